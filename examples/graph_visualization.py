"""Record one small dynamic model on two different inputs and draw both graphs: the graph follows the data.

The model runs its recurrent cell once per element of the input and then picks
one of two heads from the sign of the input. Two inputs of different length and
sign therefore record two different graphs; each is written as Graphviz DOT
(and as SVG when Graphviz's ``dot`` program is installed). Before drawing, the model takes ``--steps``
steps of SGD on both inputs (a target of +1 for one, -1 for the other): each step's backward walks the
graph that input recorded.

    python examples/graph_visualization.py [--steps 10] [--out graphs] [--device cpu]
"""
from __future__ import annotations

import os
import shutil

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
from dynajax import nn


class TinyDynamicNet(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.width = width
        self.cell = nn.Linear(2 * width, width)
        self.up = nn.Linear(width, 1)
        self.down = nn.Linear(width, 1)

    def forward(self, xs: list):
        """One cell step per (1, width) tensor in ``xs``, then the head the input's sign selects."""
        h = dj.zeros(1, self.width, device=self.up.weight.device)
        for x in xs:
            h = self.cell(dj.cat([x, h], dim=1)).tanh()
        head = self.up if dj.cat(xs).mean().item() > 0 else self.down
        return head(h).sum()


TARGETS = {"short_positive": 1.0, "long_negative": -1.0}


def train(model: nn.Module, inputs: dict, steps: int) -> list:
    """``steps`` SGD steps on both inputs; the summed squared error before each step."""
    opt = dj.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = sum((model(xs) - TARGETS[name]) ** 2 for name, xs in inputs.items())
        loss.backward()   # through both recorded graphs, each with its own length and head
        opt.step()
        losses.append(loss.item())
    return losses


def main(out: str = "graphs", device="cpu", seed: int = 0, verbose: bool = True, steps: int = 10) -> dict:
    """Train ``steps`` steps, record the model on two inputs, write their graphs to ``out``; return op counts,
    paths and the losses."""
    dj.manual_seed(seed)
    model = TinyDynamicNet().to(device)
    inputs = {"short_positive": [dj.rand(1, 4, device=device) for _ in range(2)],
              "long_negative": [-dj.rand(1, 4, device=device) for _ in range(4)]}
    losses = train(model, inputs, steps)
    if verbose:
        print(f"{steps} SGD steps on both inputs: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    os.makedirs(out, exist_ok=True)
    ops, paths = {}, []
    for name, xs in inputs.items():
        lowered = dj.lower(model, xs, name=name)    # records the ops this input takes
        ops[name] = [e.op.name for e in lowered.eqns]
        paths.append(dj.viz.draw(lowered, os.path.join(out, f"{name}.dot")))
        if shutil.which("dot"):
            paths.append(dj.viz.draw(lowered, os.path.join(out, f"{name}.svg")))
        if verbose:
            print(f"{name}: {len(xs)} inputs -> {len(ops[name])} ops")
            print(lowered)
    if verbose:
        print("wrote " + ", ".join(paths))
        if not shutil.which("dot"):
            print("(install Graphviz to get SVG files too, or render the .dot files with any DOT viewer)")
    return {"ops": ops, "paths": paths, "losses": losses}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    ap = _cli.parser(__doc__, steps=10)
    ap.add_argument("--out", default="graphs", help="directory for the .dot/.svg files (default graphs)")
    return _cli.parse(ap, argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.out, args.device, steps=args.steps)
