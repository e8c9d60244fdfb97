"""``torch.onnx``: importable so scripts that import it run; exporting is not implemented.

A dynajax model's graph can be had as a JAX function (``dynajax.lower(fn, *args)``), which
``jax.export`` serialises as StableHLO; there is no ONNX exporter."""
from __future__ import annotations

__all__ = ["export", "is_in_onnx_export", "dynamo_export"]


def _no_export(name: str):
    raise NotImplementedError(f"dynajax has no torch.onnx.{name}: there is no ONNX exporter; dynajax.lower(fn, "
                              "*args) gives the model as a JAX function, which jax.export serialises (StableHLO)")


def export(model, args=(), f=None, *extra, **kwargs):
    _no_export("export")


def dynamo_export(model, *args, **kwargs):
    _no_export("dynamo_export")


def is_in_onnx_export() -> bool:
    return False
