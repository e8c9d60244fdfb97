"""A Tree-LSTM that reads arithmetic expression trees and predicts their value.

Every example is a different random tree such as ``(3 - (7 + 2)) + 5``; the
model is applied recursively, leaves first, so each example records a graph
with the shape of its own tree. The cell is the binary (N-ary) Tree-LSTM of
Tai, Socher and Manning (2015), with the operator or digit as the node's input.

    python examples/tree_lstm.py [--steps 120] [--device cpu]
"""
from __future__ import annotations

import random

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}
SYMBOLS = [str(d) for d in range(10)] + list(OPS)
SCALE = 10.0  # targets are value / SCALE


def random_expression(rng: random.Random, depth: int):
    """A nested tuple ``(op, left, right)`` or a digit, at most ``depth`` operators deep."""
    if depth == 0 or rng.random() < 0.3:
        return rng.randrange(10)
    return (rng.choice(list(OPS)), random_expression(rng, depth - 1), random_expression(rng, depth - 1))


def value(expr) -> int:
    """The integer an expression evaluates to."""
    return expr if isinstance(expr, int) else OPS[expr[0]](value(expr[1]), value(expr[2]))


def show(expr) -> str:
    """The expression in infix notation."""
    return str(expr) if isinstance(expr, int) else f"({show(expr[1])} {expr[0]} {show(expr[2])})"


def to_tree(expr, device="cpu"):
    """The expression with every symbol replaced by its (1,) index tensor."""
    if isinstance(expr, int):
        return (dj.tensor([SYMBOLS.index(str(expr))], device=device),)
    return (dj.tensor([SYMBOLS.index(expr[0])], device=device), to_tree(expr[1], device), to_tree(expr[2], device))


def make_data(n: int, rng: random.Random, device="cpu") -> list:
    """``n`` (tree, target, expression) triples with at most 3 levels of operators."""
    exprs = [random_expression(rng, 3) for _ in range(n)]
    return [(to_tree(e, device), dj.tensor([[value(e) / SCALE]], device=device), e) for e in exprs]


class BinaryTreeLSTM(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(len(SYMBOLS), 16)
        self.gates = nn.Linear(16 + 2 * hidden, 5 * hidden)   # input, 2 forget, output, update
        self.out = nn.Linear(hidden, 1)

    def encode(self, tree):
        """(h, c) of a node from its symbol and its children's states, computed recursively."""
        if len(tree) == 1:
            zero = dj.zeros(1, self.hidden, device=self.out.weight.device)
            (h_l, c_l), (h_r, c_r) = (zero, zero), (zero, zero)
        else:
            (h_l, c_l), (h_r, c_r) = self.encode(tree[1]), self.encode(tree[2])
        x = self.embed(tree[0])
        i, f_l, f_r, o, u = self.gates(dj.cat([x, h_l, h_r], dim=1)).chunk(5, dim=1)
        c = i.sigmoid() * u.tanh() + f_l.sigmoid() * c_l + f_r.sigmoid() * c_r
        return o.sigmoid() * c.tanh(), c

    def forward(self, tree):
        h, _ = self.encode(tree)
        return self.out(h)


def evaluate(model: nn.Module, data: list) -> float:
    """Mean squared error (in units of SCALE^2) over ``data``."""
    with dj.no_grad():
        return sum(F.mse_loss(model(tree), target).item() for tree, target, _ in data) / len(data)


def main(steps: int = 120, device="cpu", seed: int = 0, batch: int = 16, test_size: int = 128,
         verbose: bool = True) -> dict:
    """Train for ``steps`` steps; return held-out MSE before/after and the constant-prediction baseline."""
    dj.manual_seed(seed)
    rng = random.Random(seed)
    test = make_data(test_size, rng, device)
    targets = [value(e) / SCALE for _, _, e in test]
    mean = sum(targets) / len(targets)
    baseline = sum((t - mean) ** 2 for t in targets) / len(targets)
    model = BinaryTreeLSTM().to(device)
    opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    mse_before = evaluate(model, test)
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = sum(F.mse_loss(model(tree), target) for tree, target, _ in make_data(batch, rng, device)) / batch
        loss.backward()
        opt.step()
        if verbose and step % 50 == 0:
            print(f"step {step:4d}  train mse {loss.item():.4f}")
    mse_after = evaluate(model, test)
    if verbose:
        print(f"held-out mse {mse_before:.4f} -> {mse_after:.4f} (predicting the mean: {baseline:.4f})")
        with dj.no_grad():
            for tree, _, expr in test[:3]:
                print(f"  {show(expr)} = {value(expr)}, predicted {model(tree).item() * SCALE:.1f}")
    return {"loss_before": mse_before, "loss_after": mse_after, "baseline": baseline}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    return _cli.parse(_cli.parser(__doc__, steps=120), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
