"""Autograd: grad modes and the graph (loaded with the tensor, below the ops), the native tape engine and custom
``Function``s (above the ops, whose functions they call: loaded on first use of their names here)."""
from .grad_mode import enable_grad as enable_grad
from .grad_mode import inference_mode as inference_mode
from .grad_mode import is_grad_enabled as is_grad_enabled
from .grad_mode import no_grad as no_grad
from .grad_mode import set_grad_enabled as set_grad_enabled
from .graph import Node as Node

_LATER = {"backward": "engine", "detect_anomaly": "engine", "grad": "engine", "set_detect_anomaly": "engine",
          "Function": "function", "FunctionCtx": "function", "once_differentiable": "function"}


def __getattr__(name: str):
    # ``_tensor`` imports ``autograd.grad_mode``, which runs this file; the engine imports ``_tensor``: so the
    # engine's names are looked up when first asked for, not imported here (PEP 562)
    if name in _LATER:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{_LATER[name]}"), name)
        globals()[name] = value
        return value
    if name in ("engine", "function"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LATER))
