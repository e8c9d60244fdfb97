"""Indexing ops against PyTorch: getitem/setitem (views and copies), the gather/scatter
family, masks, write-through views, version counters and PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynajax as dj
from helpers import assert_close, compare, same, to_np

torch = pytest.importorskip("torch")

settings.register_profile("index", derandomize=True, max_examples=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4))
X3 = rng.standard_normal((2, 3, 4))


def _i(*a):
    return np.array(a, np.int64)


# ---------------------------------------------------------------- getitem
BASIC_KEYS = [0, -1, (slice(1, None),), (slice(None, None, 2), 1), (None, Ellipsis, 1),
              (1, None, slice(0, 3, 2)), (Ellipsis,), (slice(5, 1),)]


@pytest.mark.parametrize("key", BASIC_KEYS, ids=repr)
def test_basic_getitem(key):
    compare(lambda x: x[key], lambda x: x[key], X, double=True)


def test_basic_getitem_is_view_float32():
    x = dj.tensor(X.astype(np.float32))
    v = x[1, 1:]
    assert v._base is x
    compare(lambda x: x[1, ::3] * 2, lambda x: x[1, ::3] * 2, X.astype(np.float32), double=True)


ADV = {
    "list_dup": (lambda x: x[[0, 2, 0]], X),
    "neg_tensor": (lambda x: x[:, dj.tensor([1, -1]) if isinstance(x, dj.Tensor) else torch.tensor([1, -1])], X),
    "two_arrays": (lambda x: x[[[0], [2]], [1, 3, 0]], X),
    "select_first": (lambda x: x[0, :, [0, 1]], X3),
    "separated": (lambda x: x[:, [0, 1], None, [0, 3]], X3),
    "mask": (lambda x: x[x > 0], X),
    "row_mask": (lambda x: x[[True, False, True], 1:], X),
    "false": (lambda x: x[False], X),
    "empty": (lambda x: x[[]], X),
}


@pytest.mark.parametrize("name", ADV)
def test_advanced_getitem(name):
    fn, inp = ADV[name]
    compare(fn, fn, inp, double=True)


def test_advanced_index_tensor_inputs():
    idx = _i([2, 0], [1, 1])
    compare(lambda x, i: x[i, 1:], lambda x, i: x[i, 1:], X, idx, double=True)
    compare(lambda x, i: x[i].sum(0), lambda x, i: x[i].sum(0), X, _i(), double=True)  # empty index


def test_new_index_values_reuse_compiled_op():
    from dynajax.ops.index import _index
    x = dj.tensor(X)
    x[dj.tensor([0, 1])]
    n = len(_index._jit)
    assert_close(x[dj.tensor([2, 0])], X[[2, 0]])
    assert len(_index._jit) == n


def test_int_tensor_index_is_select():
    x = dj.tensor(X)
    assert_close(x[dj.tensor(1)], X[1])
    assert x[dj.tensor(1)]._base is x


@settings(settings.get_profile("index"))
@given(st.lists(st.one_of(st.integers(-3, 2), st.none(), st.just(Ellipsis),
                          st.builds(slice, st.one_of(st.none(), st.integers(-5, 5)),
                                    st.one_of(st.none(), st.integers(-5, 5)),
                                    st.one_of(st.none(), st.integers(1, 3)))), max_size=4))
def test_basic_keys_match_numpy(items):
    if items.count(Ellipsis) > 1 or sum(i is not None and i is not Ellipsis for i in items) > 3:
        return
    a = np.arange(24.0).reshape(2, 3, 4)
    key = tuple(items)
    try:
        expected = a[key]
    except IndexError:
        with pytest.raises(IndexError):
            dj.tensor(a)[key]
        return
    assert_close(dj.tensor(a)[key], expected)


# ---------------------------------------------------------------- setitem
def _set(key, scalar=None):
    def fn(x, v=None):
        y = x * 1
        y[key] = v if scalar is None else scalar
        return y
    return fn


SET = {
    "basic_row": (_set(0), X, rng.standard_normal(4)),
    "basic_broadcast": (_set((slice(None), 1)), X, rng.standard_normal(1)),
    "leading_ones": (_set(1), X, rng.standard_normal((1, 1, 4))),
    "adv_list": (_set(([0, 2], slice(1, 3))), X, rng.standard_normal((2, 2))),
    "adv_mixed": (_set((0, slice(None), [1, 3])), X3, rng.standard_normal((3, 2))),
    "mask": (_set(X > 0.5), X, rng.standard_normal(int((X > 0.5).sum()))),
}


@pytest.mark.parametrize("name", SET)
def test_setitem(name):
    fn, x, v = SET[name]
    compare(fn, fn, x, v, double=True)


def test_setitem_scalar_and_int_target():
    compare(_set((slice(None), [0, 2]), 7.5), _set((slice(None), [0, 2]), 7.5), X, double=True)
    compare(_set(1, 2.7), _set(1, 2.7), np.arange(6).reshape(2, 3))  # value cast to int64 like PyTorch


def test_index_put_accumulate():
    idx = _i(0, 0, 2)
    for acc in (True, False):
        idx_ = idx if acc else _i(0, 1, 2)
        compare(lambda x, v, i: x.index_put((i,), v, accumulate=acc),
                lambda x, v, i: x.index_put((i,), v, accumulate=acc), X, rng.standard_normal(4), idx_, double=True)
    compare(lambda x, v, i: (x * 1).index_put_((i, i), v, accumulate=True),
            lambda x, v, i: (x * 1).index_put_((i, i), v, accumulate=True), X, rng.standard_normal(3), idx,
            double=True)


# ---------------------------------------------------------------- write-through views
def test_write_through_slice_reaches_base_grad():
    a = dj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a.clone()
    b[:2].mul_(2)
    b.sum().backward()
    assert_close(a.grad, np.array([2.0, 2.0, 1.0]))


def test_write_through_nested_and_transposed_views():
    x = dj.tensor(X.copy())
    x[1][2] = 5
    assert to_np(x)[1, 2] == 5
    x.t()[0].zero_()
    assert np.all(to_np(x)[:, 0] == 0)
    x[0].zero_()
    assert np.all(to_np(x)[0] == 0)
    v = x[2, 1:]
    x.add_(1)
    assert_close(v, to_np(x)[2, 1:])
    x.narrow(1, 1, 2).fill_(-1)
    assert np.all(to_np(x)[:, 1:3] == -1)
    x.select(1, 3)[dj.tensor([0, 2])] = 9.0
    assert_close(x[:, 3], np.array([9.0, to_np(x)[1, 3], 9.0]))


def test_setitem_through_view_gradients():
    def run(lib, x, v):
        y = x * 1
        y.t()[1, :2] = v
        y[2][[0, 3]] = v * 3
        return y
    compare(lambda x, v: run(dj, x, v), lambda x, v: run(torch, x, v), X, rng.standard_normal(2), double=True)


def test_setitem_saved_tensor_version_error():
    x = dj.tensor(X, requires_grad=True)
    y = x * 1
    z = (y * y).sum()
    y[0] = 1.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_setitem_on_leaf_requiring_grad():
    x = dj.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        x[0] = 1.0
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        x[0].zero_()
    with dj.no_grad():
        x[0] = 1.0
    assert np.all(to_np(x)[0] == 1)


# ---------------------------------------------------------------- gather / scatter family
G_IDX = _i([0, 2, 1], [2, 2, 0])
S_IDX = _i([0, 2, 1], [2, 1, 0])  # unique per column: scatter without reduce has a defined gradient
T_IDX = _i([0, 0, 1], [2, 0, 0])  # repeats, for reductions
XT = np.array([[1.0, 2.0, 3.0, 1.0], [2.0, 2.0, 0.5, 1.0], [3.0, -1.0, 2.0, 4.0]])  # ties for amax/amin

OPS = {
    "gather": (lambda m, x, i: m.gather(x, 0, i), [X, G_IDX]),
    "gather_dim1": (lambda m, x, i: m.gather(x, 1, i[:, :2]), [X, G_IDX]),
    "scatter_src": (lambda m, x, s, i: m.scatter(x, 0, i, s), [X, rng.standard_normal((2, 3)), S_IDX]),
    "scatter_value": (lambda m, x, i: m.scatter(x, 0, i, value=2.5), [X, S_IDX]),
    "scatter_add": (lambda m, x, s, i: m.scatter_add(x, 0, i, s), [X, rng.standard_normal((2, 3)), T_IDX]),
    "index_select": (lambda m, x, i: m.index_select(x, 1, i), [X, _i(3, 0, 3)]),
    "index_add": (lambda m, x, s, i: m.index_add(x, 0, i, s, alpha=2.0), [X, rng.standard_normal((3, 4)), _i(2, 0, 2)]),
    "index_copy": (lambda m, x, s, i: m.index_copy(x, 1, i, s), [X, rng.standard_normal((3, 2)), _i(3, 0)]),
    "index_fill": (lambda m, x, i: m.index_fill(x, 1, i, -1.5), [X, _i(1, -1)]),
    "index_fill_tensor": (lambda m, x, v, i: m.index_fill(x, 0, i, v), [X, np.array(0.7), _i(1)]),
    "masked_fill": (lambda m, x: m.masked_fill(x, x > 0, 3.0), [X]),
    "masked_fill_tensor": (lambda m, x, v: m.masked_fill(x, x[0] > 0, v), [X, np.array(-2.0)]),
    "masked_scatter": (lambda m, x, s: m.masked_scatter(x, x > 0, s), [X, rng.standard_normal(14)]),
    "masked_select": (lambda m, x: m.masked_select(x, x[1] > 0), [X]),
    "take": (lambda m, x, i: m.take(x, i), [X, _i([0, -1], [11, 5])]),
    "take_along_dim": (lambda m, x, i: m.take_along_dim(x, i, dim=1), [X, _i([0], [3], [1])]),
    "take_along_dim_flat": (lambda m, x, i: m.take_along_dim(x, i), [X, _i(0, 7, 11)]),
    "narrow": (lambda m, x: m.narrow(x, 1, -3, 2), [X]),
    "select": (lambda m, x: m.select(x, -1, 2), [X]),
    "put": (lambda m, x, s, i: m.put(x, i, s, accumulate=True), [X, rng.standard_normal(3), _i(0, 0, -1)]),
}
for _r in ("sum", "prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        OPS[f"scatter_reduce_{_r}_{_inc}"] = (
            lambda m, x, s, i, r=_r, inc=_inc: m.scatter_reduce(x, 0, i, s, r, include_self=inc),
            [XT, np.array([[2.0, 0.5, 2.0], [3.0, 2.0, 1.5]]), T_IDX])


OPS["scatter_reduce_prod_zeros"] = (lambda m, x, s, i: m.scatter_reduce(x, 0, i, s, "prod"),
                                    [XT * (XT != 0.5), np.array([[2.0, 0.0, 2.0], [0.0, 2.0, 1.5]]), T_IDX])
OPS["scatter_reduce_prod_zeros_excl"] = (
    lambda m, x, s, i: m.scatter_reduce(x, 0, i, s, "prod", include_self=False),
    [XT, np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 1.5]]), T_IDX])


@pytest.mark.parametrize("name", OPS)
def test_op_vs_torch(name):
    fn, inputs = OPS[name]
    compare(lambda *a: fn(dj, *a), lambda *a: fn(torch, *a), *inputs, double=True)


def test_float32_gather_and_masked_fill():
    x = X.astype(np.float32)
    compare(lambda x, i: x.gather(0, i).masked_fill(x[:2, :3] > 0, 1.0),
            lambda x, i: x.gather(0, i).masked_fill(x[:2, :3] > 0, 1.0), x, G_IDX, double=True)


INPLACE = {
    "scatter_": lambda x, s, i: x.scatter_(0, i, s[:1]),
    "scatter_add_": lambda x, s, i: x.scatter_add_(0, i, s[:1]),
    "scatter_reduce_": lambda x, s, i: x.scatter_reduce_(0, i, s[:1], "amax", include_self=False),
    "index_add_": lambda x, s, i: x.index_add_(0, i[0, :3], s),
    "index_copy_": lambda x, s, i: x.index_copy_(0, i[0, :2], s[:2]),
    "index_fill_": lambda x, s, i: x.index_fill_(1, i[0], 0.5),
    "masked_fill_": lambda x, s, i: x.masked_fill_(x > 0, -1.0),
    "masked_scatter_": lambda x, s, i: x.masked_scatter_(x < 0, s.flatten()),
    "put_": lambda x, s, i: x.put_(i[0, :3], s[0, :3]),
}


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_variants(name):
    fn = INPLACE[name]
    s = rng.standard_normal((3, 4))
    compare(lambda x, s, i: fn(x * 1, s, i), lambda x, s, i: fn(x * 1, s, i), X, s, _i([0, 2, 1, 1]),
            double=True)


def test_nonzero_argwhere_where():
    a = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    for fn in (lambda m, x: m.nonzero(x), lambda m, x: m.argwhere(x),
               lambda m, x: m.nonzero(x, as_tuple=True), lambda m, x: m.where(x > 0),
               lambda m, x: m.nonzero(x[0, 1]), lambda m, x: m.nonzero(x[0, 0], as_tuple=True)):
        compare(lambda x: fn(dj, x), lambda x: fn(torch, x), a, grad=False)


def test_empty_indices():
    e = _i()
    for fn in (lambda m, x, i: x[i], lambda m, x, i: m.index_select(x, 0, i), lambda m, x, i: m.take(x, i),
               lambda m, x, i: x.index_fill(0, i, 1.0), lambda m, x, i: m.gather(x, 1, i.reshape(3, 0))):
        compare(lambda x, i: fn(dj, x, i), lambda x, i: fn(torch, x, i), X, e, double=True)
    y = dj.tensor(X)
    y[dj.tensor([], dtype=dj.int64)] = 5.0
    assert_close(y, X)


# ---------------------------------------------------------------- errors
L = np.array
ERRORS = [
    ("int", lambda m, x: x[5], IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    ("int_neg", lambda m, x: x[0, -5], IndexError, "index -5 is out of bounds for dimension 1 with size 4"),
    ("tensor", lambda m, x: x[:, m.tensor([0, 4])], IndexError, "index 4 is out of bounds for dimension 0 with size 4"),
    ("tensor_2nd", lambda m, x: x[m.tensor([0]), m.tensor([-5])], IndexError,
     "index -5 is out of bounds for dimension 1 with size 4"),
    ("tensor_neg", lambda m, x: x[m.tensor([-4])], IndexError, "index -4 is out of bounds for dimension 0 with size 3"),
    ("setitem", lambda m, x: x.__setitem__(m.tensor([3]), 1.0), IndexError,
     "out of bounds for dimension 0 with size 3"),
    ("step", lambda m, x: x[::-1], ValueError, "step must be greater than zero"),
    ("too_many", lambda m, x: x[0, 0, 0], IndexError, "too many indices for tensor of dimension 2"),
    ("zero_dim", lambda m, x: x[0, 0][0], IndexError, "invalid index of a 0-dim tensor"),
    ("float_index", lambda m, x: x[m.tensor([1.0])], IndexError, "tensors used as indices must be long"),
    ("mask_shape", lambda m, x: x[m.tensor([True, False])], IndexError, "The shape of the mask [2] at index 0"),
    ("broadcast", lambda m, x: x[m.tensor([0, 1]), m.tensor([0, 1, 2])], IndexError,
     "shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]"),
    ("set_shape", lambda m, x: x.__setitem__(0, m.ones(3, dtype=m.float64)), RuntimeError,
     "The expanded size of the tensor (4) must match the existing size (3)"),
    ("set_shape_adv", lambda m, x: x.__setitem__([0], m.ones(3, dtype=m.float64)), RuntimeError,
     "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [1, 4]"),
    ("gather", lambda m, x: x.gather(0, m.tensor([[5]])), RuntimeError,
     "index 5 is out of bounds for dimension 0 with size 3"),
    ("gather_neg", lambda m, x: x.gather(1, m.tensor([[-1]])), RuntimeError,
     "index -1 is out of bounds for dimension 1"),
    ("gather_ndim", lambda m, x: x.gather(0, m.tensor([0, 1])), RuntimeError,
     "Index tensor must have the same number of dimensions as input tensor"),
    ("gather_size", lambda m, x: x.gather(0, m.tensor([[0] * 5])), RuntimeError, "Size does not match at dimension 1"),
    ("scatter", lambda m, x: x.scatter(0, m.tensor([[5]]), 1.0), RuntimeError,
     "index 5 is out of bounds for dimension 0 with size 3"),
    ("scatter_ndim", lambda m, x: x.scatter(0, m.tensor([5]), 1.0), RuntimeError,
     "Index tensor must have the same number of dimensions as self tensor"),
    ("scatter_dtype", lambda m, x: x.scatter_add(0, m.tensor([[0]]), m.ones(1, 1)), RuntimeError,
     "Expected self.dtype to be equal to src.dtype"),
    ("scatter_reduce", lambda m, x: x.scatter_reduce(0, m.tensor([[0]]), x, "foo"), RuntimeError,
     "reduce argument must be either sum, prod, mean, amax or amin"),
    ("index_select", lambda m, x: x.index_select(0, m.tensor([3])), IndexError, "index out of range in self"),
    ("index_select_2d", lambda m, x: x.index_select(0, m.tensor([[0]])), IndexError,
     "Index is supposed to be a vector"),
    ("index_add", lambda m, x: x.index_add(0, m.tensor([3]), x[:1]), RuntimeError,
     "index 3 is out of bounds for dimension 0"),
    ("index_add_count", lambda m, x: x.index_add(0, m.tensor([0]), x[:2]), RuntimeError, "Number of indices (1)"),
    ("index_copy", lambda m, x: x.index_copy(0, m.tensor([-1]), x[:1]), IndexError,
     "index_copy_(): index -1 is out of bounds"),
    ("index_fill", lambda m, x: x.index_fill(1, m.tensor([4]), 1.0), IndexError,
     "index 4 is out of bounds for dimension 1"),
    ("take", lambda m, x: x.take(m.tensor([12])), IndexError,
     "out of range: tried to access index 12 on a tensor of 12"),
    ("put", lambda m, x: (x * 1).put_(m.tensor([0, 1]), x[0, :1]), IndexError,
     "Expected source and index to have the same"),
    ("masked_fill_mask", lambda m, x: x.masked_fill(m.tensor([1, 0, 1, 0]), 1.0), RuntimeError,
     "masked_fill_ only supports boolean masks"),
    ("masked_fill_value", lambda m, x: x.masked_fill(x > 0, x[0]), RuntimeError,
     "only supports a 0-dimensional value tensor"),
    ("masked_fill_", lambda m, x: (x[0] * 1).masked_fill_(x > 0, 1.0), RuntimeError,
     "output with shape [4] doesn't match the broadcast shape [3, 4]"),
    ("masked_scatter", lambda m, x: x.masked_scatter(x > -9, x[0]), RuntimeError,
     "Number of elements of source < number of ones in mask"),
    ("narrow", lambda m, x: x.narrow(0, 1, 5), RuntimeError, "start (1) + length (5) exceeds dimension size (3)."),
    ("select", lambda m, x: x.select(1, 4), IndexError, "select(): index 4 out of range for tensor of size [3, 4]"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_torch(case):
    _, fn, exc, msg = case
    with pytest.raises(exc) as et:
        fn(torch, torch.tensor(X))
    assert msg in str(et.value), f"torch says: {et.value}"
    x = dj.tensor(X)
    before = to_np(x).copy()
    with pytest.raises(exc) as ed:
        fn(dj, x)
    assert msg in str(ed.value)
    assert np.array_equal(to_np(x), before)  # nothing half-applied


def test_augmented_assignment_and_self_masks():
    def run(m, x):
        y = x * 1
        y[y < 0] = 0
        y[y > 1] += 1
        y[0] += 5
        y[:, [0, 1]] *= 2
        y[m.tensor([1, 2], dtype=m.int32), 0] = -1.0
        return y
    compare(lambda x: run(dj, x), lambda x: run(torch, x), X, double=True)


def test_scatter_src_larger_than_index_gradcheck():
    from helpers import gradcheck
    # PyTorch itself can't differentiate this case; check against finite differences instead
    gradcheck(lambda x, s: dj.scatter(x, 0, dj.tensor(S_IDX), s), X, rng.standard_normal((3, 4)), order=2)
    gradcheck(lambda x, s: dj.scatter_reduce(x, 1, dj.tensor(T_IDX[:, :2]), s, "mean", include_self=False),
              X, rng.standard_normal((3, 4)), order=2)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("zeros", ["none", "one", "two"])
def test_scatter_reduce_prod_repeated_indices_lowered_grad(include_self, zeros):
    # JAX differentiates its scatter-multiply only for unique indices: the impl's JVP uses the tape rule's
    # coefficients, so jax.grad (jit, vmap) and jax.jvp of the lowered graph agree with the tape and torch
    import jax
    import jax.numpy as jnp
    import torch
    from dynajax.lower import lower
    from dynajax.testing import check_grads
    x, s = np.array(XT), np.array([[2.0, 0.5, 2.0], [3.0, 2.0, 1.5]])
    if zeros != "none":   # slot (0, 1) gathers x[0, 1], s[0, 1], s[1, 1]: one or two zero factors
        s[0, 1] = 0.0
        x[1, 0] = 0.0
        if zeros == "two":
            s[1, 1] = 0.0
    g = rng.standard_normal(x.shape)

    def f(m, a, b, i):
        return m.scatter_reduce(a, 0, i, b, "prod", include_self=include_self)

    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(s, requires_grad=True)
    want = torch.autograd.grad(f(torch, tx, ts, torch.tensor(T_IDX)), (tx, ts), torch.tensor(g))
    dx, ds = dj.tensor(x, requires_grad=True), dj.tensor(s, requires_grad=True)
    got = dj.autograd.grad(f(dj, dx, ds, dj.tensor(T_IDX)), (dx, ds), dj.tensor(g))
    low = lower(lambda a, b: f(dj, a, b, dj.tensor(T_IDX)), dx, ds)
    with dj._dtype.x64():   # (float64 arrays, as the lowered graph's)
        xs = (jnp.asarray(x), jnp.asarray(s))
        vjp = jax.jit(lambda a, b: jax.vjp(low.fn, a, b)[1](jnp.asarray(g)))
        jgrads = vjp(*xs)
        batched = jax.vmap(vjp)(*(jnp.stack([v, v]) for v in xs))
        tangent = jax.jvp(low.fn, xs, (jnp.ones(x.shape), jnp.ones(s.shape)))[1]
    for k in range(2):
        assert_close(got[k], want[k].numpy(), msg=f"tape grad {k}")
        assert_close(np.asarray(jgrads[k]), want[k].numpy(), msg=f"jax.vjp of the lowered graph {k}")
        assert_close(np.asarray(batched[k][1]), want[k].numpy(), msg=f"vmapped {k}")
    # forward mode is the transpose: <jvp(ones), g> = <vjp(g), ones>
    np.testing.assert_allclose(float(np.sum(np.asarray(tangent) * g)),
                               sum(float(want[k].sum()) for k in range(2)), rtol=1e-10)
    idx = dj.tensor(T_IDX)
    check_grads(lambda a, b: f(dj, a, b, idx).sum() * 1.5, [x, s], order=2 if zeros == "none" else 1)
    check_grads(lambda a, b: dj.index_reduce(a, 0, dj.tensor([0, 2, 0]), b, "prod", include_self=include_self),
                [x, rng.uniform(0.5, 1.5, (3, 4))], order=2)


def test_bounds_extrema_on_device_path():
    import jax.numpy as jnp
    from dynajax.ops.index import _extrema_dev
    got = np.asarray(_extrema_dev((jnp.array([3, -1, 2]), jnp.array([[5]], dtype=jnp.int32))))
    assert got.tolist() == [[-1, 3], [5, 5]]


def test_linear_index_ops_do_not_save_their_inputs():
    # like PyTorch, writing to the inputs of scatter_add/setitem afterwards doesn't break backward
    grads = []
    for m in (dj, torch):
        x = m.tensor(X, requires_grad=True)
        s = m.tensor(X[:2, :3].copy(), requires_grad=True)
        a, b = x * 1, s * 1
        y = a.scatter_add(0, m.tensor(T_IDX), b)
        y2 = a.clone()
        y2[0, :3] = b[0]
        a.add_(1)
        b.mul_(2)
        (y.sum() + y2.sum()).backward()
        grads.append((x.grad, s.grad))
    assert_close(grads[0][0], grads[1][0])
    assert_close(grads[0][1], grads[1][1])


# ---------------------------------------------------------------- 0-d index_* ops, negative take_along_dim indices
# Regression tests of issue 37's fixes, each side by side with PyTorch (and the tape with jax.vjp of the
# lowered graph where a gradient was wrong): duplicate indices in index_fill's value gradient, and ops that refused
# what PyTorch computes (0-d index_* ops, negative take_along_dim indices), and PyTorch's errors next to them.
def test_index_fill_value_gradient_counts_each_slice_once():
    x = np.random.default_rng(0).standard_normal((3, 5))
    idx = [1, 1, 3, 1]   # a repeated index
    compare(lambda x, v: x.index_fill(1, dj.tensor(idx), v), lambda x, v: x.index_fill(1, torch.tensor(idx), v),
            x, np.array(0.7))
    dj.testing.check_grads(lambda x, v: x.index_fill(1, dj.tensor(idx), v), [x, np.array(0.7)])


INDEX_0D_AND_NEGATIVE = {
    "index_add 0-d": lambda L: L.tensor(1.0).index_add(0, L.tensor([0]), L.tensor(2.0), alpha=3),
    "index_add 0-d 0-d index": lambda L: L.tensor(1.0).index_add(-1, L.tensor(0), L.tensor(2.0)),
    "index_add 0-d source shape": lambda L: L.tensor(1.0).index_add(0, L.tensor([0, 0]), L.tensor([2.0, 3])),
    "index_add 0-d bad index": lambda L: L.tensor(1.0).index_add(0, L.tensor([1]), L.tensor(2.0)),
    "index_add 0-d bad dim": lambda L: L.tensor(1.0).index_add(1, L.tensor([0]), L.tensor(2.0)),
    "index_copy 0-d": lambda L: L.tensor(1.0).index_copy(0, L.tensor([0]), L.tensor(2.0)),
    "index_copy 0-d vector source": lambda L: L.tensor(1.0).index_copy(0, L.tensor([0]), L.tensor([2.0])),
    "index_copy 0-d two indices": lambda L: L.tensor(1.0).index_copy(0, L.tensor([0, 0]), L.tensor(2.0)),
    "index_copy 0-d bad index": lambda L: L.tensor(1.0).index_copy(0, L.tensor([1]), L.tensor(2.0)),
    "index_fill 0-d": lambda L: L.tensor(1.0).index_fill(0, L.tensor([0, 0]), 2.0),
    "index_fill 0-d tensor value": lambda L: L.tensor(1.0).index_fill(-1, L.tensor(0), L.tensor(2.0)),
    "index_fill 0-d bad index": lambda L: L.tensor(1.0).index_fill(0, L.tensor([1]), 2.0),
    "index_fill_ 0-d": lambda L: L.tensor([5.0])[0].index_fill_(0, L.tensor([0]), 2.0),
    "take_along_dim negative": lambda L: L.take_along_dim(L.arange(6.0).reshape(2, 3), L.tensor([[-1], [0]]), 1),
    "take_along_dim negative dim 0": lambda L: L.take_along_dim(L.arange(6.0).reshape(2, 3),
                                                                L.tensor([[-2, 1, 0]]), 0),
    "take_along_dim flat negative": lambda L: L.take_along_dim(L.arange(6.0).reshape(2, 3), L.tensor([-1])),
}


@pytest.mark.parametrize("case", sorted(INDEX_0D_AND_NEGATIVE))
def test_0d_index_ops_and_negative_take_along_dim_like_torch(case):
    same(INDEX_0D_AND_NEGATIVE[case])


def test_zero_d_index_ops_gradients_like_torch():
    compare(lambda x, s: x.index_add(0, dj.tensor([0]), s, alpha=3), lambda x, s: x.index_add(0, torch.tensor([0]), s,
            alpha=3), np.array(1.0), np.array(2.0))
    compare(lambda x, s: x.index_copy(0, dj.tensor([0]), s), lambda x, s: x.index_copy(0, torch.tensor([0]), s),
            np.array(1.0), np.array(2.0))
    compare(lambda x: dj.take_along_dim(x, dj.tensor([[-1, 0]]), 1), lambda x: torch.take_along_dim(
        x, torch.tensor([[-1, 0]]), 1), np.random.default_rng(0).standard_normal((2, 3)))
