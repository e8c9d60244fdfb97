"""Conditional computation: a mixture of experts that runs, per example, only the top-k experts a gate picks.

The data come from four clusters, each with its own linear decision rule, so no
single small network fits them all but an expert per cluster does. A gate
scores the experts for each example, ``topk`` picks two, and only those two
experts run; which ones is decided in Python from the gate's output, so the
recorded graph differs from example to example. A load-balancing term (as in
the Switch Transformer) keeps every expert in use.

    python examples/mixture_of_experts.py [--steps 200] [--device cpu]
"""
from __future__ import annotations

import random

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

DIM, CLUSTERS = 8, 4


def make_task(rng: random.Random) -> list:
    """Per cluster: a centre and the normal of its decision boundary."""
    return [([rng.choice((-3.0, 3.0)) for _ in range(DIM)], [rng.gauss(0, 1) for _ in range(DIM)])
            for _ in range(CLUSTERS)]


def make_data(n: int, task: list, rng: random.Random, device="cpu") -> list:
    """``n`` (point, label) pairs: a (1, DIM) point near a random centre, labelled by that cluster's rule."""
    data = []
    for _ in range(n):
        centre, normal = rng.choice(task)
        offset = [rng.gauss(0, 1) for _ in range(DIM)]
        label = int(sum(a * b for a, b in zip(offset, normal)) > 0)
        point = [c + o for c, o in zip(centre, offset)]
        data.append((dj.tensor([point], device=device), dj.tensor([label], device=device)))
    return data


class MixtureOfExperts(nn.Module):
    def __init__(self, experts: int = 4, k: int = 2, hidden: int = 16) -> None:
        super().__init__()
        self.k = k
        self.gate = nn.Linear(DIM, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(DIM, hidden), nn.ReLU(), nn.Linear(hidden, 2)) for _ in range(experts))

    def forward(self, x):
        """Logits for one (1, DIM) example, the gate's probabilities and the chosen experts."""
        probs = F.softmax(self.gate(x).squeeze(0), dim=0)
        weights, chosen = probs.topk(self.k)
        weights = weights / weights.sum()
        chosen = chosen.tolist()
        out = sum(weights[j] * self.experts[e](x) for j, e in enumerate(chosen))  # only k experts run
        return out, probs, chosen


def balance_loss(probs: list, chosen: list, experts: int):
    """Switch Transformer's auxiliary loss: experts * sum_e (share routed to e) * (mean gate prob of e)."""
    counts = [0] * experts
    for c in chosen:
        for e in c:
            counts[e] += 1
    share = dj.tensor([n / sum(counts) for n in counts], device=probs[0].device)
    return experts * (share * dj.stack(probs).mean(0)).sum()


def evaluate(model: nn.Module, data: list) -> tuple[float, float, list]:
    """Mean cross-entropy, accuracy and how many examples each expert served."""
    loss = correct = 0.0
    usage = [0] * len(model.experts)
    with dj.no_grad():
        for x, label in data:
            logits, _, chosen = model(x)
            loss += F.cross_entropy(logits, label).item()
            correct += int(logits.argmax().item() == label.item())
            for e in chosen:
                usage[e] += 1
    return loss / len(data), correct / len(data), usage


def main(steps: int = 200, device="cpu", seed: int = 0, batch: int = 16, test_size: int = 128,
         verbose: bool = True) -> dict:
    """Train for ``steps`` steps; return held-out loss before/after, accuracy and expert usage."""
    dj.manual_seed(seed)
    rng = random.Random(seed)
    task = make_task(rng)
    test = make_data(test_size, task, rng, device)
    model = MixtureOfExperts().to(device)
    opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    loss_before, _, _ = evaluate(model, test)
    for step in range(1, steps + 1):
        opt.zero_grad()
        outs = [(model(x), label) for x, label in make_data(batch, task, rng, device)]
        loss = sum(F.cross_entropy(logits, label) for (logits, _, _), label in outs) / batch
        aux = balance_loss([p for (_, p, _), _ in outs], [c for (_, _, c), _ in outs], len(model.experts))
        (loss + 0.01 * aux).backward()
        opt.step()
        if verbose and step % 50 == 0:
            print(f"step {step:4d}  train loss {loss.item():.3f}  balance {aux.item():.3f}")
    loss_after, accuracy, usage = evaluate(model, test)
    if verbose:
        print(f"held-out loss {loss_before:.3f} -> {loss_after:.3f}, accuracy {accuracy:.0%}, "
              f"examples per expert {usage}")
    return {"loss_before": loss_before, "loss_after": loss_after, "accuracy": accuracy, "usage": usage}


def parse_args(argv=None):
    """Command-line flags (see _cli.py)."""
    return _cli.parse(_cli.parser(__doc__, steps=200), argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device)
