"""dynajax.signal.windows against torch.signal.windows: values for a few lengths, sym, dtypes, and errors."""
import numpy as np
import pytest
import torch

import dynajax as dj

WINDOWS = {
    "bartlett": {}, "blackman": {}, "cosine": {}, "hamming": {}, "hann": {}, "nuttall": {},
    "exponential": {"tau": 0.7}, "gaussian": {"std": 1.3}, "kaiser": {"beta": 5.0},
    "general_cosine": {"a": [0.46, 0.23, 0.31]}, "general_hamming": {"alpha": 0.6},
}
ERRORS = {   # (kwargs, M): each raises the same exception, with the same message, as torch's
    "bartlett": ({}, -1), "blackman": ({}, -2), "cosine": ({}, -1), "hamming": ({}, -1), "hann": ({}, -3),
    "nuttall": ({}, -1), "exponential": ({"tau": -1.0}, 4), "gaussian": ({"std": 0.0}, 4),
    "kaiser": ({"beta": -2.0}, 4), "general_cosine": ({"a": []}, 4), "general_hamming": ({}, -1),
}


@pytest.mark.parametrize("name", sorted(WINDOWS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values(name, dtype):
    for M in (0, 1, 5, 8):
        for sym in (True, False):
            want = getattr(torch.signal.windows, name)(M, sym=sym, dtype=getattr(torch, dtype), **WINDOWS[name])
            got = getattr(dj.signal.windows, name)(M, sym=sym, dtype=getattr(dj, dtype), **WINDOWS[name])
            assert str(got.dtype) == str(want.dtype).replace("torch", "dynajax")
            assert tuple(got.shape) == tuple(want.shape)
            tol = 1e-6 if dtype == "float32" else 1e-12
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol, err_msg=f"{name} M={M} {sym}")


def test_default_dtype_and_requires_grad():
    w = dj.signal.windows.hann(6, requires_grad=True)
    assert w.dtype == dj.float32 and w.requires_grad and w.is_leaf
    assert dj.signal.windows.exponential(5, sym=False, center=1.0).shape == (5,)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors(name):
    kwargs, M = ERRORS[name]
    with pytest.raises(Exception) as want:
        getattr(torch.signal.windows, name)(M, **kwargs)
    with pytest.raises(want.type, match=None) as got:
        getattr(dj.signal.windows, name)(M, **kwargs)
    assert str(got.value) == str(want.value)


def test_dtype_errors():
    with pytest.raises(ValueError, match="hann expects float32|general_cosine expects float32"):
        dj.signal.windows.hann(4, dtype=dj.int64)
    with pytest.raises(ValueError, match="Center must be None for symmetric windows"):
        dj.signal.windows.exponential(4, center=1.0)
