"""What test_data.py's DataLoader workers load: datasets, collate_fns and a worker_init_fn.

Worker processes unpickle these objects, so they import this module: it imports neither torch nor pytest
nor the suite's helpers (together over a second per worker on a busy machine), which test_data.py does.
"""
import math
import os
import random
import time

import jax
import numpy as np
from jax._src import xla_bridge

import dynajax as dj
from dynajax.utils.data import Dataset, IterableDataset, get_worker_info


# ---------------------------------------------------------------- datasets the workers load
class Numbers(Dataset):
    """Sample i: a dict of a float32 array, an int and a string; ``fail_at``: that index raises."""

    def __init__(self, n: int = 10, fail_at=None, delay: float = 0.0, crash_at=None) -> None:
        self.n, self.fail_at, self.delay, self.crash_at = n, fail_at, delay, crash_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if i == self.crash_at:
            os._exit(3)
        time.sleep(self.delay)
        return {"x": np.array([i, i * i], np.float32), "y": i, "name": f"s{i}"}


_INIT_CALLS = []   # in a worker: what worker_init_fn saw


def record_init(worker_id):
    info = get_worker_info()
    _INIT_CALLS.append((worker_id, info.id, info.num_workers, info.seed))


class Probe(Dataset):
    """Sample i: what the worker that read it knows: its info, process id, first draws of its random
    generators, and what worker_init_fn recorded there."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return (i, info.id, info.num_workers, info.seed, info.dataset is self, os.getpid(), random.random(),
                np.random.randint(2**31), dj.random.initial_seed(), list(_INIT_CALLS), _jax_started())


def _jax_started() -> bool:
    """Whether this process has started a JAX backend (JAX has no public question for it), and the
    platforms it may start."""
    return bool(xla_bridge._backends), jax.config.jax_platforms


def pids_and_index(batch):
    """A custom collate_fn: the worker's process id with the indices."""
    return os.getpid(), [s["y"] for s in batch]


def unpicklable_batch(batch):
    """A custom collate_fn whose batch cannot be sent back from a worker."""
    return [lambda: len(batch)]


def stack_with_dynajax(batch):
    """A custom collate_fn that makes dynajax tensors (in the worker, when there is one)."""
    return {"x": dj.stack([dj.tensor(s["x"]) for s in batch]), "n": len(batch)}


class ShardedRange(IterableDataset):
    """range(start, end), split between the workers with get_worker_info (torch's documented example)."""

    def __init__(self, start: int, end: int, shard: bool = True) -> None:
        self.start, self.end, self.shard = start, end, shard

    def __iter__(self):
        info = get_worker_info()
        if info is None or not self.shard:
            return iter(range(self.start, self.end))
        per = int(math.ceil((self.end - self.start) / info.num_workers))
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.end)))
