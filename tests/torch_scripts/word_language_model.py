"""A word-level language model in the style of the classic word_language_model example: an
encoder embedding, a recurrent (RNN_TANH, RNN_RELU, LSTM, GRU) or Transformer core, a decoder with
optionally tied weights, truncated backpropagation through time with detached hidden states, gradient
clipping and plain SGD written out by hand. The corpus is a synthetic token stream made with numpy."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import numpy_init, parser, report


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.0, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            except KeyError as e:
                raise ValueError("An invalid option for `--model` was supplied, "
                                 "options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        self.rnn.flatten_parameters()
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Sine and cosine positional encodings added to the embeddings (a buffer, not trained)."""

    def __init__(self, d_model, dropout=0.0, max_len=500):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    """A causal transformer encoder (nn.Transformer's encoder half) with positional encodings."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                                               num_encoder_layers=nlayers, dropout=dropout)
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def synthetic_corpus(n_tokens, ntoken, seed):
    """A token stream with structure to learn: each token mostly follows from the one before."""
    rng = np.random.RandomState(seed)
    successor = rng.randint(0, ntoken, size=ntoken)
    ids = np.empty(n_tokens, dtype=np.int64)
    ids[0] = 0
    for i in range(1, n_tokens):
        ids[i] = successor[ids[i - 1]] if rng.rand() < 0.8 else rng.randint(ntoken)
    return torch.tensor(ids.tolist(), dtype=torch.long)


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def run(args, model_type, device):
    ntokens = 50
    corpus = synthetic_corpus(2000, ntokens, args.seed)
    train_data = batchify(corpus, args.batch_size, device)
    if model_type == "Transformer":
        model = TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, 0.0).to(device)
    else:
        model = RNNModel(model_type, ntokens, args.emsize, args.nhid, args.nlayers, 0.0, args.tied).to(device)
    numpy_init(model, args.seed)
    criterion = nn.NLLLoss()
    lr = args.lr
    model.train()
    if model_type != "Transformer":
        hidden = model.init_hidden(args.batch_size)
    for step, i in enumerate(range(0, args.steps * args.bptt, args.bptt)):
        data, targets = get_batch(train_data, i % (train_data.size(0) - args.bptt - 1), args.bptt)
        model.zero_grad()
        if model_type == "Transformer":
            output = model(data)
            output = output.view(-1, ntokens)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        report(step, loss.item())
        if step % 10 == 9:
            lr /= 2.0
    print(f"ppl {math.exp(loss.item())!r}")


def main():
    p = parser("word-level language model")
    p.add_argument("--model", type=str, default="LSTM",
                   help="RNN_TANH, RNN_RELU, LSTM, GRU, Transformer, or several separated by commas")
    p.add_argument("--emsize", type=int, default=16)
    p.add_argument("--nhid", type=int, default=16)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--lr", type=float, default=5.0)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--bptt", type=int, default=12)
    p.add_argument("--nhead", type=int, default=2)
    p.add_argument("--tied", action="store_true")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for model_type in args.model.split(","):
        print(f"model {model_type}")
        run(args, model_type, device)


if __name__ == "__main__":
    main()
