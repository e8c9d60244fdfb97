"""Padding layers: ``ZeroPad*``, ``ConstantPad*``, ``ReflectionPad*``, ``ReplicationPad*``, ``CircularPad*``."""
from __future__ import annotations

from .. import functional as F
from .module import Module


def _pad_module(name: str, nd: int, mode: str, has_value: bool = False, zero: bool = False):
    """Declare a padding layer over the last ``nd`` dims (padding: int or 2*nd ints, last dim first)."""

    def _set(self, padding, value) -> None:
        Module.__init__(self)
        self.padding = (padding,) * (2 * nd) if isinstance(padding, int) else tuple(padding)
        self.value = value

    if has_value:
        def __init__(self, padding, value: float) -> None:
            _set(self, padding, value)
    else:
        def __init__(self, padding) -> None:
            _set(self, padding, 0.0 if zero else None)

    def forward(self, input):
        return F.pad(input, list(self.padding), mode, self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}" if has_value else f"{self.padding}"

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__doc__": f"Pad the last {nd} dim(s) ({mode} mode)."})


ZeroPad1d = _pad_module("ZeroPad1d", 1, "constant", zero=True)
ZeroPad2d = _pad_module("ZeroPad2d", 2, "constant", zero=True)
ZeroPad3d = _pad_module("ZeroPad3d", 3, "constant", zero=True)
ConstantPad1d = _pad_module("ConstantPad1d", 1, "constant", has_value=True)
ConstantPad2d = _pad_module("ConstantPad2d", 2, "constant", has_value=True)
ConstantPad3d = _pad_module("ConstantPad3d", 3, "constant", has_value=True)
ReflectionPad1d = _pad_module("ReflectionPad1d", 1, "reflect")
ReflectionPad2d = _pad_module("ReflectionPad2d", 2, "reflect")
ReflectionPad3d = _pad_module("ReflectionPad3d", 3, "reflect")
ReplicationPad1d = _pad_module("ReplicationPad1d", 1, "replicate")
ReplicationPad2d = _pad_module("ReplicationPad2d", 2, "replicate")
ReplicationPad3d = _pad_module("ReplicationPad3d", 3, "replicate")
CircularPad1d = _pad_module("CircularPad1d", 1, "circular")
CircularPad2d = _pad_module("CircularPad2d", 2, "circular")
CircularPad3d = _pad_module("CircularPad3d", 3, "circular")
