"""``dynajax.signal.windows``: torch.signal.windows's window functions, with torch's signatures and argument
errors. Each window is computed by numpy in float64 and made a tensor of ``dtype`` (float32 or float64; the
default float dtype when None) like :func:`dynajax.tensor`; ``layout`` is accepted for torch's signature and
must be strided (None or ``torch.strided``)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .. import _dtype
from ..ops.creation import tensor as _tensor

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine", "general_hamming",
           "hamming", "hann", "kaiser", "nuttall"]


def _checks(name: str, M: int, dtype, layout):
    """torch's ``_window_function_checks``; returns the dtype (the default float dtype for None)."""
    if dtype is None:
        dtype = _dtype.get_default_dtype()
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout is not None and str(layout) not in ("torch.strided", "strided"):
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if dtype not in (_dtype.float32, _dtype.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _made(values, dtype, device, requires_grad):
    return _tensor(np.asarray(values, np.float64).reshape(-1), dtype=dtype, device=device,
                   requires_grad=requires_grad)


def _steps(start: float, end: float, M: int) -> np.ndarray:
    return np.linspace(start, end, M, dtype=np.float64)


def exponential(M: int, *, center: float | None = None, tau: float = 1.0, sym: bool = True, dtype=None,
                layout=None, device=None, requires_grad: bool = False):
    dtype = _checks("exponential", M, dtype, layout)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    if M == 0:
        return _made([], dtype, device, requires_grad)
    if center is None:
        center = (M if not sym and M > 1 else M - 1) / 2.0
    k = _steps(-center / tau, (-center + (M - 1)) / tau, M)
    return _made(np.exp(-np.abs(k)), dtype, device, requires_grad)


def cosine(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    dtype = _checks("cosine", M, dtype, layout)
    if M == 0:
        return _made([], dtype, device, requires_grad)
    constant = math.pi / (M + 1 if not sym and M > 1 else M)
    k = _steps(0.5 * constant, (0.5 + (M - 1)) * constant, M)
    return _made(np.sin(k), dtype, device, requires_grad)


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype=None, layout=None, device=None,
             requires_grad: bool = False):
    dtype = _checks("gaussian", M, dtype, layout)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    if M == 0:
        return _made([], dtype, device, requires_grad)
    start = -(M if not sym and M > 1 else M - 1) / 2.0
    constant = 1 / (std * math.sqrt(2))
    k = _steps(start * constant, (start + (M - 1)) * constant, M)
    return _made(np.exp(-k ** 2), dtype, device, requires_grad)


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype=None, layout=None, device=None,
           requires_grad: bool = False):
    dtype = _checks("kaiser", M, dtype, layout)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    if M == 0:
        return _made([], dtype, device, requires_grad)
    if M == 1:
        return _made([1.0], dtype, device, requires_grad)
    beta = float(beta)
    constant = 2.0 * beta / (M if not sym else M - 1)
    k = _steps(-beta, min(beta, -beta + (M - 1) * constant), M)
    return _made(np.i0(np.sqrt(np.maximum(beta * beta - k ** 2, 0.0))) / np.i0(beta), dtype, device,
                 requires_grad)


def bartlett(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    dtype = _checks("bartlett", M, dtype, layout)
    if M == 0:
        return _made([], dtype, device, requires_grad)
    if M == 1:
        return _made([1.0], dtype, device, requires_grad)
    constant = 2 / (M if not sym else M - 1)
    k = _steps(-1.0, -1.0 + (M - 1) * constant, M)
    return _made(1 - np.abs(k), dtype, device, requires_grad)


def general_cosine(M, *, a: Iterable, sym: bool = True, dtype=None, layout=None, device=None,
                   requires_grad: bool = False):
    dtype = _checks("general_cosine", M, dtype, layout)
    if M == 0:
        return _made([], dtype, device, requires_grad)
    if M == 1:
        return _made([1.0], dtype, device, requires_grad)
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    if not a:
        raise ValueError("Coefficients cannot be empty")
    constant = 2 * math.pi / (M if not sym else M - 1)
    k = _steps(0.0, (M - 1) * constant, M)
    a_i = np.asarray([(-1) ** i * float(w) for i, w in enumerate(a)], np.float64)
    i = np.arange(a_i.shape[0], dtype=np.float64)
    return _made((a_i[:, None] * np.cos(i[:, None] * k)).sum(0), dtype, device, requires_grad)


def general_hamming(M, *, alpha: float = 0.54, sym: bool = True, dtype=None, layout=None, device=None,
                    requires_grad: bool = False):
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def hamming(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    return general_hamming(M, sym=sym, dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)


def hann(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def blackman(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    dtype = _checks("blackman", M, dtype, layout)
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def nuttall(M: int, *, sym: bool = True, dtype=None, layout=None, device=None, requires_grad: bool = False):
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym, dtype=dtype,
                          layout=layout, device=device, requires_grad=requires_grad)
