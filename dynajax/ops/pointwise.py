"""More elementwise ops, declared with the helpers of :mod:`elementwise` (``unary``, ``binary``):
``acosh``, ``sinc``, ``logit``, ``xlogy``, ``copysign``, ``signbit``, ``fmax``/``fmin`` and the fused
``addcmul``/``addcdiv`` (with their Tensor methods and in-place twins)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor
from .elementwise import (_abs_impl, _float_np, binary, broadcast_error, cos, export, isnan, log, rsqrt, sign,
                          tensor_args, unary, where, with_out)
from .registry import apply, op

__all__ = ["acosh", "arccosh", "addcdiv", "addcmul", "copysign", "fmax", "fmin", "logit", "signbit", "sinc",
           "xlogy"]


def _is_t(x) -> bool:
    return isinstance(x, Tensor)


# ---------------------------------------------------------------- unary
acosh = unary("acosh", jnp.arccosh, lambda g, out, x, **_: (g * rsqrt(x * x - 1),))
arccosh = acosh
export(acosh, "arccosh")


def _sinc_rule(g, out, x, **_):
    # d/dx sin(pi x) / (pi x) = (cos(pi x) - sinc(x)) / x, and 0 at x = 0 (PyTorch's value there)
    zero = x == 0
    safe = where(zero, 1.0, x)
    return (where(zero, 0.0, g * (cos(x * math.pi) - out) / safe),)


sinc = unary("sinc", jnp.sinc, _sinc_rule)   # (jnp.sinc's own derivative is 0 at 0 too)


def _signbit_impl(x):
    return jnp.signbit(x) if x.dtype.kind == "f" else x < 0   # (an unsigned or bool value has no sign bit)


signbit = unary("signbit", _signbit_impl, None, to_float=False, has_inplace=False)


@op("logit")
def _logit_impl(x, *, eps, dtype):
    x = x.astype(dtype)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x))


@_logit_impl.defvjp
def _logit_vjp(g, out, x, *, eps, dtype):
    d = g / (x * (1 - x))
    if eps is None:   # outside [0, 1] the logit is NaN, and so is its gradient (PyTorch's)
        return (where((x < 0) | (x > 1), math.nan, d),)
    return (where((x < eps) | (x > 1 - eps), 0.0, d),)


@export
def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """``log(p / (1 - p))``; with ``eps``, ``p`` is first clamped to ``[eps, 1 - eps]``."""
    return apply(_logit_impl, input, eps=None if eps is None else float(eps), dtype=_float_np(input))


export(logit, inplace_name="logit_")


# ---------------------------------------------------------------- binary
def _xlogy_impl(x, y):
    # 0 where x is 0 (unless y is NaN); the log is taken of a placeholder 1 where it would not be finite, so
    # JAX's derivative there is the rule's (0), and log(y) where it is
    zero = x == 0
    fine = (y > 0) & jnp.isfinite(y)
    out = x * jnp.log(jnp.where(zero & ~fine, jnp.ones((), y.dtype), y))
    return jnp.where(zero & jnp.isnan(y), y, out)


def _xlogy_x(g, out, x, y, **_):
    return where((x == 0) & (y <= 0), 0.0, g * log(y))


def _xlogy_y(g, out, x, y, **_):
    return g * x / y


xlogy = binary("xlogy", _xlogy_impl, (_xlogy_x, _xlogy_y), "float", numbers="either")


def _copysign_impl(x, y):
    # |x| with y's sign bit; ``_abs_impl``'s slope is 0 at x = 0, where PyTorch's gradient is 0
    return jnp.where(jnp.signbit(y), -_abs_impl(x), _abs_impl(x))


def _copysign_x(g, out, x, y, **_):
    return where(x == 0, 0.0, g * sign(x) * sign(out))


copysign = binary("copysign", _copysign_impl, (_copysign_x, lambda g, out, x, y, **_: g * 0), "float")


def _fpick(keep_first):
    """``fmax``/``fmin``: the first operand where ``keep_first(x, y)`` or ``y`` is NaN (so NaNs are ignored
    unless both are NaN); the gradient goes wholly to the operand picked (a tie: to the first)."""
    def impl(x, y):
        return jnp.where(keep_first(x, y) | jnp.isnan(y), x, y)

    def mask(x, y):
        return keep_first(x, y) | isnan(y)

    return impl, (lambda g, out, x, y, **_: where(mask(x, y), g, 0.0),
                  lambda g, out, x, y, **_: where(mask(x, y), 0.0, g))


_fmax_impl, _fmax_rules = _fpick(lambda x, y: x >= y)
_fmin_impl, _fmin_rules = _fpick(lambda x, y: x <= y)
_fmax = binary("fmax", _fmax_impl, _fmax_rules, has_inplace=False)
_fmin = binary("fmin", _fmin_impl, _fmin_rules, has_inplace=False)


def fmax(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """The elementwise maximum ignoring NaNs, as ``torch.fmax``."""
    tensor_args("fmax", input=(1, input), other=(2, other))
    return _fmax(input, other, out=out)


def fmin(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """The elementwise minimum ignoring NaNs, as ``torch.fmin``."""
    tensor_args("fmin", input=(1, input), other=(2, other))
    return _fmin(input, other, out=out)


export(fmax)
export(fmin)


# ---------------------------------------------------------------- addcmul / addcdiv
def _broadcastable(*ts) -> None:
    """PyTorch's error (naming the first pair that does not broadcast) before any product is computed."""
    try:
        np.broadcast_shapes(*(tuple(t._v.shape) for t in ts))
    except ValueError as exc:
        broadcast_error(exc, *ts)
        raise


def _value_for(value, d: np.dtype):
    """``value`` as PyTorch's fused kernels take it: converted to the result dtype ``d`` (so 0.5 with integer
    tensors is 0), after the range check."""
    if _is_t(value):
        raise TypeError(f"addcmul(): argument 'value' must be Number, not Tensor")
    value = _dtype.checked_scalar(value, d)
    if d == np.bool_:
        return bool(value)
    return int(value) if _dtype.is_integral(d) else value


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1, out=None) -> Tensor:
    """``input + value * tensor1 * tensor2``, broadcast and promoted across the three tensors."""
    tensor_args("addcmul", input=(1, input), tensor1=(2, tensor1), tensor2=(3, tensor2))
    _broadcastable(input, tensor1, tensor2)
    v = _value_for(value, _dtype.result_type(input, tensor1, tensor2))
    prod = tensor1 * tensor2
    return with_out(input + (prod if v == 1 and not isinstance(v, bool) else prod * v), out, "addcmul")


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1, out=None) -> Tensor:
    """``input + value * tensor1 / tensor2`` (true division; integer ``tensor1`` and ``tensor2`` raise, as
    in PyTorch)."""
    tensor_args("addcdiv", input=(1, input), tensor1=(2, tensor1), tensor2=(3, tensor2))
    _broadcastable(input, tensor1, tensor2)
    if _dtype.is_integral(tensor1._v.dtype, True) and _dtype.is_integral(tensor2._v.dtype, True):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
            "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
            "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
            "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
            "implementation: (input + value * tensor1 / tensor2), for all dtypes.")
    v = _value_for(value, _dtype.result_type(input, tensor1, tensor2))
    q = tensor1 / tensor2
    return with_out(input + (q if v == 1 and not isinstance(v, bool) else q * v), out, "addcdiv")


export(addcmul, inplace_name="addcmul_")
export(addcdiv, inplace_name="addcdiv_")


# ---------------------------------------------------------------- more of PyTorch's pointwise functions
_LN2 = math.log(2.0)
gcd = binary("gcd", jnp.gcd, result="int", numbers="none")
lcm = binary("lcm", jnp.lcm, result="int", numbers="none")
_nextafter_f = jax.custom_jvp(jnp.nextafter)   # (JAX's has no derivative: lowered graphs get the rule's)


@_nextafter_f.defjvp
def _nextafter_jvp(primals, tangents):
    out = jnp.nextafter(*primals)
    return out, jnp.broadcast_to(tangents[0], out.shape).astype(out.dtype)



nextafter = binary("nextafter", _nextafter_f, (lambda g, out, x, y, **_: g, lambda g, out, x, y, **_: g * 0),
                   numbers="none")   # (the step is locally constant in y, the identity in x: PyTorch's gradient)


def deg2rad(input: Tensor) -> Tensor:
    """Degrees to radians (integers give the default float dtype)."""
    return input * (math.pi / 180)


def rad2deg(input: Tensor) -> Tensor:
    return input * (180 / math.pi)


def positive(input: Tensor) -> Tensor:
    """``input`` itself (``+input``); a bool tensor raises, as in PyTorch."""
    if input._v.dtype == np.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def isposinf(input: Tensor) -> Tensor:
    from .elementwise import isinf
    return isinf(input) & (input > 0)


def isneginf(input: Tensor) -> Tensor:
    from .elementwise import isinf
    return isinf(input) & (input < 0)


def isreal(input: Tensor) -> Tensor:
    """True where the element has no imaginary part (every element of a real tensor)."""
    return input.imag == 0 if input.is_complex() else input.new_ones(tuple(input.shape), dtype=_dtype.bool_)


def ldexp(input: Tensor, other: Tensor) -> Tensor:
    """``input * 2 ** other`` in a floating-point dtype."""
    tensor_args("ldexp", input=(1, input), other=(2, other))
    return input * (2.0 ** other)


def logaddexp2(input: Tensor, other: Tensor) -> Tensor:
    """``log2(2 ** input + 2 ** other)``, without overflow."""
    from .elementwise import logaddexp
    tensor_args("logaddexp2", input=(1, input), other=(2, other))
    return logaddexp(input * _LN2, other * _LN2) / _LN2


def float_power(input, exponent) -> Tensor:
    """``pow`` computed in double precision (complex128 when an operand is complex), as ``torch.float_power``."""
    if not _is_t(input) and not _is_t(exponent):
        raise TypeError("float_power(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    cplx = any(v.is_complex() if _is_t(v) else isinstance(v, complex) for v in (input, exponent))
    d = _dtype.complex128 if cplx else _dtype.float64
    up = [v.to(d) if _is_t(v) else v for v in (input, exponent)]
    return up[0] ** up[1] if _is_t(up[0]) else up[1].__rpow__(up[0])


def heaviside(input: Tensor, values: Tensor) -> Tensor:
    """The step function: 0 below 0, 1 above, ``values`` at 0 (the dtypes must agree, as in PyTorch)."""
    tensor_args("heaviside", input=(1, input), values=(2, values))
    if input.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    return where(input == 0, values, (input > 0).to(input.dtype))


def rsub(input: Tensor, other, alpha=1) -> Tensor:
    """``other - alpha * input``."""
    from .elementwise import sub
    tensor_args("rsub", input=(1, input))
    return sub(other, input, alpha=alpha)


for _f in (deg2rad, rad2deg, positive, isposinf, isneginf, isreal, ldexp, logaddexp2, float_power, heaviside):
    export(_f)
__all__ += ["deg2rad", "float_power", "gcd", "heaviside", "isneginf", "isposinf", "isreal", "lcm", "ldexp",
            "logaddexp2", "nextafter", "positive", "rad2deg", "rsub"]
