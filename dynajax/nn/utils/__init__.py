"""``dynajax.nn.utils``: gradient clipping, parameter/vector conversion, ``rnn`` helpers."""
from __future__ import annotations

import math

from ..._tensor import Tensor
from ...autograd import grad_mode
from . import rnn as rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_",
           "parameters_to_vector", "vector_to_parameters", "rnn",
           "weight_norm", "remove_weight_norm"]


def _params(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _norm(t: Tensor, p: float) -> Tensor:
    if p == math.inf:
        return t.abs().amax()
    if p == 2:
        return (t * t).sum().sqrt()
    return (t.abs() ** p).sum() ** (1.0 / p)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The ``norm_type`` norm of all ``tensors`` (usually gradients) taken together, as one vector."""
    from ...ops.creation import tensor
    from ...ops.join import stack
    norm_type = float(norm_type)
    tensors = [t for t in _params(tensors) if t is not None]
    if not tensors:
        return tensor(0.0)
    with grad_mode.no_grad():
        total = _norm(stack([_norm(t.detach(), norm_type) for t in tensors]), norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                           "so it cannot be clipped. To disable this error and scale the gradients by the "
                           "non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale the parameters' gradients in place by ``max_norm / (total_norm + 1e-6)`` where that is below 1."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    if not grads:
        return
    with grad_mode.no_grad():
        coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale all gradients in place so their joint ``norm_type`` norm is at most ``max_norm``; returns the norm."""
    parameters = _params(parameters)   # (a generator is read once)
    total = get_total_norm([p.grad for p in parameters], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
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


def _norm_except_dim(v: Tensor, dim: int) -> Tensor:
    if dim == -1:
        return (v * v).sum().sqrt()
    dims = [d for d in range(v.dim()) if d != dim % v.dim()]
    return (v * v).sum(dims, keepdim=True).sqrt()


class _WeightNorm:
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    def compute(self, module) -> Tensor:
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    def __call__(self, module, inputs) -> None:
        object.__setattr__(module, self.name, self.compute(module))


def weight_norm(module, name: str = "weight", dim: int = 0):
    """Reparameterize ``module.<name>`` as ``g * v / ||v||`` (parameters ``<name>_g`` and ``<name>_v``)."""
    from ..parameter import Parameter
    for h in module._forward_pre_hooks.values():
        if isinstance(h, _WeightNorm) and h.name == name:
            raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
    dim = -1 if dim is None else dim
    fn = _WeightNorm(name, dim)
    w = getattr(module, name)
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(_norm_except_dim(w.detach(), dim)))
    module.register_parameter(name + "_v", Parameter(w.detach()))
    object.__setattr__(module, name, fn.compute(module))
    module._weight_norm_handle = module.register_forward_pre_hook(fn)
    return module


def remove_weight_norm(module, name: str = "weight"):
    """Undo :func:`weight_norm`: ``<name>`` becomes a plain Parameter again."""
    from ..parameter import Parameter
    for k, h in list(module._forward_pre_hooks.items()):
        if isinstance(h, _WeightNorm) and h.name == name:
            with grad_mode.no_grad():
                w = h.compute(module)
            del module._forward_pre_hooks[k]
            del module._parameters[name + "_g"], module._parameters[name + "_v"]
            module.__dict__.pop(name, None)
            module.register_parameter(name, Parameter(w))
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
