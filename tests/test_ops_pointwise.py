"""acosh, sinc, logit, xlogy, copysign, signbit, fmax/fmin, addcmul/addcdiv (and their in-place forms)
against PyTorch: values, dtypes, errors; gradients against torch in float64 (their kinks included), and the
tape against jax.vjp of the lowered graph and finite differences."""
import numpy as np
import pytest

import dynajax as dj
from helpers import compare, raises_like_torch, same

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
CASES = {
    "acosh int": lambda L: L.acosh(L.tensor([1, 2])),
    "arccosh": lambda L: L.arccosh(L.tensor([1.5], dtype=L.float64)),
    "sinc": lambda L: L.sinc(L.tensor([0, 1, 2])),
    "logit": lambda L: L.logit(L.tensor([0.0, 0.3, 1.0, 2.0])).nan_to_num(-7.0),
    "logit eps": lambda L: L.logit(L.tensor([0.0, 0.3, 1.0, 2]), eps=0.1),
    "logit_": lambda L: L.tensor([0.25, 0.5]).logit_(),
    "xlogy": lambda L: L.xlogy(L.tensor([0.0, 1, 0, 0, 2]), L.tensor([NAN, 0.0, 0.0, INF, 3])).nan_to_num(-7.0),
    "xlogy scalar x": lambda L: L.xlogy(2, L.tensor([3.0])),
    "xlogy scalar y": lambda L: L.xlogy(L.tensor([0, 1]), 3),
    "xlogy_": lambda L: L.tensor([1.0, 0.0]).xlogy_(L.tensor([2.0, 0.0])),
    "copysign": lambda L: L.copysign(L.tensor([1, 2]), -1),
    "copysign zeros": lambda L: L.copysign(L.tensor([1.0, -2, 0]), L.tensor([-0.0, 0.0, -1])),
    "signbit": lambda L: L.signbit(L.tensor([-0.0, 0.0, -1, NAN])),
    "signbit int": lambda L: L.signbit(L.tensor([1, -2])),
    "fmax": lambda L: L.fmax(L.tensor([1, 2, 3]), L.tensor([1.5, NAN, NAN])),
    "fmin nan both": lambda L: L.fmin(L.tensor([NAN, 1.0]), L.tensor([NAN, NAN])).nan_to_num(-7.0),
    "fmax number": lambda L: L.fmax(L.tensor([1.0, 2]), 1),
    "addcmul": lambda L: L.addcmul(L.ones(2), L.tensor([2.0, 3]), L.tensor([4.0, 5]), value=0.5),
    "addcmul ints truncate value": lambda L: L.addcmul(L.ones(2, dtype=L.int64), L.ones(2, dtype=L.int64),
                                                       L.ones(2, dtype=L.int64), value=0.5),
    "addcmul promotes": lambda L: L.addcmul(L.ones(2, dtype=L.int64), L.ones(2), L.ones(2, dtype=L.int64), value=2),
    "addcmul broadcast": lambda L: L.addcmul(L.ones(2, 1), L.ones(3), L.ones(2, 3)),
    "addcmul_": lambda L: L.ones(2).addcmul_(L.ones(2), L.tensor([2.0, 3]), value=3),
    "addcmul_ int self": lambda L: L.ones(2, dtype=L.int64).addcmul_(L.ones(2), L.ones(2)),
    "addcdiv": lambda L: L.addcdiv(L.ones(2), L.tensor([2.0, 3]), L.tensor([4.0, 5]), value=2),
    "addcdiv ints": lambda L: L.addcdiv(L.ones(2), L.ones(2, dtype=L.int64), L.ones(2, dtype=L.int64)),
    "addcdiv int float": lambda L: L.addcdiv(L.ones(2, dtype=L.int64), L.ones(2, dtype=L.int64), L.ones(2)),
    "addcdiv_": lambda L: L.ones(2).addcdiv_(L.ones(2), L.tensor([2.0, 4])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_torch(case):
    same(CASES[case])


X = np.random.default_rng(0).standard_normal((2, 3))
Y = np.random.default_rng(1).standard_normal((2, 3))
KINKS = np.array([[0.0, 1.0, -1.0], [0.0, 2.0, 0.5]])
GRADS = {
    "acosh": lambda L, x, y: L.acosh(x.abs() + 1.2),
    "sinc": lambda L, x, y: L.sinc(x),
    "logit": lambda L, x, y: L.logit(x.sigmoid()),
    "logit eps": lambda L, x, y: L.logit(x.sigmoid(), eps=0.3),
    "xlogy": lambda L, x, y: L.xlogy(x, y.abs() + 0.1),
    "copysign": lambda L, x, y: L.copysign(x, y),
    "fmax": lambda L, x, y: L.fmax(x, y),
    "fmin": lambda L, x, y: L.fmin(x, y),
    "addcmul": lambda L, x, y: L.addcmul(x, y, x * y, value=0.7),
    "addcdiv": lambda L, x, y: L.addcdiv(y, x, y.exp(), value=-1.5),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_like_torch(name):
    f = GRADS[name]
    compare(lambda x, y: f(dj, x, y), lambda x, y: f(torch, x, y), X, Y, double=True)


@pytest.mark.parametrize("name", ["sinc", "xlogy", "copysign", "fmax", "fmin"])
def test_gradients_at_kinks_like_torch(name):
    f = GRADS[name]
    y = KINKS[::-1].copy() if name != "xlogy" else np.abs(KINKS) + 0.5
    compare(lambda a, b: f(dj, a, b), lambda a, b: f(torch, a, b), KINKS, y)


@pytest.mark.parametrize("name", sorted(GRADS))
def test_tape_matches_lowered_and_finite_differences(name):
    dj.testing.check_grads(lambda x, y: GRADS[name](dj, x, y), [dj.tensor(X), dj.tensor(Y)])


def test_lowered_gradients_at_kinks_match_the_tape():
    for name in ("sinc", "copysign"):
        dj.testing.check_grads(lambda x: GRADS[name](dj, x, dj.tensor(KINKS[::-1].copy())), [dj.tensor(KINKS)],
                               order=1, fd_atol=np.inf)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_shape_mismatch_names_input_and_tensor1(name):
    raises_like_torch(lambda L: getattr(L, name)(L.ones(2), L.ones(3), L.ones(2)), RuntimeError,
                      "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0")
