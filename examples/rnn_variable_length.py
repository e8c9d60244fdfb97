"""An LSTM classifier over sequences of varying length: no padding, no fixed shape anywhere.

Each sequence is a list of tokens from {0, 1, 2, 3}; the label says whether it
holds more 0s than 1s. The model steps an LSTM cell once per token, so a
sequence of length 5 records a 5-step graph and one of length 16 a 16-step
graph, exactly as a PyTorch user would write it. (Stepping token by token keeps
every op's shape the same at any length, so no op is compiled twice.)

    python examples/rnn_variable_length.py [--steps 100] [--device cpu]
"""
from __future__ import annotations

import random

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

VOCAB = 4


def make_data(n: int, rng: random.Random, device="cpu") -> list:
    """``n`` (tokens, label) pairs: lengths 4 to 16, tokens as (1,) tensors, never a tie of 0s and 1s."""
    data = []
    while len(data) < n:
        seq = [rng.randrange(VOCAB) for _ in range(rng.randint(4, 16))]
        zeros, ones = seq.count(0), seq.count(1)
        if zeros != ones:
            tokens = [dj.tensor([tok], device=device) for tok in seq]
            data.append((tokens, dj.tensor([int(zeros > ones)], device=device)))
    return data


class Classifier(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.cell = nn.LSTMCell(16, hidden)
        self.head = nn.Linear(hidden, 2)

    def forward(self, tokens: list):           # any number of (1,) token tensors
        state = None
        for tok in tokens:
            state = self.cell(self.embed(tok), state)
        h, c = state
        return self.head(h)                    # (1, 2) logits from the last hidden state


def evaluate(model: nn.Module, data: list) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over ``data``."""
    loss = correct = 0.0
    with dj.no_grad():
        for tokens, label in data:
            logits = model(tokens)
            loss += F.cross_entropy(logits, label).item()
            correct += int(logits.argmax().item() == label.item())
    return loss / len(data), correct / len(data)


def main(steps: int = 100, device="cpu", seed: int = 0, batch: int = 8, test_size: int = 64,
         verbose: bool = True) -> dict:
    """Train for ``steps`` optimizer steps; return the held-out loss before/after and the accuracy."""
    dj.manual_seed(seed)
    rng = random.Random(seed)
    test = make_data(test_size, rng, device)
    model = Classifier().to(device)
    opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    loss_before, acc_before = evaluate(model, test)
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = sum(F.cross_entropy(model(tokens), label) for tokens, label in make_data(batch, rng, device)) / batch
        loss.backward()
        opt.step()
        if verbose and step % 50 == 0:
            print(f"step {step:4d}  train loss {loss.item():.3f}")
    loss_after, acc_after = evaluate(model, test)
    if verbose:
        print(f"held-out loss {loss_before:.3f} -> {loss_after:.3f}, accuracy {acc_before:.0%} -> {acc_after:.0%}")
    return {"loss_before": loss_before, "loss_after": loss_after, "accuracy": acc_after}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    return _cli.parse(_cli.parser(__doc__, steps=100), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
