"""Fitting a polynomial in the style of the classic regression example: features x, x^2, x^3, x^4
of random points, a single nn.Linear, the smooth L1 loss from torch.nn.functional, and gradient
descent written out by hand on each parameter's .data."""
import numpy as np
import torch
import torch.nn.functional as F

from _common import parser, report

POLY_DEGREE = 4


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def poly_desc(W, b):
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    result += "{:+.2f}".format(b[0])
    return result


def main():
    p = parser("polynomial regression")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    rng = np.random.RandomState(args.seed)
    W_target = torch.from_numpy(rng.randn(POLY_DEGREE, 1).astype(np.float32)) * 5
    b_target = torch.from_numpy(rng.randn(1).astype(np.float32)) * 5

    def f(x):
        return x.mm(W_target) + b_target.item()

    def get_batch(batch_size):
        x = make_features(torch.from_numpy(rng.randn(batch_size).astype(np.float32)))
        return x, f(x)

    fc = torch.nn.Linear(W_target.size(0), 1)
    with torch.no_grad():
        fc.weight.copy_(torch.from_numpy(rng.uniform(-0.5, 0.5, (1, POLY_DEGREE)).astype(np.float32)))
        fc.bias.fill_(0.0)
    for batch_idx in range(args.steps):
        batch_x, batch_y = get_batch(args.batch_size)
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            param.data -= args.lr * param.grad
        report(batch_idx, loss)
    print("Learned function:\t" + poly_desc(fc.weight.view(-1).tolist(), fc.bias.tolist()))
    print("Actual function:\t" + poly_desc(W_target.view(-1).tolist(), b_target.tolist()))


if __name__ == "__main__":
    main()
