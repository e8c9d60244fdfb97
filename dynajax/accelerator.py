"""``torch.accelerator``: the machine's accelerator, if JAX's default backend is one (a GPU or TPU)."""
from __future__ import annotations

import jax

from ._device import default_accelerator, device

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index", "set_device_index",
           "synchronize"]


def is_available() -> bool:
    """Whether JAX's default backend is an accelerator (False on a CPU-only machine)."""
    return default_accelerator() != "cpu"


def current_accelerator(check_available: bool = False):
    """The accelerator's device type as a ``device`` (``device(type='cuda')``), or None on a CPU."""
    return device(default_accelerator()) if is_available() else None


def device_count() -> int:
    return len(jax.devices()) if is_available() else 0


_current = {"index": 0}
_NONE = "Cannot access accelerator device when none is available."


def _need() -> None:
    if not is_available():
        raise RuntimeError(_NONE)


def current_device_index() -> int:
    _need()
    return _current["index"]


def set_device_index(device_index) -> None:
    _need()
    index = getattr(device_index, "index", device_index)
    index = 0 if index is None else int(index)
    if not 0 <= index < device_count():
        raise RuntimeError(f"torch.accelerator.set_device_index: invalid device index {index} "
                           f"({device_count()} devices)")
    _current["index"] = index


def synchronize(device_index=None) -> None:
    """Wait for the work queued on the default device: a new op there runs after it."""
    _need()
    (jax.device_put(0.0) + 0).block_until_ready()
