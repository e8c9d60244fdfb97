"""utils.data: samplers, shuffling, and loading in worker processes (num_workers > 0).

Worker processes unpickle the datasets below, so they import this module: it imports neither torch nor
pytest nor the suite's helpers (together over a second per worker on a busy machine), so the tests here
use plain asserts. The comparisons with torch.utils.data, and the tests of errors, are in
test_data_parity.py, which uses these datasets too.
"""
import gc
import itertools
import math
import multiprocessing
import os
import pickle
import random
import time

import jax
import numpy as np
from jax._src import xla_bridge

import dynajax as dj
from dynajax.utils.data import (DataLoader, Dataset, IterableDataset, RandomSampler, TensorDataset, default_collate,
                                get_worker_info)
from dynajax.utils.data import _collate
from dynajax.utils.data._worker import numpy_seed


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


def _batches(loader):
    """A loader's batches as plain Python (tensors to lists, dicts to sorted item lists)."""
    def plain(v):
        if isinstance(v, dj.Tensor):
            return (str(v.dtype), v.tolist())
        if isinstance(v, dict):
            return sorted((k, plain(x)) for k, x in v.items())
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    return [plain(b) for b in loader]


def _children_after(fn):
    """Run ``fn`` and return this process's live child processes after it (waiting up to 5 s for the
    ones that are stopping); the exception it raised, if any, is returned as text, without its traceback
    (which would keep the loader's iterator, and so its workers, alive)."""
    try:
        fn()
        err = None
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    gc.collect()
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return multiprocessing.active_children(), err


# ---------------------------------------------------------------- in one process
def test_shuffle_is_seeded_and_a_permutation():
    ds = TensorDataset(dj.arange(12))
    dj.manual_seed(3)
    a = [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    dj.manual_seed(3)
    b = [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    assert a == b and [len(x) for x in a] == [5, 5, 2]
    assert sorted(sum(a, [])) == list(range(12)) and sum(a, []) != list(range(12))
    g = dj.Generator().manual_seed(0)
    c = [b[0].tolist() for b in DataLoader(ds, batch_size=12, shuffle=True, generator=g)]
    assert sorted(c[0]) == list(range(12))


def test_random_sampler_draws_lazily_in_chunks():
    # minGPT's trainer: RandomSampler(replacement=True, num_samples=int(1e10)); drawing every index up front
    # needs 80 GB, so only the chunk in use may be drawn
    t0 = time.perf_counter()
    big = RandomSampler(range(10), replacement=True, num_samples=int(1e10))
    first = list(itertools.islice(iter(big), 5))
    assert len(big) == int(1e10) and len(first) == 5 and all(0 <= i < 10 for i in first)
    perms = RandomSampler(range(12), num_samples=int(1e10))
    head = list(itertools.islice(iter(perms), 36))
    assert all(sorted(head[k:k + 12]) == list(range(12)) for k in (0, 12, 24))   # one permutation per pass
    assert time.perf_counter() - t0 < 10
    # the same indices from the same generator seed, across chunk boundaries and with a short last chunk
    n = 2 * 1024 + 5
    a = list(RandomSampler(range(10), True, n, generator=dj.Generator().manual_seed(1)))
    b = list(RandomSampler(range(10), True, n, generator=dj.Generator().manual_seed(1)))
    assert a == b and len(a) == n and len(set(a)) == 10
    assert a != list(RandomSampler(range(10), True, n, generator=dj.Generator().manual_seed(2)))
    # without a generator: one seed from the default stream, so manual_seed repeats it
    dj.manual_seed(5)
    c = list(RandomSampler(range(10), True, 40))
    dj.manual_seed(5)
    assert c == list(RandomSampler(range(10), True, 40))
    assert sorted(list(RandomSampler(range(12), num_samples=15))[:12]) == list(range(12))


def test_worker_info_is_none_in_main_process():
    assert get_worker_info() is None


# ---------------------------------------------------------------- in worker processes
def test_workers_give_the_same_batches_in_order():
    ref = _batches(DataLoader(Numbers(11), batch_size=3))
    loader = DataLoader(Numbers(11), batch_size=3, num_workers=2, persistent_workers=True, prefetch_factor=3)
    assert len(loader) == 4
    assert _batches(loader) == ref
    # a seeded shuffle gives the same batches as without workers (the base seed is drawn either way)
    dj.manual_seed(7)
    shuffled = _batches(DataLoader(Numbers(11), batch_size=3, shuffle=True))
    dj.manual_seed(7)
    assert _batches(DataLoader(Numbers(11), batch_size=3, shuffle=True, num_workers=2)) == shuffled
    # no auto-batching: default_convert in the worker; a custom collate_fn runs in the worker
    assert _batches(DataLoader(Numbers(4), batch_size=None, num_workers=2)) == _batches(
        DataLoader(Numbers(4), batch_size=None))
    pids = [p for p, _ in DataLoader(Numbers(8), batch_size=2, num_workers=2, collate_fn=pids_and_index)]
    assert len(set(pids)) == 2 and os.getpid() not in pids and pids[0] == pids[2] != pids[1] == pids[3]
    # in_order=False: every batch, in any order
    unordered = _batches(DataLoader(Numbers(11), batch_size=3, num_workers=2, in_order=False))
    assert sorted(map(repr, unordered)) == sorted(map(repr, ref))
    loader._workers.shutdown()


def test_worker_init_fn_info_and_seeding():
    dj.manual_seed(0)
    loader = DataLoader(Probe(), batch_size=2, num_workers=2, worker_init_fn=record_init, collate_fn=list)
    batches = list(loader)
    assert [s[0] for b in batches for s in b] == list(range(8))
    for k, batch in enumerate(batches):
        for i, wid, n, seed, own_copy, pid, *_, jax_started in batch:
            assert wid == k % 2 and n == 2 and own_copy and pid != os.getpid()   # round robin, batch by batch
            assert jax_started == (False, "cpu")   # seeding and collating numpy leave JAX alone; never an accelerator
    first = {b[0][1]: b[0] for b in batches[:2]}
    base = first[0][3]
    assert first[1][3] == base + 1   # seed = base_seed + worker id
    for wid, (_, _, _, seed, _, _, py_draw, np_draw, dj_seed, inits, _) in first.items():
        assert inits == [(wid, wid, 2, seed)]   # worker_init_fn called once per worker, with its info set
        assert py_draw == random.Random(seed).random()
        assert np_draw == np.random.RandomState(numpy_seed(base, wid)).randint(2**31)
        assert dj_seed == seed
    dj.manual_seed(0)
    assert [b[0][3] for b in list(loader)[:2]] == [base, base + 1]   # the base seed comes from dynajax's stream


def test_iterable_dataset_is_sharded_with_worker_info():
    got = [b.tolist() for b in DataLoader(ShardedRange(0, 7), batch_size=2, num_workers=2)]
    assert got == [[0, 1], [4, 5], [2, 3], [6]]   # worker 0 has 0-3, worker 1 has 4-6; batches alternate
    got = [b.tolist() for b in DataLoader(ShardedRange(0, 7), batch_size=2, num_workers=2, drop_last=True)]
    assert got == [[0, 1], [4, 5], [2, 3]]
    # without sharding each worker goes through its own copy of the whole dataset
    got = list(DataLoader(ShardedRange(0, 3, shard=False), batch_size=None, num_workers=2))
    assert got == [0, 0, 1, 1, 2, 2]
    # persistent workers start their copies again each epoch
    loader = DataLoader(ShardedRange(3, 7), batch_size=1, num_workers=2, persistent_workers=True)
    assert [b.tolist() for b in loader] == [[3], [5], [4], [6]]
    assert [b.tolist() for b in loader] == [[3], [5], [4], [6]]
    loader._workers.shutdown()


def test_persistent_workers_are_reused_across_epochs():
    loader = DataLoader(Probe(), batch_size=4, num_workers=2, persistent_workers=True, collate_fn=list)
    epochs = [{s[5] for b in loader for s in b} for _ in range(2)]
    next(iter(loader))   # an epoch left unfinished: its prefetched batches are dropped at the next one
    epochs.append({s[5] for b in loader for s in b})
    assert len(epochs[0]) == 2 and epochs[0] == epochs[1] == epochs[2]
    workers = list(loader._workers._workers)
    del loader
    gc.collect()
    assert not any(w.is_alive() for w in workers)
    fresh = DataLoader(Probe(), batch_size=4, num_workers=2, collate_fn=list)
    assert {s[5] for b in fresh for s in b}.isdisjoint({s[5] for b in fresh for s in b})


def test_workers_stop_when_done_deleted_or_failing():
    gc.collect()   # iterators the earlier tests' exceptions kept in reference cycles
    assert multiprocessing.active_children() == []

    def epoch():
        assert len(list(DataLoader(Numbers(6), batch_size=2, num_workers=2))) == 3

    def abandoned():
        it = iter(DataLoader(Numbers(40), batch_size=2, num_workers=2))
        next(it)
        assert len(multiprocessing.active_children()) == 2
        del it

    def failing():
        for _ in DataLoader(Numbers(8, fail_at=3), batch_size=2, num_workers=2):
            pass

    def timing_out():
        next(iter(DataLoader(Numbers(4, delay=0.5), batch_size=1, num_workers=1, timeout=0.3)))

    assert _children_after(epoch) == ([], None)
    assert _children_after(abandoned) == ([], None)
    children, err = _children_after(failing)
    assert children == [] and err.startswith("ValueError: Caught ValueError in DataLoader worker process 1")
    children, err = _children_after(timing_out)
    assert children == [] and err == "RuntimeError: DataLoader timed out after 0.3 seconds"
    children, err = _children_after(lambda: list(DataLoader(Numbers(6, crash_at=4), batch_size=2, num_workers=2)))
    assert children == [] and err.startswith("RuntimeError: DataLoader worker (pid(s) ")
    assert err.endswith(") exited unexpectedly")


def test_tensors_cross_from_workers_as_numpy():
    # a dataset of tensors: the worker reads them (starting JAX there) and sends numpy arrays
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    ds = TensorDataset(dj.tensor(x), dj.tensor(np.arange(6)))
    got = list(DataLoader(ds, batch_size=4, num_workers=1))
    assert _batches(got) == _batches(DataLoader(ds, batch_size=4))
    assert isinstance(got[0][0], dj.Tensor) and got[0][0].dtype == dj.float32 and got[0][1].dtype == dj.int64
    # a custom collate_fn's tensors: what a worker does with its result, then the trip through a pipe
    samples = [Numbers()[i] for i in (3, 4)]
    sent = pickle.loads(pickle.dumps(_collate.for_worker(stack_with_dynajax)(samples)))
    assert not isinstance(sent["x"], dj.Tensor) and sent["n"] == 2
    back = _collate.from_worker(sent)
    assert isinstance(back["x"], dj.Tensor) and back["x"].dtype == dj.float32
    np.testing.assert_array_equal(back["x"].numpy(), [[3, 9], [4, 16]])
    # the default collation's worker form makes the same batch as default_collate
    for batch in ([(1, 2.5, True, "a"), (3, 4.0, False, "b")], [np.float16(1), np.float16(2)],
                  [dj.ones(2), dj.zeros(2)]):
        sent = pickle.loads(pickle.dumps(_collate.for_worker(default_collate)(batch)))
        assert _batches([_collate.from_worker(sent)]) == _batches([default_collate(batch)])
