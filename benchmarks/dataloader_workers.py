"""DataLoader worker processes: one epoch of a dataset whose ``__getitem__`` waits 2 ms (reading a file,
decoding an image), loaded in the main process (``num_workers=0``) and by 4 worker processes, side by
side in one process.

Dataset: 1024 samples, each a 3x32x32 float32 array and an int label, made after a 2 ms sleep; batch 64
(16 batches). Contenders:

- 0 workers: every sample read in this process (the reference);
- 4 workers, first epoch: workers started for the epoch (``persistent_workers=False``), start-up
  included (each epoch pays it; the forkserver itself is started once, before timing);
- 4 workers, persistent, steady epoch: ``persistent_workers=True``, an epoch after the first.

Prints the median seconds per epoch over ``--rounds`` interleaved rounds and the ratio of each to 0
workers (the target: 4 workers at least 3x faster than 0).

    python benchmarks/dataloader_workers.py [--rounds 3] [--workers 4]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dynajax.utils.data import DataLoader, Dataset

SAMPLES, BATCH, WAIT_S = 1024, 64, 0.002


class SlowDataset(Dataset):
    """Sample i: a 3x32x32 float32 array and a label, after a 2 ms wait."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i):
        time.sleep(WAIT_S)
        return np.full((3, 32, 32), i, np.float32), i % 10


def epoch_s(loader) -> float:
    t0 = time.perf_counter()
    n = sum(int(y.shape[0]) for _, y in loader)
    assert n == SAMPLES
    return time.perf_counter() - t0


def measure(rounds: int = 3, workers: int = 4) -> dict:
    plain = DataLoader(SlowDataset(), batch_size=BATCH)
    fresh = DataLoader(SlowDataset(), batch_size=BATCH, num_workers=workers)
    kept = DataLoader(SlowDataset(), batch_size=BATCH, num_workers=workers, persistent_workers=True)
    epoch_s(plain)   # warm: tensor conversion compiled, forkserver started, persistent workers up
    epoch_s(kept)
    res = {"0 workers": [], f"{workers} workers, first epoch": [], f"{workers} workers, persistent, steady": []}
    for _ in range(rounds):   # interleaved: machine noise hits all alike
        for key, loader in zip(res, (plain, fresh, kept)):
            res[key].append(epoch_s(loader))
    kept._workers.shutdown()
    return {k: statistics.median(v) for k, v in res.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    s = measure(args.rounds, args.workers)
    ref = s["0 workers"]
    print(f"DataLoader, {SAMPLES} samples of 3x32x32 float32 with a {WAIT_S * 1e3:.0f} ms wait each, batch {BATCH}; "
          f"median seconds per epoch of {args.rounds} rounds")
    for k, v in s.items():
        print(f"  {k:32s}{v:8.3f} s  {ref / v:6.2f}x faster than 0 workers")
    print("target: 4 workers >= 3x faster than 0 workers")


if __name__ == "__main__":
    main()
