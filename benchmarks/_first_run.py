"""The shared driver of the shape benchmarks (``shapes_gru_lm.py``, ``shapes_mlp_batches.py``): PyTorch
eager and plain ``dynajax.compile`` on the same batches, side by side in one process, total wall time
including compiles, printed as a ratio with the compiled step's statistics.

A run is two processes. The first starts with an empty on-disk compile cache (``dj.set_compile_cache`` on a
new folder, as a user who turned it on would); it then starts the same script again on that folder, now
warm, as a training script run a second time would find it, and that second process prints its own table.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile


def main(title: str, target: float, second_target: float, default_steps: int, batches, run_torch,
         run_dynajax) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--cache", help="the warm compile-cache folder of a second run (set by the first run)")
    a = ap.parse_args()
    first = a.cache is None
    folder = tempfile.mkdtemp(prefix="dynajax-compile-cache-") if first else a.cache
    import dynajax as dj
    dj.set_compile_cache(folder)
    data = batches(a.steps)
    # PyTorch at its faster of its default thread pool and one thread (on this shared 2-core machine its pool
    # ran the GRU LM in 2.2-3.8 s from run to run; one thread is often faster): the harder reference
    import torch
    threads = torch.get_num_threads()
    tpool = run_torch(data)
    torch.set_num_threads(1)
    tone = run_torch(data)
    torch.set_num_threads(threads)
    tt = min(tpool, tone)
    td, st = run_dynajax(data)
    which = "first run, empty on-disk compile cache" if first else "second process, warm on-disk compile cache"
    print(f"{title}, {a.steps} steps ({which}; compiles included)")
    print(f"  PyTorch eager            {tt:7.2f} s   (the faster of {threads} threads: {tpool:.2f} s, 1 thread: "
          f"{tone:.2f} s)")
    print(f"  dynajax compiled         {td:7.2f} s   ratio {td / tt:.2f}x (target <= "
          f"{target if first else second_target}x)   {st.compiles} compiles ({st.cache_loads} loaded from disk), "
          f"{st.compile_time:.1f} s compiling, {st.replayed} of {st.calls} calls replayed, {st.bucket_reuses} "
          f"calls in a larger bucket, dynamic {st.dynamic_dims}, padding stopped: {st.padding_stopped}",
          flush=True)
    if first:
        try:
            # (its table printed through this process's stdout, which run_all.py reads)
            proc = subprocess.run([sys.executable, sys.argv[0], "--steps", str(a.steps), "--cache", folder],
                                  capture_output=True, text=True)
            print(proc.stdout, end="")
            if proc.returncode:
                print(f"second process failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
