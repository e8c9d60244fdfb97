"""``dynajax.special`` against ``torch.special``: values and float64 gradients, aliases of existing ops, the
polygamma family at negative non-integers (where ``jax.scipy.special.polygamma`` is wrong), and the tape
against ``jax.vjp`` of the lowered graph and finite differences."""
import mpmath
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close
from test_complex import compare_c

RNG = np.random.default_rng(2)
POS = RNG.uniform(0.1, 3.0, 7)
ANY = np.concatenate([RNG.uniform(-3.0, 3.0, 6), [0.0]])
UNIT = RNG.uniform(0.02, 0.98, 6)

UNARY = {   # name: inputs (PyTorch differentiates those it has a derivative for; the rest have no grad_fn)
    "entr": (POS, ANY), "erfcx": (ANY,), "i0": (ANY,), "i0e": (ANY,), "i1": (ANY,), "i1e": (ANY,),
    "ndtr": (ANY,), "ndtri": (UNIT,), "log_ndtr": (ANY, ANY * 4), "expit": (ANY,), "gammaln": (POS,),
    "digamma": (POS,), "psi": (ANY[:-1],), "erf": (ANY,), "erfc": (ANY,), "erfinv": (UNIT * 2 - 1,),
    "exp2": (ANY,), "expm1": (ANY,), "log1p": (POS,), "sinc": (ANY,), "round": (ANY * 3,),
    "modified_bessel_i0": (ANY,), "modified_bessel_i1": (ANY,), "spherical_bessel_j0": (ANY * 4,),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    for x in UNARY[name]:
        compare_c(getattr(dj.special, name), getattr(torch.special, name), x)
        compare_c(getattr(dj.special, name), getattr(torch.special, name), x.astype(np.float32), grad=False)


@pytest.mark.parametrize("name,x,y", [
    ("xlogy", ANY, POS), ("xlog1py", ANY, ANY), ("zeta", POS + 1, POS), ("gammainc", POS, POS[::-1].copy()),
    ("gammaincc", POS, POS[::-1].copy())])
def test_binary(name, x, y):
    f, ft = getattr(dj.special, name), getattr(torch.special, name)
    if name in ("zeta", "gammainc", "gammaincc"):   # PyTorch differentiates none (zeta) or the second argument only
        compare_c(f, ft, x, y, grad=False)
        compare_c(lambda y: f(dj.tensor(x), y), lambda y: ft(torch.tensor(x), y), y, grad=name != "zeta")
        a = dj.tensor(x, requires_grad=True)
        with pytest.raises(NotImplementedError, match="the derivative for '(zeta|igammac?: input)' is not implemented"):
            f(a, dj.tensor(y)).sum().backward()
    else:
        compare_c(f, ft, x, y)
    if name in ("xlog1py", "zeta"):   # (PyTorch takes a Python number for these; xlogy's rule does not yet)
        compare_c(lambda x: f(x, 0.5), lambda x: ft(x, 0.5), x, grad=name != "zeta")


def test_xlog1py_at_zero_and_nan():
    x, y = np.array([0.0, 0.0, 0.0, 1.0]), np.array([-1.0, np.nan, 2.0, -1.0])
    compare_c(dj.special.xlog1py, torch.special.xlog1py, x, y)
    for v in (-1.0, -2.0):
        compare_c(lambda x: dj.special.xlog1py(x, v), lambda x: torch.special.xlog1py(x, v), x)


@pytest.mark.parametrize("p", [1, 3])
def test_multigammaln(p):
    compare_c(lambda x: dj.special.multigammaln(x, p), lambda x: torch.special.multigammaln(x, p), POS + p)
    assert_close(dj.mvlgamma(dj.tensor([3]), 2), torch.mvlgamma(torch.tensor([3]), 2))
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        dj.special.multigammaln(dj.tensor([1.0]), 0)


def test_reductions_and_softmax():
    x = RNG.standard_normal((3, 4))
    for f in ("softmax", "log_softmax"):
        compare_c(lambda t: getattr(dj.special, f)(t, 1), lambda t: getattr(torch.special, f)(t, 1), x)
    compare_c(lambda t: dj.special.logsumexp(t, 0), lambda t: torch.special.logsumexp(t, 0), x)
    compare_c(lambda t: dj.special.logit(t, eps=0.1), lambda t: torch.special.logit(t, eps=0.1), UNIT)


def test_aliases_are_the_same_ops():
    S = dj.special
    assert S.erf is dj.erf and S.erfc is dj.erfc and S.erfinv is dj.erfinv and S.expm1 is dj.expm1
    assert S.exp2 is dj.exp2 and S.log1p is dj.log1p and S.round is dj.round and S.sinc is dj.sinc
    assert S.digamma is dj.digamma and S.psi is dj.digamma and S.gammaln is dj.lgamma and S.expit is dj.sigmoid
    assert S.polygamma is dj.polygamma and S.xlogy is dj.xlogy and S.logsumexp is dj.logsumexp
    assert S.i0 is dj.i0 and S.softmax is dj.nn.functional.softmax and S.multigammaln is dj.mvlgamma


NEG = np.array([-0.3, -0.5, -1.7, -2.3, -3.5, -5.25, -9.7, -10.05, -14.5, -20.3, -35.95])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_at_negative_non_integers(n):
    # torch's own values lose digits near half-integers for large n: the oracle there is mpmath
    expect = np.array([float(mpmath.polygamma(n, v)) for v in NEG])
    assert_close(dj.polygamma(n, dj.tensor(NEG)), expect, rtol=1e-9, atol=0)
    assert_close(dj.polygamma(n, dj.tensor(NEG)), torch.polygamma(n, torch.tensor(NEG)), rtol=1e-6, atol=0)
    assert_close(dj.polygamma(n, dj.tensor(NEG, dtype=dj.float32)), expect.astype(np.float32), rtol=2e-3, atol=0)
    compare_c(lambda x: dj.special.polygamma(n, x), lambda x: torch.special.polygamma(n, x), NEG[:6], rtol=1e-6,
              atol=0)
    compare_c(lambda x: dj.special.polygamma(n, x), lambda x: torch.special.polygamma(n, x),   # (float32 stays so)
              NEG[:4].astype(np.float32), grad=False, rtol=1e-4, atol=0)


def test_digamma_grad_at_negative_non_integers():
    x = dj.tensor(NEG, requires_grad=True)
    dj.digamma(x).sum().backward()
    assert_close(x.grad, np.array([float(mpmath.polygamma(1, v)) for v in NEG]), rtol=1e-9, atol=0)
    compare_c(dj.special.digamma, torch.special.digamma, NEG, rtol=1e-6, atol=0)
    compare_c(dj.lgamma, torch.lgamma, NEG)


def test_grads_against_jax_and_finite_differences():
    x = dj.tensor(UNIT, dtype=dj.float64)
    S = dj.special
    dj.testing.check_grads(lambda x: (S.entr(x) + S.erfcx(x) + S.i0e(x) * S.i1(x) + S.i1e(x) + S.log_ndtr(x)
                                      + S.ndtri(x) + S.ndtr(x) + S.xlog1py(x, x)).sum(), [x])
    dj.testing.check_grads(lambda x: S.polygamma(2, x - 7.4).sum() + S.digamma(x - 12.6).sum(), [x], rtol=1e-4)
