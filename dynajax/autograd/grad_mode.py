"""Thread-local grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``."""
from __future__ import annotations

import functools
import threading


class _State(threading.local):
    def __init__(self) -> None:
        self.enabled = True
        self.inference = False


state = _State()


def is_grad_enabled() -> bool:
    return state.enabled


def is_inference_mode_enabled() -> bool:
    return state.inference


class _Mode:
    """Base of the grad-mode context managers; each also works as a decorator."""

    _target: bool = True

    def __enter__(self) -> None:
        self._prev = (state.enabled, state.inference)
        state.enabled = self._target
        self._enter_extra()

    def _enter_extra(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        state.enabled, state.inference = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._init_args()):
                return fn(*args, **kwargs)
        return wrapper

    def _init_args(self) -> tuple:
        return ()


class no_grad(_Mode):
    """Disable gradient recording in a block or a decorated function.

    >>> with dynajax.no_grad():
    ...     y = x * 2          # y.requires_grad is False
    """
    _target = False


class enable_grad(_Mode):
    """Re-enable gradient recording inside a ``no_grad`` block."""
    _target = True


class set_grad_enabled(_Mode):
    """Set grad mode on or off; takes effect at once and also works as a context manager."""

    def __init__(self, mode: bool) -> None:
        self._target = bool(mode)
        self._prev = (state.enabled, state.inference)
        state.enabled = self._target

    def __enter__(self) -> None:
        pass

    def _init_args(self) -> tuple:
        return (self._target,)


class inference_mode(_Mode):
    """Like ``no_grad`` (tensors made here never record a graph)."""

    def __init__(self, mode: bool = True) -> None:
        self._mode = bool(mode)
        self._target = not self._mode

    def _enter_extra(self) -> None:
        state.inference = self._mode

    def _init_args(self) -> tuple:
        return (self._mode,)
