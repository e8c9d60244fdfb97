"""``python -m dynajax.demo``: train a dynamic model eagerly, then compiled, and cross-check its gradients.

The model classifies token sequences (does a sequence hold more 0s than 1s?).
Its graph depends on the data: a GRU cell runs once per token, so the number of
recurrent steps is the batch's sequence length, and sequences of 6 tokens or
more get an extra layer. The same batches are trained three times from the
same initial weights: eagerly (one dispatch per op, the native tape), with
``dynajax.compile`` (one cached XLA executable per distinct graph, the step's
Python recorded again on every call), and with ``dynajax.compile(replay=True)``
(once a length's graph has repeated, its calls run the executable without the
step's Python). The report gives loss and accuracy per phase, steps/s and
their ratios, how many distinct graphs were seen and compiled, and the native
tape's gradients against ``jax.grad`` of the lowered graph.

    python -m dynajax.demo [--steps 100] [--device cpu] [--seed 0]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field

import jax
import numpy as np

import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

__all__ = ["SequenceClassifier", "make_batches", "run", "main"]

VOCAB = 4
LENGTHS = (3, 4, 5, 6, 7)


class SequenceClassifier(nn.Module):
    """Embedding, a GRU cell applied once per token, an extra layer for long inputs, a linear head."""

    def __init__(self, hidden: int = 32, deep_from: int = 6) -> None:
        super().__init__()
        self.hidden, self.deep_from = hidden, deep_from
        self.embed = nn.Embedding(VOCAB, 16)
        self.cell = nn.GRUCell(16, hidden)
        self.extra = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 2)

    def forward(self, tokens):
        """Logits for a (batch, length) batch of token ids; the graph depends on ``length``."""
        h = dj.zeros(tokens.shape[0], self.hidden, device=tokens.device)
        for x in self.embed(tokens).unbind(1):   # one recurrent step per token
            h = self.cell(x, h)
        if tokens.shape[1] >= self.deep_from:    # long sequences go one layer deeper
            h = h + self.extra(h).tanh()
        return self.head(h)


def make_batches(n: int, batch: int, lengths=LENGTHS, seed: int = 0) -> list:
    """``n`` numpy (tokens, labels) batches, each of one random length; label: more 0s than 1s."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tokens = rng.integers(0, VOCAB, size=(batch, int(rng.choice(lengths))))
        labels = ((tokens == 0).sum(1) > (tokens == 1).sum(1)).astype(np.int64)
        out.append((tokens, labels))
    return out


def train_step(model: nn.Module, opt, tokens, labels):
    """One optimizer step; returns the loss and the number of correct predictions."""
    opt.zero_grad()
    logits = model(tokens)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    return loss, (logits.argmax(1) == labels).sum()


@dataclass
class Phase:
    """What one training phase measured."""

    name: str
    losses: list = field(default_factory=list)
    correct: int = 0
    seen: int = 0
    times: list = field(default_factory=list)
    first_of_graph: list = field(default_factory=list)   # True where a step met its graph for the first time
    eval_accuracy: float = float("nan")
    stats: object = None

    @property
    def graphs(self) -> int:
        return sum(self.first_of_graph)

    @property
    def steps_per_s(self) -> float:
        return len(self.times) / sum(self.times)

    @property
    def steady_steps_per_s(self) -> float:
        """Steps per second over the steps whose graph had been seen before (no compiling)."""
        warm = [t for t, first in zip(self.times, self.first_of_graph) if not first]
        return 1.0 / statistics.median(warm) if warm else float("nan")

    @property
    def final_loss(self) -> float:
        tail = self.losses[-max(1, len(self.losses) // 5):]
        return sum(tail) / len(tail)


class Status:
    """One status line rewritten in place on a terminal; a few plain lines otherwise."""

    def __init__(self, out, total: int) -> None:
        self.out, self.total = out, total
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.every = max(1, total // 4)

    def update(self, phase: str, step: int, loss: float) -> None:
        line = f"  {phase:9} step {step:4d}/{self.total}  loss {loss:.4f}"
        if self.tty:
            self.out.write("\r" + line)
            self.out.flush()
        elif step % self.every == 0 or step == self.total:
            print(line, file=self.out)

    def done(self) -> None:
        if self.tty:
            self.out.write("\r" + " " * 60 + "\r")
            self.out.flush()


def _to_tensors(batches, device) -> list:
    return [(dj.tensor(t, device=device), dj.tensor(y, device=device)) for t, y in batches]


def _train(name: str, step_fn, batches: list, status: Status) -> Phase:
    phase, seen = Phase(name), set()
    for i, (tokens, labels) in enumerate(batches, 1):
        t0 = time.perf_counter()
        loss, correct = step_fn(tokens, labels)
        loss_value, correct_value = loss.item(), correct.item()   # waits for the step to finish
        phase.times.append(time.perf_counter() - t0)
        phase.first_of_graph.append(tokens.shape[1] not in seen)
        seen.add(tokens.shape[1])
        phase.losses.append(loss_value)
        if i > len(batches) * 4 // 5:
            phase.correct += int(correct_value)
            phase.seen += tokens.shape[0]
        status.update(name, i, loss_value)
    status.done()
    return phase


def _accuracy(model: nn.Module, batches: list) -> float:
    with dj.no_grad():
        hits = sum((model(t).argmax(1) == y).sum().item() for t, y in batches)
    return hits / sum(y.shape[0] for _, y in batches)


def cross_check(model: nn.Module, batches: list) -> float:
    """Max |native tape gradient - jax.grad of the lowered graph| over all parameters and ``batches``."""
    params = list(model.parameters())
    worst = 0.0
    for tokens, labels in batches:
        model.zero_grad()
        loss = F.cross_entropy(model(tokens), labels)
        loss.backward()
        lowered = dj.lower_graph(loss, params, allow_unused=True)  # short inputs skip a layer
        arrays = [p.detach()._value for p in params]
        jax_grads = jax.jit(jax.grad(lowered.fn, argnums=tuple(range(len(params)))))(*arrays)
        for p, g in zip(params, jax_grads):
            tape = np.zeros(g.shape) if p.grad is None else np.asarray(p.grad._value)
            worst = max(worst, float(np.max(np.abs(tape - np.asarray(g)))))
    model.zero_grad()
    return worst


def _new_model(seed: int, device):
    dj.manual_seed(seed)
    model = SequenceClassifier().to(device)
    return model, dj.optim.Adam(model.parameters(), lr=1e-2)


def run(steps: int = 100, device: str = "cpu", seed: int = 0, batch: int = 32, lengths=LENGTHS,
        out=sys.stdout) -> dict:
    """Run both phases and the cross-check, print the report to ``out``, return the numbers."""
    def say(*a):
        print(*a, file=out)

    dev = dj.device(device)
    train = _to_tensors(make_batches(steps, batch, lengths, seed), dev)
    held_out = _to_tensors(make_batches(8, batch, lengths, seed + 1), dev)
    status = Status(out, steps)
    say(f"dynajax demo: {steps} steps per phase, batch {batch}, sequence lengths {min(lengths)}-{max(lengths)}, "
        f"device {dev} ({dev.jax_device().device_kind})")

    with jax.default_device(dev.jax_device()):
        model, opt = _new_model(seed, dev)
        eager = _train("eager", lambda t, y: train_step(model, opt, t, y), train, status)
        eager.eval_accuracy = _accuracy(model, held_out)
        short = [b for b in held_out if b[0].shape[1] < model.deep_from][:1]
        long = [b for b in held_out if b[0].shape[1] >= model.deep_from][:1]
        max_error = cross_check(model, short + long)

        compiled = replayed = None
        if hasattr(dj, "compile"):
            compiled = _compiled_phase("compiled", {}, seed, dev, train, held_out, status)
            replayed = _compiled_phase("replayed", {"replay": True}, seed, dev, train, held_out, status)
    return _report(say, steps, eager, compiled, max_error, replayed)


def _compiled_phase(name: str, options: dict, seed: int, dev, train: list, held_out: list, status) -> Phase:
    """Train a fresh model with its step under ``dynajax.compile(**options)``."""
    model, opt = _new_model(seed, dev)
    step = dj.compile(lambda tokens, labels: train_step(model, opt, tokens, labels), **options)
    phase = _train(name, step, train, status)
    phase.eval_accuracy = _accuracy(model, held_out)
    phase.stats = step.stats
    return phase


def _report(say, steps: int, eager: Phase, compiled: Phase | None, max_error: float,
            replayed: Phase | None = None) -> dict:
    say("")
    say(f"{'phase':10} {'final loss':>10} {'train acc':>9} {'held-out acc':>12} {'steps/s':>8} "
        f"{'steps/s warm':>12} {'graphs':>6} {'compiles':>8}")
    rows = [p for p in (eager, compiled, replayed) if p is not None]
    for p in rows:
        compiles = p.stats.compiles if p.stats is not None else "-"
        say(f"{p.name:10} {p.final_loss:10.4f} {p.correct / max(p.seen, 1):9.1%} {p.eval_accuracy:12.1%} "
            f"{p.steps_per_s:8.1f} {p.steady_steps_per_s:12.1f} {p.graphs:6d} {compiles!s:>8}")
    say("  (steps/s counts every step, first-time compiles included; 'warm' is the median over steps whose "
        "graph was seen before)")
    result = {"eager": eager, "compiled": compiled, "max_grad_error": max_error}
    if compiled is None:
        say("compiled phase: unavailable - this build of dynajax has no dynajax.compile, so only the eager "
            "phase ran")
    else:
        st = compiled.stats
        speedup = compiled.steady_steps_per_s / eager.steady_steps_per_s
        overall = compiled.steps_per_s / eager.steps_per_s
        loss_gap = max(abs(a - b) for a, b in zip(eager.losses, compiled.losses))
        say(f"compiled vs eager: {speedup:.1f}x the steps/s warm, {overall:.1f}x overall; "
            f"{st.compiles} compiles ({st.compile_time:.1f} s), {st.cache_hits} cache hits, "
            f"{st.graph_breaks} graph breaks")
        say(f"same batches, same initial weights: max |loss eager - loss compiled| over {steps} steps = "
            f"{loss_gap:.2e}")
        for reason in st.recompile_reasons[:3]:
            say(f"  recompiled because: {reason}")
        result.update(speedup=speedup, overall_speedup=overall, loss_gap=loss_gap)
    if replayed is not None:
        st = replayed.stats
        speedup = replayed.steady_steps_per_s / compiled.steady_steps_per_s
        loss_gap = max(abs(a - b) for a, b in zip(eager.losses, replayed.losses))
        say(f"replayed vs compiled: {speedup:.1f}x the steps/s warm; {st.replayed} of {st.calls} calls ran "
            f"without the step's Python (replay=True: once a length's graph repeated); max |loss eager - loss "
            f"replayed| = {loss_gap:.2e}")
        result.update(replayed=replayed, replay_speedup=speedup, replay_loss_gap=loss_gap)
    verdict = "agree" if max_error <= 1e-5 else "DISAGREE"
    say(f"gradient cross-check (native tape vs jax.grad of the lowered graph, a short and a long batch): "
        f"{verdict}, max abs error {max_error:.2e}")
    return result


def main(argv=None) -> int:
    """Command-line entry point of ``python -m dynajax.demo``."""
    ap = argparse.ArgumentParser(prog="python -m dynajax.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="training steps per phase (default 100)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 or tpu (default cpu)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the data and the weights (default 0)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        print(f"{ap.prog}: error: --steps must be a positive integer, got {args.steps}", file=sys.stderr)
        return 2
    try:
        dj.device(args.device).jax_device()
    except RuntimeError as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    run(args.steps, args.device, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
