"""More PyTorch-parity checks of tensor semantics, side by side with torch (the same code run with ``L = torch``
and ``L = dj``): writes into tensors whose elements share memory (``expand``), Python numbers that do not fit
the dtype they are written into, the dtypes an index tensor may have, ``index_put_``'s dtype rule; and the same
writes inside a ``dynajax.compile``d step against eager mode."""
import numpy as np
import pytest

import dynajax as dj
from helpers import same

pytest.importorskip("torch")   # (the oracle ``same`` runs every case in)

# PyTorch warns where it writes into an expanded tensor (which these tests do on purpose)
pytestmark = pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated:UserWarning")


# ---------------------------------------------------------------- writes into an expanded tensor
def _expanded(L):
    return L.zeros(1, 3).expand(2, 3)


def _mask(L):
    return L.tensor([[True, False, False], [False, False, False]])


def _written(op):
    """``op`` applied to an expanded tensor; the tensor after it (rows share their elements)."""
    def fn(L):
        x = _expanded(L)
        op(L, x)
        return x
    return fn


EXPANDED_WRITES = {   # PyTorch writes each element these touch once, so both rows show the write
    "setitem row": lambda L, x: x.__setitem__(0, 1.0),
    "setitem element": lambda L, x: x.__setitem__((0, 0), 1.0),
    "setitem part of a row": lambda L, x: x.__setitem__((0, slice(0, 2)), L.tensor([3.0, 4.0])),
    "setitem index tensor": lambda L, x: x.__setitem__(L.tensor([0]), 1.0),
    "setitem two index tensors": lambda L, x: x.__setitem__((L.tensor([0]), L.tensor([1])), 7.0),
    "setitem mask": lambda L, x: x.__setitem__(_mask(L), 2.0),
    "index_put_": lambda L, x: x.index_put_((L.tensor([0]),), L.tensor(1.0)),
    "masked_fill_": lambda L, x: x.masked_fill_(_mask(L), 2.0),
    "index_fill_": lambda L, x: x.index_fill_(1, L.tensor([0]), 1.0),
    "fill_": lambda L, x: x.fill_(1.0),
    "add_ on a row": lambda L, x: x[0].add_(1.0),
    "add_ on an element": lambda L, x: x[0, 0].add_(1.0),
    # PyTorch refuses these: they would write one element several times
    "add_": lambda L, x: x.add_(1.0),
    "mul_": lambda L, x: x.mul_(2.0),
    "copy_": lambda L, x: x.copy_(L.ones(2, 3)),
    "clamp_": lambda L, x: x.clamp_(1, 2),
    "uniform_": lambda L, x: x.uniform_(),
    "add_ on a column": lambda L, x: x[:, 0].add_(1.0),
    "add_ on t()": lambda L, x: x.t().add_(1.0),
    "setitem all": lambda L, x: x.__setitem__(slice(None), 1.0),
    "setitem column": lambda L, x: x.__setitem__((slice(None), 0), L.tensor([3.0, 4.0])),
    "setitem None": lambda L, x: x.__setitem__(None, 1.0),
    "scatter_": lambda L, x: x.scatter_(1, L.tensor([[0], [0]]), 2.0),
    "index_add_": lambda L, x: x.index_add_(0, L.tensor([0]), L.ones(1, 3)),
    "index_copy_": lambda L, x: x.index_copy_(0, L.tensor([0]), L.ones(1, 3)),
    "masked_scatter_": lambda L, x: x.masked_scatter_(_mask(L), L.ones(6)),
    "put_": lambda L, x: x.put_(L.tensor([4]), L.tensor([5.0])),
}


@pytest.mark.parametrize("name", list(EXPANDED_WRITES))
def test_write_into_expanded_tensor(name):
    same(_written(EXPANDED_WRITES[name]))


def test_write_into_overlapping_unfold_windows():
    def fn(L, key, value):
        x = L.zeros(5)
        u = x.unfold(0, 3, 1)    # windows [0:3], [1:4], [2:5] share elements
        u[key] = value
        return x
    same(lambda L: fn(L, 0, 1.0))
    same(lambda L: fn(L, (1, 2), 1.0))
    same(lambda L: fn(L, (slice(None), 0), L.tensor([1.0, 2.0, 3.0])))


def test_expanded_writes_compiled_match_eager():
    """Writes through an expanded buffer inside a compiled step (the positions it shares are found while
    tracing) leave the buffer and the gradients as eager mode does."""
    def run(compiled):
        w = dj.tensor(np.arange(3.0, dtype=np.float32), requires_grad=True)
        buf = dj.zeros(1, 3)

        def step(_):
            c = (w * 1).expand(2, 3).clone()
            e = buf.expand(4, 3)
            with dj.no_grad():
                e[1, 2] += 1.0
                e[dj.tensor([0]), 0] = e[0, 0] + 2.0
                e.masked_fill_(dj.tensor([[False, True, False]] * 4), 5.0)
            loss = (c * c).sum()
            loss.backward()
            return loss
        f = dj.compile(step) if compiled else step
        losses = [f(i).item() for i in range(3)]
        return losses, buf.tolist(), w.grad.tolist()
    eager = run(False)
    assert eager[1] == [[6.0, 5.0, 3.0]]
    assert run(True) == eager


# ---------------------------------------------------------------- fills of a tensor that requires grad
FILLS = {   # as PyTorch's: the filled tensor still requires grad, and what was overwritten gets a zero gradient
    "zero_": lambda L, x, v: x.zero_(),
    "fill_ number": lambda L, x, v: x.fill_(2.5),
    "fill_ tensor": lambda L, x, v: x.fill_(L.tensor(3.0)),
    "fill_ tensor requiring grad": lambda L, x, v: x.fill_(v),
    "fill_ of a view": lambda L, x, v: x[1].fill_(4.0),
    "zero_ of a view": lambda L, x, v: x[:, 0].zero_(),
}


@pytest.mark.parametrize("name", list(FILLS))
def test_fill_keeps_requires_grad(name):
    def fn(L):
        w = L.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        v = L.tensor(1.5, requires_grad=True)
        x = w * 2
        FILLS[name](L, x, v)
        flags = [x.requires_grad, x.grad_fn is not None]
        (x * L.tensor([1.0, 2.0, 3.0])).sum().backward()
        with L.no_grad():
            y = w * 2
            y.zero_()
            flags.append(y.requires_grad)
        return flags, w.grad.tolist(), None if v.grad is None else v.grad.item(), x.tolist()
    same(fn)


def test_bernoulli_requires_grad_with_zero_gradient():
    def fn(L):
        p = L.tensor([0.0, 1.0, 1.0], requires_grad=True)
        b = L.bernoulli(p)
        (b * 2).sum().backward()
        return b.requires_grad, b.tolist(), p.grad.tolist(), L.bernoulli(p.detach()).requires_grad
    same(fn)


def test_fill_of_tensor_requiring_grad_compiled_matches_eager():
    def run(compiled):
        w = dj.tensor(np.arange(3.0, dtype=np.float32), requires_grad=True)

        def step(_):
            x = w * 3
            x[0:2].zero_()
            y = w * 1
            y.fill_(2.0)
            loss = (x * w).sum() + (y * w).sum()
            loss.backward()
            return loss
        f = dj.compile(step) if compiled else step
        losses = [f(i).item() for i in range(2)]
        return losses, w.grad.tolist()
    eager = run(False)
    assert eager == ([18.0, 18.0], [4.0, 4.0, 28.0])   # (w.grad = x + y + 3 w at the slot kept, twice)
    assert run(True) == eager


# ---------------------------------------------------------------- numbers that do not fit the dtype
SCALAR_CASES = [("int8", 300), ("int8", -129), ("int8", 127.9), ("uint8", 256), ("uint8", -1), ("uint8", -256),
                ("uint8", -1.0), ("int32", 2**31), ("int64", float("nan")), ("int64", float("inf")),
                ("float32", 1e39), ("float32", float("inf")), ("float16", 70000.0),
                ("bfloat16", 1e39), ("float32", 1j), ("float32", 1 + 0j), ("bool", 2.5), ("int8", 100)]
SCALAR_WRITES = {   # each returns the tensor written (where: its result, of the promoted dtype)
    "setitem": lambda L, x, v: (x.__setitem__(0, v), x)[1],
    "setitem index": lambda L, x, v: (x.__setitem__(L.tensor([0]), v), x)[1],
    "fill_": lambda L, x, v: x.fill_(v),
    "masked_fill": lambda L, x, v: x.masked_fill(L.tensor([True, False, False]), v),
    "index_fill": lambda L, x, v: x.index_fill(0, L.tensor([0]), v),
    "scatter value": lambda L, x, v: x.scatter(0, L.tensor([0]), v),
    "where": lambda L, x, v: L.where(L.tensor([True, False, False]), x, v),
}


@pytest.mark.parametrize("write", list(SCALAR_WRITES))
def test_number_that_does_not_fit(write):
    for name, v in SCALAR_CASES:
        if write == "where" and (isinstance(v, complex) or v != v):
            continue   # (where promotes to complex; NaN compares unequal)

        def fn(L):
            r = SCALAR_WRITES[write](L, L.zeros(3, dtype=getattr(L, name)), v)
            return r.float() if r.dtype == L.bfloat16 else r
        same(fn)


def test_full_and_clamp_number_that_does_not_fit():
    for name, v in [("int8", 300), ("int64", float("nan")), ("float16", 70000.0), ("uint8", -1)]:
        same(lambda L: L.full((2,), v, dtype=getattr(L, name)))
        if v == v:   # (an int tensor clamped by NaN is a float NaN tensor; NaN compares unequal)
            same(lambda L: L.zeros(2, dtype=getattr(L, name)).clamp(max=v))


# ---------------------------------------------------------------- index_put_ and index dtypes
def test_index_put_needs_matching_dtype():
    same(lambda L: L.zeros(3).index_put_((L.tensor([0]),), L.tensor([1.0], dtype=L.float64)))
    same(lambda L: L.zeros(3, dtype=L.int8).index_put_((L.tensor([0]),), L.tensor(3)))
    same(lambda L: L.index_put(L.zeros(3), (L.tensor([0, 0]),), L.tensor(1.0, dtype=L.float64), accumulate=True))
    same(lambda L: L.zeros(3).index_put_((L.tensor([0]),), 1.0))
    # a one-element value under one mask is a masked fill, which casts; setitem casts too
    same(lambda L: L.zeros(3).index_put_((L.tensor([True, False, True]),), L.tensor([2.0], dtype=L.float64)))
    same(lambda L: (lambda x: (x.__setitem__(L.tensor([0, 2]), L.tensor([1.5, 2.5], dtype=L.float64)), x)[1])(
        L.zeros(3)))


INDEX_OPS = {
    "getitem": lambda L, x, i: x[i],
    "setitem": lambda L, x, i: x.__setitem__(i, 2.0),
    "index_put_": lambda L, x, i: x.index_put_((i,), L.tensor(1.0)),
    "take": lambda L, x, i: x.take(i),
    "put_": lambda L, x, i: x.put_(i, L.ones(2)),
    "index_select": lambda L, x, i: x.index_select(0, i),
    "index_add_": lambda L, x, i: x.index_add_(0, i, L.ones(2, 2)),
    "index_copy_": lambda L, x, i: x.index_copy_(0, i, L.ones(2, 2)),
    "index_fill_": lambda L, x, i: x.index_fill_(0, i, 1.0),
    "gather": lambda L, x, i: x.gather(0, i[None]),
    "scatter": lambda L, x, i: x.scatter(0, i[None], 1.0),
    "scatter_add": lambda L, x, i: x.scatter_add(0, i[:, None].expand(2, 2).contiguous(), L.ones(2, 2)),
    "take_along_dim": lambda L, x, i: L.take_along_dim(x, i[:, None], 0),
}


@pytest.mark.parametrize("name", list(INDEX_OPS))
@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8"])
def test_index_tensor_dtypes(name, dtype):
    same(lambda L: INDEX_OPS[name](L, L.zeros(3, 2), L.tensor([0, 1], dtype=getattr(L, dtype))))


def test_index_select_of_a_0d_tensor():
    def fn(L, index):
        x = L.tensor(3.0, requires_grad=True)
        y = x.index_select(0, L.tensor(index))
        (y * 2).backward()
        return [y.tolist(), list(y.shape), x.grad.tolist()]
    same(lambda L: fn(L, [0]))
    same(lambda L: fn(L, 0))
    same(lambda L: fn(L, [0, 0]))
    same(lambda L: fn(L, [1]))


def test_range_key():
    same(lambda L: L.arange(10.0).reshape(5, 2)[range(1, 4, 2)])
    same(lambda L: L.arange(10.0).reshape(5, 2)[range(0)])


SETITEM_DTYPES = {   # a value tensor of another dtype: cast through a basic key or a lone mask, refused through
    "index tensor": lambda L: L.tensor([0, 2]),   # index tensors (PyTorch's index_put_)
    "list": lambda L: [0, 2],
    "index tensor in a tuple": lambda L: (None, L.tensor([0, 2])),
    "mask": lambda L: L.tensor([True, False, True]),
    "slice": lambda L: slice(0, 2),
    "int": lambda L: 0,
}


@pytest.mark.parametrize("key", list(SETITEM_DTYPES))
@pytest.mark.parametrize("value", ["float64 pair", "float64 one", "int64 one", "bool one"])
def test_setitem_value_of_another_dtype(key, value):
    def fn(L):
        x = L.zeros(3)
        v = {"float64 pair": lambda: L.tensor([1.5, 2.5], dtype=L.float64)[:1 if key == "int" else 2],
             "float64 one": lambda: L.tensor(1.5, dtype=L.float64), "int64 one": lambda: L.tensor(2),
             "bool one": lambda: L.tensor([True])}[value]()
        x[SETITEM_DTYPES[key](L)] = v
        return x
    same(fn)


DTYPE_ERRORS = {   # PyTorch's NotImplementedError (a RuntimeError) for an op its kernels lack for a dtype
    "and of floats": lambda L: L.ones(2) & L.ones(2),
    "left shift of floats": lambda L: L.ones(2) << 1,
    "right shift of floats": lambda L: L.bitwise_right_shift(L.ones(2), 1),
    "randn int64": lambda L: L.randn(2, dtype=L.int64),
    "rand int64": lambda L: L.rand(2, dtype=L.int64),
    "normal_ of int64": lambda L: L.zeros(2, dtype=L.int64).normal_(),
    "uniform_ of bool": lambda L: L.zeros(2, dtype=L.bool).uniform_(),
    "exponential_ of int8": lambda L: L.zeros(2, dtype=L.int8).exponential_(),
    "bernoulli_ of int64": lambda L: L.zeros(2, dtype=L.int64).bernoulli_(0.0),
}


@pytest.mark.parametrize("name", list(DTYPE_ERRORS))
def test_op_not_implemented_for_dtype(name):
    same(DTYPE_ERRORS[name])


ALPHAS = {   # alpha takes no part in type promotion: PyTorch checks it against the result's dtype
    "add int float alpha": lambda L: L.add(L.tensor([1, 2]), L.tensor([1, 1]), alpha=0.5),
    "add int alpha 1.0": lambda L: L.add(L.tensor([1, 2]), L.tensor([1, 1]), alpha=1.0),
    "add_ int float alpha": lambda L: L.tensor([1, 2]).add_(L.tensor([1, 1]), alpha=0.5),
    "sub int float alpha": lambda L: L.sub(L.tensor([1, 2]), L.tensor([1, 1]), alpha=1.5),
    "add int number float alpha": lambda L: L.add(L.tensor([1, 2]), 3, alpha=0.5),
    "add float int alpha": lambda L: L.add(L.tensor([1.0, 2.0]), L.tensor([1, 1]), alpha=2),
    "add float complex alpha": lambda L: L.add(L.tensor([1.0, 2.0]), L.tensor([1.0, 1.0]), alpha=1j),
    "add bool bool alpha 2": lambda L: L.add(L.tensor([True, False]), L.tensor([True, True]), alpha=2),
    "add bool bool alpha 0": lambda L: L.add(L.tensor([True, False]), L.tensor([True, True]), alpha=0),
    "add float bool alpha": lambda L: L.add(L.tensor([1.0, 2.0]), L.tensor([1.0, 1.0]), alpha=True),
    "add int8 alpha overflow": lambda L: L.add(L.tensor([1, 2], dtype=L.int8), L.tensor([1, 1], dtype=L.int8),
                                               alpha=1000),
    "add int8 alpha wraps": lambda L: L.add(L.tensor([1, 2], dtype=L.int8), L.tensor([100, 100], dtype=L.int8),
                                            alpha=3),
    "add tensor alpha": lambda L: L.add(L.tensor([1, 2]), L.tensor([1, 1]), alpha=L.tensor(2)),
    # index_add converts alpha to the input's dtype: truncated for integers, checked to fit
    "index_add int float alpha": lambda L: L.tensor([1, 2]).index_add(0, L.tensor([0]), L.tensor([5]), alpha=1.7),
    "index_add int negative alpha": lambda L: L.tensor([1, 2]).index_add(0, L.tensor([0]), L.tensor([5]),
                                                                         alpha=-1.7),
    "index_add float complex alpha": lambda L: L.tensor([1.0, 2.0]).index_add(0, L.tensor([0]), L.tensor([5.0]),
                                                                              alpha=1j),
    "index_add int8 alpha overflow": lambda L: L.tensor([1, 2], dtype=L.int8).index_add(
        0, L.tensor([0]), L.tensor([5], dtype=L.int8), alpha=300),
    # bools accumulate as PyTorch adds them (True + True is True)
    "index_add bool": lambda L: L.tensor([True, False]).index_add(0, L.tensor([0, 1, 1]),
                                                                  L.tensor([True, True, True]), alpha=2),
    "index_put_ bool accumulate": lambda L: L.tensor([True, False]).index_put_(
        (L.tensor([1, 1]),), L.tensor([True, True]), accumulate=True),
    "put_ bool accumulate": lambda L: L.tensor([True, False]).put_(L.tensor([1, 1]), L.tensor([True, False]),
                                                                   accumulate=True),
}


@pytest.mark.parametrize("name", list(ALPHAS))
def test_alpha_and_accumulate(name):
    same(ALPHAS[name])


@pytest.mark.filterwarnings("ignore:where received a uint8 condition")
def test_where_takes_a_uint8_condition():
    same(lambda L: L.where(L.tensor([1, 0, 2], dtype=L.uint8), 1.0, 0.0))
    same(lambda L: L.where(L.tensor([1.0, 0.0]), 1.0, 0.0))


LERPS = {
    "end float64": lambda L: L.lerp(L.tensor([1.0, 2.0]), L.tensor([3.0, 4.0], dtype=L.float64), 0.5),
    "end int64": lambda L: L.lerp(L.tensor([1.0, 2.0]), L.tensor([3, 4]), 0.5),
    "half input float end": lambda L: L.lerp(L.ones(2, dtype=L.float16), L.ones(2), 0.5),
    "weight float64": lambda L: L.lerp(L.tensor([1.0, 2.0]), L.tensor([3.0, 4.0]), L.tensor([0.5, 0.5],
                                                                                        dtype=L.float64)),
    "int input": lambda L: L.lerp(L.tensor([1, 2]), L.tensor([3, 4]), 0.5),
    "int input tensor weight": lambda L: L.lerp(L.tensor([1, 2]), L.tensor([3, 4]), L.tensor(1)),
    "lerp_": lambda L: L.tensor([[1.0, 2.0]]).lerp_(L.tensor([3.0, 4.0]), 0.25),
    "lerp_ broadcast out": lambda L: L.tensor([1.0, 2.0]).lerp_(L.tensor([[3.0, 4.0]]), 0.5),
    "float16": lambda L: L.lerp(L.tensor([1.0, 2.0], dtype=L.float16), L.tensor([3.0, 4.0], dtype=L.float16), 0.3),
}


@pytest.mark.parametrize("name", list(LERPS))
def test_lerp(name):
    same(LERPS[name])


PYTHON_PROTOCOLS = {
    "in, 2-D": lambda L: 2.0 in L.tensor([[1, 2], [3, 4]]),
    "not in, 2-D": lambda L: 5 in L.tensor([[1, 2], [3, 4]]),
    "tensor in, broadcast": lambda L: L.tensor([1, 5]) in L.tensor([[1, 2], [3, 4]]),
    "in 0-d": lambda L: 2 in L.tensor(2),
    "in numpy number": lambda L: np.float32(3) in L.tensor([3.0]),
    "in, a list": lambda L: [1] in L.tensor([1, 2]),
    "float of two elements": lambda L: float(L.tensor([1.0, 2.0])),
    "int of two elements": lambda L: int(L.tensor([1, 2])),
    "complex of no element": lambda L: complex(L.tensor([])),
    "item of two elements": lambda L: L.tensor([1.0, 2.0]).item(),
    "format with a spec, 1-D": lambda L: f"{L.tensor([1.0, 2.0]):.2f}",
    "format without a spec, 1-D": lambda L: f"{L.tensor([1.0, 2.0])}".replace("dynajax", "torch"),
    "format 0-d": lambda L: f"{L.tensor(3.14159):.2f}",
}


@pytest.mark.parametrize("name", list(PYTHON_PROTOCOLS))
def test_python_protocols(name):
    same(PYTHON_PROTOCOLS[name])


BOOL_SCATTERS = {   # bools reduce as PyTorch's: a sum is a logical or, a product an and; no mean
    f"scatter_reduce {r} include_self={inc}": (lambda r, inc: lambda L: L.tensor([True, False]).scatter_reduce(
        0, L.tensor([1, 1]), L.tensor([True, False]), r, include_self=inc))(r, inc)
    for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)
}
BOOL_SCATTERS["scatter_add"] = lambda L: L.tensor([True, False]).scatter_add(0, L.tensor([1, 1]),
                                                                            L.tensor([True, False]))
BOOL_SCATTERS["index_put_ mask accumulate of another dtype"] = lambda L: L.zeros(2, 3).index_put_(
    (L.tensor([[True, False, True], [False, True, True]]),), L.tensor(1.0, dtype=L.float64), accumulate=True)


@pytest.mark.parametrize("name", list(BOOL_SCATTERS))
def test_bool_scatter(name):
    same(BOOL_SCATTERS[name])
