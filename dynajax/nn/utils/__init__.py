"""``dynajax.nn.utils``: gradient clipping, parameter/vector conversion, ``rnn`` helpers."""
from __future__ import annotations

import math

from ..._tensor import Tensor
from ...autograd import grad_mode
from . import rnn as rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters", "rnn"]


def _params(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _norm(t: Tensor, p: float) -> Tensor:
    if p == math.inf:
        return t.abs().amax()
    if p == 2:
        return (t * t).sum().sqrt()
    return (t.abs() ** p).sum() ** (1.0 / p)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale all gradients in place so their joint ``norm_type`` norm is at most ``max_norm``; returns the norm."""
    from ...ops.creation import tensor
    from ...ops.join import stack
    norm_type = float(norm_type)
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    if not grads:
        return tensor(0.0)
    with grad_mode.no_grad():
        total = _norm(stack([_norm(g.detach(), norm_type) for g in grads]), norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                               "so it cannot be clipped. To disable this error and scale the gradients by the "
                               "non-finite norm anyway, set `error_if_nonfinite=False`")
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient in place to ``[-clip_value, clip_value]``."""
    with grad_mode.no_grad():
        for p in _params(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """All parameters flattened and concatenated into one vector."""
    from ...ops.join import cat
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of ``vec`` into ``parameters`` (in place)."""
    from ..init import _fill
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    i = 0
    for p in parameters:
        n = p.numel()
        _fill(p, vec[i:i + n].detach().reshape(p.shape))
        i += n
