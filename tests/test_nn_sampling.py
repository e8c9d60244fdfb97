"""grid_sample (bilinear / nearest, padding zeros / border / reflection, align_corners) and affine_grid
against PyTorch: values, input and grid gradients in float64, errors; the tape against jax.vjp of the lowered
graph and finite differences."""
import itertools
import warnings

import numpy as np
import pytest

import dynajax as dj
from helpers import same

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5))
G = RNG.uniform(-1.3, 1.3, (2, 6, 7, 2))
G[0, 0, 0], G[0, 0, 1], G[1, 0, 0] = [1.0, -1.0], [0.0, 0.0], [-1.0, 1.0]   # edges and the centre exactly


def _run(L, mode, padding_mode, align_corners):
    x, g = L.tensor(X, requires_grad=True), L.tensor(G, requires_grad=True)
    out = L.nn.functional.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    cot = L.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)) % 7 - 3)
    (out * cot).sum().backward()
    gg = g.grad if g.grad is not None else L.zeros(tuple(g.shape), dtype=L.float64)   # (nearest: no gradient)
    return [np.asarray(t.tolist()) for t in (out, x.grad, gg)]


@pytest.mark.parametrize("mode,padding_mode,align_corners",
                         list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"),
                                                (True, False))))
def test_grid_sample_like_torch(mode, padding_mode, align_corners):
    for what, a, b in zip(("output", "input grad", "grid grad"), _run(torch, mode, padding_mode, align_corners),
                          _run(dj, mode, padding_mode, align_corners)):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10, err_msg=what)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")
@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("shape,size", [((2, 2, 3), (2, 3, 4, 5)), ((2, 3, 4), (2, 3, 2, 4, 5)),
                                        ((1, 2, 3), (1, 1, 1, 3))])
def test_affine_grid_like_torch(shape, size, align_corners):
    theta = RNG.standard_normal(shape)
    a, b = (np.asarray(L.nn.functional.affine_grid(L.tensor(theta), size, align_corners=align_corners).tolist())
            for L in (torch, dj))
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")
def test_unit_size_grid_warns_like_torch():
    for L in (torch, dj):
        with pytest.warns(UserWarning, match="affine_grid behavior has changed for unit-size grids"):
            L.nn.functional.affine_grid(L.ones(1, 2, 3), (1, 1, 1, 3), align_corners=True)


def test_align_corners_default_warns_like_torch():
    for L in (torch, dj):
        with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
            L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 1, 1, 2))


ERRORS = {
    "mode": lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 1, 1, 2), mode="foo"),
    "padding": lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 1, 1, 2), padding_mode="foo"),
    "grid last dim": lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 1, 1, 1)),
    "batch": lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(2, 1, 1, 2)),
    "dtype": lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 1, 1, 2, dtype=L.float64)),
    "theta shape": lambda L: L.nn.functional.affine_grid(L.ones(1, 3, 3), (1, 1, 2, 2)),
    "size rank": lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3), (1, 1, 2)),
    "size zero": lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3), (1, 1, 0, 2)),
    "theta int": lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3, dtype=L.int64), (1, 1, 2, 2)),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_like_torch(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(ERRORS[case])


def test_tape_matches_lowered_and_finite_differences():
    inside = RNG.uniform(-0.9, 0.9, (2, 3, 2, 2))
    for pm in ("zeros", "border", "reflection"):
        dj.testing.check_grads(lambda x, g: dj.nn.functional.grid_sample(x, g, padding_mode=pm, align_corners=False),
                               [X, inside], order=1)
    dj.testing.check_grads(lambda t: dj.nn.functional.grid_sample(
        dj.tensor(X), dj.nn.functional.affine_grid(t, (2, 3, 3, 4), align_corners=True), align_corners=True),
        [RNG.standard_normal((2, 2, 3)) * 0.3], order=1)
