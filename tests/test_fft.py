"""``dynajax.fft`` against ``torch.fft``: values, dtypes and gradients (complex cotangents, PyTorch's
convention) of every transform with its ``n``/``s``/``dim``/``norm`` arguments; the tape against ``jax.vjp`` of
the lowered graph and finite differences through real inputs; frequencies, shifts and errors."""
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close
from test_complex import compare_c, crandn

R = np.random.default_rng(1).standard_normal((4, 6))
C = crandn(4, 6)

ONE_D = [{}, {"n": 5}, {"n": 8, "norm": "ortho"}, {"dim": 0, "norm": "forward"}]
N_D = [{}, {"s": (3, 5)}, {"s": (5, 8), "norm": "ortho"}, {"dim": (1, 0), "norm": "forward"}, {"s": (-1, 4)}]


def _cases(names, kwargs, real_only=()):
    return [(n, kw, inp) for n in names for kw in kwargs for inp in ("real", "complex")
            if not (n in real_only and inp == "complex")]


@pytest.mark.parametrize("name,kw,inp", _cases(["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"], ONE_D,
                                               ("rfft", "ihfft")))
def test_one_dim(name, kw, inp):
    f, ft = getattr(dj.fft, name), getattr(torch.fft, name)
    compare_c(lambda x: f(x, **kw), lambda x: ft(x, **kw), R if inp == "real" else C)


@pytest.mark.parametrize("name,kw,inp", _cases(["fft2", "ifftn", "rfft2", "irfftn", "hfft2", "ihfftn"], N_D,
                                               ("rfft2", "ihfftn")))
def test_n_dims(name, kw, inp):
    f, ft = getattr(dj.fft, name), getattr(torch.fft, name)
    compare_c(lambda x: f(x, **kw), lambda x: ft(x, **kw), R if inp == "real" else C)


@pytest.mark.parametrize("name", ["fftn", "ifft2", "rfftn", "irfft2", "hfftn", "ihfft2"])
def test_other_n_dim_spellings(name):
    f, ft = getattr(dj.fft, name), getattr(torch.fft, name)
    x = R[None].repeat(2, 0)
    compare_c(f, ft, x)
    compare_c(lambda x: f(x, s=(3, 4)), lambda x: ft(x, s=(3, 4)), x)


def test_float32_and_integer_inputs():
    compare_c(dj.fft.fft, torch.fft.fft, R.astype(np.float32))
    compare_c(dj.fft.irfft, torch.fft.irfft, C.astype(np.complex64))
    compare_c(dj.fft.rfft, torch.fft.rfft, np.arange(6))
    compare_c(dj.fft.fft, torch.fft.fft, np.array([True, False, True]))


def test_round_trips_and_composition():
    compare_c(lambda x: dj.fft.irfft(dj.fft.rfft(x) * dj.fft.rfft(x), n=6).abs(),
              lambda x: torch.fft.irfft(torch.fft.rfft(x) * torch.fft.rfft(x), n=6).abs(), R)
    compare_c(lambda z: dj.fft.ifft(dj.fft.fft(z, norm="ortho") * 2j, norm="ortho").angle(),
              lambda z: torch.fft.ifft(torch.fft.fft(z, norm="ortho") * 2j, norm="ortho").angle(), C)


def test_grads_against_jax_and_finite_differences():
    x, y = dj.randn(4, 5, dtype=dj.float64), dj.randn(4, 5, dtype=dj.float64)
    dj.testing.check_grads(lambda x, y: dj.fft.fft2(dj.complex(x, y), s=(3, 6)).abs().sum()
                           + dj.fft.irfft(dj.complex(y, x), n=7).pow(2).sum(), [x, y])
    dj.testing.check_grads(lambda x: (dj.fft.rfftn(x, norm="ortho").abs() ** 2).sum()
                           + dj.fft.ihfft(x).imag.sum() + dj.fft.hfft(x, n=6).sum(), [x], order=1)


def test_freqs_and_shifts():
    for n, d in ((5, 0.5), (8, 1.0), (1, 2.0)):
        assert_close(dj.fft.fftfreq(n, d), torch.fft.fftfreq(n, d))
        assert_close(dj.fft.rfftfreq(n, d), torch.fft.rfftfreq(n, d))
    assert_close(dj.fft.fftfreq(5, dtype=dj.float64), torch.fft.fftfreq(5, dtype=torch.float64))
    x = np.arange(30).reshape(5, 6)
    for kw in ({}, {"dim": 1}, {"dim": (0,)}, {"dim": -2}):
        assert_close(dj.fft.fftshift(dj.tensor(x), **kw), torch.fft.fftshift(torch.tensor(x), **kw))
        assert_close(dj.fft.ifftshift(dj.tensor(x), **kw), torch.fft.ifftshift(torch.tensor(x), **kw))
    compare_c(lambda z: dj.fft.fftshift(dj.fft.fft(z)), lambda z: torch.fft.fftshift(torch.fft.fft(z)), C)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda m, x: m.fft.fft(x, norm="bad"), RuntimeError, 'Invalid normalization mode: "bad"'),
    (lambda m, x: m.fft.fft(x, n=0), RuntimeError, r"Invalid number of data points \(0\) specified"),
    (lambda m, x: m.fft.fft(x, dim=3), IndexError, "Dimension out of range"),
    (lambda m, x: m.fft.rfft(x * 1j), RuntimeError, "rfft expects a real input tensor, but got ComplexFloat"),
    (lambda m, x: m.fft.ihfft(x * 1j), RuntimeError, "ihfft expects a real input tensor, but got ComplexFloat"),
    (lambda m, x: m.fft.irfft(x[0, :1] * 1j), RuntimeError, r"Invalid number of data points \(0\) specified"),
    (lambda m, x: m.fft.fftn(x, s=(2, 3), dim=(0,)), RuntimeError, "dim and shape arguments must have the same"),
    (lambda m, x: m.fft.fftn(x, dim=(0, 0)), RuntimeError, "FFT dims must be unique"),
    (lambda m, x: m.fft.fft(x.half()), RuntimeError, "Unsupported dtype Half"),
    (lambda m, x: m.fft.fft(x[0, 0]), IndexError, "Dimension specified as -1 but tensor has no dimensions"),
])
def test_errors_as_torch(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call(torch, torch.ones(4, 6))
    with pytest.raises(exc, match=msg):
        call(dj, dj.ones(4, 6))
