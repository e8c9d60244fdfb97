"""Automatic mixed precision, as ``torch.amp``: ``autocast`` regions and the ``GradScaler``.

``autocast`` lives with the ops it casts (``dynajax/ops/autocast.py``: the casts happen where ops are
dispatched); the ``GradScaler`` with the optimizers it steps (``dynajax/_grad_scaler.py``).
"""
from __future__ import annotations

from ._device import cuda as _cuda
from ._grad_scaler import GradScaler as GradScaler
from .ops.autocast import autocast as autocast
from .ops.autocast import custom_bwd as custom_bwd
from .ops.autocast import custom_fwd as custom_fwd
from .ops.autocast import get_autocast_dtype as get_autocast_dtype
from .ops.autocast import is_autocast_available as is_autocast_available
from .ops.autocast import is_autocast_enabled as is_autocast_enabled



class _CudaAmp:
    """``torch.cuda.amp`` (deprecated by PyTorch, still common in scripts): the "cuda" ``autocast`` and
    ``GradScaler`` without a device argument."""

    @staticmethod
    def autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True) -> autocast:
        return autocast("cuda", dtype, enabled, cache_enabled)

    @staticmethod
    def GradScaler(init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                   growth_interval: int = 2000, enabled: bool = True) -> GradScaler:
        return GradScaler("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


_cuda.amp = _CudaAmp
