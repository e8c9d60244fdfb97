"""``dynajax.masked``: the reductions and normalizations of ``torch.masked`` on dense tensors.

Each takes PyTorch's ``mask=`` (a bool tensor broadcastable to the input, ``True`` where an element counts).
Masked-out elements are replaced by the operation's identity before the ordinary op runs: 0 for sums and
norms, 1 for products, -inf (the dtype's lowest integer) for maxima, log-sum-exp and softmax, +inf for
minima and softmin. Where no identity exists (mean, median, var, std) the reduction counts only the elements
kept, and a slice with none gives NaN, as PyTorch's. Gradients flow to the kept elements only.
"""
from __future__ import annotations

import builtins

import numpy as np

from . import _dtype
from ._tensor import Tensor
from .nn.functional import log_softmax as _log_softmax, softmax as _softmax, softmin as _softmin
from .ops.elementwise import logaddexp as _logaddexp, maximum, sqrt, where
from .ops.reduce import amax as _amax, amin as _amin, argmax as _argmax, argmin as _argmin
from .ops.reduce import cumprod as _cumprod, cumsum as _cumsum, logsumexp as _logsumexp, nanmedian
from .ops.reduce import sum as _sum, vector_norm
from .ops.shape import broadcast_to

__all__ = ["amax", "amin", "argmax", "argmin", "cumprod", "cumsum", "log_softmax", "logaddexp", "logsumexp",
           "mean", "median", "norm", "normalize", "prod", "softmax", "softmin", "std", "sum", "var"]


# ---------------------------------------------------------------- helpers
def _dims(dim, ndim: int) -> tuple:
    """``dim`` (None, an int or a sequence) as a sorted tuple of non-negative dims; None: all of them."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    n = builtins.max(ndim, 1)
    out = []
    for d in dims:
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
        d = int(d) % n
        if d in out:
            raise RuntimeError(f"dim={d} appears multiple times in the list of dims")
        out.append(d)
    return tuple(sorted(out))


def _canonical_mask(input: Tensor, mask) -> Tensor | None:
    """``mask`` broadcast to ``input``'s shape, as bools (None stays None)."""
    if mask is None:
        return None
    if mask.dim() > input.dim():
        raise IndexError("_input_mask expected broadcastable mask (got mask dimensionality higher than of the "
                         "input)")
    return broadcast_to(mask, tuple(input.shape)).bool()


def _identity(kind: str, input: Tensor):
    """The value a masked-out element takes for a reduction of ``kind``: "sum", "prod", "max" or "min"."""
    if kind in ("sum", "prod"):
        return 0 if kind == "sum" else 1
    d = input._v.dtype
    if _dtype.is_float(d) or d.kind == "c":
        return -float("inf") if kind == "max" else float("inf")
    info = np.iinfo(np.int64 if d == np.bool_ else d)
    return int(info.min if kind == "max" else info.max)


def _filled(input: Tensor, mask, kind: str) -> Tensor:
    """``input`` with its masked-out elements replaced by the identity of ``kind``."""
    m = _canonical_mask(input, mask)
    return input if m is None else where(m, input, _identity(kind, input))


def _cast(t: Tensor, dtype) -> Tensor:
    return t if dtype is None else t.to(dtype)


def _reduce_over(fn, x: Tensor, dim, keepdim: bool, **kw) -> Tensor:
    """``fn(x, dims, keepdim)`` over ``dim`` (None: every dim, also of a 0-d tensor)."""
    if dim is None:
        dim = tuple(range(x.dim()))
    dims = _dims(dim, x.dim())
    if not dims:   # (a 0-d tensor: reduced as its one element)
        return fn(x.reshape(1), (0,), keepdim=False, **kw)
    return fn(x, dims, keepdim=bool(keepdim), **kw)


def _count(input: Tensor, mask, dim, keepdim: bool) -> Tensor:
    """How many elements of ``input`` each slice keeps, as int64."""
    m = _canonical_mask(input, mask)
    if m is None:
        m = broadcast_to(input.new_ones((), dtype=_dtype.bool_), tuple(input.shape))
    return _reduce_over(_sum, m, dim, keepdim)


# ---------------------------------------------------------------- reductions
def sum(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The sum of the elements ``mask`` keeps."""
    return _reduce_over(_sum, _filled(input, mask, "sum"), dim, keepdim, dtype=dtype)


def prod(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The product of the elements ``mask`` keeps (one dim at a time, as PyTorch)."""
    x = _filled(input, mask, "prod")
    if dtype is None and _dtype.is_integral(x._v.dtype, True):
        dtype = _dtype.int64
    x = _cast(x, dtype)
    for d in reversed(_dims(dim, x.dim())):
        x = x.prod(d, keepdim=bool(keepdim))
    return x


def cumsum(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:
    return _cumsum(_filled(input, mask, "sum"), _dims(dim, input.dim())[0], dtype=dtype)


def cumprod(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:
    return _cumprod(_filled(input, mask, "prod"), _dims(dim, input.dim())[0], dtype=dtype)


def amax(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    return _cast(_reduce_over(_amax, _filled(input, mask, "max"), dim, keepdim), dtype)


def amin(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    return _cast(_reduce_over(_amin, _filled(input, mask, "min"), dim, keepdim), dtype)


def argmax(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The index of the maximum of the elements ``mask`` keeps, in ``dtype`` (as PyTorch: the input's unless told)."""
    return _cast(_argmax(_filled(input, mask, "max"), dim, keepdim=bool(keepdim)), dtype or input.dtype)


def argmin(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The index of the minimum of the elements ``mask`` keeps, in ``dtype`` (as PyTorch: the input's unless told)."""
    return _cast(_argmin(_filled(input, mask, "min"), dim, keepdim=bool(keepdim)), dtype or input.dtype)


def logsumexp(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    return _cast(_reduce_over(_logsumexp, _filled(input, mask, "max"), dim, keepdim), dtype)


def mean(input: Tensor, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The mean of the elements ``mask`` keeps (NaN where a slice keeps none)."""
    d = dtype if dtype is not None else input.dtype
    if not (d.is_floating_point or d.is_complex):
        source = "Optional" if dtype is not None else "Input"
        raise ValueError(f"mean(): Could not infer output dtype. {source} dtype must be either a floating point "
                         f"or complex dtype. Got: {d}")
    return sum(input, dim, keepdim=keepdim, dtype=d, mask=mask) / _count(input, mask, dim, keepdim)


def median(input: Tensor, dim: int = -1, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The median of the elements ``mask`` keeps along ``dim`` (the lower of the two middle ones)."""
    x = input if input.is_floating_point() else input.float()
    m = _canonical_mask(x, mask)
    if m is not None:
        x = where(m, x, float("nan"))
    out = nanmedian(x, _dims(dim, x.dim())[0], keepdim=bool(keepdim)).values
    if input.is_floating_point():
        return out
    if bool(out.isnan().any()):
        raise ValueError("masked median expects no fully masked out rows if dtype is not floating point")
    return out.to(dtype if dtype is not None else input.dtype)


def _std_var(input: Tensor, dim, unbiased, correction, keepdim: bool, dtype, mask, root: bool) -> Tensor:
    if unbiased is not None and correction is not None:
        raise AssertionError("Only one of unbiased and correction may be given")
    c = float(correction) if correction is not None else 1.0 if unbiased is None or unbiased else 0.0
    if dtype is None:
        dtype = input.dtype if input.dtype.is_floating_point or input.dtype.is_complex else _dtype.float32
    centred = input - sum(input, dim, keepdim=True, dtype=dtype, mask=mask) / _count(input, mask, dim, True)
    total = sum(centred * centred.conj(), dim, keepdim=keepdim, dtype=dtype, mask=mask)
    count = _count(input, mask, dim, keepdim).to(total.real.dtype if total.is_complex() else total.dtype)
    if c != 0:
        count = maximum(count - c, count.new_zeros(()))
    out = (total / count).to(dtype)
    return sqrt(out) if root else out


def var(input: Tensor, dim=None, unbiased=None, *, correction=None, keepdim: bool = False, dtype=None,
        mask=None) -> Tensor:
    """The variance of the elements ``mask`` keeps (``correction``: Bessel's, 1 unless told)."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, False)


def std(input: Tensor, dim=None, unbiased=None, *, correction=None, keepdim: bool = False, dtype=None,
        mask=None) -> Tensor:
    """The standard deviation of the elements ``mask`` keeps."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, True)


def norm(input: Tensor, ord=2.0, dim=None, *, keepdim: bool = False, dtype=None, mask=None) -> Tensor:
    """The vector ``ord``-norm of the elements ``mask`` keeps (``ord=-inf``: masked-out ones count as +inf)."""
    x = _filled(input, mask, "min" if ord == -float("inf") else "sum")
    return vector_norm(x, ord, _dims(dim, x.dim()) if dim is not None else None, bool(keepdim), dtype=dtype)


def logaddexp(input: Tensor, other: Tensor, *, dtype=None, input_mask=None, other_mask=None) -> Tensor:
    """``logaddexp`` with each operand's masked-out elements taken as -inf."""
    return _cast(_logaddexp(_filled(input, input_mask, "max"), _filled(other, other_mask, "max")), dtype)


def _output_mask(op, input: Tensor, *args, **kwargs) -> Tensor:
    """Which elements of ``op(input, *args, **kwargs)`` are defined by ``mask=``: a reduction's slices that
    keep an element, a normalization's kept elements (PyTorch's ``torch.masked._output_mask``, which its
    gradient tests call)."""
    name = op.__name__
    mask = _canonical_mask(input, kwargs.get("mask"))
    if name in _NORMALIZATIONS:
        return mask
    if name not in _REDUCTIONS:
        raise ValueError(f"_output_mask expected masked operation (got callable {op.__module__}.{name})")
    if name == "norm" and args:
        args = args[1:]   # (past ord)
    dim = args[0] if args else kwargs.get("dim")
    return _reduce_over(lambda m, *a, **k: m.any(*a, **k), mask, dim, kwargs.get("keepdim", False))


_REDUCTIONS = {"sum", "prod", "amax", "amin", "argmax", "argmin", "mean", "median", "norm", "var", "std",
               "logsumexp"}
_NORMALIZATIONS = {"softmax", "log_softmax", "softmin", "normalize", "cumsum", "cumprod"}


# ---------------------------------------------------------------- normalizations
def softmax(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:
    """``softmax`` over the elements ``mask`` keeps (masked-out ones get 0; a slice keeping none, NaN)."""
    return _softmax(_filled(input, mask, "max"), _dims(dim, input.dim())[0], dtype=dtype)


def log_softmax(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:
    return _log_softmax(_filled(input, mask, "max"), _dims(dim, input.dim())[0], dtype=dtype)


def softmin(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:
    return _softmin(_filled(input, mask, "min"), _dims(dim, input.dim())[0], dtype=dtype)


def normalize(input: Tensor, ord: float, dim: int, *, eps: float = 1e-12, dtype=None, mask=None) -> Tensor:
    """``input`` divided by its masked ``ord``-norm over ``dim`` (at least ``eps``); masked-out elements are 0."""
    n = norm(input, ord, dim, keepdim=True, dtype=dtype, mask=mask)
    return _filled(input, mask, "sum") / maximum(n, n.new_full((), eps))
