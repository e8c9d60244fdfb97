"""``torch.backends``: the cuDNN / cuBLAS / MPS switches PyTorch scripts set at their top.

XLA chooses its own kernels, so these are flags a script may read and set with no effect on what runs:
``cudnn.benchmark``, ``cudnn.deterministic``, ``cudnn.enabled``, ``cudnn.allow_tf32``,
``cuda.matmul.allow_tf32``. dynajax's float32 matmuls always run at full float32 precision (JAX's
``precision="highest"``), whatever :func:`set_float32_matmul_precision` or ``allow_tf32`` say.
"""
from __future__ import annotations

import os
import warnings

from ._device import cuda as _cuda

__all__ = ["cudnn", "cuda", "mps", "set_float32_matmul_precision", "get_float32_matmul_precision",
           "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_num_threads", "get_num_threads"]

_PRECISIONS = ("highest", "high", "medium")
_state = {"float32_matmul_precision": "highest"}


def set_float32_matmul_precision(precision: str) -> None:
    """Recorded for :func:`get_float32_matmul_precision` and ``cuda.matmul.allow_tf32``; dynajax's float32
    matmuls stay at full precision. An unknown name warns and changes nothing, as PyTorch's does."""
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "setFloat32MatmulPrecision call has no effect.", UserWarning, stacklevel=2)
        return
    _state["float32_matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _state["float32_matmul_precision"]


class _Flags:
    """A namespace of settable flags; its repr lists them."""

    def __repr__(self) -> str:
        flags = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"<dynajax.backends.{type(self).__name__.lstrip('_')} ({flags})>"


class _cudnn(_Flags):
    def __init__(self) -> None:
        self.enabled, self.benchmark, self.deterministic, self.allow_tf32 = True, False, False, True
        self.benchmark_limit = 10

    @staticmethod
    def is_available() -> bool:
        return _cuda.is_available()

    @staticmethod
    def version():
        return None   # no cuDNN library of PyTorch's is loaded; XLA brings its own


class _matmul(_Flags):
    def __init__(self) -> None:
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    @property
    def allow_tf32(self) -> bool:
        return _state["float32_matmul_precision"] != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        _state["float32_matmul_precision"] = "high" if value else "highest"


class _cuda_backend(_Flags):
    def __init__(self) -> None:
        self.matmul = _matmul()

    @staticmethod
    def is_built() -> bool:
        return _cuda.is_available()


class _mps(_Flags):
    @staticmethod
    def is_available() -> bool:
        return False   # JAX has no Metal backend dynajax runs on

    @staticmethod
    def is_built() -> bool:
        return False


cudnn = _cudnn()
cuda = _cuda_backend()
mps = _mps()


_switches = {"deterministic": False, "warn_only": False, "threads": None}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Recorded for :func:`are_deterministic_algorithms_enabled`. dynajax's ops are deterministic as XLA
    runs them on CPU (on GPUs XLA's scatter-adds may not be; this switch does not change that)."""
    _switches["deterministic"], _switches["warn_only"] = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    return _switches["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _switches["warn_only"]


def set_num_threads(n: int) -> None:
    """Recorded for :func:`get_num_threads`; XLA sizes its thread pool when it starts, so this changes nothing."""
    if int(n) <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    _switches["threads"] = int(n)


def get_num_threads() -> int:
    return _switches["threads"] or os.cpu_count() or 1
