"""Discrete Fourier transforms (``dynajax.fft``), as ``torch.fft``.

Three ops do the transforms, as PyTorch's three kernels: ``fft_c2c`` (complex to complex, forward or
inverse), ``fft_r2c`` (real to complex: the half spectrum of ``rfft``, or the full one of ``fft`` of a real
input) and ``fft_c2r`` (a half spectrum to a real signal: ``irfft``); ``hfft``/``ihfft`` are these with a
conjugate and the dual normalization. Each takes the transformed ``dims``, the signal sizes ``s`` along them
(the input is cut or zero-padded to them first) and ``norm``; their VJPs are the adjoint transforms (the
inverse direction with the dual normalization, ``backward`` <-> ``forward``), in PyTorch's complex convention
(``ops/complex.py``), cut or padded back to the input's sizes.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _wrap_dim
from .complex import complex_dtype_of, conj, real
from .creation import tensor
from .elementwise import with_out
from .join import roll
from .registry import apply, op

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn",
           "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn", "fftfreq", "rfftfreq", "fftshift",
           "ifftshift"]

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


# ---------------------------------------------------------------- the ops
@op("fft_resize", backward_name="ConstantPadNdBackward0")
def _resize(x, *, dims, sizes, orig):
    """``x`` cut or zero-padded at the end of each of ``dims`` to ``sizes`` (``orig``: its sizes there)."""
    x = x[tuple(slice(0, sizes[dims.index(d)]) if d in dims else slice(None) for d in range(x.ndim))]
    pad = [(0, max(0, sizes[dims.index(d)] - x.shape[d])) if d in dims else (0, 0) for d in range(x.ndim)]
    return jnp.pad(x, pad) if any(p[1] for p in pad) else x


_resize.defvjp(lambda g, out, x, *, dims, sizes, orig: (resize(g, dims, orig),))


def resize(x: Tensor, dims: tuple, sizes: tuple) -> Tensor:
    """``x`` cut or zero-padded at the end of ``dims`` to ``sizes`` (``x`` itself where it has them)."""
    orig = tuple(x.shape[d] for d in dims)
    return x if orig == tuple(sizes) else apply(_resize, x, dims=dims, sizes=tuple(sizes), orig=orig)


@op("fft_c2c", backward_name="FftC2CBackward0")
def _c2c(x, *, dims, norm, forward):
    return (jnp.fft.fftn if forward else jnp.fft.ifftn)(x, axes=dims, norm=norm)


_c2c.defvjp(lambda g, out, x, *, dims, norm, forward: (c2c(g, dims, _DUAL[norm], not forward),))


def c2c(x: Tensor, dims: tuple, norm: str, forward: bool) -> Tensor:
    return apply(_c2c, x, dims=dims, norm=norm, forward=forward)


@op("fft_r2c", backward_name="FftR2CBackward0")
def _r2c(x, *, dims, norm, onesided, n):
    if onesided:
        return jnp.fft.rfftn(x, axes=dims, norm=norm)
    return jnp.fft.fftn(x.astype(complex_dtype_of(x.dtype)), axes=dims, norm=norm)


@_r2c.defvjp
def _r2c_vjp(g, out, x, *, dims, norm, onesided, n):
    if onesided:   # the half spectrum is the first n // 2 + 1 bins of the full one: the others get no cotangent
        g = resize(g, dims[-1:], (n,))
    return (real(c2c(g, dims, _DUAL[norm], False)),)


def r2c(x: Tensor, dims: tuple, norm: str, onesided: bool) -> Tensor:
    return apply(_r2c, x, dims=dims, norm=norm, onesided=onesided, n=x.shape[dims[-1]])


@op("fft_c2r", backward_name="FftC2RBackward0")
def _c2r(x, *, dims, norm, n):
    s = [x.shape[d] for d in dims[:-1]] + [n]
    return jnp.fft.irfftn(x, s=s, axes=dims, norm=norm)


@_c2r.defvjp
def _c2r_vjp(g, out, x, *, dims, norm, n):
    # the signal is real: each bin but the first (and, for an even n, the last) stands for itself and its
    # conjugate mirror, so its cotangent counts twice
    return (apply(_twice_mirrored, r2c(g, dims, _DUAL[norm], True), dim=dims[-1], n=n),)


@op("fft_twice_mirrored", backward_name="MulBackward0")
def _twice_mirrored(x, *, dim, n):
    k = np.arange(x.shape[dim])
    w = np.where((k >= 1) & (k < n - n // 2), 2.0, 1.0).reshape((-1,) + (1,) * (x.ndim - 1 - dim))
    return x * jnp.asarray(w, jnp.finfo(x.dtype).dtype)


_twice_mirrored.defvjp(lambda g, out, x, *, dim, n: (apply(_twice_mirrored, g, dim=dim, n=n),))


# ---------------------------------------------------------------- argument handling
def _norm(norm) -> str:
    if norm is None:
        return "backward"
    if norm not in _DUAL:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm


def _plan(x: Tensor, s, dim, half_out: bool = False, default_all: bool = True):
    """``(dims, sizes)``: the transformed dims and the signal size along each (``half_out``: the last is the
    length of the real output of a half-spectrum input, ``2 * (m - 1)`` by default)."""
    nd = x.ndim
    if dim is None:
        if s is not None:
            dims = tuple(range(nd - len(s), nd))
        else:
            dims = tuple(range(nd)) if default_all else (nd - 1,)
    else:
        dl = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        if nd == 0 and dl:
            raise IndexError(f"Dimension specified as {dl[0]} but tensor has no dimensions")
        dims = tuple(_wrap_dim(int(d), nd) for d in dl)
    if s is not None:
        s = tuple(int(n) for n in s)
        if len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    if not dims:
        raise RuntimeError("fft: at least one dim must be transformed")
    have = [x.shape[d] for d in dims]
    sizes = [h if n == -1 else n for n, h in zip(s or [-1] * len(dims), have)]
    if half_out and (s is None or s[-1] == -1):
        sizes[-1] = 2 * (have[-1] - 1)
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return dims, tuple(sizes)


def _floating(x: Tensor, name: str, real_only: bool = False) -> Tensor:
    """``x`` as a float or complex tensor (integers and bools in the default float dtype), with PyTorch's
    errors for half precision and, where ``real_only``, for a complex input."""
    d = x._v.dtype
    if d.kind == "c":
        if real_only:
            raise RuntimeError(f"{name} expects a real input tensor, but got {x.dtype.legacy_name}")
        return x
    if d.kind in "biu":
        return x.to(_dtype.get_default_dtype())
    if d.itemsize < 4:
        raise RuntimeError(f"Unsupported dtype {x.dtype.legacy_name}")
    return x


def _as_complex(x: Tensor) -> Tensor:
    d = x._v.dtype
    return x if d.kind == "c" else x.to(_dtype.from_np(complex_dtype_of(d)))


def _transform(x: Tensor, s, dim, norm, kind: str, name: str, default_all: bool = True) -> Tensor:
    """One of the transforms: ``kind`` is ``fft``/``ifft`` (complex output), ``rfft``, ``irfft``, ``hfft`` or
    ``ihfft``."""
    norm = _norm(norm)
    x = _floating(x, name, real_only=kind in ("rfft", "ihfft"))
    half_out = kind in ("irfft", "hfft")
    dims, sizes = _plan(x, s, dim, half_out, default_all)
    if half_out:   # the input is the half spectrum: n // 2 + 1 bins of the last dim
        x = resize(_as_complex(x), dims, sizes[:-1] + (sizes[-1] // 2 + 1,))
        if kind == "hfft":
            x, norm = conj(x), _DUAL[norm]
        return apply(_c2r, x, dims=dims, norm=norm, n=sizes[-1])
    x = resize(x, dims, sizes)
    if kind in ("rfft", "ihfft"):
        r = r2c(x, dims, norm if kind == "rfft" else _DUAL[norm], True)
        return r if kind == "rfft" else conj(r)
    forward = kind == "fft"
    if x._v.dtype.kind != "c" and forward:
        return r2c(x, dims, norm, False)
    return c2c(_as_complex(x), dims, norm, forward)


def _family(kind: str):
    """The 1-D, 2-D and n-D functions of one transform (``fft``, ``fft2``, ``fftn``)."""
    def one(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None, *, out=None) -> Tensor:
        return with_out(_transform(input, None if n is None else (n,), dim, norm, kind, kind), out, kind)

    def two(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None, *, out=None) -> Tensor:
        return with_out(_transform(input, s, dim, norm, kind, kind + "2"), out, kind + "2")

    def many(input: Tensor, s=None, dim=None, norm: str | None = None, *, out=None) -> Tensor:
        return with_out(_transform(input, s, dim, norm, kind, kind + "n"), out, kind + "n")

    for f, suffix, what in ((one, "", "along ``dim``"), (two, "2", "over the last two dims (``dim``)"),
                            (many, "n", "over ``dim`` (all dims by default)")):
        f.__name__ = f.__qualname__ = kind + suffix
        f.__doc__ = f"``torch.fft.{kind}{suffix}``: the {kind} {what}; ``n``/``s`` cut or zero-pad the signal."
    return one, two, many


fft, fft2, fftn = _family("fft")
ifft, ifft2, ifftn = _family("ifft")
rfft, rfft2, rfftn = _family("rfft")
irfft, irfft2, irfftn = _family("irfft")
hfft, hfft2, hfftn = _family("hfft")
ihfft, ihfft2, ihfftn = _family("ihfft")


# ---------------------------------------------------------------- frequencies and shifts
def _freqs(k: np.ndarray, n: int, d: float, dtype, device, requires_grad: bool) -> Tensor:
    npd = _dtype.to_np(dtype) if dtype is not None else _dtype.default_float_np()
    vals = k.astype(npd) * np.asarray(1.0 / (n * d), npd)   # (in the output dtype, as PyTorch's mul_)
    return tensor(vals, dtype=dtype if dtype is not None else _dtype.from_np(npd), device=device,
                  requires_grad=requires_grad)


def fftfreq(n: int, d: float = 1.0, *, dtype=None, layout=None, device=None, requires_grad: bool = False) -> Tensor:
    """The sample frequencies of an ``n``-point FFT with sample spacing ``d``: ``[0, 1, ..., -1] / (d n)``."""
    k = np.arange(n)
    return _freqs(np.where(k < (n + 1) // 2, k, k - n), n, d, dtype, device, requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, layout=None, device=None, requires_grad: bool = False) -> Tensor:
    """The sample frequencies of ``rfft``: ``[0, 1, ..., n // 2] / (d n)``."""
    return _freqs(np.arange(n // 2 + 1), n, d, dtype, device, requires_grad)


def _shift(x: Tensor, dim, sign: int) -> Tensor:
    dims = tuple(range(x.ndim)) if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    dims = tuple(_wrap_dim(int(d), x.ndim) for d in dims)
    return roll(x, [sign * (x.shape[d] // 2) for d in dims], dims)


def fftshift(input: Tensor, dim=None) -> Tensor:
    """The zero frequency moved to the middle of ``dim`` (all dims by default)."""
    return _shift(input, dim, 1)


def ifftshift(input: Tensor, dim=None) -> Tensor:
    """The inverse of :func:`fftshift`."""
    return _shift(input, dim, -1)
