"""Reductions against PyTorch: values, dtypes, gradients, double backward, ties, zeros,
empty tensors and errors. One table drives the value/gradient tests."""
import math
import warnings

import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close, compare, gradcheck

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((3, 4))
TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 5.0, 0.5, 5.0]])
Z1 = A.copy()
Z1[0, 1] = Z1[2, 3] = 0.0  # one zero in some rows
Z2 = A.copy()
Z2[1, 0] = Z2[1, 2] = 0.0  # two zeros in one row
NANS = A.copy()
NANS[0, 2] = NANS[2, 0] = np.nan
INTS = np.array([[3, 0, -2, 7], [1, 1, 0, 5]])
BOOLS = INTS > 0
EMPTY = np.zeros((0,))
EMPTY2 = np.zeros((2, 0))

# id -> (f(lib, *inputs), inputs, double backward)
CASES = {
    "sum_dims_keepdim": (lambda m, x: m.sum(x, (0, 1), keepdim=True), (A,), True),
    "sum_int": (lambda m, x: m.sum(x, 1), (INTS,), False),
    "sum_0d_dim": (lambda m, x: m.sum(x[0, 0], 0), (A,), True),
    "prod_all": (lambda m, x: m.prod(x), (A,), True),
    "prod_dim": (lambda m, x: m.prod(x, 1), (A,), True),
    "prod_dim_keepdim": (lambda m, x: m.prod(x, -2, keepdim=True), (A,), True),
    "prod_one_zero": (lambda m, x: m.prod(x, 1), (Z1,), True),
    "prod_two_zeros_dim": (lambda m, x: m.prod(x, 1), (Z2,), True),
    "prod_all_one_zero": (lambda m, x: m.prod(x[0]), (Z1,), True),
    "prod_all_two_zeros": (lambda m, x: m.prod(x), (Z2,), False),  # PyTorch's double backward is 0 here
    "prod_int": (lambda m, x: m.prod(x, 0), (INTS.astype(np.int32),), False),
    "prod_dtype": (lambda m, x: m.prod(x, 1, dtype=m.float32), (A,), False),
    "max_all": (lambda m, x: m.max(x), (A,), True),
    "max_dim": (lambda m, x: m.max(x, 1), (A,), True),
    "max_dim_keepdim": (lambda m, x: m.max(x, dim=0, keepdim=True), (A,), True),
    "max_binary": (lambda m, x, y: m.max(x, y), (A, B), True),
    "min_all": (lambda m, x: m.min(x), (A,), True),
    "min_dim": (lambda m, x: m.min(x, -1), (A,), True),
    "min_binary": (lambda m, x, y: m.min(x, y), (A, B), True),
    "max_ties_split": (lambda m, x: m.max(x), (TIES,), True),
    "max_method": (lambda m, x: x.max(1).values, (A,), True),
    "max_int_dim": (lambda m, x: m.max(x, 1), (INTS,), False),
    "max_0d_dim": (lambda m, x: m.max(x[1, 1], 0), (A,), True),
    "max_nan": (lambda m, x: (m.max(x), m.max(x, 1)), (NANS,), False),
    "amax_dims": (lambda m, x: m.amax(x, (0, 1)), (A,), True),
    "amax_ties": (lambda m, x: m.amax(x, 1), (TIES,), True),
    "amin_ties_keepdim": (lambda m, x: m.amin(x, 0, keepdim=True), (TIES,), True),
    "amax_bool": (lambda m, x: m.amax(x, 1), (BOOLS,), False),
    "aminmax": (lambda m, x: m.aminmax(x, dim=1), (A,), True),
    "aminmax_all": (lambda m, x: tuple(m.aminmax(x)), (A,), True),
    "argmax_all": (lambda m, x: m.argmax(x), (A,), False),
    "argmax_keepdim": (lambda m, x: m.argmax(x, 1, keepdim=True), (A,), False),
    "argmax_all_keepdim": (lambda m, x: m.argmax(x, keepdim=True), (A,), False),
    "argmin_dim": (lambda m, x: x.argmin(0), (A,), False),
    "argmax_nan": (lambda m, x: m.argmax(x, 1), (NANS,), False),
    "var_all": (lambda m, x: m.var(x), (A,), True),
    "var_dim_keepdim": (lambda m, x: m.var(x, 1, keepdim=True), (A,), True),
    "var_correction0": (lambda m, x: m.var(x, dim=(0, 1), correction=0), (A,), True),
    "var_unbiased_false": (lambda m, x: x.var(0, unbiased=False), (A,), True),
    "var_legacy_bool": (lambda m, x: m.var(x, False), (A,), True),
    "std_dim": (lambda m, x: m.std(x, 0), (A,), True),
    "std_correction2": (lambda m, x: x.std(1, correction=2), (A,), True),
    "var_mean": (lambda m, x: m.var_mean(x, 1), (A,), True),
    "std_mean": (lambda m, x: m.std_mean(x, (0, 1), keepdim=True), (A,), True),
    "norm_default": (lambda m, x: m.norm(x), (A,), True),
    "norm_p1": (lambda m, x: m.norm(x, 1, 1), (A,), True),
    "norm_inf": (lambda m, x: m.norm(x, math.inf, 1), (A,), True),
    "norm_neg_inf": (lambda m, x: m.norm(x, -math.inf), (A,), True),
    "norm_inf_ties": (lambda m, x: m.norm(x, math.inf, 1), (TIES,), True),
    "norm_p3_keepdim": (lambda m, x: x.norm(3, 1, keepdim=True), (A,), True),
    "norm_fro_dims": (lambda m, x: m.norm(x, "fro", (0, 1)), (A,), True),
    "norm_p0": (lambda m, x: m.norm(x, 0), (Z1,), False),
    "norm_zero_vector": (lambda m, x: m.norm(x * 0, dim=1), (A,), False),
    "norm_dtype": (lambda m, x: m.norm(x.float(), dtype=m.float64), (A,), True),
    "logsumexp": (lambda m, x: m.logsumexp(x, 1), (A,), True),
    "logsumexp_dims_keepdim": (lambda m, x: x.logsumexp((0, 1), keepdim=True), (A * 30,), True),
    "logsumexp_int": (lambda m, x: m.logsumexp(x, 1), (INTS,), False),
    "cumsum": (lambda m, x: m.cumsum(x, 1), (A,), True),
    "cumsum_dtype": (lambda m, x: m.cumsum(x, 0, dtype=m.float32), (A,), False),
    "cumsum_bool": (lambda m, x: m.cumsum(x, 1), (BOOLS,), False),
    "cumsum_0d": (lambda m, x: m.cumsum(x[0, 0], 0), (A,), True),
    "cumprod": (lambda m, x: x.cumprod(1), (A,), True),
    "cumprod_one_zero": (lambda m, x: m.cumprod(x, 1), (Z1,), True),
    "cumprod_two_zeros": (lambda m, x: m.cumprod(x, 1), (Z2,), True),
    "cumprod_int": (lambda m, x: m.cumprod(x, 0), (INTS.astype(np.int8),), False),
    "median_all": (lambda m, x: m.median(x), (A,), True),
    "median_all_ties": (lambda m, x: m.median(x), (TIES,), True),
    "median_dim": (lambda m, x: m.median(x, 1), (A,), True),
    "median_dim_keepdim": (lambda m, x: x.median(0, keepdim=True), (A,), True),
    "median_nan": (lambda m, x: (m.median(x), m.median(x, 1)), (NANS,), False),
    "nanmedian": (lambda m, x: (m.nanmedian(x), m.nanmedian(x, 1)), (NANS,), False),
    "nansum": (lambda m, x: (m.nansum(x), m.nansum(x, 1)), (NANS,), True),
    "nanmean": (lambda m, x: m.nanmean(x, 0, keepdim=True), (NANS,), True),
    "all_any": (lambda m, x: (m.all(x), m.any(x, 1), m.all(x, (0, 1), keepdim=True), x.any()), (INTS,), False),
    "all_uint8": (lambda m, x: m.all(x.to(m.uint8), 1), (INTS,), False),
    "count_nonzero": (lambda m, x: (m.count_nonzero(x), m.count_nonzero(x, (0, 1)), x.count_nonzero(1)),
                      (INTS,), False),
    # empty tensors, where PyTorch defines a result
    "empty_sum_prod": (lambda m, x: (m.sum(x), m.prod(x), m.norm(x), m.logsumexp(x, 0)), (EMPTY,), True),
    "empty_other_dim": (lambda m, x: (m.max(x, 0), m.amax(x, 0), m.prod(x, 1), m.cumsum(x, 1)), (EMPTY2,), True),
    "empty_median": (lambda m, x: m.median(x), (EMPTY,), False),
}


def flat(out) -> list:
    """Nested tuples of outputs (several namedtuples) as one flat list."""
    return [t for o in out for t in flat(o)] if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_matches_torch(case):
    f, inputs, double = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch's "degrees of freedom is <= 0"
        compare(lambda *a: flat(f(dj, *a)), lambda *a: flat(f(torch, *a)), *inputs, double=double)


@pytest.mark.parametrize("case", ["prod_all_two_zeros", "prod_two_zeros_dim", "prod_one_zero", "cumprod_one_zero",
                                  "cumprod_two_zeros",
                                  "norm_p3_keepdim", "var_dim_keepdim", "logsumexp", "amax_dims", "std_dim"])
def test_reduction_finite_differences(case):
    f, inputs, _ = CASES[case]
    gradcheck(lambda *a: f(dj, *a), *inputs, order=2)


@pytest.mark.parametrize("case", ["max_dim", "median_dim", "prod_two_zeros_dim", "cumprod_two_zeros", "var_mean", "norm_p3_keepdim"])
def test_reduction_tape_matches_lowered_jax(case):
    """Engine 1 (tape) against jax.grad of the lowered graph (engine 2) and finite differences."""
    f, inputs, _ = CASES[case]
    dj.testing.check_grads(lambda *a: f(dj, *a), inputs, order=2)


def test_result_types_are_namedtuples():
    x = dj.tensor(A)
    r = dj.max(x, 1)
    assert type(r).__name__ == "max" and r._fields == ("values", "indices")
    assert dj.min(x, 1)._fields == ("values", "indices")
    assert dj.median(x, 1)._fields == ("values", "indices")
    assert dj.aminmax(x)._fields == ("min", "max")
    v, i = dj.max(x, 1)
    assert i.dtype == dj.int64 and not i.requires_grad


def test_max_dim_gradient_goes_to_the_returned_index_among_ties():
    x = dj.tensor(TIES, requires_grad=True)
    v, i = dj.max(x, 1)
    v.sum().backward()
    g = x.grad.numpy()
    assert (g.sum(1) == 1).all()
    assert (g[np.arange(3), i.numpy()] == 1).all()
    assert_close(v, torch.max(torch.tensor(TIES), 1).values)


def test_amax_ties_share_gradient_evenly():
    x = dj.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    dj.amax(x).backward()
    assert_close(x.grad, np.array([[0.0, 0.5, 0.5]]))


ERRORS = {
    "max_empty": (lambda m: m.max(m.zeros(0)), RuntimeError, "Expected reduction dim to be specified"),
    "min_empty": (lambda m: m.zeros(0).min(), RuntimeError, "min(): Expected reduction dim"),
    "amax_empty": (lambda m: m.amax(m.zeros(0)), RuntimeError, "amax(): Expected reduction dim"),
    "max_empty_dim": (lambda m: m.max(m.zeros(2, 0), 1), IndexError, "Expected reduction dim 1 to have non-zero"),
    "amin_empty_dim": (lambda m: m.amin(m.zeros(2, 0), 1), IndexError, "amin(): Expected reduction dim 1"),
    "argmax_empty": (lambda m: m.argmax(m.zeros(0)), IndexError, "argmax(): Expected reduction dim"),
    "median_empty_dim": (lambda m: m.median(m.zeros(2, 0), 1), IndexError, "median(): Expected reduction dim 1"),
    "aminmax_empty": (lambda m: m.aminmax(m.zeros(0)), RuntimeError, "cannot compute aminmax over an empty"),
    "dim_out_of_range": (lambda m: m.max(m.zeros(2, 3), 2), IndexError, "Dimension out of range"),
    "cumsum_dim": (lambda m: m.cumsum(m.zeros(2, 3), 2), IndexError, "Dimension out of range"),
    "repeated_dim": (lambda m: m.amax(m.zeros(2, 3), (0, 0)), RuntimeError, "appears multiple times"),
    "var_int": (lambda m: m.var(m.tensor([1, 2])), RuntimeError, "std and var only support floating point"),
    "norm_narrowing": (lambda m: m.norm(m.ones(2, dtype=m.float64), dtype=m.float32), RuntimeError,
                       "should be convertible without narrowing"),
    "norm_int": (lambda m: m.norm(m.tensor([1, 2])), RuntimeError, "Expected a floating point or complex tensor"),
    "norm_fro_3dims": (lambda m: m.norm(m.ones(2, 2, 2), "fro", (0, 1, 2)), RuntimeError,
                       "dim must be a 2-tuple"),
    "nanmean_int": (lambda m: m.nanmean(m.tensor([1, 2])), RuntimeError, "expected input to have floating point"),
    "prod_tuple_dim": (lambda m: m.prod(m.ones(2, 3), (0, 1)), TypeError, "prod()"),
}


def raises_like_torch(f, exc, part: str) -> None:
    """``f(torch)`` and ``f(dynajax)`` both raise ``exc`` with ``part`` in the message."""
    with pytest.raises(exc) as et:
        f(torch)
    with pytest.raises(exc) as ed:
        f(dj)
    assert part in str(et.value) and part in str(ed.value), (str(et.value), str(ed.value))


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_reduction_errors_match_torch(case):
    raises_like_torch(*ERRORS[case])
