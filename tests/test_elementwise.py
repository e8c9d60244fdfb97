"""Elementwise ops against PyTorch: values, gradients, double backward, promotion, kinks."""
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close, compare, gradcheck

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((4,))
POS = np.abs(A) + 0.5
UNIT = np.tanh(A) * 0.9  # inside (-1, 1), for asin/acos/atanh/erfinv

# name -> (input domain, supports double backward)
UNARY = {
    "exp": (A, True), "exp2": (A, True), "expm1": (A, True), "log": (POS, True), "log2": (POS, True),
    "log10": (POS, True), "log1p": (POS, True), "sqrt": (POS, True), "rsqrt": (POS, True),
    "reciprocal": (POS, True), "sin": (A, True), "cos": (A, True), "tan": (UNIT, True), "asin": (UNIT, True),
    "acos": (UNIT, True), "atan": (A, True), "sinh": (A, True), "cosh": (A, True), "tanh": (A, True),
    "asinh": (A, True), "atanh": (UNIT, True), "sigmoid": (A, True), "erf": (A, True), "erfc": (A, True),
    "erfinv": (UNIT, True), "lgamma": (POS, True), "digamma": (POS, True), "square": (A, True), "neg": (A, True),
    "abs": (A, True), "relu": (A, True), "sign": (A, True), "floor": (A, True), "ceil": (A, True),
    "trunc": (A, True), "frac": (A, True), "round": (A * 3, True),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name):
    x, double = UNARY[name]
    compare(getattr(dj, name), getattr(torch, name), x, double=double)
    compare(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), x.astype(np.float32), double=False)


@pytest.mark.parametrize("name", ["exp", "sin", "sqrt", "abs", "sigmoid", "tanh"])
def test_unary_int_input_promotes_like_torch(name):
    x = np.array([1, 2, 3])
    compare(getattr(dj, name), getattr(torch, name), x, grad=False)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "sqrt", "erf"])
def test_unary_finite_differences(name):
    x, _ = UNARY[name]
    gradcheck(getattr(dj, name), x if name not in ("log", "sqrt") else POS, order=2)


@pytest.mark.parametrize("name", ["exp_", "sin_", "abs_", "relu_", "sigmoid_", "clamp_"])
def test_unary_inplace_matches_torch(name):
    args = (-0.5, 0.5) if name == "clamp_" else ()

    def run(lib):
        def f(x):
            y = x * 1
            getattr(y, name)(*args)
            return y
        return f
    compare(run(dj), run(torch), A, double=True)


BINARY = {
    "add": (A, B), "sub": (A, B), "mul": (A, B), "div": (A, B + 3), "pow": (POS, B), "atan2": (A, B),
    "maximum": (A, B), "minimum": (A, B), "remainder": (A, B + 3), "fmod": (A, B + 3), "hypot": (A, B),
    "logaddexp": (A, B), "floor_divide": (A * 5, B + 3),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_torch(name):
    x, y = BINARY[name]
    differentiable = name != "floor_divide"  # PyTorch defines no derivative for it
    compare(getattr(dj, name), getattr(torch, name), x, y, grad=differentiable, double=differentiable)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "//", "%"])
@pytest.mark.parametrize("scalar", [2, 1.5])
def test_python_operators_with_scalars(op, scalar):
    f = eval(f"lambda x: (x {op} {scalar}, {scalar} {op} x)")
    # PyTorch defines no derivative for floor division, nor for ``scalar % tensor``
    compare(f, f, POS, grad=op not in ("//", "%"), double=op not in ("//", "%"))
    if op == "%":
        g = eval(f"lambda x: x % {scalar}")
        compare(g, g, POS, double=True)


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"])
def test_comparisons(name):
    x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    y = np.array([2.0, 2.0, 2.0])
    compare(getattr(dj, name), getattr(torch, name), x, y, grad=False)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise(name):
    x, y = np.array([5, 3, 12]), np.array([3, 6, 10])
    compare(getattr(dj, name), getattr(torch, name), x, y, grad=False)
    compare(getattr(dj, name), getattr(torch, name), x > 4, y > 4, grad=False)


def test_operator_dunders_cover_torch():
    x, y = np.array([5, 3, 12]), np.array([3, 6, 10])
    for f in (lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: ~a, lambda a, b: -a,
              lambda a, b: a << 1, lambda a, b: b >> 1, lambda a, b: abs(-a), lambda a, b: +a):
        compare(f, f, x, y, grad=False)


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.5), (None, 0.2), (-0.3, None)])
def test_clamp_scalar_bounds(lo, hi):
    compare(lambda x: dj.clamp(x, lo, hi), lambda x: torch.clamp(x, lo, hi), A, double=True)


def test_clamp_tensor_bounds():
    lo, hi = -np.abs(B) * 0.5, np.abs(B) * 0.5
    compare(lambda x, a, b: dj.clamp(x, a, b), lambda x, a, b: torch.clamp(x, a, b), A, lo, hi, double=True)


def test_where_and_lerp():
    c = A > 0
    compare(lambda c, x, y: dj.where(c, x, y), lambda c, x, y: torch.where(c, x, y), c, A, B, double=True)
    compare(lambda x, y: dj.lerp(x, y, 0.3), lambda x, y: torch.lerp(x, y, 0.3), A, B, double=True)


def test_add_sub_alpha_and_div_rounding():
    compare(lambda x, y: dj.add(x, y, alpha=2), lambda x, y: torch.add(x, y, alpha=2), A, B, double=True)
    compare(lambda x, y: dj.sub(x, y, alpha=0.5), lambda x, y: torch.sub(x, y, alpha=0.5), A, B, double=True)
    for mode in ("trunc", "floor"):
        compare(lambda x, y: dj.div(x, y, rounding_mode=mode), lambda x, y: torch.div(x, y, rounding_mode=mode),
                A * 5, B + 3, grad=False)
        compare(lambda x, y: dj.div(x, y, rounding_mode=mode), lambda x, y: torch.div(x, y, rounding_mode=mode),
                np.array([-7, 7, 5]), np.array([2, -2, 3]), grad=False)


def test_kinks_match_torch():
    """At kinks PyTorch picks specific subgradients; dynajax must pick the same ones."""
    x = np.array([-1.0, 0.0, 1.0, 2.0])
    compare(dj.abs, torch.abs, x)
    compare(dj.relu, torch.relu, x)
    compare(lambda t: dj.clamp(t, 0.0, 1.0), lambda t: torch.clamp(t, 0.0, 1.0), x)
    compare(lambda a, b: dj.maximum(a, b), lambda a, b: torch.maximum(a, b), x, np.array([0.0, 0.0, 1.0, 3.0]))
    compare(lambda a, b: dj.minimum(a, b), lambda a, b: torch.minimum(a, b), x, np.array([0.0, 0.0, 1.0, 3.0]))
    compare(lambda t: t ** 2.0, lambda t: t ** 2.0, x, double=True)
    compare(lambda t: dj.sqrt(t), lambda t: torch.sqrt(t), np.array([0.0, 1.0]))
    compare(lambda a, b: a ** b, lambda a, b: a ** b, np.array([0.0, 2.0]), np.array([0.0, 1.5]))


def test_out_argument_writes_in_place():
    x = dj.tensor([1.0, 2.0])
    out = dj.zeros(2)
    r = dj.exp(x, out=out)
    assert r is out
    assert_close(out, torch.exp(torch.tensor([1.0, 2.0])))
    assert out._version == 1


def test_broadcast_mismatch_names_shapes():
    with pytest.raises(RuntimeError, match=r"size of tensor a \(3\) must match the size of tensor b \(4\) at "
                                           r"non-singleton dimension 1"):
        dj.ones(2, 3) + dj.ones(4)


def test_inplace_result_type_cannot_downcast():
    x = dj.tensor([1, 2])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(1.5)
    assert x.tolist() == [1, 2] and x._version == 0
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        dj.ones(3).add_(dj.ones(2, 3))


def test_leaky_relu_nan_to_num():
    from dynajax.ops.elementwise import leaky_relu
    compare(lambda t: leaky_relu(t, 0.2), lambda t: torch.nn.functional.leaky_relu(t, 0.2), A, double=True)
    x = np.array([np.nan, np.inf, -np.inf, 1.0])
    compare(lambda t: dj.nan_to_num(t, nan=0.5, posinf=9.0, neginf=-9.0),
            lambda t: torch.nan_to_num(t, nan=0.5, posinf=9.0, neginf=-9.0), x, grad=False)
