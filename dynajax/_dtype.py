"""dtypes with PyTorch's names and PyTorch's type promotion rules.

Internally every array carries a numpy dtype; the public ``dynajax.float32``
etc. are :class:`dtype` objects that map one to one onto those.
"""
from __future__ import annotations

import builtins as _b
import functools

import jax as _jax
import ml_dtypes
import numpy as np


class dtype:
    """A tensor element type, spelled as in PyTorch (``dynajax.float32``)."""

    __slots__ = ("name", "np", "is_floating_point", "is_complex", "is_signed", "itemsize")

    def __init__(self, name: str, np_dtype) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f" or self.np == ml_dtypes.bfloat16
        self.is_complex = self.np.kind == "c"
        self.is_signed = self.np.kind in "fic" or self.is_floating_point
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"dynajax.{self.name}"

    @property
    def legacy_name(self) -> str:
        """PyTorch's scalar type name used in error messages ("Float", "Long", ...)."""
        return _LEGACY_NAMES.get(self.name, self.name.capitalize())

    def to_real(self) -> "dtype":
        return {complex64: float32, complex128: float64}.get(self, self)


float16 = dtype("float16", np.float16)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16)
float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
complex64 = dtype("complex64", np.complex64)
complex128 = dtype("complex128", np.complex128)
uint8 = dtype("uint8", np.uint8)
int8 = dtype("int8", np.int8)
int16 = dtype("int16", np.int16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
bool_ = dtype("bool", np.bool_)

half, float, double = float16, float32, float64
short, int, long = int16, int32, int64
cfloat, cdouble = complex64, complex128

_LEGACY_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                 "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                 "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}

_ALL = (float16, bfloat16, float32, float64, complex64, complex128,
        uint8, int8, int16, int32, int64, bool_)
_FROM_NP = {d.np: d for d in _ALL}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update(half=float16, float=float32, double=float64, short=int16,
                int=int32, long=int64, cfloat=complex64, cdouble=complex128)

_default_float = float32


def from_np(np_dtype) -> dtype:
    """The dynajax dtype of a numpy/jax dtype (raises TypeError if unsupported)."""
    hit = _FROM_NP.get(np_dtype) if isinstance(np_dtype, np.dtype) else None   # the hot path: no conversion
    if hit is not None:
        return hit
    try:
        return _FROM_NP[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"dynajax has no dtype for numpy dtype {np_dtype}") from None


def to_np(d) -> np.dtype:
    """Accept a dynajax dtype, a numpy/jax dtype, a Python type or a name; return a numpy dtype."""
    if isinstance(d, dtype):
        return d.np
    if d is _b.float:
        return _default_float.np
    if d is _b.int:
        return int64.np
    if d is _b.bool:
        return bool_.np
    if isinstance(d, str):
        name = d.removeprefix("torch.").removeprefix("dynajax.")
        if name in _BY_NAME:
            return _BY_NAME[name].np
    return from_np(d).np



def set_default_dtype(d) -> None:
    """Set the dtype of float tensors created from Python floats (float32 or float64)."""
    global _default_float
    d = from_np(to_np(d))
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default_float = d
    _PAIR_RESULT.clear()


def get_default_dtype() -> dtype:
    return _default_float


def default_float_np() -> np.dtype:
    return _default_float.np


# ---------------------------------------------------------------- promotion
# Categories order the kinds: bool < integer < floating < complex.
def _category(np_dtype: np.dtype) -> _b.int:
    if np_dtype == np.bool_:
        return 0
    if np_dtype.kind in "iu":
        return 1
    if np_dtype.kind == "c":
        return 3
    return 2


_PAIR_CACHE: dict = {}


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promotion of two tensor dtypes of equal priority."""
    key = (a, b)
    r = _PAIR_CACHE.get(key)
    if r is None:
        if a == b:
            r = a
        else:
            ca, cb = _category(a), _category(b)
            if ca != cb:
                hi, lo = (a, b) if ca > cb else (b, a)
                r = hi if not (hi.kind == "c" and lo.kind == "f" and lo.itemsize > hi.itemsize // 2) \
                    else np.dtype(np.complex128)
            else:
                import jax.numpy as jnp
                r = np.dtype(jnp.promote_types(a, b))
        _PAIR_CACHE[key] = r
    return r


def _scalar_np(x) -> np.dtype:
    if isinstance(x, _b.bool):
        return bool_.np
    if isinstance(x, _b.int):
        return int64.np
    if isinstance(x, _b.complex):
        return complex64.np if _default_float is float32 else complex128.np
    return _default_float.np


def _combine(higher, lower):
    """Fold a lower-priority group's type into a higher one (torch's combine_categories)."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = _category(higher), _category(lower)
    if ch >= cl and ch >= 2:
        return higher
    if cl == 3 and ch == 2:   # a complex 0-d tensor or number with a float tensor: the float's complex type
        return np.dtype(np.complex128) if higher == np.float64 else np.dtype(np.complex64)
    if ch == 0 or cl > ch:
        return promote_types(higher, lower)
    return higher


_RESULT_CACHE: dict = {}


def result_type(*args) -> np.dtype:
    """PyTorch's ``result_type`` over tensors and Python scalars.

    Dimensioned tensors decide the type; 0-d tensors and then Python scalars can
    only raise its category (``float32 + float64 0-d -> float32``,
    ``int64 + 1.5 -> float32``).
    """
    key = tuple(_key_of(a) for a in args)
    r = _RESULT_CACHE.get(key)
    if r is None:
        groups = [None, None, None]  # dimensioned, zero-dim, python scalar
        for prio, d in key:
            groups[prio] = d if groups[prio] is None else promote_types(groups[prio], d)
        r = _combine(groups[0], _combine(groups[1], groups[2]))
        _RESULT_CACHE[key] = r
    return r


_PAIR_RESULT: dict = {}


def result_type2(a, b) -> np.dtype:
    """``result_type(a, b)`` with a cache keyed on (dtype, is 0-d) or the Python scalar type."""
    try:
        va = a._v
        ka = (va.dtype, va.ndim == 0)
    except AttributeError:
        ka = type(a)
    try:
        vb = b._v
        kb = (vb.dtype, vb.ndim == 0)
    except AttributeError:
        kb = type(b)
    key = (ka, kb)
    r = _PAIR_RESULT.get(key)
    if r is None:
        r = _PAIR_RESULT[key] = result_type(a, b)
    return r


def _key_of(a):
    v = getattr(a, "_v", None)
    if v is not None:
        return (0 if v.ndim else 1, v.dtype)
    if isinstance(a, np.ndarray) or hasattr(a, "dtype"):
        return (0 if np.ndim(a) else 1, np.dtype(a.dtype))
    return (2, _scalar_np(a))


def is_float(np_dtype: np.dtype) -> _b.bool:
    return _category(np_dtype) >= 2


def is_integral(np_dtype: np.dtype, include_bool: _b.bool = False) -> _b.bool:
    c = _category(np_dtype)
    return c == 1 or (include_bool and c == 0)


def finfo(d):
    return ml_dtypes.finfo(to_np(d))


def iinfo(d):
    return np.iinfo(to_np(d))


# ---------------------------------------------------------------- dtype names in PyTorch's messages
# the C++ type of each dtype as PyTorch's messages name it ("expected m1 and m2 to have the same dtype, but
# got: float != double"); its "value cannot be converted" message spells the fixed-width integers as
# ``<cstdint>`` does
C_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
           "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
           "uint8": "unsigned char", "bool": "bool", "complex64": "c10::complex<float>",
           "complex128": "c10::complex<double>"}
_CONVERT_NAMES = {**C_NAMES, "int64": "int64_t", "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t"}


# ---------------------------------------------------------------- Python numbers written into a dtype


def checked_scalar(value, np_dtype, halves_wide: _b.bool = False):
    """``value`` as it is written into a tensor of ``np_dtype`` (a complex number with no imaginary part as its
    real part), after PyTorch's check that it fits: a number that fills or is written into a tensor
    (``x[0] = 300`` on int8, ``fill_(nan)`` on an int tensor, ``full((2,), 1e39)``) raises PyTorch's
    RuntimeError where a plain cast would wrap around or saturate silently. Anything but a Python number is
    returned as it is.

    PyTorch's rules (c10's checked conversion): infinities and NaN fit a float dtype but no integer one; a
    finite value fits where it lies within the dtype's lowest and largest values (compared as a double for a
    float value); a negative int fits an unsigned dtype down to minus its largest value (two's complement
    wrap-around, ``uint8 - 1``); a complex value fits a real dtype only with a zero imaginary part; bool takes
    any number. ``halves_wide``: the caller, as PyTorch's ``x[key] = v`` and ``where``, converts a number
    for a float16/bfloat16 tensor at double precision, so one beyond their range becomes inf there."""
    if isinstance(value, _b.bool) or not isinstance(value, (_b.int, _b.float, _b.complex)):
        return value
    if value in (0, 1) and not isinstance(value, _b.complex):   # (the usual fill: fits every dtype)
        return value
    d = np.dtype(np_dtype)
    if d == np.bool_ or (halves_wide and d.itemsize == 2 and _category(d) == 2):
        return value
    if isinstance(value, _b.complex):
        if d.kind == "c":
            for part in (value.real, value.imag):
                checked_scalar(part, d)
            return value
        if value.imag != 0:
            _overflow(d)
        value = value.real
    if d.kind in "iu":
        info = np.iinfo(d)
        if isinstance(value, _b.int):
            wraps = d.kind == "u" and value < 0 and -value <= info.max
            bad = value > info.max or (value < info.min and not wraps)
        else:
            bad = not (_b.float(info.min) <= value <= _b.float(info.max))   # (NaN and the infinities fail too)
    else:
        top = _b.float(ml_dtypes.finfo(d if d.kind != "c" else np.dtype(np.float64 if d.itemsize == 16
                                                                            else np.float32)).max)
        try:
            v = _b.float(value)
        except OverflowError:   # an int beyond every float
            _overflow(d)
        bad = abs(v) > top and v not in (np.inf, -np.inf)
    if bad:
        _overflow(d)
    return value


def _overflow(d: np.dtype):
    raise RuntimeError(f"value cannot be converted to type {_CONVERT_NAMES[from_np(d).name]} without overflow")


# ---------------------------------------------------------------- 64-bit types, for dynajax only
# PyTorch's int64/float64 need JAX's 64-bit mode, which is off by default and, set with
# ``jax.config.update``, would change every JAX program of the process. dynajax turns it on only for the
# thread it is working on and only while it works: JAX's own thread-local value of the flag (what
# ``with jax.enable_x64(True)`` sets), written directly through the flag's ``swap_local``/``set_local``
# (~0.1 us for both; the context manager costs ~0.5 us, more under load). An op dispatch
# (``ops.registry.run``), tensor creation, lowering and compiled steps enter it; nested entries are free.
_X64 = _jax.enable_x64
x64_swap = _X64.swap_local   # x64_swap(True) -> the thread's previous value, for x64_set
x64_set = _X64.set_local


class x64:
    """Context manager and decorator: JAX's 64-bit types on for this thread inside, as they were after."""

    __slots__ = ("prev",)

    def __enter__(self):
        self.prev = x64_swap(True)

    def __exit__(self, *exc) -> None:
        x64_set(self.prev)

    @staticmethod
    def wrap(fn):
        """``fn`` running with 64-bit types on (a decorator for dynajax's entry points)."""
        @functools.wraps(fn)
        def in_x64(*args, **kwargs):
            prev = x64_swap(True)
            try:
                return fn(*args, **kwargs)
            finally:
                x64_set(prev)
        return in_x64
