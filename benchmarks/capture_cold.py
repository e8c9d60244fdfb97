"""How much slower ``dynajax.compile``'s capture (re-running the step's Python) is right after the step's
executable than back to back: the cost a training loop that waits for every step pays.

The MLP step of compile_step.py (784-512-512-10, batch 128, Adam) is recorded, planned and undone --
capture alone, no executable run (``Compiled``'s own recording path, so this script reaches into
``dynajax.compile``'s module) -- after each of: nothing (captures back to back: caches hold the
Python's code and data), the step's compiled executable run to completion (what every waited step
does), a 32 MB numpy sum (data caches flushed by one core, no XLA threads), a 1 ms sleep. Prints the
median capture time of each, side by side in one process, as a ratio to back to back. The
executable runs on all cores; afterwards the interpreter's working set (bytecode, objects, dicts)
comes back from memory.

    python benchmarks/capture_cold.py [--calls 200] [--rounds 5]
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import time

import jax
import numpy as np

from compile_step import dynajax_step

_compile = importlib.import_module("dynajax.compile")   # the module (``dynajax.compile`` the attribute is the function)


def _capture_once(fn, args) -> float:
    """Seconds to record, plan and undo one call of compiled ``fn`` (nothing runs)."""
    t = time.perf_counter()
    cap = _compile.Capture(fn, dual=False)
    with cap:
        result = fn.fn(*args)
    fn._plan(cap, result, args)
    dt = time.perf_counter() - t
    _compile._restore(cap)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    run, fn = dynajax_step(True, speculate=False)
    args = run.args
    for _ in range(5):
        jax.block_until_ready(run())
    big = np.ones(8_000_000, np.float32)
    before = {
        "back to back": lambda: None,
        "after the step's executable": lambda: jax.block_until_ready(run()),
        "after a 32 MB numpy sum": big.sum,
        "after a 1 ms sleep": lambda: time.sleep(1e-3),
    }
    times = {k: [] for k in before}
    with _compile._gc_paused():
        for _ in range(a.rounds):
            for name, disturb in before.items():
                ts = []
                for _ in range(a.calls):
                    disturb()
                    ts.append(_capture_once(fn, args))
                times[name].append(statistics.median(ts))
    warm = statistics.median(times["back to back"])
    print(f"MLP step capture (record + plan, no run), {fn.stats.recorded_ops} recorded ops; median of "
          f"{a.rounds} rounds x {a.calls} captures")
    print(f"{'':32s}{'ms/capture':>12s}{'vs back to back':>18s}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:32s}{m * 1e3:12.3f}{m / warm:17.2f}x")


if __name__ == "__main__":
    main()
