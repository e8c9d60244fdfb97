"""Products against PyTorch: every matmul broadcasting case, mm/bmm/mv/dot, fused adds,
einsum (explicit, implicit, ellipsis, diagonals, list forms), tensordot, kron, and errors."""
import itertools
import math
import warnings

import jax
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import compare, gradcheck, same
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


# ---------------------------------------------------------------- torch.linalg's OpInfos
# PyTorch's own sample inputs for each torch.linalg OpInfo (up to 5 per op, spread over its list): values in
# float32 and float64, first-order gradients in float64 (second order on the first sample), against torch.
def _sign_fix(u, vh=None):
    """Columns of ``u`` (and the matching rows of ``vh``) with a non-negative first row: the sign each
    factorization may choose freely."""
    if u.shape[-2] == 0:
        return (u,) if vh is None else (u, vh)
    s = u[..., :1, :].sign()
    return (u * s,) if vh is None else (u * s, vh * s.mT)


def _svd_gauge(m, out):
    """``(U, Vh)`` up to sign, their first ``k`` columns / rows (the rest of a full ``U`` or ``Vh`` is any
    orthonormal completion), and ``S``."""
    u, s, vh = out
    k = s.shape[-1]
    return _sign_fix(u[..., :k], vh[..., :k, :]) + (s,)


def _symmetric(a):
    return a + a.mT


LINALG = {   # OpInfo name -> (dynajax function with torch's signature, output gauge fix or None, symmetric input)
    "linalg.cross": (dj.linalg.cross, None, False),
    "linalg.det": (dj.linalg.det, None, False),
    "linalg.diagonal": (dj.linalg.diagonal, None, False),
    "linalg.cholesky": (dj.linalg.cholesky, None, True),
    "linalg.cholesky_ex": (dj.linalg.cholesky_ex, None, True),
    "linalg.vecdot": (dj.linalg.vecdot, None, False),
    "linalg.cond": (dj.linalg.cond, None, False),
    "linalg.eigh": (dj.linalg.eigh, lambda m, o: (o[0],) + _sign_fix(o[1]), True),
    "linalg.eigvalsh": (dj.linalg.eigvalsh, None, True),
    "linalg.householder_product": (dj.linalg.householder_product, None, False),
    "linalg.lstsq": (dj.linalg.lstsq, None, False),
    "linalg.matrix_power": (dj.linalg.matrix_power, None, False),
    "linalg.multi_dot": (dj.linalg.multi_dot, None, False),
    "linalg.norm": (dj.linalg.norm, None, False),
    "linalg.matrix_norm": (dj.linalg.matrix_norm, None, False),
    "linalg.qr": (dj.linalg.qr, None, False),
    "linalg.slogdet": (dj.linalg.slogdet, None, False),
    "linalg.vander": (dj.linalg.vander, None, False),
    "linalg.vector_norm": (dj.linalg.vector_norm, None, False),
    "linalg.lu_factor": (dj.linalg.lu_factor, None, False),
    "linalg.lu_factor_ex": (dj.linalg.lu_factor_ex, None, False),
    "linalg.lu": (dj.linalg.lu, None, False),
    "linalg.lu_solve": (dj.linalg.lu_solve, None, False),
    "linalg.inv": (dj.linalg.inv, None, False),
    "linalg.inv_ex": (dj.linalg.inv_ex, None, False),
    "linalg.solve": (dj.linalg.solve, None, False),
    "linalg.solve_ex": (dj.linalg.solve_ex, None, False),
    "linalg.solve_triangular": (dj.linalg.solve_triangular, None, False),
    "linalg.matrix_rank": (dj.linalg.matrix_rank, None, False),
    "linalg.pinv": (dj.linalg.pinv, None, False),
    "linalg.pinv|singular": (lambda a, b: dj.linalg.pinv(a @ b.mT), None, False),
    "linalg.lstsq|grad_oriented": (lambda a, b, driver: dj.linalg.lstsq(a, b, driver=driver)[:2], None, False),
    "linalg.svd": (dj.linalg.svd, _svd_gauge, False),
    "linalg.svdvals": (dj.linalg.svdvals, None, False),
    "linalg.tensorinv": (dj.linalg.tensorinv, None, False),
    "linalg.tensorsolve": (dj.linalg.tensorsolve, None, False),
}
# the second derivative of a vector norm at 0: dynajax's vector_norm (ops/reduce.py) gives NaN where PyTorch
# gives its subgradient 0 -- a gap of vector_norm's rule, not of the linalg ops tested here
NO_DOUBLE = {"linalg.norm|subgradients_at_zero"}
MISSING = {"linalg.eig", "linalg.eigvals", "linalg.ldl_factor", "linalg.ldl_factor_ex", "linalg.ldl_solve"}


def _opinfos():
    from torch.testing._internal.common_methods_invocations import op_db
    return {(o.name, o.variant_test_name): o for o in op_db if o.name.startswith("linalg.")}


def test_linalg_opinfo_coverage():
    """Every torch.linalg OpInfo is either tested below or listed as missing."""
    names = {n for n, _ in _opinfos()}
    tested = {k.split("|")[0] for k in LINALG}
    assert names - MISSING == tested, sorted(names ^ (tested | MISSING))


def _samples(o, dtype, n):
    """``n`` of the OpInfo's samples with no empty tensor, spread over the first 24 of its list, and its first
    sample with one (None if it has none). The OpInfo's own ``sample_inputs_func``, seeded: ``sample_inputs``
    wraps it in an iterator that inspects the call stack's source files for every sample, which costs more
    than these tests."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ss = list(itertools.islice(o.sample_inputs_func(o, "cpu", dtype, dtype == torch.float64), 24))
    def empty(s):
        return any(a.size == 0 for a in _flatten(s)[0])
    full = [s for s in ss if not empty(s)]
    return full[len(full) // (2 * n)::max(1, len(full) // n)][:n], next((s for s in ss if empty(s)), None)


def _flatten(sample):
    """``(arrays, rebuild)``: the sample's tensors as numpy arrays, and ``rebuild(lib_tensors)`` giving
    ``(input, args, kwargs)`` with them put back."""
    arrays = []

    def strip(x):
        if isinstance(x, torch.Tensor):
            arrays.append(x.detach().numpy().copy())
            return ("__t", len(arrays) - 1)
        if isinstance(x, (list, tuple)):
            return type(x)(strip(v) for v in x)
        return x

    tree = strip((sample.input, tuple(sample.args), dict(sample.kwargs)))

    def rebuild(ts):
        def put(x):
            if isinstance(x, tuple) and len(x) == 2 and x[0] == "__t":
                return ts[x[1]]
            if isinstance(x, (list, tuple)):
                return type(x)(put(v) for v in x)
            if isinstance(x, dict):
                return {k: put(v) for k, v in x.items()}
            return x
        return put(tree)
    return arrays, rebuild


def _caller(lib, fn, rebuild, gauge, symmetric):
    def call(*ts):
        inp, args, kwargs = rebuild(ts)
        if symmetric:
            inp = _symmetric(inp)
        out = fn(inp, *args, **kwargs)
        return gauge(lib, out) if gauge is not None else out
    return call


_OPINFO_IDS = sorted(f"{n}|{v}" for n, v in _opinfos() if n in LINALG)


@pytest.mark.parametrize("key", _OPINFO_IDS)
def test_linalg_opinfo_samples_match_torch(key):
    """Two float64 samples: values and gradients (second order on the first); float32: the values of one
    sample, and of one with an empty tensor (a 0 x 0 matrix, an empty batch) where the OpInfo has one."""
    name, variant = key.split("|")
    o = _opinfos()[(name, variant)]
    fn, gauge, symmetric = LINALG.get(key, LINALG[name])
    grad = o.supports_autograd
    for dtype, n in ((torch.float64, 2), (torch.float32, 1)):
        full, empty = _samples(o, dtype, n)
        for i, s in enumerate(full + ([empty] if empty is not None and dtype == torch.float32 else [])):
            arrays, rebuild = _flatten(s)
            f64 = dtype == torch.float64
            tol = dict(rtol=1e-6, atol=1e-8) if f64 else dict(rtol=1e-4, atol=1e-5)
            compare(_caller(dj, fn, rebuild, gauge, symmetric), _caller(torch, o.op, rebuild, gauge, symmetric),
                    *arrays, grad=f64 and grad,
                    double=f64 and grad and i == 0 and o.supports_gradgrad and key not in NO_DOUBLE, **tol)


# ---------------------------------------------------------------- top-level aliases, Tensor methods, matrix_exp
def _spd(a):
    return a @ a.mT + 3 * (torch.eye(a.shape[-1], dtype=a.dtype) if isinstance(a, torch.Tensor) else
                           dj.eye(a.shape[-1], dtype=a.dtype))


ALIASES = {
    "inverse": (lambda m, a: (m.inverse(a), a.inverse()), (r(2, 3, 3),)),
    "det_logdet_slogdet": (lambda m, a: (m.det(a), a.det(), m.logdet(_spd(a)), a.logdet(), *m.slogdet(a),
                                         *a.slogdet()), (r(3, 3),)),
    "cholesky": (lambda m, a: (m.cholesky(_spd(a)), _spd(a).cholesky(upper=True)), (r(3, 3),)),
    "cholesky_solve_inverse": (lambda m, a, b: (m.cholesky_solve(b, m.linalg.cholesky(_spd(a))),
                                                b.cholesky_solve(m.linalg.cholesky(_spd(a)).mT, upper=True),
                                                m.cholesky_inverse(m.linalg.cholesky(_spd(a)))),
                               (r(3, 3), r(3, 2))),
    "qr_some": (lambda m, a: (*m.qr(a), *a.qr(some=False)), (r(3, 4),)),
    "svd_V": (lambda m, a: (lambda u, s, v: (u * u[..., :1, :].sign(), s, v * u[..., :1, :].sign()))(*m.svd(a)),
              (r(4, 3),)),
    "svd_no_uv": (lambda m, a: tuple(a.svd(compute_uv=False)), (r(3, 4),)),
    "pinverse": (lambda m, a: (m.pinverse(a), a.pinverse(rcond=1e-10)), (r(4, 3),)),
    "matrix_exp": (lambda m, a: (m.matrix_exp(a), a.matrix_exp(), m.linalg.matrix_exp(a[0])), (0.5 * r(2, 3, 3),)),
    "matrix_power": (lambda m, a: (m.matrix_power(a, 3), a.matrix_power(-2), a.matrix_power(0)), (r(3, 3),)),
    "lu_unpack_solve": (lambda m, a, b: (lambda lu, piv: (*m.lu_unpack(lu, piv), m.lu_solve(b, lu, piv),
                                                          b.lu_solve(lu, piv)))(*m.linalg.lu_factor(a)),
                        (r(3, 3), r(3, 2))),
    "lu_old": (lambda m, a: m.lu(a)[0], (r(3, 3),)),
    "orgqr": (lambda m, a, t: (a.orgqr(t), m.orgqr(a, t)), (r(4, 3), r(2))),
}


@pytest.mark.filterwarnings("ignore:torch.*deprecated")   # PyTorch's own notes on torch.qr, torch.lu, ...
@pytest.mark.parametrize("case", sorted(ALIASES))
def test_linalg_aliases_and_methods_match_torch(case):
    f, inputs = ALIASES[case]
    compare(lambda *a: f(dj, *a), lambda *a: f(torch, *a), *inputs, double=case == "matrix_exp", rtol=1e-6,
            atol=1e-8)


TAPE = {   # the primitive ops: tape against jax.vjp of the lowered graph, finite differences, double backward
    "inv": (lambda a: dj.linalg.inv(a), [r(3, 3)]),
    "solve": (lambda a, b: dj.linalg.solve(a, b), [r(2, 3, 3), r(3, 2)]),
    "solve_triangular": (lambda a, b: dj.linalg.solve_triangular(a, b, upper=False, left=False),
                         [r(3, 3) + 3 * np.eye(3), r(2, 3)]),
    "cholesky": (lambda a: dj.linalg.cholesky(_spd(a)), [r(3, 3)]),
    "det_slogdet": (lambda a: (dj.linalg.det(a), dj.linalg.slogdet(a).logabsdet), [r(3, 3)]),
    "eigh": (lambda a: (lambda w, v: (w, _sign_fix(v)[0]))(*dj.linalg.eigh(a + a.mT)), [r(3, 3)]),
    "svd": (lambda a: _svd_gauge(dj, dj.linalg.svd(a, full_matrices=False)), [r(4, 3)]),
    "qr": (lambda a: dj.linalg.qr(a), [r(3, 4)]),
    "lu_factor": (lambda a: dj.linalg.lu_factor(a).LU, [r(4, 3)]),
    "pinv": (lambda a: dj.linalg.pinv(a), [r(3, 4)]),
    "matrix_exp": (lambda a: dj.linalg.matrix_exp(a), [0.5 * r(2, 2)]),
}


@pytest.mark.parametrize("case", sorted(TAPE))
def test_linalg_tape_matches_lowered_jax(case):
    f, inputs = TAPE[case]
    # matrix_exp's second order differentiates a 4n x 4n exponential: its double backward is compared with
    # PyTorch's in test_linalg_aliases_and_methods_match_torch instead, to keep this test fast
    dj.testing.check_grads(f, inputs, order=1 if case == "matrix_exp" else 2)


# ---------------------------------------------------------------- errors
def _singular(m):
    return m.tensor([[1.0, 2.0], [2.0, 4.0]])


LINALG_ERRORS = {
    "inv_rank": (lambda m: m.linalg.inv(_o(m, 3)), RuntimeError,
                 "linalg.inv: The input tensor A must have at least 2 dimensions."),
    "inv_square": (lambda m: m.linalg.inv(_o(m, 2, 3)), RuntimeError,
                   "linalg.inv: A must be batches of square matrices, but they are 2 by 3 matrices"),
    "inv_int": (lambda m: m.linalg.inv(_o(m, 2, 2, dtype=torch.int64)), RuntimeError,
                "linalg.inv: Expected a floating point or complex tensor as input. Got Long"),
    "inv_half": (lambda m: m.linalg.inv(_o(m, 2, 2, dtype=torch.float16)), RuntimeError,
                 "linalg.inv: Low precision dtypes not supported. Got Half"),
    "inv_singular": (lambda m: m.linalg.inv(_singular(m)), RuntimeError,
                     "linalg.inv: The diagonal element 2 is zero, the inversion could not be completed because the "
                     "input matrix is singular."),
    "solve_singular_batch": (lambda m: m.linalg.solve(m.stack([m.eye(2), m.zeros(2, 2)]), _o(m, 2, 2)), RuntimeError,
                             "torch.linalg.solve: (Batch element 1): The solver failed because the input matrix is "
                             "singular."),
    "solve_shapes": (lambda m: m.linalg.solve(m.eye(2), _o(m, 3)), RuntimeError,
                     "linalg.solve: Incompatible shapes of A and B for the equation AX = B (2x2 and 3x1)"),
    "solve_right_shapes": (lambda m: m.linalg.solve(m.eye(3), _o(m, 2, 4), left=False), RuntimeError,
                           "linalg.solve: Incompatible shapes of A and B for the equation XA = B (3x3 and 2x4)"),
    "solve_dtype": (lambda m: m.linalg.solve(m.eye(2), _o(m, 2, dtype=torch.float64)), RuntimeError,
                    "linalg.solve: Expected A and B to have the same dtype, but found A of type Float and B of type "
                    "Double instead"),
    "solve_batch": (lambda m: m.linalg.solve(m.eye(2).expand(2, 2, 2), _o(m, 3, 2, 1)), RuntimeError,
                    "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 0"),
    "solve_triangular_vector": (lambda m: m.linalg.solve_triangular(m.eye(2), _o(m, 2), upper=True), RuntimeError,
                                "linalg.solve_triangular: The input tensor B must have at least 2 dimensions."),
    "cholesky_not_pd": (lambda m: m.linalg.cholesky(m.tensor([[1.0, 2.0], [2.0, 1.0]])), RuntimeError,
                        "linalg.cholesky: The factorization could not be completed because the input is not "
                        "positive-definite (the leading minor of order 2 is not positive-definite)."),
    "cholesky_batch": (lambda m: m.linalg.cholesky(-m.eye(2).expand(2, 2, 2)), RuntimeError,
                       "linalg.cholesky: (Batch element 0): The factorization could not be completed because the "
                       "input is not positive-definite (the leading minor of order 1 is not positive-definite)."),
    "lu_factor_singular": (lambda m: m.linalg.lu_factor(m.zeros(2, 2)), RuntimeError,
                           "torch.linalg.lu_factor: U[1,1] is zero and using it on lu_solve would result in a "
                           "division by zero."),
    "lu_factor_no_pivot": (lambda m: m.linalg.lu_factor(_o(m, 2, 3), pivot=False), RuntimeError,
                           "linalg.lu_factor: LU without pivoting is not implemented on the CPU"),
    "eigh_uplo": (lambda m: m.linalg.eigh(m.eye(2), UPLO="X"), RuntimeError,
                  "Expected UPLO argument to be 'L' or 'U', but got X"),
    "svd_int": (lambda m: m.linalg.svd(_o(m, 2, 2, dtype=torch.int64)), RuntimeError,
                "linalg.svd: Expected a floating point or complex tensor as input. Got Long"),
    "svd_driver": (lambda m: m.linalg.svd(m.eye(2), driver="gesvd"), RuntimeError,
                   "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs"),
    "qr_mode": (lambda m: m.linalg.qr(m.eye(2), mode="x"), RuntimeError,
                "qr received unrecognized mode 'x' but expected one of 'reduced' (default), 'r', or 'complete'"),
    "qr_r_backward": (lambda m: m.linalg.qr(m.eye(2).requires_grad_(), mode="r")[1].sum().backward(), RuntimeError,
                      "The derivative of linalg.qr depends on Q, which is not computed when mode='r'."),
    "cross_length": (lambda m: m.linalg.cross(_o(m, 2, 2), _o(m, 2, 2)), RuntimeError,
                     "linalg.cross: inputs dimension -1 must have length 3. Got 2 and 2"),
    "matrix_power_square": (lambda m: m.linalg.matrix_power(_o(m, 2, 3), 2), RuntimeError,
                            "linalg.matrix_power: A must be batches of square matrices, but they are 2 by 3 matrices"),
    "matrix_power_int_negative": (lambda m: m.linalg.matrix_power(_o(m, 2, 2, dtype=torch.int64), -1), RuntimeError,
                                  "linalg.inv: Expected a floating point or complex tensor as input. Got Long"),
    "pinv_int": (lambda m: m.linalg.pinv(_o(m, 2, dtype=torch.int64)), RuntimeError,
                 "linalg.pinv(Long{[2]}): expected a tensor with 2 or more dimensions of float, double, cfloat or "
                 "cdouble types"),
    "tensorinv_ind": (lambda m: m.linalg.tensorinv(_o(m, 2, 3), ind=0), RuntimeError,
                      "Expected a strictly positive integer for 'ind', but got 0"),
    "tensorinv_shape": (lambda m: m.linalg.tensorinv(_o(m, 2, 3), ind=1), RuntimeError,
                        "prod(self.shape[ind:]) == prod(self.shape[:ind]), but got 3 != 2"),
    "vander_n": (lambda m: m.linalg.vander(_o(m, 1)), RuntimeError, "N must be greater than 1."),
    "vecdot_dtype": (lambda m: m.linalg.vecdot(_o(m, 2), _o(m, 2, dtype=torch.float64)), RuntimeError,
                     "linalg.vecdot: Expected x and y to have the same dtype, but found x of type Float and y of "
                     "type Double instead"),
    "cond_ord": (lambda m: m.linalg.cond(m.eye(2), 3), RuntimeError, "linalg.cond got an invalid norm type: 3"),
    "cond_square": (lambda m: m.linalg.cond(_o(m, 2, 3), "fro"), RuntimeError,
                    "linalg.cond(ord=fro): A must be batches of square matrices, but they are 2 by 3 matrices"),
    "matrix_norm_ord": (lambda m: m.linalg.matrix_norm(m.eye(2), 3), RuntimeError,
                        "linalg.matrix_norm: Order 3 not supported."),
    "matrix_rank_rank": (lambda m: m.linalg.matrix_rank(_o(m, 2)), RuntimeError,
                         "torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions."),
    "householder_shapes": (lambda m: m.linalg.householder_product(_o(m, 2, 3), _o(m, 2)), RuntimeError,
                           "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]"),
    "householder_dtype": (lambda m: m.linalg.householder_product(_o(m, 3, 2), _o(m, 2, dtype=torch.float64)),
                          RuntimeError, "tau dtype Double does not match input dtype Float"),
    "lstsq_rows": (lambda m: m.linalg.lstsq(_o(m, 3, 2), _o(m, 4, 2)), RuntimeError,
                   "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"),
    "lstsq_driver": (lambda m: m.linalg.lstsq(_o(m, 3, 2), _o(m, 3, 2), driver="foo"), RuntimeError,
                     "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)"),
}


@pytest.mark.parametrize("case", sorted(LINALG_ERRORS))
def test_linalg_errors_match_torch(case):
    raises_like_torch(*LINALG_ERRORS[case])


def test_linalg_error_is_a_runtime_error_subclass():
    with pytest.raises(dj.linalg.LinAlgError) as info:
        dj.linalg.inv(_singular(dj))
    assert isinstance(info.value, RuntimeError)


def test_info_outputs_match_torch():
    for m in (torch, dj):
        a = _singular(m)
        got = (m.linalg.inv_ex(a).info, m.linalg.solve_ex(m.zeros(2, 2), m.ones(2)).info,
               m.linalg.cholesky_ex(m.tensor([[1.0, 2.0], [2.0, 1.0]])).info, m.linalg.lu_factor_ex(m.zeros(2, 2)).info)
        assert [(int(i), str(i.dtype).split(".")[-1]) for i in got] == [(2, "int32"), (1, "int32"), (2, "int32"),
                                                                       (1, "int32")]


def test_singular_check_only_runs_eagerly():
    """A compiled step cannot read a factorization's info without a graph break: like other value checks,
    it is skipped there, and the inverse of a singular matrix holds the inf / NaN it computed."""
    step = dj.compile(lambda a: dj.linalg.inv(a))
    out = step(dj.zeros(2, 2))
    assert not np.isfinite(out.numpy()).all()
    with pytest.raises(dj.linalg.LinAlgError):
        dj.linalg.inv(dj.zeros(2, 2))


# ---------------------------------------------------------------- norms at zero, nuclear norm, size-1 tensordot dims
# Regression tests of issue 37's fixes, each side by side with PyTorch (and the tape with jax.vjp of the
# lowered graph where a gradient was wrong): lowered norms at zero, and ops that refused what PyTorch computes
# (norm(p='nuc'), size-1 tensordot dims), and PyTorch's errors next to them.
def _lowered_grad(fn, x: np.ndarray, cot: np.ndarray) -> np.ndarray:
    low = dj.lower(fn, dj.tensor(x))
    return np.asarray(jax.grad(lambda a: (low.fn(a) * cot).sum())(x))


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, math.inf, -math.inf])
@pytest.mark.parametrize("x", [[0.0, 0.0, 0.0], [0.0, 1.0, -2.0]])
@pytest.mark.parametrize("fn", ["vector_norm", "linalg.norm", "Tensor.norm"])
def test_norm_gradients_at_zero(fn, x, p):
    f = {"vector_norm": lambda L, a: L.linalg.vector_norm(a, p), "linalg.norm": lambda L, a: L.linalg.norm(a, p),
         "Tensor.norm": lambda L, a: a.norm(p)}[fn]
    x = np.array(x)
    xt = torch.tensor(x, requires_grad=True)
    f(torch, xt).backward()
    xd = dj.tensor(x, requires_grad=True)
    f(dj, xd).backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(_lowered_grad(lambda a: f(dj, a), x, np.array(1.0)), xt.grad.numpy(), atol=1e-12)


NUCLEAR_NORM = {
    "norm nuc": lambda L: round(L.norm(L.tensor([[1.0, 2, 3], [4, 5, 6]], dtype=L.float64), p="nuc").item(), 10),
    "norm nuc dim keepdim": lambda L: np.round(L.norm(L.arange(24.0, dtype=L.float64).reshape(2, 3, 4).sin(),
                                                      p="nuc", dim=(0, 2), keepdim=True).tolist(), 10).tolist(),
    "norm nuc 3-d": lambda L: L.norm(L.ones(2, 3, 4), p="nuc"),
    "norm nuc int": lambda L: L.norm(L.ones(2, 3, dtype=L.int64), p="nuc", dim=(0, 1)),
    "norm unknown order": lambda L: L.norm(L.ones(2, 3), p="foo"),
}


@pytest.mark.parametrize("case", sorted(NUCLEAR_NORM))
def test_norm_nuc_like_torch(case):
    same(NUCLEAR_NORM[case])


def test_nuclear_norm_gradients_like_torch():
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    compare(lambda a: dj.norm(a, p="nuc", dim=(1, 2)), lambda a: torch.norm(a, p="nuc", dim=(1, 2)), x, double=True)
    dj.testing.check_grads(lambda a: a.norm(p="nuc", dim=(0, 2)), [x])


TENSORDOT_SIZE_ONE = {
    "tensordot size-1 first": lambda L: L.tensordot(L.ones(2, 1), L.tensor([[1.0, 2], [3, 4], [5, 6]]),
                                                    dims=([1], [0])),
    "tensordot size-1 second": lambda L: L.tensordot(L.arange(6.0).reshape(2, 3), L.ones(1, 2), dims=([1], [0])),
    "tensordot size-1 dims=1": lambda L: L.tensordot(L.arange(6.0).reshape(2, 3), L.ones(1, 4), dims=1),
    "tensordot size-1 ints": lambda L: L.tensordot(L.ones(2, 1, dtype=L.int32), L.ones(3, 2, dtype=L.int32),
                                                   dims=([1], [0])),
}


@pytest.mark.parametrize("case", sorted(TENSORDOT_SIZE_ONE))
def test_tensordot_size_one_dims_like_torch(case):
    same(TENSORDOT_SIZE_ONE[case])


def test_tensordot_size_one_gradients_like_torch():
    rng = np.random.default_rng(0)
    compare(lambda a, b: dj.tensordot(a, b, dims=([1], [0])), lambda a, b: torch.tensordot(a, b, dims=([1], [0])),
            rng.standard_normal((2, 1)), rng.standard_normal((3, 2)))
