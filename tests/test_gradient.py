"""dynajax.gradient against torch.gradient: scalar, per-dim and coordinate spacing, both edge orders,
float64 gradients through it, and torch's argument errors."""
import numpy as np
import pytest
import torch

import dynajax as dj

CASES = [
    ((5,), {}),
    ((5,), {"spacing": 2.0}),
    ((5, 5), {"edge_order": 2}),
    ((5, 4), {"spacing": [2.0, 2.1]}),
    ((4, 4, 4), {"dim": [0, 1], "spacing": [2.0, 1.0], "edge_order": 2}),
    ((3, 3, 3), {"dim": [0, -1], "spacing": [[1.1, 2.0, 3.5], [4.0, 2.0, 6.0]]}),
    ((3, 4, 3), {"dim": [0, 2], "spacing": [[1.0, 3.0, 2.0], [8.0, 6.0, 1.0]], "edge_order": 2}),
    ((2, 3), {"dim": 1}),
]


def _spacing(kwargs, lib):
    out = dict(kwargs)
    if isinstance(out.get("spacing"), list) and isinstance(out["spacing"][0], list):
        out["spacing"] = [lib.tensor(c, dtype=lib.float64) for c in out["spacing"]]
    return out


@pytest.mark.parametrize("shape,kwargs", CASES)
def test_values_and_grads(shape, kwargs):
    x = np.random.default_rng(0).standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    dx = dj.tensor(x, requires_grad=True)
    want = torch.gradient(tx, **_spacing(kwargs, torch))
    got = dj.gradient(dx, **_spacing(kwargs, dj))
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-10, atol=1e-12)
    sum(((w * (i + 1)) ** 2).sum() for i, w in enumerate(want)).backward()
    sum(((g * (i + 1)) ** 2).sum() for i, g in enumerate(got)).backward()
    np.testing.assert_allclose(dx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_int_input():
    assert str(dj.gradient(dj.tensor([1, 4, 9, 16]))[0].dtype) == "dynajax.float32"
    np.testing.assert_allclose(dj.gradient(dj.tensor([1, 4, 9, 16]), spacing=2)[0].numpy(), [1.5, 2.0, 3.0, 3.5])


@pytest.mark.parametrize("kwargs", [{"dim": [1, -1]}, {"dim": [1, 1], "spacing": [1.0]}, {"edge_order": 3},
                                    {"dim": 3}, {"spacing": [1.0, 2.0, 3.0]}])
def test_errors(kwargs):
    with pytest.raises(Exception) as want:
        torch.gradient(torch.ones(3, 3), **kwargs)
    with pytest.raises(want.type) as got:
        dj.gradient(dj.ones(3, 3), **kwargs)
    assert str(got.value) == str(want.value)


def test_short_dim():
    for lib in (torch, dj):
        with pytest.raises(RuntimeError, match="at least edge_order\\+1"):
            lib.gradient(lib.ones(2, 4), edge_order=2)
