"""Small PyTorch-parity checks, side by side with torch (the same code run with ``L = torch`` and ``L = dj``):
``out=`` arguments (dtype casting, autograd), integer division by zero, ``Size`` arithmetic, bool arithmetic."""
import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import same


# ---------------------------------------------------------------- out=
def _grad_x(L):
    return L.ones(3, requires_grad=True)


OUT_AUTOGRAD = {
    "mul": lambda L, o: L.mul(_grad_x(L), 2, out=o),
    "multiply": lambda L, o: L.multiply(_grad_x(L), 2, out=o),
    "add": lambda L, o: L.add(_grad_x(L), 2, out=o),
    "add alpha": lambda L, o: L.add(_grad_x(L), 2, alpha=3, out=o),
    "sub": lambda L, o: L.sub(_grad_x(L), 2, out=o),
    "div": lambda L, o: L.div(_grad_x(L), 2, out=o),
    "true_divide": lambda L, o: L.true_divide(_grad_x(L), 2, out=o),
    "div trunc": lambda L, o: L.div(_grad_x(L), 2, rounding_mode="trunc", out=o),
    "div floor": lambda L, o: L.div(_grad_x(L), 2, rounding_mode="floor", out=o),
    "remainder": lambda L, o: L.remainder(_grad_x(L), 2, out=o),
    "fmod": lambda L, o: L.fmod(_grad_x(L), 2, out=o),
    "pow": lambda L, o: L.pow(_grad_x(L), 2, out=o),
    "atan2": lambda L, o: L.atan2(_grad_x(L), L.ones(3), out=o),
    "maximum": lambda L, o: L.maximum(_grad_x(L), L.ones(3), out=o),
    "exp": lambda L, o: L.exp(_grad_x(L), out=o),
    "neg": lambda L, o: L.neg(_grad_x(L), out=o),
    "negative": lambda L, o: L.negative(_grad_x(L), out=o),
    "absolute": lambda L, o: L.absolute(_grad_x(L), out=o),
    "arcsin": lambda L, o: L.arcsin(_grad_x(L) * 0.5, out=o),
    "sigmoid": lambda L, o: L.sigmoid(_grad_x(L), out=o),
    "clamp": lambda L, o: L.clamp(_grad_x(L), 0, 1, out=o),
    "clip": lambda L, o: L.clip(_grad_x(L), 0, 1, out=o),
    "cat": lambda L, o: L.cat([_grad_x(L)], out=o),
    "hstack": lambda L, o: L.hstack([_grad_x(L)], out=o),
    "matmul": lambda L, o: L.matmul(L.ones(3, 3, requires_grad=True), L.ones(3), out=o),
    "out requires grad": lambda L, o: L.mul(L.ones(3), 2, out=L.zeros(3, requires_grad=True)),
    "out is a non-leaf": lambda L, o: L.mul(L.ones(3), 2, out=_grad_x(L) * 1),
}


@pytest.mark.parametrize("name", sorted(OUT_AUTOGRAD))
def test_out_with_an_argument_requiring_grad_raises(name):
    kind, msg = same(lambda L: OUT_AUTOGRAD[name](L, L.empty(3)))
    assert kind == "RuntimeError" and "functions with out=... arguments don't support automatic " \
        "differentiation, but one of the arguments requires grad." in msg


@pytest.mark.parametrize("name", ["mul", "exp", "clamp", "cat", "out requires grad"])
def test_out_under_no_grad_writes(name):
    def run(L):
        o = L.empty(3)
        with L.no_grad():
            r = OUT_AUTOGRAD[name](L, o)
        return [r.tolist(), o.tolist() if name != "out requires grad" else None, r.requires_grad]
    same(run)


def test_out_with_a_result_not_requiring_grad_writes():
    # a comparison's result is not differentiable: out= is allowed although its input requires grad
    same(lambda L: L.eq(_grad_x(L), 1, out=L.empty(3, dtype=L.bool)))


OUT_DTYPE = {
    "float into int64": lambda L: L.add(L.zeros(3), 1.5, out=L.zeros(3, dtype=L.int64)),
    "float into int32": lambda L: L.add(L.ones(3), L.ones(3, dtype=L.int64), out=L.empty(3, dtype=L.int32)),
    "int64 into bool": lambda L: L.mul(L.ones(3, dtype=L.int64), 2, out=L.empty(3, dtype=L.bool)),
    "true div of ints into int64": lambda L: L.div(L.ones(3, dtype=L.int64), 2, out=L.empty(3, dtype=L.int64)),
    "exp of ints into int64": lambda L: L.exp(L.zeros(3, dtype=L.int64), out=L.zeros(3, dtype=L.int64)),
    "float into a slice of int64": lambda L: L.mul(L.ones(3), 2, out=L.zeros(4, dtype=L.int64)[1:]),
    # allowed: the result's category is not above out's
    "int64 into float": lambda L: L.add(L.zeros(3, dtype=L.int64), 1, out=L.zeros(3)),
    "float32 into float16": lambda L: L.add(L.zeros(3), 1, out=L.zeros(3, dtype=L.float16)),
    "bool into float": lambda L: L.eq(L.zeros(3), 0, out=L.zeros(3)),
    "bool into int64": lambda L: L.eq(L.zeros(3), 0, out=L.zeros(3, dtype=L.int64)),
    "bool into int8": lambda L: L.mul(L.ones(3, dtype=L.bool), True, out=L.empty(3, dtype=L.int8)),
    "int floor div into int64": lambda L: L.div(L.ones(3, dtype=L.int64), 2, rounding_mode="floor",
                                                out=L.empty(3, dtype=L.int64)),
    "ints' exp into float64": lambda L: L.exp(L.ones(3, dtype=L.int64), out=L.empty(3, dtype=L.float64)),
}


@pytest.mark.parametrize("name", sorted(OUT_DTYPE))
def test_out_dtype_casting(name):
    r = same(OUT_DTYPE[name])
    if r[0] != "ok":
        assert r[0] == "RuntimeError" and "can't be cast to the desired output type" in r[1]


def test_out_is_written_in_place():
    def run(L):
        base = L.zeros(4)
        o = base[1:]
        r = L.mul(L.ones(3), 2, out=o)
        return [r is o, base.tolist(), o.tolist()]
    same(run)


# ---------------------------------------------------------------- integer division by zero
INT_DIV_ZERO = {
    "t // 0": lambda L: L.tensor([7]) // 0,
    "t % 0": lambda L: L.tensor([7]) % 0,
    "t // False": lambda L: L.tensor([7]) // False,
    "div floor 0": lambda L: L.div(L.tensor([7]), 0, rounding_mode="floor"),
    "div trunc 0": lambda L: L.div(L.tensor([7]), 0, rounding_mode="trunc"),
    "div trunc tensor 0": lambda L: L.div(L.tensor([7]), L.tensor([0]), rounding_mode="trunc"),
    "floor_divide 0": lambda L: L.floor_divide(L.tensor([7]), 0),
    "tensor divisor with a zero": lambda L: L.tensor([7, 3]) // L.tensor([1, 0]),
    "0-d tensor divisor": lambda L: L.tensor([7]) // L.tensor(0),
    "remainder tensor": lambda L: L.remainder(L.tensor([7]), L.tensor([0])),
    "fmod": lambda L: L.fmod(L.tensor([7]), 0),
    "fmod tensor": lambda L: L.fmod(L.tensor([7]), L.tensor([0])),
    "int // tensor": lambda L: 7 // L.tensor([0]),
    "int % tensor": lambda L: 7 % L.tensor([0]),
    "remainder(int, tensor)": lambda L: L.remainder(7, L.tensor([0])),
    "uint8": lambda L: L.tensor([7], dtype=L.uint8) // 0,
    "int8 % uint8": lambda L: L.tensor([7], dtype=L.int8) % L.tensor([0], dtype=L.uint8),
    "bool // int": lambda L: L.tensor([True]) // L.tensor([0]),
    "div_ floor": lambda L: L.tensor([7]).div_(0, rounding_mode="floor"),
    "remainder_": lambda L: L.tensor([7]).remainder_(0),
    "//=": lambda L: L.tensor([7]).__ifloordiv__(L.tensor([0])),
    "divisor view": lambda L: L.tensor([4, 6]) // L.tensor([0, 1])[:1],
    "out=": lambda L: L.floor_divide(L.tensor([7]), L.tensor([0]), out=L.empty(1, dtype=L.long)),
}


@pytest.mark.parametrize("name", sorted(INT_DIV_ZERO))
def test_integer_division_by_zero_raises(name):
    assert same(INT_DIV_ZERO[name]) == ("RuntimeError", "ZeroDivisionError")


NO_ZERO_DIV_ERROR = {
    "empty // 0": lambda L: L.tensor([], dtype=L.long) // 0,
    "t // empty": lambda L: L.tensor([7]) // L.zeros(0, dtype=L.long),
    "empty broadcast // 0-tensor": lambda L: L.zeros(0, 1, dtype=L.long) // L.tensor([0]),
    "divisor view without zero": lambda L: L.tensor([4, 6]) // L.tensor([0, 2])[1:],
    "int // float 0": lambda L: L.tensor([7]) // 0.0,
    "int // float tensor 0": lambda L: L.tensor([7]) // L.tensor([0.0]),
    "float // int 0": lambda L: L.tensor([7.0]) // 0,
    "float // int tensor 0": lambda L: L.tensor([7.0]) // L.tensor([0]),
    "int / 0 (true division)": lambda L: L.tensor([7]) / 0,
    "negative floor div": lambda L: L.tensor([-7, 7]) // L.tensor([2, -2]),
    "negative remainder": lambda L: L.tensor([-7, 7]) % L.tensor([2, -2]),
    "negative trunc div": lambda L: L.div(L.tensor([-7, 7]), L.tensor([2, -2]), rounding_mode="trunc"),
    "negative fmod": lambda L: L.fmod(L.tensor([-7, 7]), 2),
}


@pytest.mark.parametrize("name", sorted(NO_ZERO_DIV_ERROR))
def test_division_without_an_integer_zero_divisor(name):
    assert same(NO_ZERO_DIV_ERROR[name])[0] == "ok"


def test_float_remainder_by_zero_is_nan():
    r = dj.tensor([7]) % 0.0
    assert r.dtype == dj.float32 and np.isnan(r.tolist()[0])


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod", "div trunc"])
def test_bool_integer_division_not_implemented(name):
    def run(L):
        b = L.tensor([True])
        if name == "div trunc":
            return L.div(b, b, rounding_mode="trunc")
        return getattr(L, name)(b, L.tensor([False]))
    assert same(run)[0] == "NotImplementedError"


def test_compiled_step_does_not_check_a_tensor_divisor():
    def step(a, b):
        return a // b + a % b
    c = dj.compile(step)
    a, b = dj.tensor([7, 8]), dj.tensor([2, 0])
    for _ in range(3):
        c(a, b)   # no eager read of the divisor: no error, no graph break
    assert c.stats.compiles == 1 and c.stats.graph_breaks == 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        step(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):   # a Python int is checked by its value
        dj.compile(lambda a: a // 0)(a)


def test_transformed_function_does_not_check_a_tensor_divisor():
    from dynajax.func import vmap
    assert vmap(lambda x, y: x // y)(dj.tensor([7, 8]), dj.tensor([2, 1])).tolist() == [3, 8]
    vmap(lambda x, y: x // y)(dj.tensor([7, 8]), dj.tensor([2, 0]))   # traced: not read, no error


# ---------------------------------------------------------------- Size
SIZE_OPS = {
    "Size + tuple": lambda L: L.Size([2]) + (3,),
    "tuple + Size": lambda L: (3,) + L.Size([2]),
    "Size + Size": lambda L: L.Size([2]) + L.Size([4]),
    "Size + ()": lambda L: L.Size([2]) + (),
    "Size * 2": lambda L: L.Size([2, 3]) * 2,
    "2 * Size": lambda L: 2 * L.Size([2, 3]),
    "Size * 0": lambda L: L.Size([2, 3]) * 0,
    "Size[1:]": lambda L: L.Size([2, 3, 4])[1:],
    "Size[::-1]": lambda L: L.Size([2, 3, 4])[::-1],
    "Size[0]": lambda L: L.Size([2, 3, 4])[0],
    "shape + tuple": lambda L: L.zeros(2, 3).shape + (1,),
    "shape[:-1] * 2": lambda L: L.zeros(2, 3).shape[:-1] * 2,
}


@pytest.mark.parametrize("name", sorted(SIZE_OPS))
def test_size_arithmetic(name):
    t, d = SIZE_OPS[name](torch), SIZE_OPS[name](dj)
    assert list(d) == list(t) if isinstance(t, tuple) else d == t
    assert (type(d) is dj.Size) == (type(t) is torch.Size) and type(d) is not torch.Size
    assert type(d).__name__ == type(t).__name__


@pytest.mark.parametrize("expr", ["s + [3]", "[3] + s", "s * 2.0"])
def test_size_arithmetic_errors(expr):
    for L in (torch, dj):
        with pytest.raises(TypeError):
            eval(expr, {"s": L.Size([2])})


# ---------------------------------------------------------------- bool arithmetic
BOOL_OPS = {
    "bool - bool": lambda L: L.tensor([True, False]) - L.tensor([True, True]),
    "sub(bool, bool)": lambda L: L.sub(L.tensor([True]), L.tensor([False])),
    "sub alpha": lambda L: L.sub(L.tensor([True]), L.tensor([False]), alpha=2),
    "Tensor.sub": lambda L: L.tensor([True]).sub(L.tensor([False])),
    "sub_": lambda L: L.tensor([True]).sub_(L.tensor([False])),
    "bool - True": lambda L: L.tensor([True]) - True,
    "True - bool": lambda L: True - L.tensor([True]),
    "bool - 1": lambda L: L.tensor([True]) - 1,
    "1 - bool": lambda L: 1 - L.tensor([True]),
    "bool - 1.5": lambda L: L.tensor([True]) - 1.5,
    "float - True": lambda L: L.ones(1) - True,
    "bool - int tensor": lambda L: L.tensor([True]) - L.tensor([1]),
    "bool - empty bool": lambda L: L.tensor([True, False]) - L.zeros(0, dtype=L.bool),
    "-bool": lambda L: -L.tensor([True, False]),
    "neg(bool)": lambda L: L.neg(L.tensor([True])),
    "negative(bool)": lambda L: L.negative(L.tensor([True])),
    "neg_": lambda L: L.tensor([True]).neg_(),
    "sign(bool)": lambda L: L.sign(L.tensor([True, False])),
    "Tensor.sign": lambda L: L.tensor([True, False]).sign(),
    "sgn(bool)": lambda L: L.sgn(L.tensor([True, False])),
    "sign_": lambda L: L.tensor([True, False]).sign_(),
    "sign(int)": lambda L: L.sign(L.tensor([-2, 0, 3])),
    "sign(float)": lambda L: L.sign(L.tensor([-2.0, 0.0, 3.0])),
    "bool + bool": lambda L: L.tensor([True, False]) + L.tensor([True, True]),
    "bool + True": lambda L: L.tensor([True]) + True,
    "float - float": lambda L: L.ones(2) - L.ones(2),
    "int - 1": lambda L: L.tensor([3]) - 1,
}


@pytest.mark.parametrize("name", sorted(BOOL_OPS))
def test_bool_arithmetic(name):
    same(BOOL_OPS[name])
