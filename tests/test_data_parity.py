"""utils.data against torch.utils.data: batches (with and without worker processes), collation, option
checks (errors as PyTorch's), sampler arguments, weights, fractions in random_split, default_convert of
numpy scalars, shuffling with a generator, and a worker's errors as PyTorch reports them."""
import gc
import multiprocessing
from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.utils.data as TD

import dynajax as dj
import dynajax.utils.data as DD
from dynajax.utils.data import (DataLoader, Dataset, IterableDataset, Subset, TensorDataset, default_collate,
                                random_split)
from dynajax.utils.data._worker import numpy_seed
from helpers import assert_close
from test_data import Numbers, unpicklable_batch


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
