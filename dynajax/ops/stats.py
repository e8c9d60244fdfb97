"""Order statistics and counts: ``quantile``/``nanquantile`` (differentiable: sorted values picked and
interpolated), ``mode`` (values and indices), and the data-dependent counts ``bincount``/``histc``
(their sizes or ranges come from the data, so they read it on the host, as ``nonzero`` does)."""
from __future__ import annotations

import builtins
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _make, _wrap_dim
from .creation import tensor
from .elementwise import ceil, export, floor, isnan, round, where
from .index import _host
from .reduce import return_type, select_along, selecting, take_along
from .shape import expand, movedim, reshape
from .sort import sort

__all__ = ["bincount", "histc", "mode", "nanquantile", "quantile"]

_mode_t = return_type("mode", "values", "indices")


# ---------------------------------------------------------------- quantile / nanquantile
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _q_tensor(name: str, input: Tensor, q) -> Tensor:
    """``q`` as a tensor of ``input``'s dtype, after PyTorch's checks (which read a tensor ``q`` on the host)."""
    if isinstance(q, Tensor):
        if q._v.ndim > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
        if q._v.dtype != input._v.dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
        qv = _host(q)
        if qv.size and not (np.all(qv >= 0) and np.all(qv <= 1)):
            raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
        return q
    if not 0 <= q <= 1:
        raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
    return tensor(float(q), dtype=input.dtype)


def _quantile(name: str, input: Tensor, q, dim, keepdim: bool, interpolation: str, skip_nan: bool) -> Tensor:
    if not _dtype.is_float(input._v.dtype):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                           f"but got {interpolation}")
    qt = _q_tensor(name, input, q)
    shape = tuple(input._v.shape)
    if dim is None:
        x, axis = reshape(input, (-1,)), 0
    else:
        axis = _wrap_dim(dim, len(shape))
        x = reshape(input, (1,)) if not shape else input
    if x._v.size == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    s = movedim(sort(x, axis).values, axis, -1)          # (rest..., n), NaNs last
    n = s._v.shape[-1]
    rest = tuple(s._v.shape[:-1])
    nq = qt._v.size
    qcol = reshape(qt, (nq,) + (1,) * (len(rest) + 1))   # (Q, 1..., 1)
    nan = isnan(s).any(-1, keepdim=True)                 # (rest..., 1)
    if skip_nan:
        count = (~isnan(s)).sum(-1, keepdim=True).to(s.dtype)
        ranks = qcol * (count - 1)
        ranks = where(count == 0, float(n - 1), ranks)   # all NaN: the last element, a NaN
    else:
        ranks = where(nan, float(n - 1), qcol * float(n - 1))   # any NaN: the result is NaN
    ranks = expand(ranks, (nq,) + rest + (1,))
    table = expand(reshape(s, (1,) + rest + (n,)), (nq,) + rest + (n,))
    last = len(rest) + 1

    def pick(r):
        return take_along(table, r.to(_dtype.int64), last)

    if interpolation in ("lower", "higher", "nearest"):
        r = {"lower": floor, "higher": ceil, "nearest": round}[interpolation](ranks)
        out = pick(r)
    else:
        below, above = floor(ranks), ceil(ranks)
        lo, hi = pick(below), pick(above)
        w = ranks - below if interpolation == "linear" else 0.5
        out = lo + (hi - lo) * w
    out = reshape(out, (nq,) + rest)                     # (Q, rest...)
    if keepdim:
        kept = (1,) * len(shape) if dim is None else (rest[:axis] + (1,) + rest[axis:] if shape else ())
        out = reshape(out, (nq,) + kept)
    if not isinstance(q, Tensor) or q._v.ndim == 0:
        out = reshape(out, tuple(out._v.shape[1:]))
    return out


def quantile(input: Tensor, q, dim: int | None = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:
    """The ``q``-th quantiles along ``dim`` (of all elements if None); a 1-D ``q`` adds a leading dim. A
    slice holding a NaN gives NaN."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


def nanquantile(input: Tensor, q, dim: int | None = None, keepdim: bool = False, *,
                interpolation: str = "linear") -> Tensor:
    """``quantile`` ignoring NaNs (a slice of NaNs only gives NaN)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


export(quantile)
export(nanquantile)


# ---------------------------------------------------------------- mode
def _mode_pick(x, axis):
    """Index (kept along ``axis``) of the most frequent value's last occurrence; ties go to the smallest
    value. The slice is sorted stably, so each value is a run whose end is its last occurrence."""
    xm = jnp.moveaxis(x, axis, -1)
    n = xm.shape[-1]
    order = jnp.argsort(xm, axis=-1, stable=True)
    s = jnp.take_along_axis(xm, order, -1)
    starts = jnp.concatenate([jnp.ones(s.shape[:-1] + (1,), bool), s[..., 1:] != s[..., :-1]], -1)
    pos = jax.lax.broadcasted_iota(jnp.int64, s.shape, s.ndim - 1)
    run_start = jax.lax.cummax(jnp.where(starts, pos, 0), axis=s.ndim - 1)
    best = jnp.argmax(pos - run_start + 1, axis=-1, keepdims=True)    # the first run end of the top count
    idx = jnp.take_along_axis(order, best, -1) if n else best
    return jnp.moveaxis(idx, -1, axis)


_mode = selecting("mode", _mode_pick)


def mode(input: Tensor, dim: int = -1, keepdim: bool = False):
    """``(values, indices)``: the most frequent value along ``dim`` (the smallest among equally frequent
    ones) and the index of its last occurrence; the gradient flows to that element."""
    return select_along(_mode, input, dim, keepdim, "mode", _mode_t)


export(mode)


# ---------------------------------------------------------------- bincount / histc
@_dtype.x64.wrap
def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """Counts (or sums of ``weights``) of each value of a 1-D non-negative integer tensor; its length is
    ``max(input) + 1`` or ``minlength``, so the data is read on the host. Not differentiable (nor is
    PyTorch's)."""
    if not _dtype.is_integral(input._v.dtype, True):
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{input.dtype.legacy_name}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    a = _host(input)
    if a.ndim != 1 or (a.size and a.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights._v.ndim != 1 or weights._v.shape[0] != a.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if weights is None:
        return _make(jnp.asarray(np.bincount(a, minlength=minlength).astype(np.int64)))
    w = _host(weights)
    d = w.dtype if w.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    counts = np.zeros(builtins.max(int(a.max()) + 1 if a.size else 0, int(minlength)), d)
    np.add.at(counts, a, w.astype(d))
    return _make(jnp.asarray(counts))


@_dtype.x64.wrap
def histc(input: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """A histogram of ``bins`` equal-width bins over ``[min, max]`` (the data's range when both are 0;
    values outside are not counted, ``max`` falls in the last bin). Not differentiable."""
    if not _dtype.is_float(input._v.dtype):
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{input.dtype.legacy_name}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    a = _host(input).reshape(-1)
    if lo == hi and a.size:
        lo, hi = float(a.min()), float(a.max())
    if lo == hi:   # an empty range widens by 1 on each side, as PyTorch's
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        show = lambda v: "-nan" if math.isnan(v) else f"{v:g}"   # noqa: E731
        raise RuntimeError(f"torch.histc: range of [{show(lo)}, {show(hi)}] is not finite")
    d = a.dtype
    inside = a[(a >= d.type(lo)) & (a <= d.type(hi))]
    pos = np.floor((inside - d.type(lo)) * d.type(bins) / (d.type(hi) - d.type(lo))).astype(np.int64)
    counts = np.bincount(np.minimum(pos, bins - 1), minlength=bins).astype(d)   # (max itself: the last bin)
    return _make(jnp.asarray(counts))


export(bincount)
export(histc)


# ---------------------------------------------------------------- distances, renorm, trapezoids, covariance
def dist(input: Tensor, other: Tensor, p=2) -> Tensor:
    """The ``p``-norm of ``input - other`` (broadcast), a 0-d tensor."""
    from .reduce import vector_norm
    return vector_norm(input - other, p)


def renorm(input: Tensor, p, dim: int, maxnorm) -> Tensor:
    """Each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled down to norm ``maxnorm``."""
    from .reduce import vector_norm
    if input._v.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input._v.ndim} dimensions")
    if p < 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    nd = input._v.ndim
    d = _wrap_dim(dim, max(nd, 1))
    others = tuple(k for k in range(nd) if k != d)
    norms = vector_norm(input, p, others, keepdim=True) if others else input.abs()
    return input * where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)


def _trapezoids(y: Tensor, x, dx, dim: int) -> Tensor:
    """The areas of the trapezoids between neighbours of ``y`` along ``dim`` (spacing ``x``'s steps or
    ``dx``)."""
    nd = y._v.ndim
    d = _wrap_dim(dim, max(nd, 1))
    n = y.shape[d]
    if n == 0:
        return y.narrow(d, 0, 0)
    mid = (y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)) / 2
    if x is None:
        return mid * (1 if dx is None else dx)
    if x._v.ndim == 1:
        steps = x.diff()
        shape = [1] * nd
        shape[d] = -1
        return mid * steps.reshape(tuple(shape))
    return mid * x.diff(dim=d)


def trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The trapezoidal rule's integral of ``y`` along ``dim``."""
    d = _wrap_dim(dim, max(y._v.ndim, 1))
    return _trapezoids(y, x, dx, d).sum(d)


def trapz(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The running trapezoidal integral of ``y`` along ``dim`` (one element fewer than ``y``)."""
    d = _wrap_dim(dim, max(y._v.ndim, 1))
    return _trapezoids(y, x, dx, d).cumsum(d)


def cov(input: Tensor, *, correction: int = 1, fweights=None, aweights=None) -> Tensor:
    """The covariance of the variables in ``input``'s rows (observations in columns), as ``torch.cov``."""
    if input._v.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input._v.ndim} dimensions")
    n_obs = input.shape[-1] if input._v.ndim else 1
    for name, w, kind, ok in (("fweights", fweights, "integral", lambda d: d.np.kind in "iu"),
                              ("aweights", aweights, "floating point", lambda d: d.is_floating_point)):
        if w is None:
            continue
        if w._v.ndim > 1:
            raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                               f"{w._v.ndim} dimensions")
        if not ok(w.dtype):
            raise RuntimeError(f"cov(): expected {name} to have {kind} dtype but got {name} with "
                               f"{w.dtype.legacy_name} dtype")
        if w.numel() != n_obs:
            raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the "
                               f"input but got {w.numel()} != {n_obs}")
    x = input if input._v.ndim == 2 else input.reshape(1, -1)
    if not (x.is_floating_point() or x.is_complex()):
        x = x.to(_dtype.from_np(_dtype.default_float_np()))
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights
    if aweights is not None:
        w = aweights if w is None else w * aweights
    if w is None:
        avg, w_sum = x.mean(1), n
        norm = n - correction
    else:
        w_sum = w.sum()
        avg = (x * w).sum(1) / w_sum
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = w_sum - correction
        else:
            norm = w_sum - correction * (w * aweights).sum() / w_sum
    norm = where(tensor(norm) <= 0, 0, norm) if not isinstance(norm, Tensor) else where(norm <= 0, 0, norm)
    xm = x - avg.unsqueeze(1)
    c = (xm if w is None else xm * w) @ xm.mH
    return (c / norm).squeeze()


def corrcoef(input: Tensor) -> Tensor:
    """Pearson's correlation coefficients of the variables in ``input``'s rows."""
    c = cov(input)
    if c._v.ndim == 0:
        return c / c
    sd = c.diagonal().real.sqrt() if c.is_complex() else c.diagonal().sqrt()
    c = c / sd.unsqueeze(1) / sd.unsqueeze(0)
    return c if c.is_complex() else c.clamp(-1, 1)


for _f in (dist, renorm, cov, corrcoef):
    export(_f)
__all__ += ["corrcoef", "cov", "cumulative_trapezoid", "dist", "renorm", "trapezoid", "trapz"]
