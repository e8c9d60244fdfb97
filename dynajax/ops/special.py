"""The special functions of ``torch.special`` that no other op module has: ``entr``, ``erfcx``, the modified
Bessel functions ``i0``/``i0e``/``i1``/``i1e``, the normal distribution's ``ndtr``/``ndtri``/``log_ndtr``,
``xlog1py``, ``zeta``, ``gammainc``/``gammaincc``, ``multigammaln`` and the Bessel functions PyTorch gives no
gradient (``modified_bessel_i0``/``i1``, ``spherical_bessel_j0``), on ``jax.scipy.special``. The public
namespace, with the aliases of existing ops (``erf``, ``digamma``, ``gammaln``, ``expit`` ...), is
``dynajax.special``."""
from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np

from .. import _dtype
from .._tensor import Tensor, method
from .elementwise import _float_np, binary, exp, export, lgamma, log, log1p, sign, unary, where
from .reduce import sum as _sum
from .registry import apply, op

__all__ = ["i0", "mvlgamma"]

_SQRT_2PI = math.sqrt(2 * math.pi)


def _special(name: str, impl, rule=None):
    """A float-valued elementwise special function (ints and bools computed in the default float dtype) with no
    Tensor method: ``special.<name>(input)``; ``rule``: its VJP (None: PyTorch gives it no gradient)."""
    o = op(name, backward_name=f"Special{name.title().replace('_', '')}Backward0")(
        lambda x, *, dtype: impl(x.astype(dtype)))
    if rule is not None:
        o.defvjp(rule)

    def public(input: Tensor, *, out=None) -> Tensor:
        r = apply(o, input, dtype=_float_np(input))
        return r if out is None else out.copy_(r)
    public.__name__ = public.__qualname__ = name
    public.__doc__ = f"``torch.special.{name}``, elementwise."
    public.op = o
    return public


def _nonzero(x: Tensor) -> Tensor:
    """``x`` with its zeros replaced by ones (a divisor whose quotient a ``where`` discards there)."""
    return where(x == 0, 1.0, x)


i0 = unary("i0", jss.i0, lambda g, out, x, **_: (g * i1(x),))
entr = _special("entr", jss.entr, lambda g, out, x, **_: (-g * (log(x) + 1),))
erfcx = _special("erfcx", jss.erfcx, lambda g, out, x, **_: (g * (2 * x * out - 2 / math.sqrt(math.pi)),))
i0e = _special("i0e", jss.i0e, lambda g, out, x, **_: (g * (i1e(x) - sign(x) * out),))
i1 = _special("i1", jss.i1, lambda g, out, x, **_: (g * where(x == 0, 0.5, i0(x) - out / _nonzero(x)),))
i1e = _special("i1e", jss.i1e, lambda g, out, x, **_: (
    g * where(x == 0, 0.5, i0e(x) - out * (sign(x) + 1 / _nonzero(x))),))
ndtr = _special("ndtr", jss.ndtr, lambda g, out, x, **_: (g * exp(x * x * -0.5) / _SQRT_2PI,))
ndtri = _special("ndtri", jss.ndtri, lambda g, out, x, **_: (g * _SQRT_2PI * exp(out * out * 0.5),))
log_ndtr = _special("log_ndtr", jss.log_ndtr, lambda g, out, x, **_: (g * exp(x * x * -0.5 - out) / _SQRT_2PI,))
# PyTorch differentiates none of these
modified_bessel_i0 = _special("modified_bessel_i0", jss.i0)
modified_bessel_i1 = _special("modified_bessel_i1", jss.i1)
spherical_bessel_j0 = _special("spherical_bessel_j0",
                               lambda x: jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(x) / jnp.where(x == 0, 1, x)))


def _xlog1py_impl(x, y):
    # 0 where x is 0 (unless y is NaN); the log is taken of a placeholder where it would not be finite, so that
    # JAX's derivative there is the rule's (0)
    zero = x == 0
    fine = (y > -1) & jnp.isfinite(y)
    out = x * jnp.log1p(jnp.where(zero & ~fine, jnp.zeros((), y.dtype), y))
    return jnp.where(zero & jnp.isnan(y), y, out)


def _xlog1py_x(g, out, x, y, **_):
    if isinstance(y, Tensor):
        return where((x == 0) & (y <= -1), 0.0, g * log1p(y))
    if y > -1:
        return g * math.log1p(y)
    return where(x == 0, 0.0, g * (-math.inf if y == -1 else math.nan))


xlog1py = binary("special_xlog1py", _xlog1py_impl, (_xlog1py_x, lambda g, out, x, y, **_: g * x / (y + 1)), "float",
                 method_name="xlog1py", numbers="either")


def _no_derivative(what: str):
    def rule(g, out, x, y, **_):
        raise NotImplementedError(f"the derivative for '{what}' is not implemented.")
    return rule


def _igamma_x(sign_: float):
    """The derivative of the regularized incomplete gamma function in its second argument (``sign_`` -1: of
    the upper one): ``x^(a-1) e^(-x) / Gamma(a)``."""
    def rule(g, out, a, x, **_):
        return g * sign_ * exp((a - 1) * log(x) - x - lgamma(a))
    return rule


# d/dq zeta(x, q) = -x zeta(x + 1, q) (the series term by term); none in x, as in PyTorch
zeta = binary("special_zeta", jss.zeta, (_no_derivative("zeta"), lambda g, out, x, q, **_: g * -x * zeta(x + 1, q)),
              "float",
              method_name="zeta", numbers="either")
gammainc = binary("special_gammainc", jss.gammainc, (_no_derivative("igamma: input"), _igamma_x(1.0)), "float",
                  method_name="gammainc", numbers="none")
gammaincc = binary("special_gammaincc", jss.gammaincc, (_no_derivative("igammac: input"), _igamma_x(-1.0)),
                   "float", method_name="gammaincc", numbers="none")


@method()
@_dtype.x64.wrap
def mvlgamma(input: Tensor, p: int) -> Tensor:
    """The log of the multivariate gamma function of dimension ``p``:
    ``p (p - 1) / 4 log(pi) + sum_j lgamma(input - j / 2)``, ``j < p`` (as PyTorch 2.13, elements not above
    ``(p - 1) / 2`` are not refused: their value is whatever the lgammas give)."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    d = _float_np(input)
    input = input.to(_dtype.from_np(d))
    shifts = Tensor._make(jnp.asarray(-np.arange(p) / 2, d))
    return _sum(lgamma(input.unsqueeze(-1) + shifts), -1) + p * (p - 1) / 4 * math.log(math.pi)


multigammaln = mvlgamma
export(mvlgamma, inplace_name="mvlgamma_")


# torch.igamma / torch.igammac (and their methods): the regularized incomplete gamma functions
igamma, igammac = gammainc, gammaincc
method("igamma")(gammainc)
method("igammac")(gammaincc)
__all__ += ["igamma", "igammac"]
