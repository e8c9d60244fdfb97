"""Thread-local grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``."""
from __future__ import annotations

import functools
import inspect
import threading


class _State(threading.local):
    def __init__(self) -> None:
        self.enabled = True
        self.inference = False
        self.amp_modes: dict = {}   # autocast: device type -> (enabled, dtype) (``dynajax.amp``)
        self.casts = None           # autocast: op name -> dtype of its float inputs, or None (``dynajax.amp``)


state = _State()


def is_grad_enabled() -> bool:
    return state.enabled


def is_inference_mode_enabled() -> bool:
    return state.inference


def _decorate(make, fn):
    """Wrap ``fn`` so each call runs under a fresh ``make()``; a generator function gets it on each resumption,
    with the caller's mode back between yields (torch's ``_wrap_generator``)."""
    if not inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with make():
                return fn(*args, **kwargs)
        return wrapper

    @functools.wraps(fn)
    def generator(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with make():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with make():
                        gen.close()
                    raise
                except BaseException as e:
                    with make():
                        response = gen.throw(e)
                else:
                    with make():
                        response = gen.send(request)
        except StopIteration as e:
            return e.value
    return generator


class _Mode:
    """Base of the grad-mode context managers; each also works as a decorator."""

    _target: bool = True
    _bare: bool = True     # usable as ``@mode`` without parentheses (torch: no_grad, enable_grad, inference_mode)

    def __new__(cls, *args, **kwargs):
        if cls._bare and len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __init__(self) -> None:     # no arguments: ``no_grad(x)`` for a non-callable ``x`` is a TypeError
        pass

    def __enter__(self) -> None:
        self._prev = (state.enabled, state.inference)
        state.enabled = self._target
        self._enter_extra()

    def _enter_extra(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        state.enabled, state.inference = self._prev

    def __call__(self, fn):
        return _decorate(lambda: self.__class__(*self._init_args()), fn)

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

    _bare = False

    def __init__(self, mode: bool) -> None:
        if callable(mode):
            raise TypeError(f"set_grad_enabled(): argument 'mode' must be bool, not {type(mode).__name__}")
        self._target = bool(mode)
        self._prev = (state.enabled, state.inference)
        state.enabled = self._target

    def __enter__(self) -> None:
        state.enabled = self._target

    def __call__(self, fn):
        state.enabled, state.inference = self._prev    # as a decorator it leaves the mode as it was
        return super().__call__(fn)

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
