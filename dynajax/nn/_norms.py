"""``rms_norm``: scale by the reciprocal root mean square over the trailing dims (no centring), as
``torch.nn.functional.rms_norm``; composed of recorded ops, so every order differentiates."""
from __future__ import annotations

from .. import _dtype
from .._tensor import Tensor


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """``input / sqrt(mean(input**2 over the trailing normalized_shape dims) + eps) * weight``; ``eps`` None:
    the machine epsilon of the dtype it computes in (float32 for half and bfloat16 inputs, as PyTorch)."""
    if isinstance(normalized_shape, int):
        raise TypeError("rms_norm(): argument 'normalized_shape' (position 2) must be tuple of ints, not int")
    ns = tuple(normalized_shape)
    n = len(ns)
    if not n:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    if tuple(input.shape[input.dim() - n:]) != ns or input.dim() < n:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape "
                           f"[*{', '.join(map(str, ns))}], but got input of size{list(input.shape)}")
    if weight is not None and tuple(weight.shape) != ns:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{list(weight.shape)} and normalized_shape = {list(ns)}")
    low = input.dtype in (_dtype.float16, _dtype.bfloat16)
    x = input.to(_dtype.float32) if low else input
    if eps is None:
        eps = float(_dtype.finfo(x.dtype).eps)
    dims = tuple(range(input.dim() - n, input.dim()))
    y = x * ((x * x).mean(dims, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y.to(input.dtype)   # (a weight of another dtype does not change the result's)
