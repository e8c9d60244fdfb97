"""cat / stack / *stack and split / chunk / unbind / tensor_split against PyTorch."""
import numpy as np
import pytest

import dynajax as dj
from helpers import compare, gradcheck, raises_like_torch, to_np

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
A23 = R.standard_normal((2, 3))
B23 = R.standard_normal((2, 3))
B24 = R.standard_normal((2, 4))
V3 = R.standard_normal(3)
V2 = R.standard_normal(2)
S = np.array(1.5)
E0 = np.zeros(0)

# (id, fn(module, *tensors), inputs); fn runs with module = dynajax and = torch
CASES = [
    ("cat0", lambda m, a, b: m.cat([a, b]), (A23, B23)),
    ("cat1", lambda m, a, b: m.cat((a, b), dim=1), (A23, B24)),
    ("cat_neg", lambda m, a, b: m.cat([a, b, a], -1), (A23, B24)),
    ("concat", lambda m, a, b: m.concat([a, b], 0), (A23, B23)),
    ("concatenate", lambda m, a, b: m.concatenate([a, b], 1), (A23, B23)),
    ("cat_legacy_empty", lambda m, a, e: m.cat([a, e, a], 1), (A23, E0)),
    ("cat_all_empty", lambda m, e: m.cat([e, e]), (E0,)),
    ("cat_one", lambda m, a: m.cat([a]), (A23,)),
    ("stack0", lambda m, a, b: m.stack([a, b]), (A23, B23)),
    ("stack_last", lambda m, a, b: m.stack([a, b], dim=-1), (A23, B23)),
    ("stack_0d", lambda m, s: m.stack([s, s * 2]), (S,)),
    ("hstack", lambda m, a, b: m.hstack([a, b]), (A23, B24)),
    ("hstack_1d", lambda m, v, s: m.hstack([v, s]), (V3, S)),
    ("vstack", lambda m, a, v: m.vstack([a, v]), (A23, V3)),
    ("dstack", lambda m, a, b: m.dstack([a, b]), (A23, B23)),
    ("column_stack", lambda m, v, a: m.column_stack([v, a, v * 2]), (V2, A23)),
    ("split_int", lambda m, a: a.split(2, 1), (A23,)),
    ("split_list", lambda m, a: m.split(a, [1, 3], dim=-1), (B24,)),
    ("split_whole", lambda m, a: a.split(5), (A23,)),
    ("split_with_sizes", lambda m, a: a.split_with_sizes([2, 1], 1), (A23,)),
    ("chunk", lambda m, v: m.chunk(m.cat([v, v, v]), 4), (V3,)),
    ("chunk_dim", lambda m, a: a.chunk(2, dim=1), (A23,)),
    ("unbind", lambda m, a: a.unbind(), (A23,)),
    ("unbind1", lambda m, a: m.unbind(a, 1), (A23,)),
    ("tensor_split_sections", lambda m, a: a.tensor_split(3, dim=1), (B24,)),
    ("tensor_split_indices", lambda m, a: m.tensor_split(a, [1, 5, 2], dim=1), (B24,)),
    ("tensor_split_neg", lambda m, a: a.tensor_split((-1,), 1), (B24,)),
]


def _run(fn, m):
    return lambda *xs: fn(m, *xs)


@pytest.mark.parametrize("name,fn,inputs", CASES, ids=[c[0] for c in CASES])
def test_values_and_grads(name, fn, inputs):
    compare(_run(fn, dj), _run(fn, torch), *inputs, double=True)


def test_cat_promotes_dtypes():
    xs = [np.arange(2, dtype=np.int32), np.ones(2, np.float16), np.array([True])]
    compare(lambda *a: dj.cat(a), lambda *a: torch.cat(a), *xs, grad=False)
    compare(lambda a, b: dj.cat([a, b]), lambda a, b: torch.cat([a, b]), A23, np.zeros(0, np.float64))


def test_cat_mixed_dtype_grads():
    compare(lambda a, b: dj.cat([a, b]) * 2, lambda a, b: torch.cat([a, b]) * 2,
            A23.astype(np.float32), B23, double=True)


def test_cat_out():
    out = dj.zeros(4, 3)
    r = dj.cat([dj.tensor(A23), dj.tensor(B23)], out=out)
    assert r is out
    np.testing.assert_allclose(to_np(out), np.concatenate([A23, B23]).astype(np.float32), rtol=1e-6)


def test_stack_gradcheck():
    gradcheck(lambda a, b: dj.stack([a * b, b], 1).split(1, 0)[1], A23, B23, order=2)


def test_int_split_pieces():
    x = dj.arange(7)
    for got, want in zip(x.tensor_split(dj.tensor([1, 5])), torch.arange(7).tensor_split(torch.tensor([1, 5]))):
        np.testing.assert_array_equal(to_np(got), want.numpy())
    assert [p.shape for p in dj.zeros(0).split(2)] == [(0,)]
    assert [p.shape for p in dj.zeros(0).chunk(3)] == [(0,)] * 3
    assert [p.shape[0] for p in dj.arange(5).chunk(4)] == [2, 2, 1]


def test_iteration_uses_unbind():
    x = dj.tensor(A23)
    rows = list(x)
    assert len(rows) == 2
    np.testing.assert_allclose(to_np(rows[1]), A23[1].astype(np.float32))


# ---------------------------------------------------------------- views: writes reach the base
@pytest.mark.parametrize("pieces", [
    lambda x: x.split(2),
    lambda x: x.chunk(2),
    lambda x: x.tensor_split(2),
    lambda x: x.split([2, 2]),
])
def test_pieces_write_through(pieces):
    leaf = dj.tensor(np.arange(1.0, 5.0), requires_grad=True)
    x = leaf * 1
    a, b = pieces(x)
    a.mul_(0)
    np.testing.assert_array_equal(to_np(x), [0, 0, 3, 4])
    assert x._version == 1
    (x * dj.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(to_np(leaf.grad), [0, 0, 3, 4])


def test_base_write_reaches_pieces():
    x = dj.arange(6.0).reshape(2, 3)
    r0, r1 = x.unbind(0)
    x.add_(1)
    np.testing.assert_array_equal(to_np(r1), [4, 5, 6])
    c0, c1, c2 = x.unbind(1)
    c2.mul_(10)
    np.testing.assert_array_equal(to_np(x), [[1, 2, 30], [4, 5, 60]])


def test_pieces_of_leaf_reject_inplace():
    x = dj.ones(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        x.split(2)[0].mul_(2)


# ---------------------------------------------------------------- errors
ERRORS = [
    (lambda m: m.cat([]), ValueError, "expected a non-empty list of Tensors"),
    (lambda m: m.cat([m.zeros(2, 3), m.zeros(4, 3)], 1), RuntimeError,
     "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 4 for tensor number 1"),
    (lambda m: m.cat([m.zeros(3, 2), m.zeros(3, 3), m.zeros(4, 2)], 1), RuntimeError,
     "Expected size 3 but got size 4 for tensor number 2 in the list."),
    (lambda m: m.cat([m.zeros(2, 3), m.zeros(2, 3, 1)]), RuntimeError,
     "Tensors must have same number of dimensions: got 2 and 3"),
    (lambda m: m.cat([m.tensor(1.0)]), RuntimeError, "zero-dimensional tensor (at position 0) cannot be concatenated"),
    (lambda m: m.cat([m.zeros(2, 3)], 2), IndexError, "Dimension out of range"),
    (lambda m: m.stack([m.zeros(2, 3), m.zeros(2, 4)]), RuntimeError,
     "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1"),
    (lambda m: m.stack([]), RuntimeError, "stack expects a non-empty TensorList"),
    (lambda m: m.stack([m.zeros(2)], 2), IndexError, "Dimension out of range"),
    (lambda m: m.hstack([]), RuntimeError, "hstack expects a non-empty TensorList"),
    (lambda m: m.vstack([]), RuntimeError, "vstack expects a non-empty TensorList"),
    (lambda m: m.zeros(5).split([2, 2]), RuntimeError, "split_with_sizes expects split_sizes to sum exactly to 5"),
    (lambda m: m.zeros(5).split(0), RuntimeError, "split_size can only be 0 if dimension size is 0"),
    (lambda m: m.zeros(5).split(-1), RuntimeError, "split expects split_size be non-negative"),
    (lambda m: m.tensor(1.0).split(1), RuntimeError, "split expects at least a 1-dimensional tensor"),
    (lambda m: m.zeros(5).split(2, 1), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(5).chunk(0), RuntimeError, "chunk expects `chunks` to be greater than 0, got: 0"),
    (lambda m: m.zeros(5).tensor_split(0), RuntimeError, "number of sections must be larger than 0, got 0"),
    (lambda m: m.tensor(1.0).unbind(), IndexError, "Dimension specified as 0 but tensor has no dimensions"),
]


@pytest.mark.parametrize("fn,exc,msg", ERRORS)
def test_errors_match_torch(fn, exc, msg):
    raises_like_torch(fn, exc, msg)
