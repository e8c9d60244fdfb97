"""Sorting and searching against PyTorch: values, indices, gradients through indices,
NaN order, stability, unique, searchsorted/bucketize, and errors."""
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import compare, gradcheck, same
from test_reduce import flat, raises_like_torch

rng = np.random.default_rng(2)
A = rng.standard_normal((3, 5))
TIES = np.array([[2.0, 1.0, 2.0, 0.0, 1.0], [3.0, 3.0, 3.0, -1.0, 3.0]])
NANS = np.array([1.0, np.nan, 2.0, 3.0, 2.0, np.nan, 1.0])
INTS = np.array([[3, 1, 3, 2], [0, 0, 5, 1]])
SEQ = np.array([1.0, 3.0, 5.0, 7.0])
SEQ2 = np.sort(rng.standard_normal((2, 4)), axis=1)


# id -> (f(lib, *inputs), inputs, double backward)
CASES = {
    "sort": (lambda m, x: m.sort(x), (A,), True),
    "sort_dim0_desc": (lambda m, x: m.sort(x, 0, descending=True), (A,), True),
    "sort_method_kw": (lambda m, x: x.sort(dim=-1, descending=True), (A,), True),
    "sort_stable_ties": (lambda m, x: (m.sort(x, stable=True), m.sort(x, descending=True, stable=True)), (TIES,),
                         True),
    "sort_nan": (lambda m, x: (m.sort(x, stable=True), m.sort(x, descending=True, stable=True)), (NANS,), False),
    "sort_int": (lambda m, x: m.sort(x, 1), (INTS,), False),
    "sort_0d": (lambda m, x: m.sort(x[0, 0]), (A,), True),
    "argsort": (lambda m, x: (m.argsort(x), x.argsort(0, descending=True)), (A,), False),
    "argsort_stable_ties": (lambda m, x: m.argsort(x, stable=True), (TIES,), False),
    "msort": (lambda m, x: m.msort(x), (A,), True),
    "topk": (lambda m, x: m.topk(x, 2), (A,), True),
    "topk_smallest_dim0": (lambda m, x: x.topk(2, dim=0, largest=False), (A,), True),
    "topk_all_and_zero": (lambda m, x: (m.topk(x, 5), m.topk(x, 0)), (A,), True),
    "topk_nan": (lambda m, x: (m.topk(x, 3), m.topk(x, 2, largest=False)),
                 (np.array([1.0, np.nan, 2.0, 3.0, 2.5, 0.5]),), False),
    "topk_0d": (lambda m, x: m.topk(x[0, 0], 1), (A,), True),
    "kthvalue": (lambda m, x: m.kthvalue(x, 2), (A,), True),
    "kthvalue_dim_keepdim": (lambda m, x: x.kthvalue(3, 0, keepdim=True), (A,), True),
    "kthvalue_0d": (lambda m, x: m.kthvalue(x[1, 1], 1), (A,), True),
    "unique": (lambda m, x: m.unique(x), (INTS,), False),
    "unique_inverse_counts": (lambda m, x: m.unique(x, return_inverse=True, return_counts=True), (INTS,), False),
    # PyTorch marks unique's float output as requiring grad (with no backward); dynajax does not
    "unique_float_counts": (lambda m, x: m.unique(x.detach(), return_counts=True), (TIES,), False),
    "unique_dim": (lambda m, x: m.unique(x, dim=0, return_inverse=True, return_counts=True),
                   (np.array([[1, 2], [0, 5], [1, 2]]),), False),
    "unique_method": (lambda m, x: x.unique(sorted=True, return_inverse=True), (INTS,), False),
    "unique_consecutive": (lambda m, x: m.unique_consecutive(x, return_inverse=True, return_counts=True),
                           (np.array([1, 1, 2, 2, 3, 1, 1, 2]),), False),
    "unique_consecutive_dim": (lambda m, x: m.unique_consecutive(x, dim=0, return_counts=True),
                               (np.array([[1, 2], [1, 2], [0, 1], [1, 2]]),), False),
    "searchsorted": (lambda m, s, v: (m.searchsorted(s, v), m.searchsorted(s, v, right=True)),
                     (SEQ, np.array([[0.0, 3.0], [5.5, 9.0]])), False),
    "searchsorted_side_int32": (lambda m, s, v: m.searchsorted(s, v, side="right", out_int32=True),
                                (SEQ, np.array([3.0, 7.0])), False),
    "searchsorted_nd": (lambda m, s, v: m.searchsorted(s, v), (SEQ2, rng.standard_normal((2, 3))), False),
    "searchsorted_scalar": (lambda m, s: (m.searchsorted(s, 3), m.searchsorted(s, 4.5, right=True)), (SEQ,), False),
    "searchsorted_sorter": (lambda m, s, v: m.searchsorted(s, v, sorter=m.argsort(s)),
                            (np.array([5.0, 1.0, 7.0, 3.0]), np.array([2.0, 6.0])), False),
    "searchsorted_int_seq": (lambda m, s, v: m.searchsorted(s.long(), v), (SEQ, np.array([2.5, 3.0])), False),
    "bucketize": (lambda m, x, b: (m.bucketize(x, b), m.bucketize(x, b, right=True)),
                  (np.array([[1.0, 4.0], [7.0, 9.0]]), SEQ), False),
    "bucketize_scalar": (lambda m, b: m.bucketize(3, b, out_int32=True), (SEQ,), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sort_matches_torch(case):
    f, inputs, double = CASES[case]
    compare(lambda *a: flat(f(dj, *a)), lambda *a: flat(f(torch, *a)), *inputs, double=double)


@pytest.mark.parametrize("case", ["sort_dim0_desc", "topk", "kthvalue_dim_keepdim"])
def test_sort_finite_differences(case):
    f, inputs, _ = CASES[case]
    gradcheck(lambda *a: flat(f(dj, *a)), *inputs, order=2)


@pytest.mark.parametrize("case", ["sort_dim0_desc", "topk_smallest_dim0", "kthvalue_dim_keepdim"])
def test_sort_tape_matches_lowered_jax(case):
    """Engine 1 (tape) against jax.grad of the lowered graph (engine 2) and finite differences."""
    f, inputs, _ = CASES[case]
    dj.testing.check_grads(lambda *a: f(dj, *a), inputs, order=2)


def test_sort_results_are_namedtuples_with_int64_indices():
    x = dj.tensor(A, requires_grad=True)
    for r, name in ((dj.sort(x), "sort"), (dj.topk(x, 2), "topk"), (dj.kthvalue(x, 1), "kthvalue")):
        assert type(r).__name__ == name and r._fields == ("values", "indices")
        assert r.values.requires_grad and not r.indices.requires_grad and r.indices.dtype == dj.int64


def test_sort_gradient_scatters_through_indices():
    x = dj.tensor([3.0, 1.0, 2.0], requires_grad=True)
    v, _ = dj.sort(x)
    (v * dj.tensor([1.0, 10.0, 100.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [100.0, 1.0, 10.0])


ERRORS = {
    "topk_k_too_large": (lambda m: m.topk(m.ones(2, 3), 4), RuntimeError, "selected index k out of range"),
    "topk_k_negative": (lambda m: m.topk(m.ones(3), -1), RuntimeError, "selected index k out of range"),
    "kthvalue_k": (lambda m: m.kthvalue(m.ones(2, 3), 4), RuntimeError,
                   "kthvalue(): selected number k out of range for dimension 1"),
    "kthvalue_k0": (lambda m: m.kthvalue(m.ones(2, 3), 0, 0), RuntimeError,
                    "selected number k out of range for dimension 0"),
    "sort_dim": (lambda m: m.sort(m.ones(2, 3), dim=2), IndexError, "Dimension out of range"),
    "searchsorted_shapes": (lambda m: m.searchsorted(m.ones(1, 3), m.ones(2, 2)), RuntimeError,
                            "boundaries tensor [1, 3] and input value tensor [2, 2]"),
    "searchsorted_side_right": (lambda m: m.searchsorted(m.ones(3), 3, right=True, side="left"), RuntimeError,
                                "side and right can't be set to opposites"),
    "bucketize_2d": (lambda m: m.bucketize(m.ones(3), m.ones(1, 2)), RuntimeError,
                     "boundaries tensor must be 1 dimension, but got dim(2)"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_sort_errors_match_torch(case):
    raises_like_torch(*ERRORS[case])


# ---------------------------------------------------------------- unique_consecutive of 0-d and 1-element inputs
# Regression tests of issue 37's fixes, each side by side with PyTorch: unique_consecutive of a 0-d or
# 1-element input, which was refused where PyTorch computes it (and PyTorch's error for dim=0 of a 0-d input).
UNIQUE_CONSECUTIVE_SMALL = {
    "unique_consecutive 0-d": lambda L: [t.tolist() for t in L.unique_consecutive(L.tensor(3), return_inverse=True,
                                                                                  return_counts=True)],
    "unique_consecutive 1 element": lambda L: L.unique_consecutive(L.tensor([3])),
    "unique_consecutive 0-d dim": lambda L: L.unique_consecutive(L.tensor(3), dim=0),
}


@pytest.mark.parametrize("case", sorted(UNIQUE_CONSECUTIVE_SMALL))
def test_unique_consecutive_small_inputs_like_torch(case):
    same(UNIQUE_CONSECUTIVE_SMALL[case])
