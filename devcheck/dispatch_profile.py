"""Why a replayed step (no capture at all) is slower than the same step hand-written in ``jax.jit`` on a GPU.

On an H200 (2026-12-04) the tiny MLP's replayed step took 0.54 ms against 0.21 ms hand-written, and the
784-512-512-10 MLP's 0.72 against 0.38 ms: what replay runs is the executable's call alone, so the
executable, or what its call passes, costs ~0.35 ms more per call there. This prints, for each workload:

- the time per step (waiting for each) and the time the call takes to return (dispatch), hand-written and
  replayed;
- the replayed executable's arguments (arrays donated, kept, Python numbers) and outputs, and both programs'
  kernel count (fusions and library calls in the optimized HLO's entry computation);
- the replayed executable called with its Python numbers as device arrays made once (weak-typed, as
  ``jnp.asarray`` makes them), to isolate the per-number host-to-device copies a jit call makes;
- a micro-benchmark: a jitted sum of 7 Python floats against the same of 7 device scalars.

Its answer (H200, 2026-12-04): 7 Python floats cost a jit call 0.27 ms against 0.07 ms as device scalars;
the executable's call went 0.38 -> 0.17 ms (hand-written: 0.155 ms to return) once dynajax passed them as
arrays made once per value. What remains is replay's own Python (~0.07 ms) and the 10 more arrays in and 11
more out (per-parameter Adam step counts, the grads eager keeps).

    python devcheck/dispatch_profile.py [--calls 200]
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compile_step import SIZES, TINY, dynajax_step, jax_step  # noqa: E402

import dynajax._replay as _replay  # noqa: E402
from speculate_profile import call_times  # noqa: E402  (this folder is the script's: on sys.path)


def _kernels(compiled_text: str) -> int:
    """Fusions and custom calls (library kernels) in the ENTRY computation of optimized HLO."""
    entry = compiled_text[compiled_text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    return len(re.findall(r"= \S+ (fusion|custom-call|convolution|dot)\(", entry))


def _time(run, calls: int) -> tuple[float, float]:
    """(median ms per step waiting for each, median ms for the call to return)."""
    step, disp = zip(*[call_times(run) for _ in range(calls)])
    return 1e3 * statistics.median(step), 1e3 * statistics.median(disp)


def _hand(sizes, calls):
    run = jax_step(sizes)
    free = dict(zip(run.__code__.co_freevars, (c.cell_contents for c in run.__closure__)))
    for _ in range(20):
        jax.block_until_ready(run())
    step, disp = _time(run, calls)
    st = free["state"]
    text = free["step"].lower(st, *free["args"]).compile().as_text()
    n_in = len(jax.tree_util.tree_leaves((st, free["args"])))
    print(f"  hand-written jax.jit: {step:.3f} ms/step, call returns after {disp:.3f} ms; {n_in} input arrays, "
          f"{_kernels(text)} kernels")


def _device_number(made: dict, s):
    if not isinstance(s, (int, float)):
        return s
    a = made.get((type(s), s))
    if a is None:
        a = made[(type(s), s)] = jnp.asarray(s)
    return a


def _replayed(sizes, calls, device_numbers: bool):
    run, fn = dynajax_step(True, sizes=sizes, replay=True)
    for _ in range(20):
        jax.block_until_ready(run())
    entry = next(e for e in fn._replayer.entries.values() if type(e) is _replay._Entry)
    exe, seen, made = entry.exe, {}, {}

    def call(donated, kept, scalars):
        if device_numbers:
            if len(made) > 256:
                made.clear()
            scalars = [_device_number(made, s) for s in scalars]
        if not seen:
            seen["shape"] = (len(donated), len(kept), [type(s).__name__ for s in scalars])
            seen["text"] = exe.lower(donated, kept, scalars).compile().as_text()
        t = time.perf_counter()
        out = exe(donated, kept, scalars)
        seen.setdefault("exe", []).append(time.perf_counter() - t)
        seen["outs"] = len(out)
        return out
    entry.exe = call
    for _ in range(10):
        jax.block_until_ready(run())
    seen["exe"] = []
    step, disp = _time(run, calls)
    n_don, n_kept, kinds = seen["shape"]
    what = "numbers as device arrays" if device_numbers else "as dynajax calls it"
    print(f"  replayed ({what}): {step:.3f} ms/step, call returns after {disp:.3f} ms, of which the "
          f"executable's call {1e3 * statistics.median(seen['exe']):.3f} ms; inputs: {n_don} donated, {n_kept} "
          f"kept, {len(kinds)} numbers ({', '.join(sorted(set(kinds)))}); {seen['outs']} outputs; "
          f"{_kernels(seen['text'])} kernels; replayed {fn.stats.replayed} of {fn.stats.calls}")


def _numbers(calls):
    f = jax.jit(lambda *a: sum(a[1:], a[0]))
    py = [0.1 * i for i in range(7)]
    dev = [jnp.asarray(v) for v in py]
    for name, args in (("7 Python floats", py), ("7 device scalars", dev)):
        for _ in range(20):
            jax.block_until_ready(f(*args))
        step, disp = _time(lambda: f(*args), calls)
        print(f"  jit(sum) of {name}: {step:.3f} ms/call waiting, returns after {disp:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()})")
    _numbers(a.calls)
    for name, sizes in (("tiny MLP", TINY), ("MLP", SIZES)):
        print(f"--- {name} {'-'.join(map(str, sizes))}")
        _hand(sizes, a.calls)
        _replayed(sizes, a.calls, False)
        _replayed(sizes, a.calls, True)


if __name__ == "__main__":
    main()
