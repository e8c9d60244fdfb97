"""Complex numbers: ``complex``/``polar`` construction, ``real``/``imag``, ``view_as_real``/``view_as_complex``,
``angle``, ``conj`` and the Tensor properties and methods that go with them.

Gradients follow PyTorch's convention: for a real loss ``L`` of a complex ``z = x + iy`` the gradient is
``dL/dx + i dL/dy``, so the VJP rule of a holomorphic ``f`` multiplies the cotangent by the *conjugate*
derivative (``g * conj(f'(z))``), and an op from complex to real (``real``, ``abs``, ``angle``) returns the
complex number whose parts are the two partial derivatives. ``jax.vjp`` uses the other convention (its
cotangents are the conjugates of these); the two agree wherever the differentiated inputs are real.

The results of ``real``, ``imag``, ``conj``, ``view_as_real`` and ``view_as_complex`` are new tensors, not views
of their input as in PyTorch: they are recomputed by nothing, and a write into one does not reach the input.
``z.real = v`` and ``z.imag = v`` (the property setters) do write into ``z``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, method
from .registry import apply, op
from .views import inplace

__all__ = ["angle", "complex", "conj", "conj_physical", "imag", "is_complex", "is_conj", "polar", "real",
           "resolve_conj", "resolve_neg", "view_as_complex", "view_as_real"]

_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


def _is_complex(x) -> bool:
    return isinstance(x, Tensor) and x._v.dtype.kind == "c"


def complex_dtype_of(np_dtype: np.dtype) -> np.dtype:
    """The complex dtype whose parts have the real dtype ``np_dtype`` (complex dtypes map to themselves, ints
    and bools to the default float's complex dtype)."""
    d = np.dtype(np_dtype)
    if d.kind == "c":
        return d
    if d not in _COMPLEX_OF:
        d = _dtype.default_float_np()
    return _COMPLEX_OF[d]


# ---------------------------------------------------------------- conj
def _conj_op(name: str):
    o = op(name)(jnp.conj)
    o.defvjp(lambda g, out, x: (conj(g),))
    return o


_conj = _conj_op("conj")
_conj_physical = _conj_op("conj_physical")


@method()
def conj(input: Tensor) -> Tensor:
    """The complex conjugate; a real tensor is returned as it is (PyTorch's)."""
    return apply(_conj, input) if _is_complex(input) else input


@method()
def conj_physical(input: Tensor) -> Tensor:
    """The complex conjugate, computed (PyTorch's ``conj`` is lazy; here both compute it)."""
    return apply(_conj_physical, input) if _is_complex(input) else input


@method()
def resolve_conj(input: Tensor) -> Tensor:
    """``input``: a conjugate here is never lazy, so there is no conjugate bit to resolve."""
    return input


@method()
def resolve_neg(input: Tensor) -> Tensor:
    """``input``: a negation here is never lazy."""
    return input


@method()
def is_conj(input: Tensor) -> bool:
    return False


@method()
def is_neg(input: Tensor) -> bool:
    return False


def is_complex(input: Tensor) -> bool:
    return input.is_complex()


# ---------------------------------------------------------------- real / imag
@op("real", backward_name="SelectBackward0")
def _real(x):
    return jnp.real(x)


_real.defvjp(lambda g, out, x: (g,))   # the engine widens the real cotangent to x's complex dtype


@op("imag", backward_name="SelectBackward0")
def _imag(x):
    return jnp.imag(x)


_imag.defvjp(lambda g, out, x: (complex(g * 0, g),))   # d/dy of L enters as the imaginary part


def real(input: Tensor) -> Tensor:
    """The real part (a new tensor here; a view in PyTorch). A real tensor is returned as it is."""
    return apply(_real, input) if _is_complex(input) else input


def imag(input: Tensor) -> Tensor:
    """The imaginary part of a complex tensor (a new tensor here; a view in PyTorch)."""
    if not _is_complex(input):
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return apply(_imag, input)


def _set_part(self: Tensor, value, imaginary: bool) -> None:
    """``self.real = value`` / ``self.imag = value``: the part overwritten in place (PyTorch's setters)."""
    if not _is_complex(self):
        if imaginary:
            imag(self)   # (PyTorch's error)
        self.copy_(value)
        return
    part = value if isinstance(value, Tensor) else Tensor._make(jnp.asarray(value))
    part = part.to(_dtype.from_np(self._v.dtype).to_real())
    inplace(self, lambda z: complex(real(z), part) if imaginary else complex(part, imag(z)), "copy_")


Tensor.real = property(real, lambda self, v: _set_part(self, v, False), doc="The real part (see ``real``).")
Tensor.imag = property(imag, lambda self, v: _set_part(self, v, True), doc="The imaginary part (see ``imag``).")


# ---------------------------------------------------------------- complex / polar
@op("complex")
def _complex(re, im):
    re, im = jnp.broadcast_arrays(re, im)
    return jax.lax.complex(re, im)


_complex.defvjp(lambda g, out, re, im: real(g), lambda g, out, re, im: imag(g))


def _check_parts(name: str, a: Tensor, b: Tensor) -> None:
    da, db = a._v.dtype, b._v.dtype
    if da.kind != "f" or db.kind != "f" or da.itemsize < 4 or db.itemsize < 4:
        if da.kind != "f" or db.kind != "f":
            raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got "
                               f"{a.dtype.legacy_name} and {b.dtype.legacy_name}")
        raise RuntimeError(f"{name}: a complex tensor of half-precision parts (ComplexHalf) is not supported")
    if da != db:
        raise RuntimeError(f"Expected object of scalar type {a.dtype.legacy_name} but got scalar type "
                           f"{b.dtype.legacy_name} for second argument")


def _check_parts_out(a: Tensor, out) -> None:
    """PyTorch's check that the ``out=`` of ``complex``/``polar`` has the dtype of the result."""
    want = _dtype.from_np(complex_dtype_of(a._v.dtype))
    if out is not None and out.dtype != want:
        raise RuntimeError(f"Expected object of scalar type {want.legacy_name} but got scalar type "
                           f"{out.dtype.legacy_name} for argument 'out'")


def complex(real: Tensor, imag: Tensor, *, out=None) -> Tensor:
    """The complex tensor ``real + i imag`` (both float32 or both float64; they broadcast)."""
    _check_parts("complex", real, imag)
    _check_parts_out(real, out)
    r = apply(_complex, real, imag)
    return r if out is None else out.copy_(r)


def polar(abs: Tensor, angle: Tensor, *, out=None) -> Tensor:
    """The complex tensor ``abs * (cos(angle) + i sin(angle))``."""
    _check_parts("polar", abs, angle)
    _check_parts_out(abs, out)
    r = complex(abs * angle.cos(), abs * angle.sin())
    return r if out is None else out.copy_(r)


# ---------------------------------------------------------------- view_as_real / view_as_complex
@op("view_as_real")
def _view_as_real(z):
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)


@op("view_as_complex")
def _view_as_complex(x):
    return jax.lax.complex(x[..., 0], x[..., 1])


_view_as_real.defvjp(lambda g, out, z: (apply(_view_as_complex, g),))
_view_as_complex.defvjp(lambda g, out, x: (apply(_view_as_real, g),))


@method()
def view_as_real(input: Tensor) -> Tensor:
    """The complex tensor as real numbers, its last dim of size 2 holding the real and imaginary parts
    (a new tensor here; a view in PyTorch)."""
    if not _is_complex(input):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return apply(_view_as_real, input)


@method()
def view_as_complex(input: Tensor) -> Tensor:
    """The real tensor whose last dim (of size 2) holds real and imaginary parts, as complex numbers
    (a new tensor here; a view in PyTorch)."""
    d = input._v.dtype
    if d.kind != "f" or d.itemsize < 4:
        if d.kind != "f":
            raise RuntimeError(f"view_as_complex is only supported for half, float and double tensors, but got a "
                               f"tensor of scalar type: {input.dtype.legacy_name}")
        raise RuntimeError("view_as_complex: a complex tensor of half-precision parts (ComplexHalf) is not supported")
    if input.ndim == 0 or input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    return apply(_view_as_complex, input)


# ---------------------------------------------------------------- angle
@op("angle")
def _angle(x, *, dtype):
    if x.dtype.kind == "c":
        return jnp.angle(x)
    x = x.astype(dtype)
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.asarray(math.pi, dtype), jnp.zeros((), dtype)))


@_angle.defvjp
def _angle_vjp(g, out, x, **_):
    if not _is_complex(x):
        return (g * 0,)
    # d angle / dx = -y / |z|^2, d angle / dy = x / |z|^2: together i z / |z|^2 (0 at z = 0, as PyTorch's)
    sq = x.abs() ** 2
    return ((g * x * 1j / sq).masked_fill(sq == 0, 0),)


@method()
def angle(input: Tensor, *, out=None) -> Tensor:
    """The argument of each complex element (of a real one: pi where negative, else 0; NaN stays NaN)."""
    d = input._v.dtype
    rd = d if d.kind == "f" or d == np.dtype("bfloat16") else _dtype.default_float_np()
    r = apply(_angle, input, dtype=rd)
    return r if out is None else out.copy_(r)

