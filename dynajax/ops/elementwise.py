"""Elementwise ops: unary math, binary arithmetic with PyTorch's type promotion,
comparisons and logical ops. Each op is declared once: impl, VJP rule, public
function, Tensor method and in-place twin (``exp`` / ``Tensor.exp`` / ``exp_``)."""
from __future__ import annotations

import builtins
import math
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .dispatch import is_recorded
from .._tensor import Tensor, method
from ..autograd import grad_mode
from .registry import apply, op, run
from .views import assign, cast_dtype, inplace

__all__ = [
    "abs", "absolute", "acos", "add", "arccos", "arcsin", "arctan", "arctan2", "asin", "asinh", "atan",
    "atan2", "atanh", "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "ceil", "clamp", "clamp_max", "clamp_min", "clip", "cos", "cosh", "digamma", "div",
    "divide", "eq", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "fix", "floor", "floor_divide", "fmod",
    "frac", "ge", "greater", "greater_equal", "gt", "hypot", "isfinite", "isinf", "isnan", "le", "lerp",
    "less", "less_equal", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "lt", "maximum", "minimum", "mul", "multiply", "nan_to_num",
    "ne", "neg", "negative", "not_equal", "polygamma", "pow", "reciprocal", "relu", "remainder", "round",
    "rsqrt", "sgn", "sigmoid", "sign", "sin", "sinh", "sqrt", "square", "sub", "subtract", "tan", "tanh",
    "true_divide", "trunc", "where",
]


# ---------------------------------------------------------------- helpers
def _is_t(x) -> bool:
    return isinstance(x, Tensor)


def _float_np(x) -> np.dtype:
    """Dtype of a float-valued op's result: bools and ints become the default float dtype."""
    d = x._v.dtype
    return d if _dtype.is_float(d) else _dtype.default_float_np()


def broadcast_error(exc, *args, **params):
    """Turn JAX's broadcasting TypeError into PyTorch's RuntimeError naming both shapes."""
    shapes = [tuple(a._v.shape) for a in args if _is_t(a)]
    for i, a in enumerate(shapes):
        for b in shapes[i + 1:]:
            n = builtins.max(len(a), len(b))
            for k in range(1, n + 1):
                da = a[-k] if k <= len(a) else 1
                db = b[-k] if k <= len(b) else 1
                if da != db and da != 1 and db != 1:
                    raise RuntimeError(
                        f"The size of tensor a ({da}) must match the size of tensor b ({db}) at "
                        f"non-singleton dimension {n - k} (shapes {list(a)} and {list(b)})") from None


def refuses(kernel: str, kinds: str, error=NotImplementedError, message: str | None = None):
    """``check=`` of an op PyTorch's CPU kernel ``kernel`` has no kernel for on dtypes of numpy ``kinds``
    ("b" bool, "i" signed, "u" unsigned integers, "f" floats): its NotImplementedError naming the kernel and
    the dtype (``error``, ``message``: another exception, as relu's)."""
    def check(x, *_, **__):
        d = x._v.dtype
        if d.kind in kinds:
            raise error(message or f"\"{kernel}\" not implemented for '{_dtype.from_np(d).legacy_name}'")
    return check


def tensor_args(name: str, **args) -> None:
    """PyTorch's TypeError for an argument that must be a Tensor (``args``: name -> (position, value))."""
    for arg, (pos, v) in args.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(v).__name__}")


def export(fn, *aliases, inplace_name: str | None = None):
    """Attach ``fn`` to Tensor under its name and ``aliases``, plus an in-place twin."""
    fn = method(fn.__name__, *aliases)(fn)   # (the function too runs with 64-bit types on: _dtype.x64)
    if inplace_name:
        def _in_place(self, *args, **kwargs):
            return inplace(self, lambda a: fn(a, *args, **kwargs), inplace_name)
        _in_place.__name__ = inplace_name
        method(inplace_name)(_in_place)
    return fn


def with_out(r: Tensor, out, name: str | None = None):
    """Support PyTorch's ``out=`` argument by writing the result ``r`` of op ``name`` into ``out`` in place.

    As PyTorch: with grad mode on, a result that requires grad (an input required it) or an ``out`` that
    requires grad raises "functions with out=... arguments don't support automatic differentiation"; a result
    of a higher dtype category than ``out``'s (float into int64) raises "result type Float can't be cast to the
    desired output type Long" (:func:`views.cast_dtype`, as in-place ops). ``name`` (for the message) defaults
    to the calling function's name. ``out`` of another shape takes ``r``'s (PyTorch resizes it)."""
    if out is None:
        return r
    if grad_mode.state.enabled and (r._rg or out.requires_grad):
        if name is None:
            name = _caller_name(r)
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           f"differentiation, but one of the arguments requires grad.")
    return assign(out, cast_dtype(out, r))


def check_out(out, *inputs, name: str, dtype=None) -> None:
    """PyTorch's checks on an ``out=`` tensor (or tuple of them) before op ``name`` computes: an ``out`` that
    is one of ``inputs`` raises "unsupported operation: some elements of the input tensor and
    the written-to tensor refer to a single memory location"; with ``dtype`` given, an ``out`` of another dtype
    raises "Expected the dtype for input and out to match"."""
    if out is None:
        return
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for o in outs:
        if not isinstance(o, Tensor):
            continue
        if builtins.any(i is o for i in inputs):
            raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to "
                               "tensor refer to a single memory location. Please clone() the tensor before "
                               "performing the operation.")
        if dtype is not None and o.dtype != dtype:
            raise RuntimeError(f"{name}(): Expected the dtype for input and out to match, but got "
                               f"{dtype.legacy_name} for input's dtype and {o.dtype.legacy_name} for out's dtype.")


def _caller_name(r: Tensor) -> str:
    """The op name for :func:`with_out`'s message: the function that called it or, for a factory-made one
    (``public``, ``fused``: their code name is not the op's), the op that computed ``r``."""
    name = sys._getframe(2).f_code.co_name
    if name in ("public", "fused") or name.startswith(("_", "<")):
        if r.grad_fn is not None:
            return r.grad_fn.op.name
    return name


def _where0(mask, g):
    return where(mask, g, 0.0)


def _cj(v):
    """``v`` conjugated where it is complex: PyTorch's VJP of a holomorphic op multiplies the cotangent by the
    conjugate of the derivative (``ops/complex.py`` on the convention); a real ``v`` as it is."""
    if isinstance(v, Tensor):
        return v.conj() if v._v.dtype.kind == "c" else v
    return v.conjugate() if isinstance(v, complex) else v


# ---------------------------------------------------------------- unary
def unary(name: str, impl, rule=None, to_float: bool = True, has_inplace: bool = True, check=None):
    """Declare a unary elementwise op. With ``to_float`` ints and bools compute in the default float dtype.
    ``check``: as for :func:`op`."""
    if to_float:
        o = op(name, check=check)(lambda x, *, dtype: impl(x.astype(dtype)))
    else:
        o = op(name, check=check)(impl)
    if rule is not None:
        o.defvjp(rule)

    by_dtype = {}  # input dtype -> (params, jitted impl): the hot path skips the generic lookup

    def public(input: Tensor, *, out=None) -> Tensor:
        if to_float:
            d = (input._v.dtype, _dtype._default_float)  # ints map to the default float dtype
            hit = by_dtype.get(d)
            if hit is None:
                p = {"dtype": _float_np(input)}
                hit = by_dtype[d] = (p, o.jitted(p))
            r = run(o, hit[1], (input,), hit[0])
        else:
            r = apply(o, input)
        return r if out is None else with_out(r, out, name)
    public.__name__ = name
    public.__qualname__ = name
    public.__doc__ = f"Elementwise ``{name}`` of ``input``, as ``torch.{name}``."
    public.op = o
    return export(public, inplace_name=name + "_" if has_inplace else None)


exp = unary("exp", jnp.exp, lambda g, out, x, **_: (g * _cj(out),))
exp2 = unary("exp2", jnp.exp2, lambda g, out, x, **_: (g * _cj(out) * math.log(2.0),))
expm1 = unary("expm1", jnp.expm1, lambda g, out, x, **_: (g * _cj(out + 1),))
log = unary("log", jnp.log, lambda g, out, x, **_: (g / _cj(x),))
log2 = unary("log2", jnp.log2, lambda g, out, x, **_: (g / _cj(x * math.log(2.0)),))
log10 = unary("log10", jnp.log10, lambda g, out, x, **_: (g / _cj(x * math.log(10.0)),))
log1p = unary("log1p", jnp.log1p, lambda g, out, x, **_: (g / _cj(x + 1),))
sqrt = unary("sqrt", jnp.sqrt, lambda g, out, x, **_: (g / (2 * _cj(out)),))
rsqrt = unary("rsqrt", jax.lax.rsqrt, lambda g, out, x, **_: (g * -0.5 * _cj(out * out * out),))
reciprocal = unary("reciprocal", jnp.reciprocal, lambda g, out, x, **_: (-g * _cj(out * out),))
sin = unary("sin", jnp.sin, lambda g, out, x, **_: (g * _cj(cos(x)),))
cos = unary("cos", jnp.cos, lambda g, out, x, **_: (-g * _cj(sin(x)),))
tan = unary("tan", jnp.tan, lambda g, out, x, **_: (g * _cj(1 + out * out),))
asin = unary("asin", jnp.arcsin, lambda g, out, x, **_: (g * rsqrt(1 - x * x),))
acos = unary("acos", jnp.arccos, lambda g, out, x, **_: (-g * rsqrt(1 - x * x),))
atan = unary("atan", jnp.arctan, lambda g, out, x, **_: (g / (1 + x * x),))
sinh = unary("sinh", jnp.sinh, lambda g, out, x, **_: (g * _cj(cosh(x)),))
cosh = unary("cosh", jnp.cosh, lambda g, out, x, **_: (g * _cj(sinh(x)),))
tanh = unary("tanh", jnp.tanh, lambda g, out, x, **_: (g * _cj(1 - out * out),))
asinh = unary("asinh", jnp.arcsinh, lambda g, out, x, **_: (g * rsqrt(x * x + 1),))
atanh = unary("atanh", jnp.arctanh, lambda g, out, x, **_: (g / (1 - x * x),))
sigmoid = unary("sigmoid", jax.nn.sigmoid, lambda g, out, x, **_: (g * _cj(out * (1 - out)),))
erf = unary("erf", jax.scipy.special.erf,
            lambda g, out, x, **_: (g * (2 / math.sqrt(math.pi)) * exp(-(x * x)),))
erfc = unary("erfc", jax.scipy.special.erfc,
             lambda g, out, x, **_: (g * (-2 / math.sqrt(math.pi)) * exp(-(x * x)),))
erfinv = unary("erfinv", jax.scipy.special.erfinv,  # recomputed from x: PyTorch saves the input, not the result
               lambda g, out, x, **_: (g * (math.sqrt(math.pi) / 2) * exp(erfinv(x) ** 2),))
lgamma = unary("lgamma", jax.scipy.special.gammaln, lambda g, out, x, **_: (g * digamma(x),))
# JAX's own derivative of digamma is its polygamma, wrong at negative x: lowered graphs get ``polygamma_values``'s
_digamma_f = jax.custom_jvp(jax.scipy.special.digamma)
_digamma_f.defjvp(lambda p, t: (jax.scipy.special.digamma(p[0]), polygamma_values(1, p[0]) * t[0]))
digamma = unary("digamma", _digamma_f, lambda g, out, x, **_: (g * polygamma(1, x),))
square = unary("square", lambda x: jnp.square(x.astype(np.int64) if x.dtype == np.bool_ else x), lambda g, out, x: (g * 2 * _cj(x),), to_float=False)
def _neg_check(x):
    """PyTorch's error for ``-`` on a bool tensor."""
    if x._v.dtype == np.bool_:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")


neg = unary("neg", jnp.negative, lambda g, out, x: (-g,), to_float=False, check=_neg_check)
def _kinked(fn, slope):
    """``fn`` whose JAX derivative is ``slope(x)`` (PyTorch's value at a kink): what ``jax.grad`` of a lowered
    function (``dynajax.lower``, ``dynajax.func``) differentiates, so it agrees with the tape's rule where
    JAX's own choice differs (``jnp.abs`` has slope 1 at 0, ``jnp.maximum`` splits a tie in halves)."""
    f = jax.custom_jvp(fn)
    f.defjvp(lambda p, t: (fn(p[0]), slope(p[0]) * t[0]))
    return f


_abs_f = _kinked(jnp.abs, jnp.sign)
_relu_f = _kinked(lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), lambda x: (x > 0).astype(x.dtype))


def _abs_impl(x):
    return _abs_f(x) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.abs(x)


def _relu_impl(x):
    return _relu_f(x) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.maximum(x, jnp.zeros((), x.dtype))


def _sign_impl(x):
    """A bool is its own sign; NaN's sign is 0 (PyTorch's CPU kernel)."""
    if x.dtype == np.bool_:
        return x
    s = jnp.sign(x)
    return jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), s) if x.dtype.kind == "f" else s


abs = unary("abs", _abs_impl, lambda g, out, x: (g * sgn(x),), to_float=False, check=refuses("abs_cpu", "b"))
relu = unary("relu", _relu_impl, lambda g, out, x: (_where0(out > 0, g),), to_float=False,
             check=refuses("relu", "b", RuntimeError, "Boolean inputs not supported for relu"))
sign = unary("sign", _sign_impl, lambda g, out, x: (g * 0,), to_float=False)
floor = unary("floor", lambda x: jnp.floor(x) if x.dtype.kind == "f" else x,
              lambda g, out, x: (g * 0,), to_float=False, check=refuses("floor_vml_cpu", "b"))
ceil = unary("ceil", lambda x: jnp.ceil(x) if x.dtype.kind == "f" else x,
             lambda g, out, x: (g * 0,), to_float=False, check=refuses("ceil_vml_cpu", "b"))
trunc = unary("trunc", lambda x: jnp.trunc(x) if x.dtype.kind == "f" else x,
              lambda g, out, x: (g * 0,), to_float=False, check=refuses("trunc_vml_cpu", "b"))
frac = unary("frac", lambda x: x - jnp.trunc(x), lambda g, out, x: (g,), to_float=False,
             check=refuses("frac_cpu", "biu"))
logical_not = unary("logical_not", jnp.logical_not, None, to_float=False)
bitwise_not = unary("bitwise_not", jnp.invert, None, to_float=False, check=refuses("bitwise_not_cpu", "fc"))
isnan = unary("isnan", jnp.isnan, None, to_float=False, has_inplace=False)
isinf = unary("isinf", jnp.isinf, None, to_float=False, has_inplace=False)
isfinite = unary("isfinite", jnp.isfinite, None, to_float=False, has_inplace=False)
negative, absolute, arcsin, arccos, arctan = neg, abs, asin, acos, atan
fix = trunc
method("negative")(neg)
method("absolute")(abs)
method("fix")(trunc)


@op("round", check=refuses("round_vml_cpu", "b"))
def _round_impl(x, *, decimals):
    if x.dtype.kind != "f":
        return x
    if decimals == 0:
        return jnp.round(x)
    s = 10.0 ** decimals
    return jnp.round(x * s) / s


_round_impl.defvjp(lambda g, out, x, **_: (g * 0,))


@export
def round(input: Tensor, *, decimals: int = 0) -> Tensor:
    """Round half to even, as ``torch.round``."""
    return apply(_round_impl, input, decimals=decimals)


def _cot_derivative_poly(n: int) -> np.ndarray:
    """Coefficients (lowest power first) of ``P_n`` with ``d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))``:
    ``P_0(c) = c`` and ``P_{k+1}(c) = -(1 + c^2) P_k'(c)``."""
    p = np.array([0.0, 1.0])
    for _ in range(n):
        d = np.polynomial.polynomial.polyder(p)
        p = -np.polynomial.polynomial.polymul([1.0, 0.0, 1.0], d)
    return p


def polygamma_values(n: int, x):
    """The ``n``-th polygamma function of the float array ``x``. JAX's is wrong for negative ``x`` past about -9
    (its Hurwitz zeta there); there the reflection formula, differentiated ``n`` times, gives it from ``1 - x``:
    ``psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) P_n(cot(pi x))`` (``_cot_derivative_poly``), the cotangent taken
    of ``x``'s distance to the nearest integer so that a large ``|x|`` loses nothing to the period."""
    sp = jax.scipy.special
    at = (lambda v: sp.digamma(v)) if n == 0 else (lambda v: sp.polygamma(n, v))
    neg = x < 0
    direct = at(jnp.where(neg, 1 - x, x))
    r = x - jnp.round(x)   # in [-1/2, 1/2]; past 1/4 as tan of the distance to 1/2, exact at half-integers
    c = jnp.where(jnp.abs(r) < 0.25, 1 / jnp.tan(math.pi * r), jnp.sign(r) * jnp.tan(math.pi * (0.5 - jnp.abs(r))))
    poly = jnp.zeros_like(x)
    for coef in _cot_derivative_poly(n)[::-1]:   # (Horner)
        poly = poly * c + float(coef)   # (a Python float: weakly typed, it keeps x's dtype)
    return jnp.where(neg, (-1) ** n * direct - math.pi ** (n + 1) * poly, direct)


@op("polygamma")
def _polygamma_impl(x, *, n, dtype):
    return polygamma_values(n, x.astype(dtype))


_polygamma_impl.defvjp(lambda g, out, x, *, n, dtype: (g * polygamma(n + 1, x),))


def polygamma(n: int, input: Tensor) -> Tensor:
    """The ``n``-th derivative of the digamma function."""
    return apply(_polygamma_impl, input, n=int(n), dtype=_float_np(input))


@method("polygamma")
def _polygamma_method(self: Tensor, n: int) -> Tensor:
    return polygamma(n, self)


@op("nan_to_num")
def _nan_to_num_impl(x, *, nan, posinf, neginf):
    return jnp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


_nan_to_num_impl.defvjp(lambda g, out, x, **_: (_where0(isfinite(x), g),))


@export
def nan_to_num(input: Tensor, nan: float = 0.0, posinf=None, neginf=None) -> Tensor:
    return apply(_nan_to_num_impl, input, nan=nan, posinf=posinf, neginf=neginf)


@op("leaky_relu")
def _leaky_relu_impl(x, *, slope):
    return jnp.where(x > 0, x, x * slope)


_leaky_relu_impl.defvjp(lambda g, out, x, *, slope: (where(x > 0, g, g * slope),))


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return apply(_leaky_relu_impl, input, slope=negative_slope)


# ---------------------------------------------------------------- binary
def _cast(v, dtype):
    return jnp.asarray(v).astype(dtype)


def binary(name: str, impl, rule=None, result: str = "promote", method_name: str | None = None,
           has_inplace: bool = True, check=None, saves_out=None, numbers: str = "other"):
    """Declare a binary elementwise op computing in PyTorch's promoted dtype.

    ``result``: "promote" keeps the promoted dtype, "float" sends ints to the
    default float (true division), "int" rejects floats (bitwise ops); the
    impl's own output dtype (bool for comparisons) is kept. ``check`` and
    ``saves_out``: as for :func:`op` and ``Op.defvjp``. ``numbers``: which operands PyTorch's signatures
    take as a Python number, others raising its TypeError: "other" (``eq(t, 2)``, not ``eq(2, t)``),
    "either" (one of the two: ``pow(2, t)``), "any" (``add(2, 3)``), "none" (``maximum``, ``atan2``).
    """
    pub = method_name or name
    o = op(name, check=check, error=broadcast_error)(lambda x, y, *, dtype: impl(_cast(x, dtype), _cast(y, dtype)))
    if rule is not None:
        o.defvjp(*(rule if isinstance(rule, tuple) else (rule,)), saves_out=saves_out)

    by_dtype = {}  # promoted dtype -> (params, jitted impl): the hot path skips the generic lookup

    def public(input, other, *, out=None) -> Tensor:
        if numbers != "any" and not (isinstance(input, Tensor) and isinstance(other, Tensor)):
            _number_operands(pub, numbers, input, other)
        d = _dtype.result_type2(input, other)
        if result == "promote" and out is None:
            hit = by_dtype.get(d)
            if hit is None:
                hit = by_dtype[d] = ({"dtype": d}, o.jitted({"dtype": d}))
            return run(o, hit[1], (input, other), hit[0])
        if result == "float" and not _dtype.is_float(d):
            d = _dtype.default_float_np()
        elif result == "int" and _dtype.is_float(d):   # (PyTorch's kernel names the shifts lshift/rshift)
            kernel = {"bitwise_left_shift": "lshift", "bitwise_right_shift": "rshift"}.get(name, name)
            raise NotImplementedError(f"\"{kernel}_cpu\" not implemented for '{_dtype.from_np(d).legacy_name}'")
        return with_out(apply(o, input, other, dtype=d), out, name)
    public.__name__ = public.__qualname__ = method_name or name
    public.__doc__ = f"Elementwise ``{method_name or name}`` with broadcasting and type promotion."
    public.op = o
    if method_name is None or method_name == name:
        export(public, inplace_name=name + "_" if has_inplace else None)
    return public


def _number_operands(name: str, numbers: str, input, other) -> None:
    """:func:`binary`'s TypeError for a Python number where the op's signature wants a Tensor."""
    if not isinstance(input, Tensor) and (numbers != "either" or not isinstance(other, Tensor)):
        tensor_args(name, input=(1, input))
    if numbers == "none":
        tensor_args(name, other=(2, other))


def _power(x, y):
    """``x ** y``; an integer to a negative power is 0 unless ``x`` is 1 or -1, as in PyTorch."""
    r = jnp.power(x, y)
    if x.dtype.kind != "i":
        return r
    neg = jnp.where(x == 1, 1, jnp.where(x == -1, 1 - 2 * (y & 1), 0))
    return jnp.where(y < 0, neg.astype(x.dtype), r)


def _pow_check(x, y, *, dtype, **_):
    """PyTorch's error for an integer tensor to a negative integer power (a Python number: no device read)."""
    if isinstance(y, (int, np.integer)) and y < 0 and _is_t(x) and _dtype.is_integral(x._v.dtype, True):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if dtype == np.bool_:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")


def _pow_rule(g, out, x, y, **_):
    if _is_t(y):
        gx = where(y == 0, 0.0, g * _cj(y * pow(x, y - 1))) if _is_t(x) else None
        lx = log(x) if _is_t(x) else math.log(x) if x > 0 else 0.0
        gy = g * _cj(out * lx)
        if _is_t(x):
            gy = where((x == 0) & (y >= 0), 0.0, gy)
        return gx, gy
    return (g * 0 if y == 0 else g * _cj(y * pow(x, y - 1))), None


def _max_rule(g, out, x, y, **_):
    tie = g / 2
    return (where(x > y, g, where(x == y, tie, 0.0)) if _is_t(x) else None,
            where(y > x, g, where(x == y, tie, 0.0)) if _is_t(y) else None)


def _min_rule(g, out, x, y, **_):
    tie = g / 2
    return (where(x < y, g, where(x == y, tie, 0.0)) if _is_t(x) else None,
            where(y < x, g, where(x == y, tie, 0.0)) if _is_t(y) else None)


_BOOL = np.dtype(np.bool_)
_PY_BOOLS = (bool, np.bool_)


def _sub_check(x, y, **_):
    """PyTorch's errors for ``-`` with a bool operand (a bool tensor or a Python bool). (Every subtraction
    runs it: kept to a few attribute reads.)"""
    bx = x._v.dtype is _BOOL if isinstance(x, Tensor) else x.__class__ in _PY_BOOLS
    by = y._v.dtype is _BOOL if isinstance(y, Tensor) else y.__class__ in _PY_BOOLS
    if bx or by:
        if bx and by:
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                               "Use the `^` or `logical_xor()` operator instead.")
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")


_all_on_device = jax.jit(jnp.all)


def _has_zero(v) -> bool:
    """Whether the concrete array ``v`` holds a zero (one host read; an accelerator's array reduced there)."""
    if isinstance(v, np.ndarray) or all(d.platform == "cpu" for d in v.devices()):
        return not np.asarray(v).all()
    return not bool(_all_on_device(v))


def _int_div_check(kernel: str):
    """``check`` of an integer-dividing op (``kernel``: PyTorch's kernel name for bools' error): PyTorch's
    NotImplementedError for bool operands, and its ``RuntimeError("ZeroDivisionError")`` for an integer
    division by zero. A Python int divisor is checked by its value. An integer tensor divisor is read only
    when the op runs eagerly on concrete arrays: not while ``dynajax.compile`` records a step (nor under JAX
    tracing), so a compiled step does not check it (its integer division by zero gives an unspecified value).
    Float dtypes skip every check."""
    def check(x, y, *, dtype):
        kind = dtype.kind
        if kind not in "iub":
            return
        if kind == "b":
            raise NotImplementedError(f"\"{kernel}_cpu\" not implemented for 'Bool'")
        if _is_t(y):
            v = y._value
            if isinstance(v, jax.core.Tracer) or is_recorded(y) or not _has_zero(v):
                return
        elif not isinstance(y, (int, np.integer)) or y != 0:
            return
        shapes = [a._v.shape for a in (x, y) if _is_t(a)]
        if math.prod(np.broadcast_shapes(*shapes)) > 0:   # (an empty result divides nothing)
            raise RuntimeError("ZeroDivisionError")
    return check


_add = binary("add", jnp.add, (lambda g, out, x, y, **_: g, lambda g, out, x, y, **_: g), method_name="_add",
              numbers="any")
_sub = binary("sub", jnp.subtract, (lambda g, out, x, y, **_: g, lambda g, out, x, y, **_: -g),
              method_name="_sub", check=_sub_check, numbers="any")
mul = binary("mul", jnp.multiply, (lambda g, out, x, y, **_: g * _cj(y), lambda g, out, x, y, **_: g * _cj(x)),
             numbers="any")
_true_div = binary("div", jnp.true_divide,
                   (lambda g, out, x, y, **_: g / _cj(y), lambda g, out, x, y, **_: -g * _cj(x / (y * y))), "float",
                   method_name="_div", numbers="any")
floor_divide = binary("floor_divide", jnp.floor_divide, lambda g, out, x, y, **_: (g * 0, g * 0),
                      check=_int_div_check("div_floor"), numbers="any")
_trunc_div = binary("div_trunc", lambda a, b: jnp.trunc(a / b).astype(a.dtype) if a.dtype.kind == "f"
                    else jnp.sign(a) * jnp.sign(b) * (jnp.abs(a) // jnp.abs(b)),
                    lambda g, out, x, y, **_: (g * 0, g * 0), method_name="_div_trunc",
                    check=_int_div_check("div_trunc"), numbers="any")
remainder = binary("remainder", jnp.remainder, lambda g, out, x, y, **_: (g, -g * floor_divide(x, y)),
                   check=_int_div_check("remainder"), numbers="either")
fmod = binary("fmod", jnp.fmod, lambda g, out, x, y, **_: (g, -g * div(x, y, rounding_mode="trunc")),
              check=_int_div_check("fmod"))
# the result is saved only with a tensor exponent (PyTorch's pow.Tensor_Tensor and pow.Scalar, not Tensor_Scalar)
pow = binary("pow", _power, _pow_rule, check=_pow_check, saves_out=lambda x, y, **_: _is_t(y), numbers="either")
atan2 = binary("atan2", jnp.arctan2,
               lambda g, out, x, y, **_: (g * y / (x * x + y * y), -g * x / (x * x + y * y)), "float",
               numbers="none")
maximum = binary("maximum", jnp.maximum, _max_rule, has_inplace=False, numbers="none")
minimum = binary("minimum", jnp.minimum, _min_rule, has_inplace=False, numbers="none")
hypot = binary("hypot", jnp.hypot, lambda g, out, x, y, **_: (g * x / out, g * y / out), "float", numbers="none")
logaddexp = binary("logaddexp", jnp.logaddexp,
                   lambda g, out, x, y, **_: (g * sigmoid(x - y), g * sigmoid(y - x)), "float", has_inplace=False,
                   numbers="none")
eq = binary("eq", jnp.equal)
ne = binary("ne", jnp.not_equal)
lt = binary("lt", jnp.less)
le = binary("le", jnp.less_equal)
gt = binary("gt", jnp.greater)
ge = binary("ge", jnp.greater_equal)
logical_and = binary("logical_and", jnp.logical_and, numbers="none")
logical_or = binary("logical_or", jnp.logical_or, numbers="none")
logical_xor = binary("logical_xor", jnp.logical_xor, numbers="none")
bitwise_and = binary("bitwise_and", jnp.bitwise_and, result="int", numbers="either")
bitwise_or = binary("bitwise_or", jnp.bitwise_or, result="int", numbers="either")
bitwise_xor = binary("bitwise_xor", jnp.bitwise_xor, result="int", numbers="either")
bitwise_left_shift = binary("bitwise_left_shift", jnp.left_shift, result="int", numbers="either")
bitwise_right_shift = binary("bitwise_right_shift", jnp.right_shift, result="int", numbers="either")
arctan2, true_divide, multiply = atan2, _true_div, mul
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
for _n, _f in (("greater", gt), ("greater_equal", ge), ("less", lt), ("less_equal", le),
               ("not_equal", ne), ("multiply", mul), ("arctan2", atan2)):
    method(_n)(_f)


def checked_alpha(alpha, d: np.dtype):
    """``alpha`` of ``add``/``sub``/``index_add`` for a result of dtype ``d``, after PyTorch's checks: an
    integer or bool result takes no float alpha, a real one no complex alpha, a bool alpha only a bool result,
    and the value must fit ``d``. A bool result's alpha is a bool (``True + True * 2`` stays a bool), so that
    ``other * alpha`` keeps ``other``'s dtype as PyTorch's kernel computes in ``d``."""
    if _is_t(alpha):
        return alpha
    if isinstance(alpha, bool) and d != np.bool_:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not _dtype.is_float(d) and not isinstance(alpha, (int, np.integer)):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if d.kind != "c" and isinstance(alpha, complex):
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
    alpha = _dtype.checked_scalar(alpha, d)
    return bool(alpha) if d == np.bool_ else alpha


@export
def add(input, other, *, alpha=1, out=None) -> Tensor:
    """``input + alpha * other`` with broadcasting and type promotion (``alpha`` takes no part in it)."""
    if type(alpha) is not int or alpha != 1:   # (``alpha=1.0`` too: a float alpha on integers raises, as in PyTorch)
        alpha = checked_alpha(alpha, _dtype.result_type(input, other))
        if alpha is not True:   # (a bool result's True alpha: nothing to scale)
            other = other * alpha
    return _add(input, other, out=out)


@export
def sub(input, other, *, alpha=1, out=None) -> Tensor:
    """``input - alpha * other``."""
    if type(alpha) is not int or alpha != 1:
        _sub_check(input, other)   # (before ``other * alpha`` takes a bool ``other`` to an integer)
        alpha = checked_alpha(alpha, _dtype.result_type(input, other))
        other = other * alpha
    return _sub(input, other, out=out)


@export
def div(input, other, *, rounding_mode: str | None = None, out=None) -> Tensor:
    """True division, or ``rounding_mode="trunc"``/``"floor"`` integer-style division.

    An integer ``"trunc"``/``"floor"`` division by zero raises PyTorch's ``RuntimeError("ZeroDivisionError")``
    when run eagerly (as ``//`` and ``%``); a compiled step does not check a tensor divisor (its result there is
    unspecified)."""
    if rounding_mode is None:
        return with_out(_true_div(input, other), out, "div")
    if rounding_mode == "floor":
        return with_out(floor_divide(input, other), out, "div")
    if rounding_mode == "trunc":
        return with_out(_trunc_div(input, other), out, "div")
    raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                       f"'{rounding_mode}'")


subtract, divide = sub, div
for _name, _fn in (("add_", add), ("sub_", sub), ("div_", div)):
    export(_fn, inplace_name=_name)
method("subtract")(sub)
method("divide")(div)
method("true_divide")(_true_div)


# ---------------------------------------------------------------- where / clamp / lerp
@op("where", error=broadcast_error)
def _where_impl(c, x, y, *, dtype):
    return jnp.where(c, _cast(x, dtype), _cast(y, dtype))


@_where_impl.defvjp
def _where_vjp(g, out, c, x, y, **_):
    # (0, not g * 0: a NaN or inf cotangent must not reach the operand that was not picked, as in PyTorch)
    return None, where(c, g, 0.0), where(c, 0.0, g)


def where(condition, input=None, other=None) -> Tensor:
    """``input`` where ``condition`` else ``other``; ``where(c)`` is ``nonzero(c, as_tuple=True)``."""
    if input is None and other is None:
        from .index import nonzero
        return nonzero(condition, as_tuple=True)
    if _is_t(condition) and condition._v.dtype == np.uint8:   # PyTorch still takes it, warning
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated and will be removed "
                      "in a future version of PyTorch. Use a boolean condition instead.", stacklevel=2)
        condition = condition != 0
    if _is_t(condition) and condition._v.dtype != np.bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{condition.dtype.legacy_name}")
    d = _dtype.result_type(input, other)
    input = _dtype.checked_scalar(input, d, halves_wide=True)
    other = _dtype.checked_scalar(other, d, halves_wide=True)
    return apply(_where_impl, condition, input, other, dtype=d)


@method("where")
def _where_method(self, condition, other) -> Tensor:
    return where(condition, self, other)


@op("clamp", error=broadcast_error)
def _clamp_impl(x, lo, hi, *, dtype, open=False):
    x = x.astype(dtype)
    # selects rather than maximum/minimum: at a bound JAX's derivative is then the rule's -- 1 for clamp
    # (PyTorch's), 0 with ``open`` (PyTorch's hardtanh family) -- where maximum would split it in halves; a
    # NaN stays NaN
    if lo is not None:
        lo = _cast(lo, dtype)
        x = jnp.where((x <= lo) if open else (x < lo), lo, x)
    if hi is not None:
        hi = _cast(hi, dtype)
        x = jnp.where((x >= hi) if open else (x > hi), hi, x)
    return x


@_clamp_impl.defvjp
def _clamp_vjp(g, out, x, lo, hi, *, open=False, **_):
    keep = None
    if lo is not None:
        keep = (x > lo) if open else (x >= lo)
    if hi is not None:
        inside = (x < hi) if open else (x <= hi)
        keep = inside if keep is None else keep & inside
    glo = ghi = None
    if _is_t(lo):
        glo = _where0((x < lo) & (lo < hi) if hi is not None else x < lo, g)
    if _is_t(hi):
        ghi = _where0((x > hi) | (hi < lo) if lo is not None else x > hi, g)
    return _where0(keep, g), glo, ghi


@export
def clamp(input: Tensor, min=None, max=None, *, out=None) -> Tensor:
    """Limit values to ``[min, max]`` (either bound may be None or a tensor)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    tensor_args("clamp", input=(1, input))
    args = [a for a in (input, min, max) if a is not None]
    d = _dtype.result_type(*args)
    min = _dtype.checked_scalar(min, d)
    max = _dtype.checked_scalar(max, d)
    return with_out(apply(_clamp_impl, input, min, max, dtype=d), out)


def clamp_open(input: Tensor, min: float, max: float) -> Tensor:
    """``clamp(input, min, max)`` whose gradient is 0 at the bounds, 1 only strictly between them: PyTorch's
    hardtanh family (``hardtanh``, ``relu6``, ``hardsigmoid``), where ``clamp``'s own is 1 at the bounds."""
    d = _dtype.result_type(input, min, max)
    return apply(_clamp_impl, input, _dtype.checked_scalar(min, d), _dtype.checked_scalar(max, d), dtype=d,
                 open=True)


clip = clamp
export(clamp, "clip", inplace_name="clamp_")
export(clamp, inplace_name="clip_")


def clamp_min(input, min):
    tensor_args("clamp_min", input=(1, input))
    return clamp(input, min=min)


def clamp_max(input, max):
    tensor_args("clamp_max", input=(1, input))
    return clamp(input, max=max)


export(clamp_min, inplace_name="clamp_min_")
export(clamp_max, inplace_name="clamp_max_")


def _lerp_check(input: Tensor, end, weight) -> None:
    """PyTorch's checks: ``end`` (and a tensor ``weight``) of ``input``'s dtype, a float or complex one."""
    if not _is_t(end):
        raise TypeError(f"lerp(): argument 'end' (position 2) must be Tensor, not {type(end).__name__}")
    if not _dtype.is_float(input._v.dtype):
        kernel = "lerp_kernel_tensor" if _is_t(weight) else "lerp_kernel_scalar"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{input.dtype.legacy_name}'")
    for name, t in (("end", end), ("weight", weight)):
        if _is_t(t) and t._v.dtype != input._v.dtype:
            raise RuntimeError(f"expected dtype {_dtype.C_NAMES[input.dtype.name]} for `{name}` but got dtype "
                               f"{_dtype.C_NAMES[t.dtype.name]}")


def lerp(input: Tensor, end, weight) -> Tensor:
    """``input + weight * (end - input)``."""
    _lerp_check(input, end, weight)
    return input + weight * (end - input)


export(lerp, inplace_name="lerp_")


def sgn(input: Tensor) -> Tensor:
    """``sign``; of a complex element ``z / |z|`` (0 at 0), composed of differentiable ops (it has a gradient,
    which a complex ``abs``'s double backward needs)."""
    if input._v.dtype.kind != "c":
        return sign(input)
    a = abs(input)
    return input / where(a == 0, 1.0, a)


# ---------------------------------------------------------------- Python operators
def _reflect(fn, dunder: str):
    def reflected(self, other):
        if not isinstance(self, Tensor):   # (called unbound, as ``Tensor.__radd__(2, t)``)
            raise TypeError(f"descriptor '{dunder}' for 'Tensor' objects doesn't apply to a "
                            f"'{type(self).__name__}' object")
        return fn(other, self)
    reflected.__name__ = dunder
    return reflected


def _eq_op(fn):
    def compare(self, other):
        if other is None or not isinstance(other, (Tensor, int, float, bool, complex, np.ndarray, np.generic)):
            return NotImplemented
        return fn(self, other)
    return compare


for _dunder, _fn in {
    "__add__": _add, "__sub__": _sub, "__mul__": mul, "__truediv__": div, "__floordiv__": floor_divide,
    "__mod__": remainder, "__pow__": pow, "__and__": bitwise_and, "__or__": bitwise_or,
    "__xor__": bitwise_xor, "__lshift__": bitwise_left_shift, "__rshift__": bitwise_right_shift,
    "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
}.items():
    setattr(Tensor, _dunder, _fn)
    if not _dunder[2:-2] in ("lt", "le", "gt", "ge"):
        setattr(Tensor, "__r" + _dunder[2:], _reflect(_fn, "__r" + _dunder[2:]))
        setattr(Tensor, "__i" + _dunder[2:], getattr(Tensor, {
            "__add__": "add_", "__sub__": "sub_", "__mul__": "mul_", "__truediv__": "div_",
            "__floordiv__": "floor_divide_", "__mod__": "remainder_", "__pow__": "pow_",
            "__and__": "bitwise_and_", "__or__": "bitwise_or_", "__xor__": "bitwise_xor_",
            "__lshift__": "bitwise_left_shift_", "__rshift__": "bitwise_right_shift_"}[_dunder]))
Tensor.__rdiv__ = Tensor.__rtruediv__
Tensor.__eq__ = _eq_op(eq)
Tensor.__ne__ = _eq_op(ne)
Tensor.__neg__ = neg
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = abs
Tensor.__invert__ = lambda self: logical_not(self) if self._v.dtype == np.bool_ else bitwise_not(self)
