"""Where a speculated call's time goes, against a plain one (for a device run: on the H200, speculate=True
made the MLP step slower, 1.65 against 1.44 ms). Answered on 2026-12-04: the speculative dispatch took 0.72
ms there, most of it the jit call copying the step's 7 Python numbers to the GPU (now passed as device
arrays, ``_device.numbers_on``: devcheck/dispatch_profile.py), and capture (0.6-0.9 ms) is three times the
step's GPU time (~0.2 ms), so a run dispatched before it has nothing to overlap.

Runs the MLP step of benchmarks/compile_step.py compiled with ``speculate=False`` and ``speculate=True``,
waiting for each step as the benchmark does, and prints for each: the median wall time per call, then the
time of each phase (capture, the speculative dispatch, settling, donation copies, write-back, the wait
for the executable after the call returned), then the functions that took most of its time under cProfile (own time per call, in us). The two lists side by side
name what the speculated call does more (a blocking read, a copy, a deallocation waiting for the device).

    python devcheck/speculate_profile.py [--calls 150] [--top 22]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compile_step import dynajax_step  # noqa: E402

import dynajax._speculate as _speculate  # noqa: E402
import importlib  # noqa: E402

_compile = importlib.import_module("dynajax.compile")   # the module (``dynajax.compile`` is the function)


PHASES = {"speculative dispatch": (_speculate.Speculator, "dispatch"), "settle": (_speculate.Speculator, "settle"),
          "write back": (_compile, "_write_back"), "unshare": (_compile, "_unshare")}


def call_times(run) -> tuple[float, float]:
    """One call of ``run``, waited for: (seconds until its result is ready, seconds until the call returned)."""
    t0 = time.perf_counter()
    out = run()
    t1 = time.perf_counter()
    jax.block_until_ready(out)
    return time.perf_counter() - t0, t1 - t0


def _timed(phases: dict):
    """Wrap each phase's function to add its seconds to ``phases[name]`` (a list per call); returns the undo."""
    saved = []
    for name, (owner, attr) in PHASES.items():
        orig = getattr(owner, attr)

        def wrapper(*a, _orig=orig, _name=name, **k):
            t = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                phases[_name][-1] += time.perf_counter() - t
        saved.append((owner, attr, orig))
        setattr(owner, attr, wrapper)
    return lambda: [setattr(o, a, f) for o, a, f in saved]


def _profile(speculate: bool, calls: int, top: int) -> None:
    run, fn = dynajax_step(True, speculate=speculate)
    for _ in range(30):   # compiles (and, speculating, the twin) outside the timed calls
        jax.block_until_ready(run())
    times, phases = [], {k: [] for k in list(PHASES) + ["capture", "exe wait"]}
    undo = _timed(phases)
    for _ in range(calls):
        for v in phases.values():
            v.append(0.0)
        cap0 = fn.stats.capture_time
        total, returned = call_times(run)
        times.append(total)
        phases["capture"][-1] = fn.stats.capture_time - cap0
        phases["exe wait"][-1] = total - returned
    undo()
    print(f"--- speculate={speculate}: medians per call (ms), unprofiled: " + ", ".join(
        f"{k} {statistics.median(v) * 1e3:.3f}" for k, v in phases.items()))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        jax.block_until_ready(run())
    prof.disable()
    st = fn.stats
    print(f"--- speculate={speculate}: {statistics.median(times) * 1e3:.3f} ms/call median unprofiled; "
          f"speculated {st.speculated}, misses {st.speculation_misses}, compiles {st.compiles}")
    rows = sorted(pstats.Stats(prof).stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        print(f"  {tottime / calls * 1e6:8.1f} us own {cumtime / calls * 1e6:8.1f} us cum "
              f"{ncalls / calls:6.1f}/call  {Path(path).name}:{line}({name})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=150)
    ap.add_argument("--top", type=int, default=22)
    a = ap.parse_args()
    print(f"JAX on {jax.default_backend()} ({jax.devices()[0].device_kind})")
    for speculate in (False, True):
        _profile(speculate, a.calls, a.top)


if __name__ == "__main__":
    main()
