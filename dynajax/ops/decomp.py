"""``torch.linalg``'s factorizations, solvers and the functions built on them.

The primitive ops are few: ``inv_ex``, ``solve_ex``, ``solve_triangular``, ``cholesky_ex``, ``det``,
``slogdet``, ``eigh``, ``svd``, ``qr``, ``lu_factor_ex``, ``pinv`` and ``matrix_exp``. Each impl calls
``jax.lax.linalg`` / ``jnp.linalg``; each VJP rule is written in dynajax ops (products, triangular solves and
the primitives themselves), so gradients of every order are recorded, and follows the formula PyTorch uses,
so gradients match PyTorch's where a factorization's gradient is a convention (a symmetric ``cholesky`` or
``eigh`` gradient, ``svd`` with ``full_matrices=True`` differentiating through the first ``min(m, n)``
columns). The rest (``lu``, ``lu_solve``, ``lstsq``, ``cond``, ``matrix_rank``, ``householder_product``,
``tensorsolve``, ...) are compositions, differentiated through what they are made of.

Singular or non-positive-definite inputs raise :class:`LinAlgError` (a ``RuntimeError``) as PyTorch does,
which reads the ``info`` the factorization returns: only when the op runs eagerly on concrete arrays; while
``dynajax.compile`` records a step, or under a JAX transformation, nothing is read and the result holds the
inf / NaN the factorization left. Real dtypes only (float32, float64): complex inputs raise
NotImplementedError.
"""
from __future__ import annotations

import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim, method
from .creation import as_tensor, eye, ones, zeros
from .dispatch import is_recorded
from .elementwise import abs, where, with_out
from .join import cat, diag_embed, diagonal as _diagonal, stack, tril, triu
from .layout import cross
from .linalg import _mm_raw, batch_shape, matmul
from .reduce import amax, amin, return_type, sum, vector_norm
from .registry import apply, op
from .shape import expand, movedim, reshape, transpose, unsqueeze

__all__ = ["inverse", "det", "logdet", "slogdet", "cholesky", "cholesky_solve", "cholesky_inverse", "qr", "svd",
           "pinverse", "matrix_exp", "matrix_power", "lu", "lu_solve", "lu_unpack", "orgqr"]


class LinAlgError(RuntimeError):
    """A factorization failed: the matrix is singular or not positive-definite (``torch.linalg.LinAlgError``)."""


_inv_ex_t = return_type("linalg_inv_ex", "inverse", "info")
_solve_ex_t = return_type("linalg_solve_ex", "result", "info")
_cholesky_ex_t = return_type("linalg_cholesky_ex", "L", "info")
_slogdet_t = return_type("linalg_slogdet", "sign", "logabsdet")
_slogdet_old_t = return_type("slogdet", "sign", "logabsdet")
_eigh_t = return_type("linalg_eigh", "eigenvalues", "eigenvectors")
_svd_t = return_type("linalg_svd", "U", "S", "Vh")
_svd_old_t = return_type("svd", "U", "S", "V")
_qr_t = return_type("linalg_qr", "Q", "R")
_qr_old_t = return_type("qr", "Q", "R")
_lu_factor_t = return_type("linalg_lu_factor", "LU", "pivots")
_lu_factor_ex_t = return_type("linalg_lu_factor_ex", "LU", "pivots", "info")
_lu_t = return_type("linalg_lu", "P", "L", "U")
_lu_unpack_t = return_type("lu_unpack", "P", "L", "U")
_lstsq_t = return_type("linalg_lstsq", "solution", "residuals", "rank", "singular_values")


# ---------------------------------------------------------------- argument checks (PyTorch's messages)
def _shape(x: Tensor) -> tuple:
    return tuple(x._v.shape)


def _check_dtype(name: str, A: Tensor, what: str = "input") -> None:
    d = A._v.dtype
    if d.kind == "c":
        raise NotImplementedError(f"{name}: complex inputs are not supported by dynajax yet")
    if d.kind != "f":
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as {what}. Got "
                           f"{A.dtype.legacy_name}")
    if d.itemsize < 4:
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got {A.dtype.legacy_name}")


def _check_matrix(name: str, A: Tensor, arg: str = "A") -> None:
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    _check_dtype(name, A)


def _check_square(name: str, A: Tensor, arg: str = "A") -> None:
    _check_matrix(name, A, arg)
    m, n = _shape(A)[-2:]
    if m != n:
        raise RuntimeError(f"{name}: {arg} must be batches of square matrices, but they are {m} by {n} matrices")


def _check_same_dtype(name: str, A: Tensor, B: Tensor, a: str = "A", b: str = "B") -> None:
    if A._v.dtype != B._v.dtype:
        raise RuntimeError(f"{name}: Expected {a} and {b} to have the same dtype, but found {a} of type "
                           f"{A.dtype.legacy_name} and {b} of type {B.dtype.legacy_name} instead")


def _readable(t: Tensor) -> bool:
    """Whether ``t`` holds a concrete array an eager check may read (not a tracer, not a recorded value)."""
    return not isinstance(t._value, jax.core.Tracer) and not is_recorded(t)


def _raise_on_info(info: Tensor, message, exc=LinAlgError) -> None:
    """PyTorch's check of a factorization's ``info``: raise ``exc(message(prefix, info))`` for the first batch
    element whose info is nonzero, the prefix "(Batch element i): " in a batch."""
    if not _readable(info) or info.numel() == 0:
        return
    flat = np.asarray(info._value).reshape(-1)
    bad = np.flatnonzero(flat)
    if bad.size:
        i = int(bad[0])
        where_ = f"(Batch element {i}): " if info.ndim else ""
        raise exc(message(where_, int(flat[i])))


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -1, -2)


def _eye_like(n: int, x: Tensor) -> Tensor:
    return eye(n, dtype=x.dtype)


def _off_diag(k: int, x: Tensor) -> Tensor:
    """A ``k x k`` boolean tensor, True off the diagonal."""
    return eye(k, dtype=x.dtype) == 0


def _rows(x: Tensor, s: Tensor) -> Tensor:
    """``diag(s) @ x``."""
    return x * unsqueeze(s, -1)


def _cols(x: Tensor, s: Tensor) -> Tensor:
    """``x @ diag(s)``."""
    return x * unsqueeze(s, -2)


def _skew(x: Tensor) -> Tensor:
    return x - _mT(x)


def _symmetric_from(a, lower: bool):
    """The symmetric matrix that ``a``'s lower (upper) triangle stands for -- the values LAPACK reads -- with the
    derivative of ``(a + a^T) / 2``: PyTorch's gradient of a factorization of a symmetric matrix is symmetric,
    and so, with this, is ``jax.vjp`` of the impl, which then agrees with the op's rule."""
    half = (a + jnp.swapaxes(a, -1, -2)) / 2
    tri = jnp.tril(a) if lower else jnp.triu(a)
    full = tri + jnp.swapaxes(jnp.tril(a, -1) if lower else jnp.triu(a, 1), -1, -2)
    return half + jax.lax.stop_gradient(full - half)


# ---------------------------------------------------------------- LU-based solves on arrays
def _lu_info(lu):
    """LAPACK getrf's info of packed factors: 1 + the first zero on U's diagonal, 0 if none."""
    d = jnp.diagonal(lu, axis1=-2, axis2=-1) == 0
    if d.shape[-1] == 0:
        return jnp.zeros(d.shape[:-1], jnp.int32)
    return jnp.where(d.any(-1), jnp.argmax(d, -1) + 1, 0).astype(jnp.int32)


def _permute_rows(x, perm):
    return jnp.take_along_axis(x, perm[..., :, None], axis=-2)


def _lu_solve_arr(lu, perm, b):
    """``A^{-1} b`` from ``A``'s packed LU factors and row permutation (``A[perm] = L U``)."""
    x = _permute_rows(b, perm)
    x = jax.lax.linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
    return jax.lax.linalg.triangular_solve(lu, x, left_side=True, lower=False)


# ---------------------------------------------------------------- inv
@op("linalg_inv_ex", nout=2, backward_name="LinalgInvExBackward0")
def _inv_ex(a):
    lu, _, perm = jax.lax.linalg.lu(a)
    return _lu_solve_arr(lu, perm, jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)), _lu_info(lu)


@_inv_ex.defvjp
def _inv_vjp(g, out, a):
    x = out[0]
    return (-_mm_raw(_mm_raw(_mT(x), g[0]), _mT(x)),)


_inv_ex.none_cotangents = True


def _inv_message(name):
    return lambda at, k: (f"{name}: {at}The diagonal element {k} is zero, the inversion could not be completed "
                          "because the input matrix is singular.")


def inv_ex(A: Tensor, *, check_errors: bool = False, out=None):
    """``torch.linalg.inv_ex``: ``(inverse, info)``; info > 0 marks a singular matrix (its zero pivot)."""
    _check_square("linalg.inv_ex", A)
    x, info = apply(_inv_ex, A)
    if check_errors:
        _raise_on_info(info, _inv_message("linalg.inv_ex"))
    return _inv_ex_t(with_out(x, out[0] if out is not None else None, "linalg_inv_ex"), info)


def inv(A: Tensor, *, out=None) -> Tensor:
    """``torch.linalg.inv``: the inverse of each square matrix; raises LinAlgError for a singular one."""
    _check_square("linalg.inv", A)
    x, info = apply(_inv_ex, A)
    _raise_on_info(info, _inv_message("linalg.inv"))
    return with_out(x, out, "linalg_inv")


def _inv(A: Tensor) -> Tensor:
    """The inverse, unchecked (inside rules and compositions)."""
    return apply(_inv_ex, A)[0]


@method()
def inverse(input: Tensor, *, out=None) -> Tensor:
    """``torch.inverse``: ``linalg.inv``."""
    return inv(input, out=out)


# ---------------------------------------------------------------- solve
@op("linalg_solve_ex", nout=2, backward_name="LinalgSolveExBackward0")
def _solve_ex(a, b):
    lu, _, perm = jax.lax.linalg.lu(a)
    return _lu_solve_arr(lu, perm, b), _lu_info(lu)


@_solve_ex.defvjp
def _solve_vjp(g, out, a, b):
    gb = apply(_solve_ex, _mT(a), g[0])[0]
    return (-_mm_raw(gb, _mT(out[0])) if a.requires_grad else None), gb


_solve_ex.none_cotangents = True


def _solve_args(name: str, A: Tensor, B: Tensor, left: bool) -> tuple:
    """Check ``A X = B`` (``X A = B``) as PyTorch does; return ``(A, B as a matrix expanded to the batch, vector)``
    with the right-side equation transposed into a left one."""
    _check_square(name, A)
    _check_dtype(name, B)
    _check_same_dtype(name, A, B)
    sa, sb = _shape(A), _shape(B)
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and sb == sa[:-1])
    if vector:
        B = unsqueeze(B, -1 if left else -2)
    n, (r, c) = sa[-1], _shape(B)[-2:]
    if (r if left else c) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and {r}x{c})")
    batch = batch_shape(_shape(B)[:-2], sa[:-2])   # in PyTorch's order (its error names B's size first)
    A = expand(A, batch + sa[-2:])
    B = expand(B, batch + _shape(B)[-2:])
    if not left:
        A, B = _mT(A), _mT(B)
    return A, B, vector


def _solve_out(X: Tensor, left: bool, vector: bool) -> Tensor:
    if not left:
        X = _mT(X)
    return reshape(X, _shape(X)[:-1] if left else _shape(X)[:-2] + _shape(X)[-1:]) if vector else X


def _solve_message(name):
    return lambda at, k: f"{name}: {at}The solver failed because the input matrix is singular."


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False, out=None):
    """``torch.linalg.solve_ex``: ``(X, info)`` with ``A X = B`` (``X A = B`` for ``left=False``)."""
    A2, B2, vector = _solve_args("linalg.solve_ex", A, B, left)
    x, info = apply(_solve_ex, A2, B2)
    if check_errors:
        _raise_on_info(info, _solve_message("torch.linalg.solve_ex"))
    return _solve_ex_t(with_out(_solve_out(x, left, vector), out[0] if out is not None else None,
                                "linalg_solve_ex"), info)


def solve(A: Tensor, B: Tensor, *, left: bool = True, out=None) -> Tensor:
    """``torch.linalg.solve``: ``X`` with ``A X = B`` (``X A = B`` for ``left=False``), batched and broadcast;
    ``B`` may be a vector. Raises LinAlgError for a singular ``A``."""
    A2, B2, vector = _solve_args("linalg.solve", A, B, left)
    x, info = apply(_solve_ex, A2, B2)
    _raise_on_info(info, _solve_message("torch.linalg.solve"))
    return with_out(_solve_out(x, left, vector), out, "linalg_solve")


# ---------------------------------------------------------------- triangular solve
@op("linalg_solve_triangular", backward_name="LinalgSolveTriangularBackward0")
def _solve_tri(a, b, *, upper, left, unit):
    return jax.lax.linalg.triangular_solve(a, b, left_side=left, lower=not upper, unit_diagonal=unit)


def _solve_tri_vjp(g, out, a, b, *, upper, left, unit):
    gb = apply(_solve_tri, _mT(a), g, upper=not upper, left=left, unit=unit)
    if not a.requires_grad:
        return None, gb
    ga = -(_mm_raw(gb, _mT(out)) if left else _mm_raw(_mT(out), gb))
    k = 1 if unit else 0
    return (triu(ga, k) if upper else tril(ga, -k)), gb


_solve_tri.defvjp(_solve_tri_vjp)


def _tri(A: Tensor, B: Tensor, upper: bool, left: bool = True, unit: bool = False) -> Tensor:
    """``solve_triangular`` unchecked, on equal batch dims."""
    return apply(_solve_tri, A, B, upper=bool(upper), left=bool(left), unit=bool(unit))


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False,
                     out=None) -> Tensor:
    """``torch.linalg.solve_triangular``: ``X`` with ``A X = B`` (``X A = B``), reading one triangle of ``A``."""
    name = "linalg.solve_triangular"
    _check_square(name, A)
    _check_matrix(name, B, "B")
    _check_same_dtype(name, A, B)
    n, (r, c) = _shape(A)[-1], _shape(B)[-2:]
    if (r if left else c) != n:
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({_shape(A)[-2]}x{n} and {r}x{c})")
    batch = batch_shape(_shape(A)[:-2], _shape(B)[:-2])
    A, B = expand(A, batch + _shape(A)[-2:]), expand(B, batch + (r, c))
    return with_out(_tri(A, B, upper, left, unitriangular), out, "linalg_solve_triangular")


# ---------------------------------------------------------------- cholesky
def _cholesky_info(a):
    """potrf's info: the order of the first leading minor of (the lower triangle of) ``a`` that is not
    positive-definite, by an unblocked right-looking Cholesky; 0 when every one is."""
    n = a.shape[-1]
    low = jnp.tril(a)
    m = low + jnp.swapaxes(jnp.tril(a, -1), -1, -2)
    idx = jnp.arange(n)

    def step(k, carry):
        m, info = carry
        d = jnp.take(jnp.take(m, k, axis=-1), k, axis=-1)
        info = jnp.where(~(d > 0) & (info == 0), k + 1, info)
        col = jnp.take(m, k, axis=-1) / jnp.sqrt(jnp.where(d > 0, d, 1))[..., None]
        col = jnp.where(idx > k, col, 0)
        return m - col[..., :, None] * col[..., None, :], info

    return jax.lax.fori_loop(0, n, step, (m, jnp.zeros(a.shape[:-2], jnp.int32)))[1]


@op("linalg_cholesky_ex", nout=2, backward_name="LinalgCholeskyExBackward0")
def _cholesky_ex(a, *, upper):
    x = _symmetric_from(a, not upper)
    low = jax.lax.linalg.cholesky(x, symmetrize_input=False)
    info = jnp.zeros(a.shape[:-2], jnp.int32)
    if a.size:   # the loop that finds the failing minor runs only when the factorization failed
        info = jax.lax.cond(jnp.isnan(low).any(), _cholesky_info, lambda x: info, x)
    return (jnp.swapaxes(low, -1, -2) if upper else low), info


@_cholesky_ex.defvjp
def _cholesky_vjp(g, out, a, *, upper):
    low, gl = (_mT(out[0]), _mT(g[0])) if upper else (out[0], g[0])
    p = tril(_mm_raw(_mT(low), gl))
    p = p - 0.5 * diag_embed(_diagonal(p, 0, -2, -1))   # Phi: the lower triangle, the diagonal halved
    s = _tri(_mT(low), p, upper=True)                     # L^-T Phi L^-1
    s = _tri(low, s, upper=False, left=False)
    return (0.5 * (s + _mT(s)),)


_cholesky_ex.none_cotangents = True


def _cholesky_message(name):
    return lambda at, k: (f"{name}: {at}The factorization could not be completed because the input is not "
                          f"positive-definite (the leading minor of order {k} is not positive-definite).")


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False, out=None):
    """``torch.linalg.cholesky_ex``: ``(L, info)``; info > 0 is the order of the first leading minor that
    is not positive-definite."""
    _check_square("linalg.cholesky_ex", A)
    L, info = apply(_cholesky_ex, A, upper=bool(upper))
    if check_errors:
        _raise_on_info(info, _cholesky_message("linalg.cholesky_ex"))
    return _cholesky_ex_t(with_out(L, out[0] if out is not None else None, "linalg_cholesky_ex"), info)


def linalg_cholesky(A: Tensor, *, upper: bool = False, out=None) -> Tensor:
    """``torch.linalg.cholesky``: ``L`` with ``A = L L^T`` (``U^T U`` for ``upper``), reading one triangle;
    raises LinAlgError for a matrix that is not positive-definite."""
    _check_square("linalg.cholesky", A)
    L, info = apply(_cholesky_ex, A, upper=bool(upper))
    _raise_on_info(info, _cholesky_message("linalg.cholesky"))
    return with_out(L, out, "linalg_cholesky")


@method()
def cholesky(input: Tensor, upper: bool = False, *, out=None) -> Tensor:
    """``torch.cholesky`` (deprecated in PyTorch for ``linalg.cholesky``)."""
    return linalg_cholesky(input, upper=upper, out=out)


@method()
def cholesky_solve(input: Tensor, input2: Tensor, upper: bool = False, *, out=None) -> Tensor:
    """``torch.cholesky_solve(B, L)``: ``X`` with ``L L^T X = B`` (``U^T U X = B``)."""
    _check_matrix("cholesky_solve", input, "B")
    _check_square("cholesky_solve", input2)
    batch = batch_shape(_shape(input)[:-2], _shape(input2)[:-2])
    B, L = expand(input, batch + _shape(input)[-2:]), expand(input2, batch + _shape(input2)[-2:])
    if upper:
        L = _mT(L)
    return with_out(_tri(_mT(L), _tri(L, B, upper=False), upper=True), out)


@method()
def cholesky_inverse(input: Tensor, upper: bool = False, *, out=None) -> Tensor:
    """``torch.cholesky_inverse(L)``: the inverse of ``L L^T`` (``U^T U``)."""
    _check_square("cholesky_inverse", input, "input")
    n = _shape(input)[-1]
    return with_out(cholesky_solve(expand(_eye_like(n, input), _shape(input)), input, upper), out)


# ---------------------------------------------------------------- det / slogdet
@op("linalg_det", backward_name="LinalgDetBackward0")
def _det(a):
    return jnp.linalg.det(a)


@_det.defvjp
def _det_vjp(g, out, a):
    return (unsqueeze(unsqueeze(g * out, -1), -1) * _mT(_inv(a)),)


@op("linalg_slogdet", nout=2, backward_name="LinalgSlogdetBackward0")
def _slogdet(a):
    return tuple(jnp.linalg.slogdet(a))


@_slogdet.defvjp
def _slogdet_vjp(g, out, a):
    if g[1] is None:
        return (None,)
    return (unsqueeze(unsqueeze(g[1], -1), -1) * _mT(_inv(a)),)


_slogdet.none_cotangents = True


def det(A: Tensor, *, out=None) -> Tensor:
    """``torch.linalg.det``."""
    _check_square("linalg.det", A)
    return with_out(apply(_det, A), out, "linalg_det")


def linalg_slogdet(A: Tensor, *, out=None):
    """``torch.linalg.slogdet``: ``(sign, log|det|)``."""
    _check_square("linalg.slogdet", A)
    return _slogdet_t(*apply(_slogdet, A))


@method("det")
def _det_method(input: Tensor) -> Tensor:
    """``torch.det``: ``linalg.det``."""
    return det(input)


@method()
def slogdet(input: Tensor):
    """``torch.slogdet``: ``(sign, logabsdet)``."""
    return _slogdet_old_t(*linalg_slogdet(input))


@method()
def logdet(input: Tensor) -> Tensor:
    """``torch.logdet``: ``log(det)``: NaN for a negative determinant, -inf for zero."""
    _check_square("logdet", input)
    s, la = apply(_slogdet, input)
    return where(s < 0, math.nan, la)


# ---------------------------------------------------------------- eigh
@op("linalg_eigh", nout=2, backward_name="LinalgEighBackward0")
def _eigh(a, *, lower):
    v, w = jax.lax.linalg.eigh(_symmetric_from(a, lower), lower=lower, symmetrize_input=False)
    return w, v


@_eigh.defvjp
def _eigh_vjp(g, out, a, *, lower):
    gw, gv = g
    w, v = out
    inner = None if gw is None else diag_embed(gw)
    if gv is not None:
        k = _shape(w)[-1]
        e = unsqueeze(w, -2) - unsqueeze(w, -1)               # e[i, j] = w[j] - w[i]
        off = _off_diag(k, w)
        vtgv = _mm_raw(_mT(v), gv)   # its skew part only, as PyTorch: the gradient is symmetric
        t = where(off, 0.5 * _skew(vtgv) / where(off, e, 1.0), 0.0)
        inner = t if inner is None else inner + t
    if inner is None:
        return (None,)
    return (_mm_raw(_mm_raw(v, inner), _mT(v)),)


_eigh.none_cotangents = True


def _uplo(name: str, UPLO: str) -> bool:
    if UPLO not in ("L", "U", "l", "u"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO in ("L", "l")


def eigh(A: Tensor, UPLO: str = "L", *, out=None):
    """``torch.linalg.eigh``: ascending eigenvalues and orthonormal eigenvectors of a symmetric matrix,
    reading its lower (``UPLO='L'``) or upper triangle."""
    _check_square("linalg.eigh", A)
    return _eigh_t(*apply(_eigh, A, lower=_uplo("linalg.eigh", UPLO)))


def eigvalsh(A: Tensor, UPLO: str = "L", *, out=None) -> Tensor:
    """``torch.linalg.eigvalsh``: the eigenvalues of ``eigh``."""
    _check_square("linalg.eigvalsh", A)
    return with_out(apply(_eigh, A, lower=_uplo("linalg.eigvalsh", UPLO))[0], out, "linalg_eigvalsh")


# ---------------------------------------------------------------- svd
@op("linalg_svd", nout=3, backward_name="LinalgSvdBackward0")
def _svd(a, *, full_matrices):
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@_svd.defvjp
def _svd_vjp(g, out, a, *, full_matrices):
    gu, gs, gvh = g
    u, s, vh = out
    m, n = _shape(a)[-2:]
    k = min(m, n)
    if full_matrices:   # as PyTorch: the gradient flows through the first k singular vectors only
        u, vh = u[..., :, :k], vh[..., :k, :]
        gu = None if gu is None else gu[..., :, :k]
        gvh = None if gvh is None else gvh[..., :k, :]
    if gu is None and gvh is None:
        return (None,) if gs is None else (_mm_raw(_cols(u, gs), vh),)
    s2 = s * s
    e = unsqueeze(s2, -2) - unsqueeze(s2, -1)                 # e[i, j] = s[j]^2 - s[i]^2
    e = where(_off_diag(k, s), e, 1.0)
    inner = None if gs is None else diag_embed(gs)
    v = _mT(vh)
    if gu is not None:
        utgu = _mm_raw(_mT(u), gu)
        t = _cols(_skew(utgu) / e, s)
        inner = t if inner is None else inner + t
    if gvh is not None:
        gv = _mT(gvh)
        vtgv = _mm_raw(_mT(v), gv)
        t = _rows(_skew(vtgv) / e, s)
        inner = t if inner is None else inner + t
    ga = _mm_raw(_mm_raw(u, inner), vh)
    if m > n and gu is not None:
        ga = ga + _mm_raw(_cols(gu - _mm_raw(u, utgu), 1 / s), vh)
    if m < n and gvh is not None:
        ga = ga + _mm_raw(u, _mT(_cols(gv - _mm_raw(v, vtgv), 1 / s)))
    return (ga,)


_svd.none_cotangents = True


def _check_driver(name: str, driver) -> None:
    if driver is not None:
        raise RuntimeError(f"{name}: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER "
                           "backend.")


def linalg_svd(A: Tensor, full_matrices: bool = True, *, driver=None, out=None):
    """``torch.linalg.svd``: ``(U, S, Vh)``, singular values descending."""
    _check_matrix("linalg.svd", A)
    _check_driver("torch.linalg.svd", driver)
    return _svd_t(*apply(_svd, A, full_matrices=bool(full_matrices)))


def _svdvals(A: Tensor) -> Tensor:
    return apply(_svd, A, full_matrices=False)[1]


def svdvals(A: Tensor, *, driver=None, out=None) -> Tensor:
    """``torch.linalg.svdvals``: the singular values, descending."""
    _check_matrix("linalg.svdvals", A)
    _check_driver("torch.linalg.svdvals", driver)
    return with_out(_svdvals(A), out, "linalg_svdvals")


@method()
def svd(input: Tensor, some: bool = True, compute_uv: bool = True, *, out=None):
    """``torch.svd``: ``(U, S, V)`` with ``V`` (not ``V^T``); ``some=False``: full ``U`` and ``V``;
    ``compute_uv=False``: zero ``U`` and ``V`` of the full shapes."""
    _check_matrix("svd", input)
    if not compute_uv:
        m, n = _shape(input)[-2:]
        b = _shape(input)[:-2]
        return _svd_old_t(zeros(b + (m, m), dtype=input.dtype), _svdvals(input), zeros(b + (n, n), dtype=input.dtype))
    u, s, vh = apply(_svd, input, full_matrices=not some)
    return _svd_old_t(u, s, _mT(vh))


# ---------------------------------------------------------------- qr
@op("linalg_qr", nout=2, backward_name="LinalgQrBackward0")
def _qr(a, *, mode):
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    q, r = jnp.linalg.qr(a, mode=mode)
    return q, r


def _qr_square_vjp(gq, gr, q, r):
    """The cotangent of ``A = Q R`` with ``R`` square (``m >= n``): ``(gQ + Q copyltu(M)) R^-T``,
    ``M = R gR^T - gQ^T Q``."""
    m_ = None if gr is None else _mm_raw(r, _mT(gr))
    if gq is not None:
        t = _mm_raw(_mT(gq), q)
        m_ = -t if m_ is None else m_ - t
    lower = tril(m_, -1)
    b = _mm_raw(q, tril(m_) + _mT(lower))
    if gq is not None:
        b = b + gq
    return _tri(_mT(r), b, upper=False, left=False)


@_qr.defvjp
def _qr_vjp(g, out, a, *, mode):
    gq, gr = g
    q, r = out
    m, n = _shape(a)[-2:]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
                           "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
                           "linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    if gq is None and gr is None:
        return (None,)
    if m >= n:
        return (_qr_square_vjp(gq, gr, q, r),)
    # wide: A = Q [R1 | R2] with R1 square; the columns past m (A2 = Q R2) feed only Q's cotangent and gA2
    gr1 = None if gr is None else gr[..., :, :m]
    gr2 = None if gr is None else gr[..., :, m:]
    a2 = a[..., :, m:]
    if gr2 is not None:
        extra = _mm_raw(a2, _mT(gr2))
        gq = extra if gq is None else gq + extra
    ga1 = _qr_square_vjp(gq, gr1, q, r[..., :, :m])
    ga2 = _mm_raw(q, gr2) if gr2 is not None else zeros(_shape(a2), dtype=a.dtype)
    return (cat([ga1, ga2], -1),)


_qr.none_cotangents = True


def linalg_qr(A: Tensor, mode: str = "reduced", *, out=None):
    """``torch.linalg.qr``: ``(Q, R)``; ``mode`` 'reduced', 'complete' or 'r' (``Q`` empty)."""
    _check_matrix("linalg.qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           "or 'complete'")
    return _qr_t(*apply(_qr, A, mode=mode))


@method()
def qr(input: Tensor, some: bool = True, *, out=None):
    """``torch.qr``: ``linalg.qr`` with ``some=False`` for mode 'complete'."""
    return _qr_old_t(*linalg_qr(input, "reduced" if some else "complete"))


# ---------------------------------------------------------------- LU
@op("linalg_lu_factor_ex", nout=3, backward_name="LinalgLuFactorExBackward0")
def _lu_factor_ex(a):
    lu, piv, _ = jax.lax.linalg.lu(a)
    return lu, (piv + 1).astype(jnp.int32), _lu_info(lu)


@op("lu_permutation")
def _lu_perm(pivots, *, m, dtype):
    """The permutation matrix ``P`` of 1-based LAPACK ``pivots`` (``A = P L U``); no gradient."""
    perm = jax.lax.linalg.lu_pivots_to_permutation(pivots - 1, m)
    return jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=dtype), -1, -2)


def _perm_matrix(pivots: Tensor, m: int, dtype) -> Tensor:
    return apply(_lu_perm, pivots, m=m, dtype=_dtype.to_np(dtype))


def _unpack(lu: Tensor) -> tuple:
    """``(L, U)`` of packed factors: ``L`` unit lower ``m x k``, ``U`` upper ``k x n``."""
    m, n = _shape(lu)[-2:]
    k = min(m, n)
    low = tril(lu, -1)[..., :, :k] + eye(m, k, dtype=lu.dtype)
    return low, triu(lu)[..., :k, :]


@_lu_factor_ex.defvjp
def _lu_vjp(g, out, a):
    glu = g[0]
    if glu is None:
        return (None,)
    lu, piv = out[0], out[1]
    m, n = _shape(a)[-2:]
    low, up = _unpack(lu)
    gl, gu = tril(glu, -1), triu(glu)
    p = _perm_matrix(piv, m, a.dtype)
    if m == n:
        inner = tril(_mm_raw(_mT(low), gl), -1) + triu(_mm_raw(gu, _mT(up)))
        x = _tri(_mT(up), _tri(_mT(low), inner, upper=True, unit=True), upper=False, left=False)
    elif m < n:   # A = P L [U1 | U2]
        gl, u1, u2, gu1, gu2 = gl[..., :, :m], up[..., :, :m], up[..., :, m:], gu[..., :, :m], gu[..., :, m:]
        inner = tril(_mm_raw(_mT(low), gl) - _mm_raw(gu2, _mT(u2)), -1) + triu(_mm_raw(gu1, _mT(u1)))
        x = cat([_tri(_mT(u1), inner, upper=False, left=False), gu2], -1)
        x = _tri(_mT(low), x, upper=True, unit=True)
    else:         # A = P [L1; L2] U
        gu = gu[..., :n, :]
        l1, l2, gl1, gl2 = low[..., :n, :], low[..., n:, :], gl[..., :n, :], gl[..., n:, :]
        inner = tril(_mm_raw(_mT(l1), gl1), -1) + triu(_mm_raw(gu, _mT(up)) - _mm_raw(_mT(l2), gl2))
        x = cat([_tri(_mT(l1), inner, upper=True, unit=True), gl2], -2)
        x = _tri(_mT(up), x, upper=False, left=False)
    return (_mm_raw(p, x),)


_lu_factor_ex.none_cotangents = True


def _check_pivot(name: str, pivot: bool) -> None:
    if not pivot:
        raise RuntimeError(f"{name}: LU without pivoting is not implemented on the CPU")


def _lu_message(name):
    return lambda at, k: (f"{name}: {at}U[{k},{k}] is zero and using it on lu_solve would result in a division "
                          "by zero. If you still want to perform the factorization, consider calling "
                          "linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False, out=None):
    """``torch.linalg.lu_factor_ex``: ``(LU, pivots, info)``: packed factors, 1-based int32 row swaps, and
    info > 0 where ``U`` has a zero pivot (the factors are still returned)."""
    _check_matrix("linalg.lu_factor_ex", A)
    _check_pivot("linalg.lu_factor_ex", pivot)
    lu_, piv, info = apply(_lu_factor_ex, A)
    if check_errors:
        _raise_on_info(info, _lu_message("torch.linalg.lu_factor_ex"), RuntimeError)
    return _lu_factor_ex_t(lu_, piv, info)


def lu_factor(A: Tensor, *, pivot: bool = True, out=None):
    """``torch.linalg.lu_factor``: ``(LU, pivots)``; raises RuntimeError where ``U`` has a zero pivot."""
    _check_matrix("linalg.lu_factor", A)
    _check_pivot("linalg.lu_factor", pivot)
    lu_, piv, info = apply(_lu_factor_ex, A)
    _raise_on_info(info, _lu_message("torch.linalg.lu_factor"), RuntimeError)
    return _lu_factor_t(lu_, piv)


def linalg_lu(A: Tensor, *, pivot: bool = True, out=None):
    """``torch.linalg.lu``: ``(P, L, U)`` with ``A = P L U``."""
    _check_matrix("linalg.lu", A)
    _check_pivot("linalg.lu", pivot)
    lu_, piv, _ = apply(_lu_factor_ex, A)
    low, up = _unpack(lu_)
    return _lu_t(_perm_matrix(piv, _shape(A)[-2], A.dtype), low, up)


@method()
def lu_unpack(LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True, *,
              out=None):
    """``torch.lu_unpack``: ``(P, L, U)`` of ``lu_factor``'s outputs."""
    low, up = _unpack(LU_data) if unpack_data else (None, None)
    p = _perm_matrix(LU_pivots, _shape(LU_data)[-2], LU_data.dtype) if unpack_pivots else None
    return _lu_unpack_t(p, low, up)


def linalg_lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False,
                    out=None) -> Tensor:
    """``torch.linalg.lu_solve``: ``X`` with ``A X = B`` for ``A = P L U`` given by ``lu_factor``
    (``A^T`` with ``adjoint``, ``X A = B`` with ``left=False``); differentiable in ``LU`` and ``B``."""
    name = "linalg.lu_solve"
    _check_square(name, LU, "LU")
    _check_matrix(name, B, "B")
    _check_same_dtype(name, LU, B, "LU", "B")
    n, (r, c) = _shape(LU)[-1], _shape(B)[-2:]
    if (r if left else c) != n:
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {r}x{c})")
    batch = batch_shape(batch_shape(_shape(LU)[:-2], _shape(B)[:-2]), _shape(pivots)[:-1])
    LU = expand(LU, batch + (n, n))
    B = expand(B, batch + (r, c))
    pivots = expand(pivots, batch + (n,))
    if not left:            # X A = B  <=>  A^T X^T = B^T
        B, adjoint = _mT(B), not adjoint
    low, up = _unpack(LU)
    p = _perm_matrix(pivots, n, LU.dtype)
    if adjoint:             # U^T L^T P^T X = B
        x = _mm_raw(p, _tri(_mT(low), _tri(_mT(up), B, upper=False), upper=True, unit=True))
    else:                   # P L U X = B
        x = _tri(up, _tri(low, _mm_raw(_mT(p), B), upper=False, unit=True), upper=True)
    return with_out(x if left else _mT(x), out, "linalg_lu_solve")


@method()
def lu_solve(input: Tensor, LU_data: Tensor, LU_pivots: Tensor, *, out=None) -> Tensor:
    """``torch.lu_solve(b, LU_data, LU_pivots)`` (deprecated there for ``linalg.lu_solve``)."""
    return linalg_lu_solve(LU_data, LU_pivots, input, out=out)


@method()
def lu(input: Tensor, pivot: bool = True, get_infos: bool = False, out=None):
    """``torch.lu``: ``(LU, pivots)`` or ``(LU, pivots, infos)``."""
    _check_matrix("lu", input)
    _check_pivot("linalg.lu_factor_ex", pivot)
    lu_, piv, info = apply(_lu_factor_ex, input)
    return (lu_, piv, info) if get_infos else (lu_, piv)


# ---------------------------------------------------------------- pinv
@op("linalg_pinv", backward_name="LinalgPinvBackward0")
def _pinv(a, atol, rtol, *, hermitian):
    if hermitian:
        w, v = jnp.linalg.eigh(_symmetric_from(a, True), symmetrize_input=False)
        s = jnp.abs(w)
    else:
        u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    top = jnp.max(s, axis=-1, initial=0.0)
    cut = jnp.maximum(atol, rtol * top)[..., None]
    keep = s > cut
    inv_s = jnp.where(keep, 1 / jnp.where(keep, s if not hermitian else w, 1), 0)
    if hermitian:
        return jnp.matmul(v * inv_s[..., None, :], jnp.swapaxes(v, -1, -2), precision="highest")
    return jnp.matmul(jnp.swapaxes(vh, -1, -2) * inv_s[..., None, :], jnp.swapaxes(u, -1, -2), precision="highest")


@_pinv.defvjp
def _pinv_vjp(g, out, a, atol, rtol, *, hermitian):
    """PyTorch's pinv_backward (the derivative of a constant-rank pseudo-inverse)."""
    m, n = _shape(a)[-2:]
    pa, pah, gh = out, _mT(out), _mT(g)
    if m <= n:
        k = _mm_raw(gh, pa)
        kpah = _mm_raw(k, pah)
        ga = (-_mT(_mm_raw(pa, k)) + kpah - _mm_raw(_mm_raw(a, pa), kpah)
              + _mm_raw(_mm_raw(pah, pa), gh - _mm_raw(k, a)))
    else:
        k = _mm_raw(pa, gh)
        pahk = _mm_raw(pah, k)
        ga = (-_mT(_mm_raw(k, pa)) + _mm_raw(_mm_raw(gh - _mm_raw(a, k), pa), pah) + pahk
              - _mm_raw(_mm_raw(pahk, pa), a))
    return ga, None, None


def _tolerances(A: Tensor, atol, rtol) -> tuple:
    """``(atol, rtol)`` as arrays of A's dtype: PyTorch's default ``rtol = eps * max(m, n)`` when neither is
    given (or only a zero ``atol``), else 0 for the one not given."""
    m, n = _shape(A)[-2:]
    np_dt = A._v.dtype

    def arr(v):
        if v is None:
            return jnp.zeros((), np_dt)
        return (v._value if isinstance(v, Tensor) else jnp.asarray(v)).astype(np_dt)

    a = arr(atol)
    if rtol is not None:
        return a, arr(rtol)
    default = jnp.asarray(float(np.finfo(np_dt).eps) * max(m, n), np_dt)
    return a, (default if atol is None else jnp.where(a > 0, jnp.zeros((), np_dt), default))


def pinv(A: Tensor, rcond=None, hermitian: bool = False, *, atol=None, rtol=None, out=None) -> Tensor:
    """``torch.linalg.pinv``: the pseudo-inverse, dropping singular values below ``max(atol, rtol * s_max)``;
    ``hermitian``: from ``eigh`` of the lower triangle."""
    if A.ndim < 2 or A._v.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.pinv({A.dtype.legacy_name}{{{list(_shape(A))}}}): expected a tensor with 2 "
                           "or more dimensions of float, double, cfloat or cdouble types")
    _check_dtype("linalg.pinv", A)
    if rcond is not None:
        rtol = rcond
    if hermitian:
        _check_square("linalg.pinv", A)
    at, rt = _tolerances(A, atol, rtol)
    return with_out(apply(_pinv, A, Tensor._make(at), Tensor._make(rt), hermitian=bool(hermitian)), out,
                    "linalg_pinv")


@method()
def pinverse(input: Tensor, rcond: float = 1e-15, hermitian: bool = False) -> Tensor:
    """``torch.pinverse``: ``linalg.pinv`` with ``rtol = rcond``."""
    return pinv(input, rtol=rcond, hermitian=hermitian)


# ---------------------------------------------------------------- matrix_exp / matrix_power
@op("linalg_matrix_exp", backward_name="LinalgMatrixExpBackward0")
def _expm(a):
    if a.shape[-1] == 0:
        return a
    return jax.scipy.linalg.expm(a)


@_expm.defvjp
def _expm_vjp(g, out, a):
    """The upper-right block of ``exp([[A^T, G], [0, A^T]])``."""
    n = _shape(a)[-1]
    at = _mT(a)
    top = cat([at, g], -1)
    bottom = cat([zeros(_shape(a), dtype=a.dtype), at], -1)
    return (apply(_expm, cat([top, bottom], -2))[..., :n, n:],)


@method()
def matrix_exp(input: Tensor) -> Tensor:
    """``torch.linalg.matrix_exp``: the matrix exponential."""
    _check_square("linalg.matrix_exp", input)
    return apply(_expm, input)


@method()
def matrix_power(input: Tensor, n: int, *, out=None) -> Tensor:
    """``torch.linalg.matrix_power``: ``A^n`` by repeated squaring; negative ``n`` inverts first."""
    name = "linalg.matrix_power"
    if input.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    r, c = _shape(input)[-2:]
    if r != c:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {r} by {c} matrices")
    n = int(n)
    if n == 0:   # the identity; an input that requires grad gets a zero gradient, as in PyTorch
        ident = expand(_eye_like(r, input), _shape(input))
        return with_out(where(False, input, ident) if input.requires_grad else ident.clone(), out)
    a = input
    if n < 0:
        a, n = inv(input), -n
    result = None
    while n:
        if n & 1:
            result = a if result is None else _mm_raw(result, a)
        n >>= 1
        if n:
            a = _mm_raw(a, a)
    return with_out(result, out)


# ---------------------------------------------------------------- spectra: svdvals-based functions
def _hermitian_vals(A: Tensor) -> Tensor:
    """|eigenvalues| of a symmetric matrix, as singular values (descending)."""
    w = abs(apply(_eigh, A, lower=True)[0])
    return w.sort(-1, descending=True)[0]


def matrix_rank(A: Tensor, tol=None, hermitian: bool = False, *, atol=None, rtol=None, out=None) -> Tensor:
    """``torch.linalg.matrix_rank``: how many singular values exceed ``max(atol, rtol * s_max)``."""
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    _check_dtype("torch.linalg.matrix_rank", A)
    if tol is not None:
        atol, rtol = tol, 0.0
    if hermitian:
        _check_square("torch.linalg.matrix_rank", A)
    at, rt = _tolerances(A, atol, rtol)
    s = (_hermitian_vals(A) if hermitian else _svdvals(A)).detach()
    if not _shape(s)[-1]:
        return with_out(sum(s > 0, -1), out)
    at, rt = Tensor._make(at), Tensor._make(rt) * amax(s, -1)
    cut = where(at > rt, at, rt)
    return with_out(sum(s > unsqueeze(cut, -1), -1), out)


def cond(A: Tensor, p=None, *, out=None) -> Tensor:
    """``torch.linalg.cond``: ``s_max / s_min`` (p None, 2; -2 the reverse), else
    ``norm(A, p) * norm(inv(A), p)`` (inf for a singular matrix)."""
    if A.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor A must have at least 2 dimensions.")
    _check_dtype("linalg.cond", A)
    if p is None or p in (2, -2):
        s = _svdvals(A)
        hi, lo = s[..., 0], s[..., -1]
        return with_out(lo / hi if p == -2 else hi / lo, out)
    if p not in ("fro", "nuc", math.inf, -math.inf, 1, -1):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    m, n = _shape(A)[-2:]
    if m != n:
        raise RuntimeError(f"linalg.cond(ord={p}): A must be batches of square matrices, but they are {m} by {n} "
                           "matrices")
    x, info = apply(_inv_ex, A)
    r = matrix_norm(A, p) * matrix_norm(x, p)
    return with_out(where(info > 0, math.inf, r), out)


def _extreme(largest: bool, x: Tensor, dim: int, keepdim: bool) -> Tensor:
    """amax / amin of non-negative ``x`` over ``dim``; the max over an empty dim is 0, as in PyTorch's norms."""
    if largest and not _shape(x)[dim]:
        return sum(x, dim, keepdim)
    return (amax if largest else amin)(x, dim, keepdim)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None, out=None) -> Tensor:
    """``torch.linalg.matrix_norm``: ord 'fro', 'nuc', 2, -2, 1, -1, inf, -inf over the two ``dim``."""
    name = "linalg.matrix_norm"
    if dtype is not None:
        A = A.to(dtype)
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        got = " ".join(map(str, dim)) if isinstance(dim, (tuple, list)) else dim
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got {got}")
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    d0, d1 = (_wrap_dim(d, A.ndim) for d in dim)
    if d0 == d1:
        raise RuntimeError(f"{name}: dims must be different. Got ({dim[0]}, {dim[1]})")
    if ord == "fro":
        r = vector_norm(A, 2, (d0, d1), keepdim)
    elif ord in ("nuc", 2, -2):
        _check_dtype(name, A)
        s = _svdvals(movedim(A, (d0, d1), (-2, -1)))
        r = sum(s, -1) if ord == "nuc" else _extreme(ord > 0, s, -1, False)
        if keepdim:
            for d in sorted((d0, d1)):
                r = unsqueeze(r, d)
    elif ord in (1, -1, math.inf, -math.inf):
        ax_sum, ax_ext = (d0, d1) if builtins.abs(ord) == 1 else (d1, d0)
        r = _extreme(ord > 0, sum(A.abs(), ax_sum, keepdim=True), ax_ext, True)
        if not keepdim:
            r = reshape(r, tuple(s for i, s in enumerate(_shape(r)) if i not in (d0, d1)))
    else:
        raise RuntimeError(f"{name}: Order {ord} not supported.")
    return with_out(r, out)


def linalg_norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None, out=None) -> Tensor:
    """``torch.linalg.norm``: a vector norm for one ``dim`` (or a flattened ``A`` with no ``ord``), a matrix
    norm for two (or a 2-D ``A`` with ``ord``)."""
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        return with_out(vector_norm(A, 2, dim, keepdim, dtype=dtype), out)
    if isinstance(ord, str) or (dim is None and A.ndim == 2) or (dim is not None and len(dim) == 2):
        if dim is None and A.ndim != 2:
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                               f"Got {A.ndim}D.")
        return with_out(matrix_norm(A, ord, dim if dim is not None else (-2, -1), keepdim, dtype=dtype), out)
    if dim is None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                           f"Got {A.ndim}D.")
    return with_out(vector_norm(A, ord, dim, keepdim, dtype=dtype), out)


# ---------------------------------------------------------------- least squares
_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: Tensor, B: Tensor, rcond=None, *, driver=None):
    """``torch.linalg.lstsq``: ``(solution, residuals, rank, singular_values)``, the minimum-norm least-squares
    solution ``pinv(A) @ B`` (``rcond``: the relative cut of small singular values); ``residuals``, ``rank``
    and ``singular_values`` are filled for the drivers that compute them on the CPU, else empty."""
    name = "torch.linalg.lstsq"
    if driver is None:
        driver = "gelsy"
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError(f"{name}: parameter `driver` should be one of ({', '.join(_LSTSQ_DRIVERS)})")
    _check_matrix(name, A)
    if A._v.dtype != B._v.dtype:
        raise RuntimeError(f"{name}: Expected input and other to have the same dtype, but got input's dtype "
                           f"{A.dtype} and other's dtype {B.dtype}")
    m, n = _shape(A)[-2:]
    vector = B.ndim == A.ndim - 1
    if vector:
        B = unsqueeze(B, -1)
    if B.ndim < 2 or _shape(B)[-2] != m:
        raise RuntimeError(f"{name}: input.size(-2) should match other.size(-2)")
    batch = batch_shape(_shape(A)[:-2], _shape(B)[:-2])
    A, B = expand(A, batch + (m, n)), expand(B, batch + _shape(B)[-2:])
    eps = float(np.finfo(A._v.dtype).eps)
    rtol = max(m, n) * eps if rcond is None or rcond < 0 else rcond
    x = _mm_raw(pinv(A, rtol=rtol), B)
    empty = zeros(0, dtype=A.dtype)
    rank = matrix_rank(A, rtol=rtol) if driver != "gels" else zeros(0, dtype=_dtype.int64)
    s = _svdvals(A).detach() if driver in ("gelsd", "gelss") else empty
    res = reshape(x, (-1,))[:0]   # empty, yet part of the graph: PyTorch's residuals always require grad
    if m > n and driver != "gelsy":
        full = driver == "gels" or not _readable(rank) or bool((rank == n).all())
        if full:
            res = sum((_mm_raw(A, x) - B) ** 2, -2)
            if vector:
                res = res[..., 0]
    if vector:
        x = x[..., 0]
    return _lstsq_t(x, res, rank, s)


# ---------------------------------------------------------------- products and shapes
def vecdot(x: Tensor, y: Tensor, *, dim: int = -1, out=None) -> Tensor:
    """``torch.linalg.vecdot``: ``sum(x * y, dim)`` with broadcasting."""
    if x._v.dtype != y._v.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{x.dtype.legacy_name} and y of type {y.dtype.legacy_name} instead")
    return with_out(sum(x * y, dim), out)


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1, out=None) -> Tensor:
    """``torch.linalg.cross``: ``cross`` along ``dim`` (-1 by default) of inputs of the same rank."""
    if input.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    return with_out(cross(input, other, dim), out)


def linalg_diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """``torch.linalg.diagonal``: ``diagonal`` over the last two dims by default."""
    return _diagonal(A, offset, dim1, dim2)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:
    """``torch.linalg.vander``: columns ``x^0, x^1, ..., x^(N-1)``."""
    if x.ndim == 0:
        x = reshape(x, (1,))
    n = _shape(x)[-1] if N is None else int(N)
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    cols, p = [ones(_shape(x), dtype=x.dtype)], x
    for _ in range(1, n):
        cols.append(p)
        p = p * x
    return stack(cols, -1)


def householder_product(A: Tensor, tau: Tensor, *, out=None) -> Tensor:
    """``torch.linalg.householder_product``: the first ``n`` columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i
    v_i^T`` with ``v_i`` column ``i`` of ``A`` below the diagonal (1 on it); differentiated as that product."""
    name = "torch.linalg.householder_product"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if tau.ndim < 1:
        raise RuntimeError(f"{name}: tau must have at least 1 dimension.")
    m, n = _shape(A)[-2:]
    k = _shape(tau)[-1]
    if m < n:
        raise RuntimeError(f"{name}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if n < k:
        raise RuntimeError(f"{name}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.ndim != A.ndim - 1:
        raise RuntimeError(f"{name}: Expected tau to have one dimension less than input, but got tau.ndim equal "
                           f"to {tau.ndim} and input.ndim is equal to {A.ndim}")
    if _shape(tau)[:-1] != _shape(A)[:-2]:
        raise RuntimeError(f"{name}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(_shape(tau)[:-1])}")
    _check_dtype(name, A)
    if tau._v.dtype != A._v.dtype:
        raise RuntimeError(f"{name}: tau dtype {tau.dtype.legacy_name} does not match input dtype "
                           f"{A.dtype.legacy_name}")
    if k == 0:   # no reflector: the identity's first n columns (a zero gradient for A, as in PyTorch)
        ident = expand(eye(m, n, dtype=A.dtype), _shape(A))
        return with_out(where(False, A, ident) if A.requires_grad else ident.clone(), out)
    rows = as_tensor(np.arange(m))
    q = expand(_eye_like(m, A), _shape(A)[:-2] + (m, m))
    for i in range(k):
        v = where(rows < i, 0.0, where(rows == i, 1.0, A[..., :, i]))
        qv = matmul(q, unsqueeze(v, -1))
        q = q - unsqueeze(unsqueeze(tau[..., i], -1), -1) * matmul(qv, unsqueeze(v, -2))
    return with_out(q[..., :, :n], out)


@method()
def orgqr(input: Tensor, tau: Tensor) -> Tensor:
    """``torch.orgqr``: ``linalg.householder_product``."""
    return householder_product(input, tau)


def tensorinv(A: Tensor, ind: int = 2, *, out=None) -> Tensor:
    """``torch.linalg.tensorinv``: the inverse of ``A`` as a map from its last dims to its first ``ind``."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    s = _shape(A)
    rows, cols = math.prod(s[:ind]), math.prod(s[ind:])
    if rows != cols:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {cols} != {rows}")
    return with_out(reshape(inv(reshape(A, (rows, cols))), s[ind:] + s[:ind]), out)


def tensorsolve(A: Tensor, B: Tensor, dims=None, *, out=None) -> Tensor:
    """``torch.linalg.tensorsolve``: ``X`` with ``tensordot(A, X, X.ndim) = B`` (``dims`` of ``A`` moved last
    first)."""
    if dims is not None:
        dims = [_wrap_dim(d, A.ndim) for d in dims]
        A = movedim(A, dims, list(range(A.ndim - len(dims), A.ndim)))
    s = _shape(A)
    rest = s[B.ndim:]
    rows, cols = math.prod(_shape(B)), math.prod(rest)
    if cols != math.prod(s[:B.ndim]):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {cols} != {math.prod(s[:B.ndim])}")
    return with_out(reshape(solve(reshape(A, (rows, cols)), reshape(B, (rows,))), rest), out)


@method()
def triangular_solve(b: Tensor, A: Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> tuple:
    """``(X, A.clone())`` with ``op(A) X = b`` for the triangular ``A`` (``op``: the transpose with
    ``transpose``), as PyTorch's deprecated ``torch.triangular_solve``."""
    M = A.mT if transpose else A
    return solve_triangular(M, b, upper=upper != transpose, unitriangular=unitriangular), A.clone()


__all__.append("triangular_solve")
