"""utils.data: datasets, samplers, DataLoader batching/shuffling/collation, random_split."""
from collections import namedtuple

import numpy as np
import pytest
import torch

import dynajax as dj
from dynajax.utils.data import (DataLoader, Dataset, IterableDataset, Subset, TensorDataset, default_collate,
                                random_split)
from helpers import assert_close


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


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": dj.tensor([float(i)]), "y": i * i}


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


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
