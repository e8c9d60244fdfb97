"""utils.data: samplers, shuffling, and loading in worker processes (num_workers > 0), then side by side with
torch.utils.data.

Worker processes unpickle the datasets, collate_fns and worker_init_fn these tests give them, so those live
in data_workers.py, which imports neither torch nor pytest nor the suite's helpers (together over a second
per worker on a busy machine); the workers import that module, not this one.
"""
import gc
import itertools
import multiprocessing
import os
import pickle
import random
import time
from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.utils.data as TD

import dynajax as dj
import dynajax.utils.data as DD
from dynajax.utils.data import (DataLoader, Dataset, IterableDataset, RandomSampler, Subset, TensorDataset,
                                default_collate, get_worker_info, random_split)
from dynajax.utils.data import _collate
from dynajax.utils.data._worker import numpy_seed
from helpers import assert_close
from data_workers import (Numbers, Probe, ShardedRange, pids_and_index, record_init, stack_with_dynajax,
                          unpicklable_batch)


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


# ---------------------------------------------------------------- against torch.utils.data
# utils.data against torch.utils.data: batches (with and without worker processes), collation, option checks
# (errors as PyTorch's), sampler arguments, weights, fractions in random_split, default_convert of numpy
# scalars, shuffling with a generator, and a worker's errors as PyTorch reports them.
def _errors_alike(fn):
    """``fn(lib, data_module)`` raises the same exception type, with the same message, in both libraries."""
    with pytest.raises(Exception) as te:
        fn(torch, TD)
    with pytest.raises(type(te.value)) as de:
        fn(dj, DD)
    assert str(de.value).split(".")[0] == str(te.value).split(".")[0]


def _dataset(lib, data):
    return data.TensorDataset(lib.arange(10.0), lib.arange(10))


@pytest.mark.parametrize("kwargs", [
    dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2), dict(persistent_workers=True),
    dict(num_workers=2, prefetch_factor=-1), dict(multiprocessing_context="spawn"),
    dict(num_workers=2, multiprocessing_context="no-such-method"), dict(num_workers=2, multiprocessing_context=3)])
def test_dataloader_rejects_worker_options_as_torch(kwargs):
    _errors_alike(lambda lib, data: data.DataLoader(_dataset(lib, data), batch_size=2, **kwargs))


def _as_numpy(batch):
    """A batch of either library as numpy arrays (with their dtypes) and plain values."""
    if isinstance(batch, dict):
        return {k: _as_numpy(v) for k, v in batch.items()}
    if isinstance(batch, (dj.Tensor, torch.Tensor)):
        return np.asarray(batch.numpy())
    return batch


def test_worker_batches_match_torch():
    want = [_as_numpy(b) for b in TD.DataLoader(Numbers(11), batch_size=3)]
    for kw in (dict(num_workers=2, prefetch_factor=1, persistent_workers=True, pin_memory=True),
               dict(pin_memory=True)):
        got = [_as_numpy(b) for b in DD.DataLoader(Numbers(11), batch_size=3, **kw)]
        assert len(got) == len(want) == 4
        for g, w in zip(got, want):
            assert g["name"] == w["name"]
            for k in ("x", "y"):
                assert g[k].dtype == w[k].dtype
                np.testing.assert_array_equal(g[k], w[k])


def test_worker_numpy_seed_as_torch():
    from torch.utils.data._utils.worker import _generate_state
    for base, wid in [(0, 0), (12345, 1), (2**62 + 17, 3), (2**63 - 1, 7)]:
        assert numpy_seed(base, wid) == _generate_state(base, wid)


def _torch_worker_message(exc_fn, worker_id: int) -> str:
    """PyTorch's text for an exception raised in its worker ``worker_id``."""
    from torch._utils import ExceptionWrapper
    try:
        exc_fn()
    except Exception:
        wrapper = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
    with pytest.raises(Exception) as e:
        wrapper.reraise()
    return str(e.value)


def test_worker_error_as_torch():
    with pytest.raises(ValueError) as e:
        list(DD.DataLoader(Numbers(8, fail_at=5), batch_size=2, num_workers=2))
    got = str(e.value)
    want = _torch_worker_message(lambda: Numbers(8, fail_at=5)[5], 0)
    # the same first line, but for the index dynajax adds, and the same original exception at the end
    assert got.splitlines()[0] == want.splitlines()[0].replace(".", " (fetching dataset index 5).", 1)
    assert got.splitlines()[1] == want.splitlines()[1] == "Original Traceback (most recent call last):"
    assert got.rstrip().splitlines()[-1] == want.rstrip().splitlines()[-1] == "ValueError: bad sample 5"




@pytest.mark.parametrize("make", [
    lambda lib, data: data.RandomSampler(range(5), num_samples=0),
    lambda lib, data: data.RandomSampler(range(5), replacement=1),
    lambda lib, data: data.BatchSampler(range(5), 2, drop_last=1),
    lambda lib, data: data.WeightedRandomSampler([1.0, 2.0], 3, replacement=1),
    lambda lib, data: list(data.WeightedRandomSampler([1.0, -2.0], 3)),
    lambda lib, data: list(data.WeightedRandomSampler([0.0, 0.0], 3)),
    lambda lib, data: list(data.WeightedRandomSampler([1.0, float("inf")], 3)),
    lambda lib, data: data.random_split(range(10), [1.5, -0.5]),
])
def test_bad_sampler_arguments_raise_as_torch(make):
    _errors_alike(make)


def test_weighted_sampler_frequencies_and_no_replacement():
    g = dj.Generator().manual_seed(0)
    draws = np.array(list(DD.WeightedRandomSampler(dj.tensor([1.0, 3.0, 0.0]), 20000, generator=g)))
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 20000, [0.25, 0.75, 0.0], atol=0.02)
    assert sorted(DD.WeightedRandomSampler([1.0, 2.0, 3.0], 3, replacement=False)) == [0, 1, 2]


def test_default_convert_numpy_scalar_as_torch():
    t = TD.default_convert(np.float32(2.5))
    d = DD.default_convert(np.float32(2.5))
    assert isinstance(d, dj.Tensor) and isinstance(t, torch.Tensor)
    assert d.item() == t.item() and str(d.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert [b.tolist() for b in DD.DataLoader(np.arange(3, dtype=np.float32), batch_size=None)] == [0.0, 1.0, 2.0]


def test_concat_rejects_iterable_dataset():
    class Stream(DD.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        DD.ConcatDataset([_dataset(dj, DD), Stream()])


def test_shuffle_with_generator_permutes_reproducibly_and_epochs_differ():
    g = dj.Generator().manual_seed(3)
    loader = DD.DataLoader(_dataset(dj, DD), batch_size=4, shuffle=True, drop_last=True, generator=g)
    assert len(loader) == len(TD.DataLoader(_dataset(torch, TD), batch_size=4, shuffle=True, drop_last=True)) == 2
    first = [b[1].tolist() for b in loader]
    second = [b[1].tolist() for b in loader]
    assert [len(b) for b in first] == [4, 4] and first != second
    g.manual_seed(3)
    assert [b[1].tolist() for b in loader] == first
    every = [b[1].tolist() for b in DD.DataLoader(_dataset(dj, DD), batch_size=10, shuffle=True, generator=g)]
    assert sorted(every[0]) == list(range(10))


def test_collate_and_convert_container_types_as_torch():
    import collections
    batch = [collections.defaultdict(list, a=1.0), collections.defaultdict(list, a=2.0)]
    t, d = TD.default_collate(batch), DD.default_collate(batch)
    assert type(d) is type(t) and d.default_factory is list and d["a"].tolist() == t["a"].tolist()
    t, d = TD.default_convert((np.ones(2), 3)), DD.default_convert((np.ones(2), 3))
    assert type(d) is type(t) is list and isinstance(d[0], dj.Tensor) and d[1] == 3


def test_iterable_dataset_sampler_errors_as_torch():
    def stream(data):
        class Stream(data.IterableDataset):
            def __iter__(self):
                return iter(range(3))
        return Stream()
    _errors_alike(lambda lib, data: data.DataLoader(stream(data), sampler=[0, 1]))
    _errors_alike(lambda lib, data: data.DataLoader(stream(data), batch_sampler=[[0, 1]]))


def test_tensor_dataset_loader_batches_in_order():
    x, y = np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10)
    ds = TensorDataset(dj.tensor(x), dj.tensor(y))
    tds = torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))
    assert len(ds) == 10
    for drop_last in (False, True):
        dl = DataLoader(ds, batch_size=4, drop_last=drop_last)
        tl = torch.utils.data.DataLoader(tds, batch_size=4, drop_last=drop_last)
        assert len(dl) == len(tl)
        got, want = list(dl), list(tl)
        assert len(got) == len(want)
        for (a, b), (c, d) in zip(got, want):
            assert_close(a, c)
            assert_close(b, d)
    with pytest.raises(AssertionError, match="Size mismatch"):
        TensorDataset(dj.zeros(3), dj.zeros(4))


def test_default_collate_matches_torch():
    Point = namedtuple("Point", "x y")
    samples = [
        [(1, 2.0, True), (3, 4.0, False)],
        [{"a": np.ones(2, np.float32), "b": 1}, {"a": np.zeros(2, np.float32), "b": 2}],
        [Point(1.0, 2), Point(3.0, 4)],
        [["s", 1], ["t", 2]],
    ]
    for batch in samples:
        got = default_collate(batch)
        want = torch.utils.data.default_collate(batch)
        assert type(got) is type(want)
        flat_g = got.values() if isinstance(got, dict) else got
        flat_w = want.values() if isinstance(want, dict) else want
        for g, w in zip(flat_g, flat_w):
            if isinstance(w, torch.Tensor):
                assert_close(g, w)
            else:
                assert g == w
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": dj.tensor([float(i)]), "y": i * i}


def test_custom_datasets_collate_fn_and_iterable():
    b = next(iter(DataLoader(Squares(), batch_size=3)))
    assert b["x"].shape == (3, 1) and b["y"].tolist() == [0, 1, 4]
    out = list(DataLoader(Squares(), batch_size=2, collate_fn=lambda s: len(s)))
    assert out == [2, 2, 1]
    assert [t.tolist() for t in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(list(DataLoader(Squares(), batch_size=None))) == 5
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(Squares(), sampler=[0, 1], shuffle=True)


def test_random_split_and_subset():
    ds = TensorDataset(dj.arange(10))
    dj.manual_seed(0)
    a, b = random_split(ds, [7, 3])
    assert len(a) == 7 and len(b) == 3
    idx = sorted(list(a.indices) + list(b.indices))
    assert idx == list(range(10))
    c, d, e = random_split(ds, [0.5, 0.3, 0.2])
    assert (len(c), len(d), len(e)) == (5, 3, 2)
    s = Subset(ds, [4, 2])
    assert int(s[1][0]) == 2 and len(s) == 2
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])
    cat = ds + ds
    assert len(cat) == 20 and int(cat[13][0]) == 3


def test_weighted_random_sampler():
    from dynajax.utils.data import WeightedRandomSampler
    dj.manual_seed(0)
    idx = list(WeightedRandomSampler([0.1, 0.0, 0.9], 3000))
    counts = np.bincount(idx, minlength=3) / 3000
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.9], atol=0.03)
    perm = list(WeightedRandomSampler(dj.tensor([1.0, 2.0, 3.0, 4.0]), 4, replacement=False))
    assert sorted(perm) == [0, 1, 2, 3]
    loader = DataLoader(TensorDataset(dj.arange(3)), batch_size=2, sampler=WeightedRandomSampler([0, 0, 1], 4))
    assert [b[0].tolist() for b in loader] == [[2, 2], [2, 2]]
    with pytest.raises(RuntimeError, match="without replacement"):
        WeightedRandomSampler([1, 1], 3, replacement=False)


def test_worker_error_names_worker_and_index_and_loading_goes_on():
    it = iter(DataLoader(Numbers(8, fail_at=5), batch_size=2, num_workers=2))
    assert next(it)["y"].tolist() == [0, 1] and next(it)["y"].tolist() == [2, 3]
    with pytest.raises(ValueError) as e:
        next(it)   # batch [4, 5]: worker 0
    text = str(e.value)
    assert text.startswith("Caught ValueError in DataLoader worker process 0 (fetching dataset index 5).\n"
                           "Original Traceback (most recent call last):")
    assert 'raise ValueError(f"bad sample {i}")' in text and text.rstrip().endswith("ValueError: bad sample 5")
    assert next(it)["y"].tolist() == [6, 7]   # as in PyTorch, the next batches still come
    with pytest.raises(StopIteration):
        next(it)
    # a KeyError's message prints as text; an exception that cannot be made from a message is a RuntimeError
    with pytest.raises(KeyError) as e:
        next(iter(DataLoader({"a": 1}, batch_size=1, num_workers=1, sampler=["b"])))
    assert str(e.value).startswith("Caught KeyError in DataLoader worker process 0 (fetching dataset index b).")
    # a batch that cannot be pickled back: the error, not a hang
    with pytest.raises(Exception, match="Caught .* in DataLoader worker process 0") as e:
        next(iter(DataLoader(Numbers(2), batch_size=2, num_workers=1, collate_fn=unpicklable_batch)))
    assert "pickle" in str(e.value)


def test_unpicklable_dataset_is_explained():
    class Local(Numbers):
        pass
    gc.collect()   # iterators kept in reference cycles by earlier tests' exceptions
    with pytest.raises(Exception) as e:
        iter(DataLoader(Local(), num_workers=1))
    assert any("define them at module level" in n for n in getattr(e.value, "__notes__", []))
    assert multiprocessing.active_children() == []
