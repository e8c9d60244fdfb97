"""isclose / allclose / equal against PyTorch: values, NaN and inf handling, integer and bool inputs, errors."""
import pytest

import dynajax as dj
from helpers import raises_like_torch, same

pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
CASES = {
    "float": lambda L: L.isclose(L.tensor([1.0, 1.1, NAN, INF, -INF]), L.tensor([1.000001, 1.0, NAN, INF, INF])),
    "equal_nan": lambda L: L.isclose(L.tensor([1.0, NAN]), L.tensor([1.0, NAN]), equal_nan=True),
    "tolerances": lambda L: L.isclose(L.tensor([1.0, 2.0]), L.tensor([1.2, 2.5]), rtol=0.1, atol=0.05),
    "zero tolerances": lambda L: L.isclose(L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0000001]), rtol=0, atol=0),
    "int": lambda L: L.isclose(L.tensor([1, 2]), L.tensor([1, 3]), atol=1),
    "bool": lambda L: L.isclose(L.tensor([True, False]), L.tensor([True, True])),
    "broadcast": lambda L: L.isclose(L.ones(2, 3), L.ones(3)),
    "method": lambda L: L.ones(2).isclose(L.ones(2) + 1e-9),
    "dtype mismatch": lambda L: L.isclose(L.ones(2), L.ones(2, dtype=L.float64)),
    "negative rtol": lambda L: L.isclose(L.ones(2), L.ones(2), rtol=-1),
    "negative atol": lambda L: L.isclose(L.ones(2), L.ones(2), atol=-1),
    "number other": lambda L: L.isclose(L.ones(2), 1.0),
    "allclose": lambda L: L.allclose(L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0 + 1e-7])),
    "allclose false": lambda L: L.allclose(L.tensor([1.0, 2.0]), L.tensor([1.0, 2.1])),
    "allclose broadcast": lambda L: L.allclose(L.ones(2), L.ones(1)),
    "allclose nan": lambda L: L.allclose(L.tensor([NAN]), L.tensor([NAN]), equal_nan=True),
    "allclose dtype": lambda L: L.allclose(L.ones(2), L.ones(2, dtype=L.float64)),
    "equal": lambda L: L.equal(L.tensor([1, 2]), L.tensor([1, 2])),
    "equal dtypes": lambda L: L.equal(L.ones(2), L.ones(2, dtype=L.float64)),
    "equal shapes": lambda L: L.equal(L.ones(2), L.ones(3)),
    "equal broadcastable": lambda L: L.equal(L.ones(1, 2), L.ones(2)),
    "equal nan": lambda L: L.equal(L.tensor([NAN]), L.tensor([NAN])),
    "equal method": lambda L: L.ones(2).equal(L.zeros(2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_torch(case):
    same(CASES[case])


def test_results_need_no_gradient():
    x = dj.ones(2, requires_grad=True)
    assert not dj.isclose(x, x).requires_grad
    assert dj.allclose(x, x) is True and dj.equal(x, x) is True


def test_shape_mismatch_raises_like_torch():
    raises_like_torch(lambda L: L.isclose(L.ones(2), L.ones(3)), RuntimeError,
                      "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0")
