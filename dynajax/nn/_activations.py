"""Activations and small helpers that the losses and ``nn.functional`` both build on: ``one_hot``,
``softplus``/``logsigmoid``, ``log_softmax``, ``pairwise_distance`` and their private helpers.

They sit in a module of their own so that ``_losses`` can import them without importing ``nn.functional``,
which re-exports the losses (that import pair was a module-level cycle); ``nn.functional`` exposes them
unchanged."""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from ..ops.dispatch import index_checks, is_recorded
from .._tensor import Tensor, _wrap_dim
from ..ops import elementwise as _ew
from ..ops.index import check_bounds
from ..ops.registry import apply
from . import _ops


def _one_hot_fail(i, k):
    raise RuntimeError("Class values must be non-negative." if i < 0 else "Class values must be smaller than num_classes.")


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim (``num_classes=-1``: max value + 1)."""
    if tensor.dtype != _dtype.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes != -1 and (is_recorded(tensor) or index_checks() is not None):
        # dynajax.compile: no graph break for a bounds check (checked on the device, ``compile.checks``)
        check_bounds([tensor], [int(num_classes)], _one_hot_fail, negative=False, name="one_hot")
        return apply(_ops.one_hot_op, tensor, num_classes=int(num_classes))
    v = np.asarray(tensor.detach()._value)
    if num_classes == -1:
        num_classes = int(v.max()) + 1 if v.size else 0
    if v.size and v.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if v.size and v.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return apply(_ops.one_hot_op, tensor, num_classes=int(num_classes))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``."""
    bx = input * beta
    soft = (bx.clamp(max=threshold)).exp().log1p() / beta
    return _ew.where(bx > threshold, input, soft)


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed stably."""
    return -softplus(-input)


def _softmax_dim(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1


def log_softmax(input: Tensor, dim=None, _stacklevel=3, dtype=None) -> Tensor:
    """``x - logsumexp(x, dim)``."""
    if dtype is not None:
        input = input.to(dtype)
    dim = _softmax_dim(input.dim()) if dim is None else dim
    return _softmax_along(input, dim, True)


def _softmax_along(input: Tensor, dim: int, log: bool) -> Tensor:
    """(log-)softmax along ``dim``, checked as PyTorch's: its NotImplementedError for an integer or bool input
    (no ``dtype=`` given), IndexError for a dim out of range; a 0-d input is one element along dim 0 or -1."""
    n = input.dim()
    d = _wrap_dim(dim, n)
    if not input.is_floating_point():
        kernel = ("log_" if log else "") + ("softmax_lastdim_kernel_impl" if d == max(n, 1) - 1
                                            else "softmax_kernel_impl")
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{input.dtype.legacy_name}'")
    if n == 0:
        return _ops.softmax_op(input.reshape(1), 0, log=log).reshape(())
    return _ops.softmax_op(input, d, log=log)


def _size_repr(shape) -> str:
    return f"dynajax.Size([{', '.join(str(s) for s in shape)}])"


def _vnorm(x: Tensor, p: float, dim, keepdim: bool) -> Tensor:
    if p == 2:
        return (x * x).sum(dim, keepdim=keepdim).sqrt()
    if p == 1:
        return x.abs().sum(dim, keepdim=keepdim)
    if p == math.inf:
        return x.abs().amax(dim, keepdim=keepdim)
    return (x.abs() ** p).sum(dim, keepdim=keepdim) ** (1.0 / p)


def _no_grad_clamp_min(x: Tensor, lo: float) -> Tensor:
    """``clamp(x, min=lo)`` whose gradient is that of ``x`` (PyTorch clamps the norm under no_grad)."""
    return x + (x.detach().clamp(min=lo) - x.detach())


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` over the last dim."""
    return _vnorm(x1 - x2 + eps, p, -1, keepdim)
