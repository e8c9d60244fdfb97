"""Autocast, the op-dispatch half of automatic mixed precision (``dynajax.amp`` is the public module).

Inside ``with dynajax.autocast("cpu"):`` (bfloat16 by default; ``"cuda"``: float16) the ops that gain most
from a narrower float -- matmuls, linear layers, convolutions -- run in it: their float32 and float16/bfloat16
tensor inputs are cast first, by a recorded, differentiable conversion op, so gradients come back to the
float32 parameters in float32. Losses cast theirs to float32 instead, as PyTorch's do (``cast_inputs``). float64 inputs are
never cast, and every other op runs in its inputs' dtypes.

The casts happen where ops are dispatched (``registry.run``), before ``dynajax.compile``'s capture sees the
op, so a compiled step records them like any other op, and the backward runs outside autocast (PyTorch's
rule: the backward of an op runs in the dtypes of its forward).

Which device type applies: the one of JAX's default backend ("cuda" on a GPU, else "cpu"). An
``autocast("cuda")`` on a machine without a GPU warns and does nothing, as PyTorch's does.

The op lists follow PyTorch's for the ops dynajax has. Checked against PyTorch's CPU autocast (tests);
the "cuda" lists (more ops in float32: softmax, exp, log, sum, ...) could not be run side by side here and
leave out ``layer_norm``/``group_norm``/``softplus``, which stay in their inputs' dtype.
"""
from __future__ import annotations

import functools
import warnings

import jax
import numpy as np

from ..autograd import grad_mode
from ..autograd.grad_mode import _decorate
from . import registry

__all__ = ["autocast", "GradScaler", "is_autocast_available", "custom_fwd", "custom_bwd"]

_F32 = np.dtype(np.float32)
_LOW = {"cpu": np.dtype(jax.numpy.bfloat16), "cuda": np.dtype(np.float16)}
_SUPPORTED = frozenset({np.dtype(jax.numpy.bfloat16), np.dtype(np.float16)})
_ELIGIBLE = frozenset({np.dtype(np.float32), np.dtype(np.float16), np.dtype(jax.numpy.bfloat16)})

# registry op names run in the autocast dtype
_LOWER = {"linear", "linear_bias", "matmul", "einsum", "convolution", "convolution_bias", "lstm_scan"}
_LOWER_CUDA = _LOWER | {"lstm_cell", "rnn_cell", "rnn_scan"}
# registry op names run in float32 (losses are cast at their entry: ``cast_inputs``)
_FP32_CPU = {"prod"}
_FP32_CUDA = _FP32_CPU | {"acos", "asin", "cosh", "sinh", "tan", "erfinv", "exp", "expm1", "log", "log10", "log2",
                          "log1p", "reciprocal", "rsqrt", "pow", "softmax", "log_softmax", "sum", "cumsum",
                          "cumprod", "vector_norm"}
_LISTS = {"cpu": (_LOWER, _FP32_CPU), "cuda": (_LOWER_CUDA, _FP32_CUDA)}

_ACTIVE = [0]   # autocast regions entered and enabled, all threads together: 0 lets ``registry.run`` skip us


def _backend_type() -> str:
    return "cuda" if jax.default_backend() == "gpu" else "cpu"


def _casts_for(modes: dict):
    """op name -> dtype its float inputs are cast to, for the device type ops run on; None: no autocast."""
    mode = modes.get(_backend_type())
    if mode is None or not mode[0]:
        return None
    low, fp32 = _LISTS[_backend_type()]
    casts = {name: mode[1] for name in low}
    casts.update({name: _F32 for name in fp32})
    return casts


def _cast_tensors(args, dtype):
    """``args`` with each float16/bfloat16/float32 Tensor among them converted to ``dtype`` (by a recorded
    op, differentiable); other values as they are."""
    from .._tensor import Tensor
    from .convert import cast   # (convert imports registry, which this module extends)
    out = list(args)
    for i, a in enumerate(out):
        if isinstance(a, Tensor) and a._v.dtype in _ELIGIBLE and a._v.dtype != dtype:
            out[i] = cast(a, dtype)
    return tuple(out)


def _cast_op_args(op, args, params):
    """``registry.run``'s hook while some autocast region is active: None where this thread's autocast leaves
    ``op`` alone, else ``(args, params)`` cast as it wants them (an op computing in a ``dtype`` parameter, as
    ``sum`` and ``prod`` do, gets float32 there too when cast to float32)."""
    casts = grad_mode.state.casts
    if casts is None:
        return None
    dtype = casts.get(op.name)
    if dtype is None:
        return None
    pd = params.get("dtype") if dtype == _F32 else None
    if pd is not None and np.dtype(pd) in _ELIGIBLE:
        params = dict(params, dtype=_F32)
    return _cast_tensors(args, dtype), params


def cast_inputs(to: str):
    """Decorator of a public function: under autocast its float tensor arguments (positional or keyword) come in
    cast, ``to`` "low" (the autocast dtype: matmuls, linear layers, convolutions, whose same-dtype checks then
    pass) or "fp32" (losses), as PyTorch's autocast casts them."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if _ACTIVE[0]:
                casts = grad_mode.state.casts
                if casts is not None:
                    dtype = _F32 if to == "fp32" else casts["matmul"]
                    args = _cast_tensors(args, dtype)
                    if kwargs:
                        keys = list(kwargs)
                        kwargs = dict(zip(keys, _cast_tensors([kwargs[k] for k in keys], dtype)))
            return fn(*args, **kwargs)
        return wrapper
    return decorate


def is_autocast_available(device_type: str) -> bool:
    return device_type in _LOW


def _available(device_type: str) -> bool:
    """Whether ``device_type``'s devices are the ones ops run on here (the JAX default backend's)."""
    return device_type == _backend_type()


class autocast:
    """``torch.autocast``: a context manager (or decorator) running the ops listed in this module in a lower
    precision float.

    >>> with dynajax.autocast("cpu"):            # bfloat16
    ...     loss = F.cross_entropy(model(x), y)  # matmuls in bfloat16, the loss in float32
    >>> loss.backward()
    """

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None) -> None:
        from .. import _dtype
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in _LOW:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device_type = device_type
        self.fast_dtype = _LOW[device_type] if dtype is None else _dtype.to_np(dtype)
        self._enabled = bool(enabled)
        if self._enabled and not _available(device_type):
            warnings.warn(f"User provided device_type of '{device_type}', but {device_type} is not the device "
                          f"dynajax runs ops on here ({_backend_type()}). Disabling autocast.")
            self._enabled = False
        if self._enabled and self.fast_dtype not in _SUPPORTED:
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported "
                          "(float16 and bfloat16 are). Disabling autocast.")
            self._enabled = False

    def __enter__(self):
        st = grad_mode.state
        self._prev = (st.amp_modes, st.casts)
        modes = dict(st.amp_modes)
        modes[self.device_type] = (self._enabled, self.fast_dtype)
        st.amp_modes = modes
        st.casts = _casts_for(modes)
        _count(self._prev[1], st.casts)
        return self

    def __exit__(self, *exc) -> None:
        st = grad_mode.state
        now = st.casts
        st.amp_modes, st.casts = self._prev
        _count(now, st.casts)

    def __call__(self, fn):
        return _decorate(lambda: autocast(self.device_type, self.fast_dtype, self._enabled), fn)


def _count(before, after) -> None:
    """Keep ``_ACTIVE`` (and so ``registry.run``'s hook) in step with one thread's casts going from ``before``
    to ``after``."""
    _ACTIVE[0] += (after is not None) - (before is not None)
    registry._autocast[0] = _cast_op_args if _ACTIVE[0] else None


def is_autocast_enabled(device_type: str | None = None) -> bool:
    mode = grad_mode.state.amp_modes.get(device_type or "cuda")
    return bool(mode and mode[0])


def get_autocast_dtype(device_type: str):
    from .. import _dtype
    mode = grad_mode.state.amp_modes.get(device_type)
    return _dtype.from_np(mode[1] if mode else _LOW.get(device_type, _LOW["cpu"]))


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs=None):
    """``torch.amp.custom_fwd`` for a custom Function's ``forward``: with ``cast_inputs``, its float tensor
    inputs are cast to that dtype and it runs outside autocast; without, as is."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    if cast_inputs is None:
        return fwd
    from .. import _dtype
    dtype = _dtype.to_np(cast_inputs)

    @functools.wraps(fwd)
    def forward(ctx, *args, **kwargs):
        if grad_mode.state.casts is None:
            return fwd(ctx, *args, **kwargs)
        args = _cast_tensors(args, dtype)
        with autocast(device_type, enabled=False):
            return fwd(ctx, *args, **kwargs)
    return forward


def custom_bwd(bwd=None, *, device_type: str = "cuda"):
    """``torch.amp.custom_bwd``: the backward runs outside autocast here anyway, so ``bwd`` as it is."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
