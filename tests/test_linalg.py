"""Products against PyTorch: every matmul broadcasting case, mm/bmm/mv/dot, fused adds,
einsum (explicit, implicit, ellipsis, diagonals, list forms), tensordot, kron, and errors."""
import math

import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import compare, gradcheck
from test_reduce import raises_like_torch

rng = np.random.default_rng(1)


def r(*shape):
    return rng.standard_normal(shape)


# id -> (f(lib, *inputs), inputs, double backward)
CASES = {
    "matmul_1d_1d": (lambda m, a, b: m.matmul(a, b), (r(3), r(3)), True),
    "matmul_2d_1d": (lambda m, a, b: m.matmul(a, b), (r(2, 3), r(3)), True),
    "matmul_1d_2d": (lambda m, a, b: m.matmul(a, b), (r(3), r(3, 4)), True),
    "matmul_2d_2d": (lambda m, a, b: a @ b, (r(2, 3), r(3, 4)), True),
    "matmul_3d_2d": (lambda m, a, b: m.matmul(a, b), (r(2, 2, 3), r(3, 4)), True),
    "matmul_3d_1d": (lambda m, a, b: m.matmul(a, b), (r(2, 2, 3), r(3)), True),
    "matmul_1d_3d": (lambda m, a, b: m.matmul(a, b), (r(3), r(2, 3, 4)), True),
    "matmul_2d_3d": (lambda m, a, b: a.matmul(b), (r(2, 3), r(2, 3, 4)), True),
    "matmul_batch_broadcast": (lambda m, a, b: m.matmul(a, b), (r(2, 1, 2, 3), r(3, 3, 4)), True),
    "matmul_batch_size1": (lambda m, a, b: m.matmul(a, b), (r(1, 2, 3), r(2, 3, 4)), True),
    "matmul_float32": (lambda m, a, b: m.matmul(a.float(), b.float()), (r(2, 3), r(3, 4)), False),
    "matmul_int64": (lambda m, a, b: m.matmul(a, b), (rng.integers(-5, 5, (2, 3)), rng.integers(-5, 5, (3, 2))),
                     False),
    "matmul_int32_batched": (lambda m, a, b: m.matmul(a.int(), b.int()),
                             (rng.integers(-5, 5, (2, 2, 3)), rng.integers(-5, 5, (3, 2))), False),
    "rmatmul_scalar_side": (lambda m, a, b: (a * 2) @ b, (r(3), r(3, 2)), True),
    "mm": (lambda m, a, b: m.mm(a, b), (r(2, 3), r(3, 4)), True),
    "bmm": (lambda m, a, b: a.bmm(b), (r(2, 2, 3), r(2, 3, 4)), True),
    "mv": (lambda m, a, b: m.mv(a, b), (r(2, 3), r(3)), True),
    "dot": (lambda m, a, b: m.dot(a, b), (r(4), r(4)), True),
    "vdot_inner": (lambda m, a, b: (m.vdot(a, b), m.inner(a, b)), (r(4), r(4)), True),
    "inner_nd": (lambda m, a, b: m.inner(a, b), (r(2, 3), r(4, 3)), True),
    "outer": (lambda m, a, b: m.outer(a, b), (r(3), r(4)), True),
    "ger_method": (lambda m, a, b: a.ger(b), (r(3), r(4)), True),
    "outer_promotes": (lambda m, a, b: m.outer(a.float(), b), (r(3), r(4)), False),
    "addmm": (lambda m, c, a, b: m.addmm(c, a, b), (r(2, 4), r(2, 3), r(3, 4)), True),
    "addmm_alpha_beta_bcast": (lambda m, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2.0), (r(4), r(2, 3), r(3, 4)),
                               True),
    "addmm_beta0_ignores_nan": (lambda m, c, a, b: m.addmm(c * math.nan, a, b, beta=0), (r(2, 4), r(2, 3), r(3, 4)),
                                True),
    "addmv": (lambda m, c, a, b: m.addmv(c, a, b, alpha=3), (r(2), r(2, 3), r(3)), True),
    "addr": (lambda m, c, a, b: m.addr(c, a, b), (r(3, 4), r(3), r(4)), True),
    "baddbmm": (lambda m, c, a, b: m.baddbmm(c, a, b, beta=2), (r(2, 2, 4), r(2, 2, 3), r(2, 3, 4)), True),
    "addbmm": (lambda m, c, a, b: m.addbmm(c, a, b), (r(2, 4), r(2, 2, 3), r(2, 3, 4)), True),
    "addmm_inplace": (lambda m, c, a, b: (c * 1).addmm_(a, b), (r(2, 4), r(2, 3), r(3, 4)), True),
    "chain_matmul": (lambda m, a, b, c: (m.linalg.multi_dot([a, b, c]) if m is torch else m.chain_matmul(a, b, c),
                                         m.linalg.multi_dot([a[0], b, c])),
                     (r(2, 3), r(3, 4), r(4, 2)), True),
    "einsum_mm": (lambda m, a, b: m.einsum("ij,jk->ik", a, b), (r(2, 3), r(3, 4)), True),
    "einsum_implicit": (lambda m, a, b: m.einsum("ij,jk", a, b), (r(2, 3), r(3, 4)), True),
    "einsum_implicit_order": (lambda m, a, b: m.einsum("Ba,ab", a, b), (r(3, 4), r(4, 3)), True),
    "einsum_spaces_list": (lambda m, a, b: m.einsum("i j , j k -> k i", [a, b]), (r(2, 3), r(3, 4)), True),
    "einsum_batch": (lambda m, a, b: m.einsum("bij,bjk->bik", a, b), (r(2, 2, 3), r(2, 3, 4)), True),
    "einsum_ellipsis_bcast": (lambda m, a, b: m.einsum("...ij,...j->...i", a, b), (r(2, 1, 3, 4), r(5, 4)), True),
    "einsum_ellipsis_sum": (lambda m, a: m.einsum("i...->i", a), (r(2, 3, 4),), True),
    "einsum_ellipsis_middle": (lambda m, a: m.einsum("i...j->ji...", a), (r(2, 3, 4, 5),), True),
    "einsum_diagonal": (lambda m, a: m.einsum("ii->i", a), (r(3, 3),), True),
    "einsum_trace": (lambda m, a: m.einsum("ii", a), (r(3, 3),), True),
    "einsum_sum_all": (lambda m, a: m.einsum("ij->", a), (r(2, 3),), True),
    "einsum_summed_in_one": (lambda m, a, b: m.einsum("ij,k->ik", a, b), (r(2, 3), r(4)), True),
    "einsum_repeated_mixed": (lambda m, a, b: m.einsum("iij,j->i", a, b), (r(3, 3, 2), r(2)), True),
    "einsum_outer3": (lambda m, a, b, c: m.einsum("i,j,k->ijk", a, b, c), (r(2), r(3), r(2)), True),
    "einsum_size1_bcast": (lambda m, a, b: m.einsum("ij,ij->i", a, b), (r(2, 3), r(1, 3)), True),
    "einsum_sublist": (lambda m, a, b: m.einsum(a, [0, 1], b, [1, 2], [0, 2]), (r(2, 3), r(3, 4)), True),
    "einsum_sublist_ellipsis": (lambda m, a, b: m.einsum(a, [..., 1], b, [1], [...]), (r(2, 3), r(3)), True),
    "tensordot_int": (lambda m, a, b: m.tensordot(a, b, 2), (r(2, 3, 4), r(3, 4, 2)), True),
    "tensordot_lists": (lambda m, a, b: m.tensordot(a, b, ([0, 2], [2, 0])), (r(2, 3, 4), r(4, 5, 2)), True),
    "tensordot_zero": (lambda m, a, b: m.tensordot(a, b, 0), (r(2), r(3)), True),
    "kron": (lambda m, a, b: m.kron(a, b), (r(2, 3), r(3, 2)), True),
    "kron_ranks": (lambda m, a, b: a.kron(b), (r(2, 3), r(2, 1, 2)), True),
    "matrix_norms": (lambda m, a: [m.linalg.matrix_norm(a, o)
                                   for o in ("fro", 1, -1, math.inf, -math.inf)], (r(3, 4),), True),
    "matrix_norm_keepdim_batch": (lambda m, a: m.linalg.matrix_norm(a, 1, dim=(0, 2), keepdim=True),
                                  (r(3, 2, 4),), True),
    "linalg_norm": (lambda m, a: [m.linalg.norm(a, *args)
                                  for args in ((), (3, 1), (math.inf,), ("fro",))] + [
                                     m.linalg.vector_norm(a, 1, (0, 1))], (r(3, 4),), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_product_matches_torch(case):
    f, inputs, double = CASES[case]
    compare(lambda *a: f(dj, *a), lambda *a: f(torch, *a), *inputs, double=double)


@pytest.mark.parametrize("case", ["matmul_batch_broadcast", "matmul_1d_3d", "einsum_repeated_mixed",
                                  "einsum_ellipsis_bcast", "kron"])
def test_product_finite_differences(case):
    f, inputs, _ = CASES[case]
    gradcheck(lambda *a: f(dj, *a), *inputs, order=2)


@pytest.mark.parametrize("case", ["matmul_batch_broadcast", "matmul_2d_1d", "einsum_repeated_mixed", "tensordot_lists"])
def test_product_tape_matches_lowered_jax(case):
    """Engine 1 (tape) against jax.grad of the lowered graph (engine 2) and finite differences."""
    f, inputs, _ = CASES[case]
    dj.testing.check_grads(lambda *a: f(dj, *a), inputs, order=2)


def test_rmatmul_with_numpy_left_operand():
    a, b = r(2, 3), r(3, 2)
    out = a @ dj.tensor(b)
    assert isinstance(out, dj.Tensor)
    np.testing.assert_allclose(out.numpy(), a @ b)


def _o(m, *shape, dtype=None):
    return m.ones(*shape, dtype=dtype if dtype is None or m is torch else getattr(dj, str(dtype).split(".")[-1]))


ERRORS = {
    "mm_shapes": (lambda m: m.mm(_o(m, 2, 3), _o(m, 4, 5)), RuntimeError,
                  "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    "matmul_2d_shapes": (lambda m: m.matmul(_o(m, 2, 3), _o(m, 4, 5)), RuntimeError,
                         "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    "matmul_dtype": (lambda m: m.matmul(_o(m, 2, 3), _o(m, 3, 5, dtype=torch.float64)), RuntimeError,
                     "expected m1 and m2 to have the same dtype, but got: float != double"),
    "matmul_dtype_ints": (lambda m: m.matmul(_o(m, 2, 3, dtype=torch.int32), _o(m, 3, 2, dtype=torch.int64)),
                          RuntimeError, "but got: int != long int"),
    "matmul_1d_dtype": (lambda m: m.matmul(_o(m, 3), _o(m, 3, dtype=torch.float64)), RuntimeError,
                        "dot : expected both vectors to have same dtype, but found Float and Double"),
    "matmul_1d_sizes": (lambda m: m.matmul(_o(m, 3), _o(m, 4)), RuntimeError,
                        "inconsistent tensor size, expected tensor [3] and src [4]"),
    "matmul_mv_sizes": (lambda m: m.matmul(_o(m, 2, 3), _o(m, 4)), RuntimeError,
                        "size mismatch, got input (2), mat (2x3), vec (4)"),
    "matmul_mv_dtype": (lambda m: m.matmul(_o(m, 2, 3), _o(m, 3, dtype=torch.float64)), RuntimeError,
                        "addmv input tensors must have the same dtype, but got Double, Float, and Double"),
    "matmul_vm_sizes": (lambda m: m.matmul(_o(m, 3), _o(m, 4, 2)), RuntimeError, "(1x3 and 4x2)"),
    "matmul_folded": (lambda m: m.matmul(_o(m, 2, 2, 3), _o(m, 4, 5)), RuntimeError, "(4x3 and 4x5)"),
    "matmul_folded_mv": (lambda m: m.matmul(_o(m, 2, 2, 3), _o(m, 4)), RuntimeError,
                         "size mismatch, got input (4), mat (4x3), vec (4)"),
    "matmul_batch_inner": (lambda m: m.matmul(_o(m, 2, 1, 2, 3), _o(m, 3, 4, 5)), RuntimeError,
                           "Expected size for first two dimensions of batch2 tensor to be: [6, 3] but got: [6, 4]."),
    "matmul_batch_bcast": (lambda m: m.matmul(_o(m, 2, 2, 2, 3), _o(m, 3, 3, 5)), RuntimeError,
                           "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1"),
    "matmul_batch_dtype": (lambda m: m.matmul(_o(m, 2, 2, 3), _o(m, 2, 3, 5, dtype=torch.float64)), RuntimeError,
                           "expected scalar type Float but found Double"),
    "matmul_0d": (lambda m: m.matmul(_o(m, ()), _o(m, 3)), RuntimeError, "both arguments to matmul need to be at least 1D"),
    "bmm_batch": (lambda m: m.bmm(_o(m, 2, 2, 3), _o(m, 3, 3, 5)), RuntimeError,
                  "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [3, 3]."),
    "bmm_rank": (lambda m: m.bmm(_o(m, 2, 2, 3), _o(m, 3, 5)), RuntimeError, "batch2 must be a 3D tensor"),
    "bmm_dtype": (lambda m: m.bmm(_o(m, 2, 2, 3), _o(m, 2, 3, 5, dtype=torch.float64)), RuntimeError,
                  "expected scalar type Float but found Double"),
    "mm_rank": (lambda m: m.mm(_o(m, 2, 3), _o(m, 3)), RuntimeError, "mat2 must be a matrix"),
    "mv_rank": (lambda m: m.mv(_o(m, 3), _o(m, 3)), RuntimeError, "vector + matrix @ vector expected, got 1, 1, 1"),
    "dot_rank": (lambda m: m.dot(_o(m, 3, 1), _o(m, 3)), RuntimeError, "1D tensors expected, but got 2D and 1D"),
    "outer_rank": (lambda m: m.outer(_o(m, 3, 1), _o(m, 3)), RuntimeError, "outer: Expected 1-D argument self"),
    "addmm_input": (lambda m: m.addmm(_o(m, 3, 5), _o(m, 2, 3), _o(m, 3, 5)), RuntimeError,
                    "The expanded size of the tensor (2) must match the existing size (3)"),
    "einsum_dtype": (lambda m: m.einsum("ij,jk->ik", _o(m, 2, 3), _o(m, 3, 2, dtype=torch.float64)), RuntimeError,
                     "expected scalar type Float but found Double"),
    "einsum_size": (lambda m: m.einsum("i,i->", _o(m, 3), _o(m, 4)), RuntimeError,
                    "subscript i has size 4 for operand 1 which does not broadcast with previously seen size 3"),
    "einsum_ndim": (lambda m: m.einsum("ij,j->", _o(m, 3), _o(m, 4)), RuntimeError,
                    "the number of subscripts in the equation (2) does not match the number of dimensions (1)"),
    "einsum_few_operands": (lambda m: m.einsum("i,i", _o(m, 3)), RuntimeError, "fewer operands were provided"),
    "einsum_many_operands": (lambda m: m.einsum("i->", _o(m, 2), _o(m, 2)), RuntimeError,
                             "more operands were provided"),
    "einsum_bad_output": (lambda m: m.einsum("ij,j->k", _o(m, 3, 4), _o(m, 4)), RuntimeError,
                          "output subscript k does not appear in the equation for any input operand"),
    "einsum_repeated_output": (lambda m: m.einsum("ij->ii", _o(m, 2, 2)), RuntimeError,
                               "output subscript i appears more than once in the output"),
    "einsum_bad_char": (lambda m: m.einsum("i1,i->", _o(m, 2, 3), _o(m, 2)), RuntimeError,
                        "invalid subscript given at index 1"),
    "einsum_diag_sizes": (lambda m: m.einsum("ii->i", _o(m, 2, 3)), RuntimeError,
                          "subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"),
    "tensordot_sizes": (lambda m: m.tensordot(_o(m, 2, 3), _o(m, 4, 5), 1), RuntimeError,
                        "contracted dimensions need to match, but first has size 3 in dim -1 and second has size 4"),
    "tensordot_lists": (lambda m: m.tensordot(_o(m, 2, 3), _o(m, 3, 4), [[1, 0], [0]]), RuntimeError,
                        "both dimension lists should have same length"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_product_errors_match_torch(case):
    raises_like_torch(*ERRORS[case])
