"""The shared driver of the first-run shape benchmarks (``shapes_gru_lm.py``, ``shapes_mlp_batches.py``):
PyTorch eager and plain ``dynajax.compile`` on the same batches, side by side in one process, total wall
time including compiles, printed as a ratio with the compiled step's statistics."""
from __future__ import annotations

import argparse


def main(title: str, target: float, default_steps: int, batches, run_torch, run_dynajax) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=default_steps)
    a = ap.parse_args()
    data = batches(a.steps)
    tt = run_torch(data)
    td, st = run_dynajax(data)
    print(f"{title}, {a.steps} steps (first run, compiles included)")
    print(f"  PyTorch eager            {tt:7.2f} s")
    print(f"  dynajax compiled         {td:7.2f} s   ratio {td / tt:.2f}x (target <= {target}x)   "
          f"{st.compiles} compiles, {st.compile_time:.1f} s compiling, {st.bucket_reuses} calls in a larger "
          f"bucket, dynamic {st.dynamic_dims}, padding stopped: {st.padding_stopped}")
