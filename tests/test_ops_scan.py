"""cummax / cummin / logcumsumexp / diff against PyTorch (values, indices, dtypes, errors), their gradients
against torch in float64, and the tape against jax.vjp of the lowered graph and finite differences."""
import numpy as np
import pytest

import dynajax as dj
from helpers import assert_close, compare, same

torch = pytest.importorskip("torch")

NAN = float("nan")
VALUES = {
    "cummax ties": lambda L: tuple(L.cummax(L.tensor([1.0, 3, 3, 2, 5]), 0)),
    "cummin ints": lambda L: tuple(L.cummin(L.tensor([1, 0, 0, 2]), 0)),
    "cummax 0-d": lambda L: tuple(L.cummax(L.tensor(3.0), 0)),
    "cummax bool": lambda L: tuple(L.cummax(L.tensor([True, False]), 0)),
    "cummin dim 0": lambda L: tuple(L.cummin(L.tensor([[3.0, 1], [2, 4], [2, 0]]), 0)),
    "cummax method": lambda L: tuple(L.tensor([[3.0, 1, 4], [2, 4, 1]]).cummax(-1)),
    "cummax empty": lambda L: tuple(L.cummax(L.zeros(2, 0), 1)),
    "cummax bad dim": lambda L: L.cummax(L.ones(2, 3), 2),
    "logcumsumexp -inf": lambda L: L.logcumsumexp(L.tensor([-float("inf"), 0.0]), 0),
    "logcumsumexp 0-d": lambda L: L.logcumsumexp(L.tensor(1.0), 0),
    "logcumsumexp int": lambda L: L.logcumsumexp(L.tensor([1, 2]), 0),
    "diff": lambda L: L.diff(L.tensor([1.0, 4, 9, 16])),
    "diff n=2 dim 0": lambda L: L.diff(L.tensor([[1, 2], [4, 8], [9, 1]]), n=2, dim=0),
    "diff prepend append": lambda L: L.diff(L.ones(2, 3), n=2, prepend=L.ones(2, 1), append=L.zeros(2, 2)),
    "diff promotes": lambda L: L.diff(L.tensor([1, 2, 4]), prepend=L.tensor([0.5])),
    "diff bool": lambda L: L.diff(L.tensor([True, False, False])),
    "diff n too large": lambda L: L.diff(L.tensor([1, 2, 4]), n=5),
    "diff n=0": lambda L: L.diff(L.tensor([1, 2, 4]), n=0),
    "diff 0-d": lambda L: L.diff(L.tensor(1.0)),
    "diff negative n": lambda L: L.diff(L.tensor([1.0, 2]), n=-1),
    "diff prepend rank": lambda L: L.diff(L.ones(2, 3), prepend=L.ones(3)),
}


@pytest.mark.parametrize("case", sorted(VALUES))
def test_values_like_torch(case):
    got = same(lambda L: _lists(VALUES[case](L)))
    assert got


def test_nan_is_kept_and_logcumsumexp_is_close():
    for L in (torch, dj):
        v, i = L.cummax(L.tensor([1.0, 3, NAN, 2, 5]), 0)
        assert np.isnan(v.tolist()[2:]).all() and i.tolist() == [0, 1, 2, 2, 2]
    x = np.array([[1.0, 2, 3], [-1e3, 0, 1e3]], np.float32)
    assert_close(dj.logcumsumexp(dj.tensor(x), 1), torch.logcumsumexp(torch.tensor(x), 1))


def _lists(r):
    return tuple(t.tolist() if hasattr(t, "tolist") else t for t in r) if isinstance(r, tuple) else r


X = np.random.default_rng(0).standard_normal((3, 5))
GRADS = {
    "cummax": lambda L, x: L.cummax(x, 1).values,
    "cummin": lambda L, x: L.cummin(x, 0).values,
    "logcumsumexp": lambda L, x: L.logcumsumexp(x, 1),
    "diff": lambda L, x: L.diff(x, 2, 0, append=x[:1] * 2),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_like_torch(name):
    f = GRADS[name]
    compare(lambda x: f(dj, x), lambda x: f(torch, x), X, double=name != "cummax")


@pytest.mark.parametrize("name", sorted(GRADS))
def test_tape_matches_lowered_and_finite_differences(name):
    dj.testing.check_grads(lambda x: GRADS[name](dj, x), [dj.tensor(X)])


def test_logcumsumexp_gradient_is_finite_for_far_apart_values():
    x = dj.tensor([-1000.0, 0.0, 1000.0], dtype=dj.float64, requires_grad=True)
    dj.logcumsumexp(x, 0).sum().backward()
    xt = torch.tensor([-1000.0, 0.0, 1000.0], dtype=torch.float64, requires_grad=True)
    torch.logcumsumexp(xt, 0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-12)


def test_cummax_gradient_with_repeated_picks_adds_up():
    x = dj.tensor([3.0, 1.0, 2.0], dtype=dj.float64, requires_grad=True)
    dj.cummax(x, 0).values.sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 0.0]
