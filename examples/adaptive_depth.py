"""Adaptive depth: each input decides how many layers it goes through (early exit), trained end to end.

A residual MLP with a halting unit after every layer, in the style of Adaptive
Computation Time (Graves, 2016): layers are applied until the accumulated
halting probability passes a threshold, the output is the halting-weighted mix
of the per-layer predictions, and a small "ponder cost" rewards stopping early.
The stopping test is a plain Python ``if`` on a tensor value, so every example
records a graph of its own depth, and gradients reach the halting unit.

Task: 2-D points labelled by the XOR of their quadrant signs.

    python examples/adaptive_depth.py [--steps 200] [--device cpu]
"""
from __future__ import annotations

import random

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn


def make_data(n: int, rng: random.Random, device="cpu") -> list:
    """``n`` (point, label) pairs: a (1, 2) point in [-1, 1]^2 and whether x * y > 0."""
    data = []
    for _ in range(n):
        x, y = rng.uniform(-1, 1), rng.uniform(-1, 1)
        data.append((dj.tensor([[x, y]], device=device), dj.tensor([int(x * y > 0)], device=device)))
    return data


class AdaptiveDepthNet(nn.Module):
    def __init__(self, hidden: int = 32, max_depth: int = 6, threshold: float = 0.99) -> None:
        super().__init__()
        self.threshold = threshold
        self.inp = nn.Linear(2, hidden)
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(max_depth))
        self.halt = nn.Linear(hidden, 1)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x):
        """Logits for one (1, 2) point, the number of layers used, and the ACT remainder."""
        h = self.inp(x).tanh()
        out, halted, halted_value = 0.0, 0.0, 0.0
        for depth, layer in enumerate(self.layers, 1):
            h = h + layer(h).tanh()
            p = self.halt(h).sigmoid().squeeze()
            if depth == len(self.layers) or halted_value + p.item() > self.threshold:
                remainder = 1 - halted                      # the last layer takes the rest of the weight
                return out + remainder * self.head(h), depth, remainder
            out = out + p * self.head(h)
            halted, halted_value = halted + p, halted_value + p.item()


def evaluate(model: nn.Module, data: list) -> tuple[float, float, float]:
    """Mean cross-entropy, accuracy and mean depth over ``data``."""
    loss = correct = depths = 0.0
    with dj.no_grad():
        for x, label in data:
            logits, depth, _ = model(x)
            loss += F.cross_entropy(logits, label).item()
            correct += int(logits.argmax().item() == label.item())
            depths += depth
    return loss / len(data), correct / len(data), depths / len(data)


def main(steps: int = 200, device="cpu", seed: int = 0, batch: int = 16, test_size: int = 128,
         ponder_cost: float = 0.01, verbose: bool = True) -> dict:
    """Train for ``steps`` steps; return held-out loss before/after, accuracy and mean depth."""
    dj.manual_seed(seed)
    rng = random.Random(seed)
    test = make_data(test_size, rng, device)
    model = AdaptiveDepthNet().to(device)
    opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    loss_before, _, _ = evaluate(model, test)
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = 0.0
        for x, label in make_data(batch, rng, device):
            logits, depth, remainder = model(x)
            loss = loss + F.cross_entropy(logits, label) + ponder_cost * (depth + remainder)
        loss = loss / batch
        loss.backward()
        opt.step()
        if verbose and step % 50 == 0:
            print(f"step {step:4d}  train loss {loss.item():.3f}")
    loss_after, accuracy, depth = evaluate(model, test)
    if verbose:
        print(f"held-out loss {loss_before:.3f} -> {loss_after:.3f}, accuracy {accuracy:.0%}, "
              f"mean depth {depth:.2f} of {len(model.layers)} layers")
    return {"loss_before": loss_before, "loss_after": loss_after, "accuracy": accuracy, "mean_depth": depth}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    return _cli.parse(_cli.parser(__doc__, steps=200), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
