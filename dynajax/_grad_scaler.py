"""``GradScaler`` (``dynajax.amp.GradScaler``): dynamic loss scaling for float16 training, PyTorch's algorithm.

The loss is multiplied by a scale before ``backward()`` so small float16 gradients do not flush to zero;
``step`` divides the gradients by it again (``unscale_``) and skips the optimizer's step when some gradient
is inf or NaN; ``update`` then halves the scale (``backoff_factor``) after such a step, or doubles it
(``growth_factor``) after ``growth_interval`` steps in a row without one.

The scale and the count of good steps are float32/int32 tensors updated in place, so under
``dynajax.compile`` they are state of the step like an optimizer's. Deciding whether to step reads one
value back (a graph break, counted in ``stats.graph_breaks``), as PyTorch reads one per device.
"""
from __future__ import annotations

import warnings

from ._dtype import float16, float32, float64, int32
from ._tensor import Tensor
from .autograd import grad_mode
from .ops.autocast import _available
from .ops.creation import full, zeros
from .ops.elementwise import isfinite, where

_READY, _UNSCALED, _STEPPED = 0, 1, 2


class GradScaler:
    """``torch.amp.GradScaler``.

    >>> scaler = dynajax.amp.GradScaler("cpu")
    >>> scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = str(device)
        if enabled and not _available(self._device.split(":")[0]):
            warnings.warn(f"torch.amp.GradScaler is enabled, but {self._device} is not the device dynajax runs "
                          "ops on here. Disabling.")
            enabled = False
        self._enabled = bool(enabled)
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._scale = None
        self._growth_tracker = None
        self._per_optimizer: dict = {}   # id(optimizer) -> {"stage", "found_inf"}

    # ------------------------------------------------------------ state
    def _lazy_init(self) -> None:
        self._scale = full((), self._init_scale, dtype=float32)
        self._growth_tracker = full((), 0, dtype=int32)

    def _opt_state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})

    def is_enabled(self) -> bool:
        return self._enabled

    # ------------------------------------------------------------ scaling
    def scale(self, outputs):
        """``outputs`` (a tensor, or lists/tuples of them) multiplied by the current scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._lazy_init()

        def mul(x):
            if isinstance(x, Tensor):
                return x * self._scale   # (a float16 loss times a float32 scale is float32, as in PyTorch)
            if isinstance(x, (list, tuple)):
                return type(x)(mul(v) for v in x)
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return mul(outputs)

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether any is inf or NaN."""
        if not self._enabled:
            return
        st = self._opt_state(optimizer)
        if st["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if self._scale is None:
            raise RuntimeError("Attempted unscale_ but _scale is None.  This may indicate your script did not "
                               "use scaler.scale(loss or outputs) earlier in the iteration.")
        with grad_mode.no_grad():
            inv = self._scale.to(float64).reciprocal().to(float32)
            found = zeros((), dtype=float32)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if g.dtype == float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    g.mul_(inv)
                    found = found + (~isfinite(g)).any().to(float32)
        st["found_inf"] = found
        st["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(...)`` on the unscaled gradients, skipped when some gradient is inf or NaN; returns
        what ``optimizer.step`` returned (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._opt_state(optimizer)
        if st["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] == _READY:
            self.unscale_(optimizer)
        ret = None
        if not st["found_inf"].item():
            ret = optimizer.step(*args, **kwargs)
        st["stage"] = _STEPPED
        return ret

    def update(self, new_scale=None) -> None:
        """The scale for the next iteration: ``new_scale`` if given, else backed off after an inf/NaN gradient
        or grown after ``growth_interval`` clean steps."""
        if not self._enabled:
            return
        if self._scale is None:
            self._lazy_init()
        with grad_mode.no_grad():
            if new_scale is not None:
                if isinstance(new_scale, Tensor):
                    if new_scale.numel() != 1:
                        raise ValueError("new_scale should be a float or a 1-element torch.cuda.FloatTensor "
                                         "with requires_grad=False.")
                    self._scale.copy_(new_scale.reshape(()))
                else:
                    self._scale.fill_(float(new_scale))
            else:
                found = [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None]
                if not found:
                    raise AssertionError("No inf checks were recorded prior to update.")
                bad = found[0]
                for f in found[1:]:
                    bad = bad + f
                bad = bad > 0
                grown = self._growth_tracker + 1
                at_interval = grown == self._growth_interval
                self._scale.copy_(where(bad, self._scale * self._backoff_factor,
                                        where(at_interval, self._scale * self._growth_factor, self._scale)))
                self._growth_tracker.copy_(where(bad | at_interval, 0, grown))
        self._per_optimizer = {}

    # ------------------------------------------------------------ inspection
    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        return 0 if self._growth_tracker is None else int(self._growth_tracker.item())

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        tracker = int(state_dict["_growth_tracker"])
        if self._scale is None:
            self._lazy_init()
        with grad_mode.no_grad():
            self._scale.fill_(self._init_scale)
            self._growth_tracker.fill_(tracker)

