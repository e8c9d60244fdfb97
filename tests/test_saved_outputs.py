"""What an op saves for backward, side by side with PyTorch: an in-place change to a tensor the op saved
makes backward raise, one to a tensor it did not save does not (``Op.defvjp``'s ``saves_out``); and the
integer semantics of ``pow`` with negative exponents."""
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close, compare

X = [[0.3, 0.6], [0.2, 0.4]]


def _e(lib):
    return lib.tensor([2.0, 3.0], dtype=lib.float64)


# (name, f(lib, x) -> y, mutate(y)): ``mutate`` runs on ``y`` after ``f``, then ``y`` (its first
# element if a tuple) is summed and differentiated
CASES = [
    ("x ** 2", lambda lib, x: x ** 2, lambda y: y.mul_(3)),
    ("x ** 2.5", lambda lib, x: x ** 2.5, lambda y: y.mul_(3)),
    ("x ** 0", lambda lib, x: x ** 0, lambda y: y.mul_(3)),
    ("pow(x, -1)", lambda lib, x: lib.pow(x, -1), lambda y: y.mul_(3)),
    ("(x * 1).pow_(2)", lambda lib, x: (x * 1).pow_(2), lambda y: y.mul_(3)),
    ("x ** float tensor", lambda lib, x: x ** _e(lib), lambda y: y.mul_(3)),
    ("x ** int tensor", lambda lib, x: x ** lib.tensor([2, 3]), lambda y: y.mul_(3)),
    ("x ** 0-d tensor", lambda lib, x: x ** lib.tensor(2.0, dtype=lib.float64), lambda y: y.mul_(3)),
    ("2 ** x", lambda lib, x: 2 ** x, lambda y: y.mul_(3)),
    ("x ** 2 with the base changed", lambda lib, x: (lambda h: (h ** 2, h))(x * 1), lambda y: y[1].mul_(3)),
    ("x.max(0).values", lambda lib, x: x.max(0).values, lambda y: y.mul_(3)),
    ("x.max(0) indices changed", lambda lib, x: x.max(0), lambda y: y[1].add_(0)),
    ("x.min(1).values", lambda lib, x: x.min(1).values, lambda y: y.mul_(3)),
    ("x.min(1) indices changed", lambda lib, x: x.min(1), lambda y: y[1].add_(0)),
    ("x.median(0).values", lambda lib, x: x.median(0).values, lambda y: y.mul_(3)),
    ("x.nanmedian(0).values", lambda lib, x: x.nanmedian(0).values, lambda y: y.mul_(3)),
    ("x.kthvalue(2, 0).values", lambda lib, x: x.kthvalue(2, 0).values, lambda y: y.mul_(3)),
    ("x.kthvalue(2, 0) indices changed", lambda lib, x: x.kthvalue(2, 0), lambda y: y[1].add_(0)),
    ("x.max()", lambda lib, x: x.max(), lambda y: y.mul_(3)),
    ("x.amax(0)", lambda lib, x: x.amax(0), lambda y: y.mul_(3)),
    ("erfinv", lambda lib, x: x.erfinv(), lambda y: y.mul_(3)),
    ("erfinv with the input changed", lambda lib, x: (lambda h: (h.erfinv(), h))(x * 1), lambda y: y[1].mul_(3)),
    ("exp", lambda lib, x: x.exp(), lambda y: y.mul_(2)),
    ("sqrt", lambda lib, x: x.sqrt(), lambda y: y.mul_(2)),
    ("tanh", lambda lib, x: x.tanh(), lambda y: y.mul_(2)),
    ("sigmoid", lambda lib, x: x.sigmoid(), lambda y: y.mul_(2)),
    ("relu", lambda lib, x: x.relu(), lambda y: y.mul_(2)),
    ("erf", lambda lib, x: x.erf(), lambda y: y.mul_(2)),
    ("prod", lambda lib, x: x.prod(), lambda y: y.mul_(2)),
    ("prod(0)", lambda lib, x: x.prod(0), lambda y: y.mul_(2)),
    ("cumprod(0)", lambda lib, x: x.cumprod(0), lambda y: y.mul_(2)),
    ("logsumexp(0)", lambda lib, x: x.logsumexp(0), lambda y: y.mul_(2)),
    ("var(0)", lambda lib, x: x.var(0), lambda y: y.mul_(2)),
    ("norm(p=1)", lambda lib, x: x.norm(p=1), lambda y: y.mul_(2)),
]


def _inplace_after(lib, f, mutate):
    """``x.grad`` (float64) after ``f``, ``mutate`` and backward, or the type of the error backward raised."""
    x = lib.tensor(X, dtype=lib.float64, requires_grad=True)
    y = f(lib, x)
    mutate(y)
    try:
        (y[0] if isinstance(y, tuple) else y).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return RuntimeError
    return x.grad


@pytest.mark.parametrize("name, f, mutate", CASES, ids=[c[0] for c in CASES])
def test_inplace_after_op_raises_exactly_where_torch_does(name, f, mutate):
    want, got = _inplace_after(torch, f, mutate), _inplace_after(dj, f, mutate)
    if want is RuntimeError:
        assert got is RuntimeError, f"{name}: torch raises, dynajax does not"
    else:
        assert got is not RuntimeError, f"{name}: dynajax raises, torch does not"
        assert_close(got, want)


A = np.array([[0.3, -0.6, 1.5], [0.2, 0.4, -0.1]])
P = np.array([[0.3, 0.6, 1.5], [0.2, 0.4, 2.0]])


@pytest.mark.parametrize("fn", [
    lambda x: x ** 3, lambda x: x ** 0, lambda x: x ** -2, lambda x: (x.abs() + 0.1).pow(2.5), lambda x: 2 ** x,
    lambda x: x.erfinv() * 0.9, lambda x: x.prod(), lambda x: x.prod(1), lambda x: x.max(0).values,
    lambda x: x.min(1).values, lambda x: x.median(1).values, lambda x: x.kthvalue(2, 1).values,
], ids=["pow3", "pow0", "pow-2", "pow2.5", "2**x", "erfinv", "prod", "prod1", "max0", "min1", "median1", "kth"])
def test_float64_gradients_of_ops_whose_saving_changed(fn):
    compare(fn, fn, A * 0.5, double=True)


def test_float64_gradients_of_pow_with_a_tensor_exponent():
    compare(lambda x, e: x ** e, lambda x, e: x ** e, P, A, double=True)


def test_prod_gradient_with_zeros_matches_torch():
    z = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]])
    compare(lambda x: x.prod(1), lambda x: x.prod(1), z, double=True)
    compare(lambda x: x.prod(), lambda x: x.prod(), z[2], double=True)


# ---------------------------------------------------------------- integers to negative powers
def _result(f, lib):
    try:
        r = f(lib)
    except RuntimeError as e:
        return type(e), str(e)
    return r.tolist(), str(r.dtype).split(".")[-1]


def _b(lib, dtype="int64"):
    return lib.tensor([2, 3, 1, -1, 0, -2], dtype=getattr(lib, dtype))


@pytest.mark.parametrize("f", [
    lambda L: _b(L) ** -1, lambda L: L.pow(_b(L), -2), lambda L: _b(L).pow_(-1), lambda L: _b(L).__ipow__(-3),
    lambda L: _b(L, "int32") ** -1, lambda L: _b(L, "int8") ** -1, lambda L: L.tensor([2], dtype=L.uint8) ** -1,
    lambda L: L.tensor([True, False]) ** -1, lambda L: _b(L) ** np.int64(-1),
    lambda L: _b(L) ** -1.0, lambda L: _b(L) ** 0, lambda L: _b(L) ** 2, lambda L: _b(L) ** True,
    lambda L: _b(L).double() ** -1,
], ids=["**-1", "pow-2", "pow_", "ipow", "int32", "int8", "uint8", "bool", "np.int64", "**-1.0", "**0", "**2",
        "**True", "float64"])
def test_integer_tensor_to_a_python_power_matches_torch(f):
    assert _result(f, dj) == _result(f, torch)


E = [-1, -2, -3, -4, -1, -1, 0, 3]
BASE = [2, 3, 1, -1, 0, -2, -5, -3]


@pytest.mark.parametrize("f", [
    lambda L: L.tensor(BASE) ** L.tensor(E),
    lambda L: L.tensor(BASE, dtype=L.int32) ** L.tensor(E, dtype=L.int32),
    lambda L: L.tensor(BASE, dtype=L.int8) ** L.tensor(E, dtype=L.int8),
    lambda L: L.tensor(BASE).pow_(L.tensor(E)),
    lambda L: L.tensor(BASE) ** L.tensor(-1),
    lambda L: 2 ** L.tensor(E), lambda L: -1 ** L.tensor(E), lambda L: (-1) ** L.tensor(E),
    lambda L: L.pow(1, L.tensor(E)), lambda L: L.pow(0, L.tensor(E)),
    lambda L: L.tensor(BASE) ** L.tensor(E, dtype=L.float64),
    lambda L: L.tensor([[1], [-1], [2]]) ** L.tensor([-1, -2, -3, 2]),
], ids=["int64", "int32", "int8", "pow_", "0-d exponent", "2**", "-1**", "(-1)**", "pow(1,)", "pow(0,)",
        "float exponent", "broadcast"])
def test_integer_tensor_to_negative_tensor_powers_matches_torch(f):
    assert _result(f, dj) == _result(f, torch)


def test_integer_negative_powers_are_right_under_compile():
    f = dj.compile(lambda b, e: b ** e + 0)
    b, e = dj.tensor(BASE), dj.tensor(E)
    want = (torch.tensor(BASE) ** torch.tensor(E)).tolist()
    assert [f(b, e).tolist() for _ in range(3)] == [want] * 3
    assert f.stats.compiles == 1 and f.stats.graph_breaks == 0


def test_compiled_step_with_pow_then_inplace_matches_eager_and_torch():
    def step(lib, w, x):
        y = (x * w) ** 2      # pow with a Python exponent saves its input only
        y.mul_(3)
        y.add_(w)
        loss = y.sum()
        loss.backward()
        return loss

    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
    w0 = np.array([0.3, -0.2, 0.8], np.float32)
    wt = torch.tensor(w0, requires_grad=True)
    want = step(torch, wt, torch.tensor(x))
    runs = {}
    for mode in ("eager", "compiled"):
        w = dj.tensor(w0, requires_grad=True)
        f = (lambda xx: step(dj, w, xx)) if mode == "eager" else dj.compile(lambda xx: step(dj, w, xx))
        for _ in range(3):
            w.grad = None
            loss = f(dj.tensor(x))
        runs[mode] = (loss.item(), w.grad.numpy())
        if mode == "compiled":
            assert f.stats.compiles == 1 and f.stats.graph_breaks == 0
        assert_close(loss, want)
        assert_close(w.grad, wt.grad)
    np.testing.assert_allclose(runs["compiled"][0], runs["eager"][0], rtol=1e-6)
    np.testing.assert_allclose(runs["compiled"][1], runs["eager"][1], rtol=1e-6)


@pytest.mark.parametrize("layer", ["batchnorm_relu_inplace", "lstm_cell", "gru_cell", "lstm", "gru"])
def test_layers_whose_outputs_are_changed_in_place_backpropagate_as_torchs(layer):
    """ResNet's ``BatchNorm2d`` + ``ReLU(inplace=True)``, an in-place op on a recurrent cell's new state or on an
    RNN's output sequence: PyTorch saves the batch statistics and the gates, not these outputs, so backward runs
    -- here too (the rules read their saved arrays, which in-place writes leave alone), with PyTorch's gradients."""
    rng = np.random.default_rng(0)

    def build(lib):
        nn = lib.nn
        if layer == "batchnorm_relu_inplace":
            return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(inplace=True),
                                 nn.Conv2d(3, 2, 3)).double()
        return {"lstm_cell": nn.LSTMCell, "gru_cell": nn.GRUCell, "lstm": nn.LSTM, "gru": nn.GRU}[layer](3, 4).double()

    def run(lib, m):
        x = lib.tensor(rng_x[0] if layer == "batchnorm_relu_inplace" else rng_x[1], requires_grad=True)
        out = m(x)
        out = out[0] if isinstance(out, tuple) else out
        if layer != "batchnorm_relu_inplace":
            out.relu_()
        out.pow(2).sum().backward()
        return [x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()]
    rng_x = (rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((4, 3)) if "cell" in layer
             else rng.standard_normal((5, 4, 3)))
    tm, dm = build(torch), build(dj)
    dm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    for a, b in zip(run(dj, dm), run(torch, tm), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("expr", ["y[1] * 2", "2 * y[1]", "y[1] / 2", "y[1].mul(0.5)", "y[1] * c",
                                  "y[1:2] @ m", "y[1].lerp(c, 0.3)", "y[1] * w"])
def test_write_after_an_op_that_saved_no_input(expr):
    """An op saves only the inputs the rules of its differentiable inputs read (PyTorch's MulBackward0 saves
    ``self`` only where ``other`` needs a gradient): an in-place write to an input no rule reads is no error;
    ``y[1] * w`` with ``w`` requiring grad still saves ``y[1]`` and raises, as in PyTorch."""
    def run(L):
        x = L.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, requires_grad=True)
        c, m = L.full((4,), 2.0), L.ones(4, 4)
        w = L.full((4,), 2.0, requires_grad=True)
        y = x * 1
        y[0] = eval(expr, {}, dict(y=y, c=c, m=m, w=w))
        try:
            y.sum().backward()
        except RuntimeError as e:
            return "modified by an inplace operation" in str(e)
        return x.grad.tolist()
    assert run(dj) == run(torch)
