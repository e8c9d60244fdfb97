"""utils.data against torch.utils.data: option checks (errors as PyTorch's), sampler arguments, weights,
fractions in random_split, default_convert of numpy scalars, shuffling with a generator."""
import numpy as np
import pytest
import torch
import torch.utils.data as TD

import dynajax as dj
import dynajax.utils.data as DD


def _errors_alike(fn):
    """``fn(lib, data_module)`` raises the same exception type, with the same message, in both libraries."""
    with pytest.raises(Exception) as te:
        fn(torch, TD)
    with pytest.raises(type(te.value)) as de:
        fn(dj, DD)
    assert str(de.value).split(".")[0] == str(te.value).split(".")[0]


def _dataset(lib, data):
    return data.TensorDataset(lib.arange(10.0), lib.arange(10))


@pytest.mark.parametrize("kwargs", [dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2),
                                    dict(persistent_workers=True)])
def test_dataloader_rejects_worker_options_as_torch(kwargs):
    _errors_alike(lambda lib, data: data.DataLoader(_dataset(lib, data), batch_size=2, **kwargs))


def test_dataloader_accepts_workers_and_pin_memory():
    for kw in (dict(num_workers=2, prefetch_factor=2, persistent_workers=True), dict(pin_memory=True)):
        got = [b[1].tolist() for b in DD.DataLoader(_dataset(dj, DD), batch_size=4, **kw)]
        assert got == [b[1].tolist() for b in TD.DataLoader(_dataset(torch, TD), batch_size=4)]


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
