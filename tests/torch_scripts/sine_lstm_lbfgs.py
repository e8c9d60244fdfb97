"""Time-sequence prediction in the style of the classic sine-wave example: two stacked LSTMCells
unrolled by a Python loop over the time steps, predicting each next value (and a few future steps
fed with their own predictions), trained in float64 with L-BFGS and a closure."""
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

from _common import numpy_init, parser, report


class Sequence(nn.Module):
    def __init__(self, hidden=12):
        super(Sequence, self).__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):   # predicting the future from its own predictions
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def sine_waves(n, length, seed):
    rng = np.random.RandomState(seed)
    x = np.empty((n, length), np.int64)
    x[:] = np.arange(length) + rng.randint(-40, 40, n).reshape(n, 1)
    return np.sin(x / 4.0).astype("float64")


def main():
    p = parser("sine-wave LSTMCell with L-BFGS")
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--max-iter", type=int, default=3)
    args = p.parse_args()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    data = sine_waves(6, args.length + 1, args.seed)
    input = torch.from_numpy(data[2:, :-1])
    target = torch.from_numpy(data[2:, 1:])
    test_input = torch.from_numpy(data[:2, :-1])
    test_target = torch.from_numpy(data[:2, 1:])
    seq = Sequence()
    seq.double()
    numpy_init(seq, args.seed)
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=args.max_iter)
    for i in range(args.steps):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        report(i, loss.item())
    with torch.no_grad():
        future = 4
        pred = seq(test_input, future=future)
        loss = criterion(pred[:, :-future], test_target)
        print(f"test loss {loss.item()!r}")
        y = pred.detach().numpy()
    print(f"prediction {np.round(y[0, -future:], 6).tolist()}")


if __name__ == "__main__":
    main()
