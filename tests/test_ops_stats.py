"""bincount / histc / quantile / nanquantile / mode against PyTorch (values, dtypes, errors); gradients of
quantile and mode against torch in float64 and the tape against jax.vjp of the lowered graph."""
import numpy as np
import pytest

import dynajax as dj
from helpers import compare, same

torch = pytest.importorskip("torch")

NAN = float("nan")
Q = [[1.0, 5, 2, 8], [3, NAN, 1, 0]]
CASES = {
    "mode": lambda L: tuple(L.mode(L.tensor([3, 1, 3, 1, 2, 1, 3]))),
    "mode dim": lambda L: tuple(L.mode(L.tensor([[3.0, 1, 3, 2], [5, 5, 4, 4]]), 1)),
    "mode keepdim": lambda L: tuple(L.tensor([[3.0, 1, 3], [5, 5, 4]]).mode(0, keepdim=True)),
    "mode 0-d": lambda L: tuple(L.mode(L.tensor(3.0))),
    "mode empty dim": lambda L: L.mode(L.zeros(2, 0), 1),
    "mode empty other": lambda L: tuple(L.mode(L.zeros(2, 0), 0)),
    "bincount": lambda L: L.bincount(L.tensor([1, 1, 3])),
    "bincount minlength": lambda L: L.bincount(L.tensor([1, 1, 3]), minlength=6),
    "bincount weights": lambda L: L.bincount(L.tensor([1, 1, 3]), weights=L.tensor([0.5, 1, 2])),
    "bincount int weights": lambda L: L.bincount(L.tensor([1, 1, 3]), weights=L.tensor([1, 2, 3])),
    "bincount empty": lambda L: L.bincount(L.tensor([], dtype=L.int64)),
    "bincount negative": lambda L: L.bincount(L.tensor([-1, 1])),
    "bincount 2-d": lambda L: L.bincount(L.tensor([[1, 1]])),
    "bincount float": lambda L: L.bincount(L.tensor([1.0, 1])),
    "bincount minlength < 0": lambda L: L.bincount(L.tensor([1]), minlength=-1),
    "bincount weights size": lambda L: L.bincount(L.tensor([1, 1]), weights=L.ones(3)),
    "histc": lambda L: L.histc(L.tensor([1.0, 2, 1, 4, 5]), bins=4, min=0, max=3),
    "histc data range": lambda L: L.histc(L.tensor([1.0, 2, 1, 4, 5]), bins=4),
    "histc constant": lambda L: L.histc(L.tensor([2.0, 2, 2]), bins=3),
    "histc double": lambda L: L.histc(L.tensor([0.5, 0.25, 1.0], dtype=L.float64), bins=2, min=0, max=1),
    "histc empty": lambda L: L.histc(L.tensor([], dtype=L.float32), bins=3),
    "histc nan range": lambda L: L.histc(L.tensor([1.0, NAN]), bins=3),
    "histc inf range": lambda L: L.histc(L.tensor([1.0, float("inf")]), bins=3),
    "histc int": lambda L: L.histc(L.tensor([1, 2]), bins=4),
    "histc bins": lambda L: L.histc(L.tensor([1.0]), bins=0),
    "histc min > max": lambda L: L.histc(L.tensor([1.0]), bins=3, min=3, max=1),
    "quantile q range": lambda L: L.quantile(L.tensor(Q), 1.3),
    "quantile q tensor range": lambda L: L.quantile(L.tensor(Q), L.tensor([1.3])),
    "quantile q 2-d": lambda L: L.quantile(L.tensor(Q), L.tensor([[0.3]])),
    "quantile q dtype": lambda L: L.quantile(L.tensor(Q), L.tensor([0.3], dtype=L.float64)),
    "quantile int": lambda L: L.quantile(L.tensor([1, 2]), 0.3),
    "quantile empty": lambda L: L.quantile(L.zeros(0), 0.3),
    "quantile interpolation": lambda L: L.quantile(L.tensor(Q), 0.3, interpolation="foo"),
    "quantile 0-d": lambda L: L.quantile(L.tensor(2.0), 0.3, dim=0),
    "quantile 0-d keepdim": lambda L: L.quantile(L.tensor(2.0), 0.3, dim=0, keepdim=True),
    "nanquantile all nan": lambda L: L.nanquantile(L.tensor([NAN] * 3), 0.3).nan_to_num(-7.0),
}


def _lists(r):
    return tuple(t.tolist() if hasattr(t, "tolist") else t for t in r) if isinstance(r, tuple) else r


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_torch(case):
    same(lambda L: _lists(CASES[case](L)))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("form", ["scalar dim", "vector keepdim", "all", "all keepdim", "dim 0"])
@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
def test_quantile_values(fn, form, interpolation):
    def run(L):
        x, f = L.tensor(Q, dtype=L.float64), getattr(L, fn)
        q = L.tensor([0.0, 0.25, 0.5, 1.0], dtype=L.float64)
        r = {"scalar dim": lambda: f(x, 0.3, dim=1, interpolation=interpolation),
             "vector keepdim": lambda: f(x, q, dim=1, keepdim=True, interpolation=interpolation),
             "all": lambda: f(x, q, interpolation=interpolation),
             "all keepdim": lambda: f(x, 0.7, keepdim=True, interpolation=interpolation),
             "dim 0": lambda: x.__getattribute__(fn)(q, 0, interpolation=interpolation)}[form]()
        return np.asarray(r.tolist()), str(r.dtype).split(".")[-1]
    (a, da), (b, db) = run(torch), run(dj)
    assert a.shape == b.shape and da == db
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


X = np.random.default_rng(0).standard_normal((3, 5))
GRADS = {
    "quantile": lambda L, x: L.quantile(x, L.tensor([0.2, 0.5, 0.9], dtype=x.dtype), dim=1),
    "nanquantile": lambda L, x: L.nanquantile(x, 0.35, dim=0, interpolation="midpoint"),
    "mode": lambda L, x: L.mode(x.round(), 1).values * x[:, :1],
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_like_torch(name):
    compare(lambda x: GRADS[name](dj, x), lambda x: GRADS[name](torch, x), X)


def test_tape_matches_lowered_and_finite_differences():
    dj.testing.check_grads(lambda x: GRADS["quantile"](dj, x), [dj.tensor(X)])
    dj.testing.check_grads(lambda x: dj.mode(x, 0).values, [dj.tensor(X)])
