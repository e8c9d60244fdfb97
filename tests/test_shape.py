"""Shape ops (view/reshape/expand/permute/... from shape.py; flip/roll/repeat/tril/diagonal/
meshgrid/in-place t_... from join.py) against PyTorch: values, gradients, double backward, errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import dynajax as dj
from helpers import compare, gradcheck, raises_like_torch, same, to_np

torch = pytest.importorskip("torch")

R = np.random.default_rng(1)
A23 = R.standard_normal((2, 3))
A33 = R.standard_normal((3, 3))
A234 = R.standard_normal((2, 3, 4))
A13 = R.standard_normal((1, 3))
A213 = R.standard_normal((2, 1, 3))
V3 = R.standard_normal(3)
S = np.array(0.7)

# (id, fn(module, *tensors), inputs); fn runs with module = dynajax and = torch
CASES = [
    # shape.py
    ("view", lambda m, x: x.view(3, 2), (A23,)),
    ("view_infer", lambda m, x: x.view(-1, 4), (A234,)),
    ("view_tuple", lambda m, x: x.view((6,)), (A23,)),
    ("reshape", lambda m, x: m.reshape(x, (4, -1, 2)), (A234,)),
    ("reshape_0d", lambda m, x: x.reshape(1, 1), (S,)),
    ("view_as", lambda m, x, y: x.view_as(y), (A23, R.standard_normal((3, 2)))),
    ("expand", lambda m, x: x.expand(4, 2, 3), (A13,)),
    ("expand_keep", lambda m, x: x.expand(2, -1, 3), (A213,)),
    ("expand_0d", lambda m, x: x.expand(2, 2), (S,)),
    ("expand_as", lambda m, x, y: x.expand_as(y), (A13, A23)),
    ("broadcast_to", lambda m, x: m.broadcast_to(x, (2, 2, 3)), (A13,)),
    ("broadcast_tensors", lambda m, x, y: m.broadcast_tensors(x, y), (A13, R.standard_normal((2, 1)))),
    ("permute", lambda m, x: x.permute(2, 0, 1), (A234,)),
    ("permute_fn", lambda m, x: m.permute(x, (1, -1, 0)), (A234,)),
    ("transpose", lambda m, x: x.transpose(0, -1), (A234,)),
    ("swapaxes", lambda m, x: m.swapaxes(x, 0, 1), (A23,)),
    ("t", lambda m, x: x.t(), (A23,)),
    ("t_1d", lambda m, x: m.t(x), (V3,)),
    ("T", lambda m, x: x.T if x.ndim < 3 else x.permute(2, 1, 0), (A23,)),
    ("mT", lambda m, x: x.mT, (A234,)),
    ("squeeze", lambda m, x: x.squeeze(), (A213,)),
    ("squeeze_dim", lambda m, x: x.squeeze(1), (A213,)),
    ("squeeze_noop", lambda m, x: x.squeeze(0), (A213,)),
    ("squeeze_dims", lambda m, x: m.squeeze(x, (0, 1)), (A213,)),
    ("unsqueeze", lambda m, x: x.unsqueeze(-1), (A23,)),
    ("unsqueeze_0d", lambda m, x: x.unsqueeze(0), (S,)),
    ("flatten", lambda m, x: x.flatten(), (A234,)),
    ("flatten_range", lambda m, x: m.flatten(x, 1, 2), (A234,)),
    ("flatten_0d", lambda m, x: x.flatten(), (S,)),
    ("unflatten", lambda m, x: x.unflatten(1, (3, 1)), (A23,)),
    ("unflatten_infer", lambda m, x: m.unflatten(x, -1, (2, -1)), (A234,)),
    ("movedim", lambda m, x: x.movedim(0, -1), (A234,)),
    ("movedim_many", lambda m, x: m.movedim(x, (0, 1), (2, 0)), (A234,)),
    # join.py
    ("flip", lambda m, x: x.flip(0), (A23,)),
    ("flip_many", lambda m, x: m.flip(x, (0, -1)), (A234,)),
    ("flip_0d", lambda m, x: x.flip(0), (S,)),
    ("fliplr", lambda m, x: m.fliplr(x), (A23,)),
    ("flipud", lambda m, x: x.flipud(), (A234,)),
    ("roll", lambda m, x: x.roll(1, 1), (A23,)),
    ("roll_flat", lambda m, x: m.roll(x, -4), (A23,)),
    ("roll_many", lambda m, x: x.roll((1, -2), (0, 2)), (A234,)),
    ("rot90", lambda m, x: x.rot90(), (A23,)),
    ("rot90_k2", lambda m, x: m.rot90(x, 2, (1, 2)), (A234,)),
    ("rot90_k-1", lambda m, x: m.rot90(x, -1, [0, 1]), (A23,)),
    ("rot90_k4", lambda m, x: m.rot90(x, 4), (A23,)),
    ("repeat", lambda m, x: x.repeat(2, 1), (A23,)),
    ("repeat_lead", lambda m, x: x.repeat(2, 1, 3), (A23,)),
    ("repeat_zero", lambda m, x: x.repeat(0, 2), (A23,)),
    ("repeat_0d", lambda m, x: x.repeat(3), (S,)),
    ("tile", lambda m, x: m.tile(x, (2,)), (A23,)),
    ("tile_lead", lambda m, x: x.tile(2, 1, 2), (V3,)),
    ("repeat_interleave", lambda m, x: x.repeat_interleave(2), (A23,)),
    ("repeat_interleave_dim", lambda m, x: m.repeat_interleave(x, 3, dim=0), (A23,)),
    ("repeat_interleave_tensor", lambda m, x: x.repeat_interleave(m.tensor([1, 0, 2]), dim=-1), (A23,)),
    ("repeat_interleave_tensor1", lambda m, x: x.repeat_interleave(m.tensor([2]), dim=0), (A23,)),
    ("repeat_interleave_flat", lambda m, x: x.repeat_interleave(m.tensor([1, 2, 0, 1, 1, 3])), (A23,)),
    ("tril", lambda m, x: x.tril(), (A33,)),
    ("tril_diag", lambda m, x: m.tril(x, diagonal=-1), (A234,)),
    ("triu", lambda m, x: x.triu(1), (A23,)),
    ("triu_fn", lambda m, x: m.triu(x, -1), (A234,)),
    ("tril_", lambda m, x: (x * 1).tril_(), (A33,)),
    ("triu_", lambda m, x: (x * 1).triu_(1), (A23,)),
    ("diag_vec", lambda m, x: m.diag(x), (V3,)),
    ("diag_vec_off", lambda m, x: x.diag(-2), (V3,)),
    ("diag_mat", lambda m, x: m.diag(x, 1), (A23,)),
    ("diag_mat_neg", lambda m, x: x.diag(-1), (A33,)),
    ("diagonal", lambda m, x: x.diagonal(), (A23,)),
    ("diagonal_off", lambda m, x: m.diagonal(x, 1, 0, 2), (A234,)),
    ("diagonal_rev", lambda m, x: x.diagonal(-1, dim1=2, dim2=0), (A234,)),
    ("diagonal_empty", lambda m, x: x.diagonal(5), (A23,)),
    ("diag_embed", lambda m, x: m.diag_embed(x), (A23,)),
    ("diag_embed_dims", lambda m, x: x.diag_embed(1, 0, 2), (A23,)),
    ("diag_embed_neg", lambda m, x: m.diag_embed(x, -1, -1, 0), (A23,)),
    ("trace", lambda m, x: x.trace(), (A23,)),
    ("trace_fn", lambda m, x: m.trace(x), (A33,)),
    ("meshgrid_ij", lambda m, x, y: m.meshgrid(x, y, indexing="ij"), (V3, A13.reshape(3)[:2])),
    ("meshgrid_xy", lambda m, x, y, s: m.meshgrid([x, y, s], indexing="xy"), (V3, A13.reshape(3)[:2], S)),
    ("meshgrid_one", lambda m, x: m.meshgrid(x, indexing="xy"), (V3,)),
    ("cartesian_prod", lambda m, x, y: m.cartesian_prod(x, y), (V3, A13.reshape(3)[:2])),
    ("atleast_1d", lambda m, s, v: m.atleast_1d(s, v), (S, V3)),
    ("atleast_2d", lambda m, s, v, a: m.atleast_2d([s, v, a]), (S, V3, A23)),
    ("atleast_3d", lambda m, s, v, a, b: m.atleast_3d(s, v, a, b), (S, V3, A23, A234)),
    ("t_", lambda m, x: (x * 1).t_(), (A23,)),
    ("transpose_", lambda m, x: (x * 1).transpose_(0, 2), (A234,)),
    ("swapaxes_", lambda m, x: (x * 1).swapaxes_(0, 1), (A23,)),
    ("squeeze_", lambda m, x: (x * 1).squeeze_(), (A213,)),
    ("squeeze_dim_", lambda m, x: (x * 1).squeeze_(1), (A213,)),
    ("unsqueeze_", lambda m, x: (x * 1).unsqueeze_(1), (A23,)),
    ("inplace_then_use", lambda m, x: (x * 1).t_().unsqueeze_(0) * 2, (A23,)),
]


def _run(fn, m):
    return lambda *xs: fn(m, *xs)


@pytest.mark.parametrize("name,fn,inputs", CASES, ids=[c[0] for c in CASES])
def test_values_and_grads(name, fn, inputs):
    compare(_run(fn, dj), _run(fn, torch), *inputs, double=True)


@pytest.mark.parametrize("fn", [
    lambda x: x.roll(1, 0).flip(1).repeat(2, 1),
    lambda x: x.repeat_interleave(dj.tensor([2, 1]), 0).diagonal(1) * x.sum(),
    lambda x: (x.tril(-1) * x).diag_embed(0, 0, 2),
])
def test_gradcheck(fn):
    gradcheck(fn, A23, order=2)


def test_int_and_bool_inputs():
    xi = np.arange(6).reshape(2, 3)
    for fn in (lambda m, x: x.flip(1), lambda m, x: x.roll(1), lambda m, x: x.repeat(1, 2),
               lambda m, x: x.repeat_interleave(2, 1), lambda m, x: x.tril(), lambda m, x: m.diag(x),
               lambda m, x: x.trace(), lambda m, x: m.diag_embed(x), lambda m, x: x.rot90()):
        compare(_run(fn, dj), _run(fn, torch), xi, grad=False)
        if fn.__code__.co_names != ("trace",):
            compare(_run(fn, dj), _run(fn, torch), xi % 2 == 0, grad=False)
    compare(lambda c: dj.repeat_interleave(c), lambda c: torch.repeat_interleave(c), np.array([1, 0, 3]), grad=False)


# ---------------------------------------------------------------- views and in-place shape changes
def test_diagonal_is_view():
    leaf = dj.tensor(A33, requires_grad=True)
    x = leaf * 1
    x.diagonal().mul_(0)
    np.testing.assert_allclose(np.diag(to_np(x)), 0)
    x.sum().backward()
    np.testing.assert_array_equal(to_np(leaf.grad), 1 - np.eye(3))


def test_inplace_shape_ops_bump_version_and_keep_identity():
    x = dj.zeros(2, 3)
    for op, shape in ((lambda t: t.t_(), (3, 2)), (lambda t: t.unsqueeze_(0), (1, 3, 2)),
                      (lambda t: t.transpose_(0, 2), (2, 3, 1)), (lambda t: t.squeeze_(), (2, 3))):
        v = x._version
        assert op(x) is x
        assert tuple(x.shape) == shape and x._version == v + 1


def test_inplace_shape_op_invalidates_saved():
    leaf = dj.tensor(A23, requires_grad=True)
    y = leaf * 2
    z = y * y
    y.t_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_inplace_shape_op_on_view_keeps_write_through():
    leaf = dj.tensor(A23, requires_grad=True)
    x = leaf * 1
    v = x.view(3, 2)
    v.t_()
    assert tuple(v.shape) == (2, 3)
    v.mul_(2)
    np.testing.assert_allclose(to_np(x), (A23.reshape(3, 2).T * 2).T.reshape(2, 3), rtol=1e-6)
    x.sum().backward()
    np.testing.assert_allclose(to_np(leaf.grad), 2 * np.ones((2, 3)))


def test_tril_inplace_on_view():
    x = dj.ones(2, 3, 3)
    x.unbind(0)[1].triu_(1)
    np.testing.assert_array_equal(to_np(x)[1], np.triu(np.ones((3, 3)), 1))
    np.testing.assert_array_equal(to_np(x)[0], np.ones((3, 3)))


# ---------------------------------------------------------------- errors
ERRORS = [
    (lambda m: m.zeros(2, 3).view(2, 5), RuntimeError, "shape '[2, 5]' is invalid for input of size 6"),
    (lambda m: m.zeros(2, 3).reshape(-1, 4), RuntimeError, "shape '[-1, 4]' is invalid for input of size 6"),
    (lambda m: m.zeros(2, 3).view(-1, -1), RuntimeError, "only one dimension can be inferred"),
    (lambda m: m.zeros(2, 3).transpose(0, 2), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).unsqueeze(3), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).squeeze(-3), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).flatten(2), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).movedim(0, 5), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).flip(2), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).size(2), IndexError, "Dimension out of range"),
    (lambda m: m.zeros(2, 3).expand(3, 3), RuntimeError,
     "The expanded size of the tensor (3) must match the existing size (2) at non-singleton dimension 0"),
    (lambda m: m.zeros(2, 3).expand(3), RuntimeError, "the number of sizes provided (1) must be greater or equal"),
    (lambda m: m.zeros(3).expand(-1, 3), RuntimeError, "The expanded size of the tensor (-1) isn't allowed"),
    (lambda m: m.zeros(2, 3, 4).t(), RuntimeError, "expects a tensor with <= 2 dimensions, but self is 3D"),
    (lambda m: m.zeros(2, 3, 4).t_(), RuntimeError, "t_() expects a tensor with <= 2 dimensions, but self is 3D"),
    (lambda m: m.zeros(2, 3).permute(0, 0), RuntimeError, "duplicate dims are not allowed"),
    (lambda m: m.zeros(2, 3).permute(0), RuntimeError, "number of dimensions in the tensor input does not match"),
    (lambda m: m.zeros(2, 3).flatten(1, 0), RuntimeError, "start_dim cannot come after end_dim"),
    (lambda m: m.zeros(2, 3).flip(0, 0), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda m: m.fliplr(m.zeros(3)), RuntimeError, "Input must be >= 2-d."),
    (lambda m: m.flipud(m.tensor(1.0)), RuntimeError, "Input must be >= 1-d."),
    (lambda m: m.zeros(2, 3).roll((1, 2), (0,)), RuntimeError, "shifts and dimensions must align"),
    (lambda m: m.zeros(2, 3).roll((1, 2)), RuntimeError, "shifts and dimensions must align"),
    (lambda m: m.zeros(2, 3).rot90(1, (0, 0)), RuntimeError, "expected rotation dims to be different"),
    (lambda m: m.zeros(3).rot90(), RuntimeError, "expected total dims >= 2, but got total dims = 1"),
    (lambda m: m.zeros(2, 3).rot90(1, (0, 1, 2)), RuntimeError, "expected total rotation dims == 2"),
    (lambda m: m.zeros(2, 3).repeat(2), RuntimeError, "Number of dimensions of repeat dims can not be smaller"),
    (lambda m: m.zeros(3, 2).repeat(2, -1), RuntimeError, "Trying to create tensor with negative dimension -2"),
    (lambda m: m.zeros(2, 3).repeat_interleave(-1), RuntimeError, "Repeats must be non-negative"),
    (lambda m: m.zeros(2, 3).repeat_interleave(m.tensor([1, -2]), dim=0), RuntimeError,
     "repeats can not be negative"),
    (lambda m: m.zeros(2, 3).repeat_interleave(m.tensor([1, 2, 3]), dim=0), RuntimeError,
     "repeats must have the same size as input along dim, but got repeats.size(0) = 3 and input.size(0) = 2"),
    (lambda m: m.zeros(2, 3).repeat_interleave(m.tensor([[1, 2]]), dim=0), RuntimeError,
     "repeats must be 0-dim or 1-dim tensor"),
    (lambda m: m.tril(m.zeros(3)), RuntimeError, "tril: input tensor must have at least 2 dimensions"),
    (lambda m: m.zeros(3).triu_(), RuntimeError, "triu: input tensor must have at least 2 dimensions"),
    (lambda m: m.diag(m.zeros(2, 2, 2)), RuntimeError, "diag(): Supports 1D or 2D tensors. Got 3D"),
    (lambda m: m.diagonal(m.zeros(3, 3), 0, 0, 0), RuntimeError, "diagonal dimensions cannot be identical 0, 0"),
    (lambda m: m.diagonal(m.zeros(3)), IndexError, "Dimension out of range"),
    (lambda m: m.diag_embed(m.zeros(2, 3), 0, 0, 0), RuntimeError, "diagonal dimensions cannot be identical"),
    (lambda m: m.trace(m.zeros(3)), RuntimeError, "trace: expected a matrix, but got tensor with dim 1"),
    (lambda m: m.ones(2, 2, dtype=m.bool).trace(), NotImplementedError, "\"trace\" not implemented for 'Bool'"),
    (lambda m: m.meshgrid(m.zeros(2, 2), indexing="ij"), RuntimeError, "Expected 0D or 1D tensor in the tensor list"),
    (lambda m: m.meshgrid(m.zeros(2), m.zeros(2, dtype=m.int64), indexing="ij"), RuntimeError,
     "meshgrid expects all tensors to have the same dtype"),
    (lambda m: m.meshgrid(m.zeros(2), indexing="ji"), RuntimeError, 'indexing must be one of "xy" or "ij"'),
    (lambda m: m.ones(2, 3, requires_grad=True).t_(), RuntimeError,
     "a leaf Variable that requires grad is being used in an in-place operation."),
    (lambda m: m.ones(2, 3, requires_grad=True).t().unsqueeze_(0), RuntimeError,
     "a view of a leaf Variable that requires grad is being used in an in-place operation."),
    (lambda m: m.ones(2, 1).squeeze_(5), IndexError, "Dimension out of range"),
]


@pytest.mark.parametrize("fn,exc,msg", ERRORS)
def test_errors_match_torch(fn, exc, msg):
    raises_like_torch(fn, exc, msg)


def test_failed_inplace_shape_op_changes_nothing():
    x = dj.zeros(2, 3)
    with pytest.raises(IndexError):
        x.transpose_(0, 4)
    assert tuple(x.shape) == (2, 3) and x._version == 0


# ---------------------------------------------------------------- property: broadcasting and reshape vs numpy
_dims = st.lists(st.sampled_from([0, 1, 2, 3]), min_size=0, max_size=3)


@settings(max_examples=25, derandomize=True, deadline=None)
@given(a=_dims, b=_dims, data=st.data())
def test_broadcast_and_reshape_match_numpy(a, b, data):
    n = min(len(a), len(b))
    b = b[:len(b) - n] + [y if y in (1, x) or x == 1 else x for x, y in zip(a[len(a) - n:], b[len(b) - n:])]
    x, y = np.arange(int(np.prod(a))).reshape(a).astype(np.float64), np.ones(b)
    want = np.broadcast_shapes(tuple(a), tuple(b))
    got = dj.broadcast_shapes(tuple(a), tuple(b))
    assert tuple(got) == want
    np.testing.assert_array_equal(to_np(dj.tensor(x) + dj.tensor(y)), x + y)
    np.testing.assert_array_equal(to_np(dj.tensor(x).expand(*want)), np.broadcast_to(x, want))
    shape = data.draw(st.permutations(a)) if a else []
    if x.size and shape:
        shape = list(shape)
        shape[data.draw(st.integers(0, len(shape) - 1))] = -1
    np.testing.assert_array_equal(to_np(dj.tensor(x).reshape(shape)), x.reshape(shape))


_LAYOUTS = {   # a view of arange(24).reshape(2, 3, 4), as PyTorch lays it out
    "base": lambda x: x, "transpose": lambda x: x[0].t(), "permute": lambda x: x.permute(2, 0, 1),
    "row": lambda x: x[1], "column": lambda x: x[:, 1], "step": lambda x: x[:, ::2], "last dims": lambda x: x[..., 1:3],
    "narrow 0": lambda x: x.narrow(0, 1, 1), "expand": lambda x: x[:, :1].expand(2, 3, 4),
    "unsqueeze": lambda x: x.unsqueeze(1), "diagonal": lambda x: x[0, :, :3].diagonal(),
    "unbind 2": lambda x: x.unbind(2)[0], "chunk 2": lambda x: x.chunk(2, 2)[1], "split 0": lambda x: x.split(1, 0)[1],
    "transpose of a transpose": lambda x: x.transpose(0, 2).transpose(0, 2), "detach of a column": lambda x: x[:, 1].detach(),
}


@pytest.mark.parametrize("name", list(_LAYOUTS))
def test_contiguity_and_what_writes_reach_follow_pytorchs_strides(name):
    """A view is contiguous where PyTorch's strides would be; ``contiguous()`` and ``reshape``/``flatten`` copy a
    view exactly where PyTorch's do, so a write to their result reaches the base exactly where it would in
    PyTorch, and ``view`` raises PyTorch's error where it cannot view."""
    def run(lib):
        out = {}
        x = lib.arange(24.0).reshape(2, 3, 4)
        v = _LAYOUTS[name](x)
        out["contiguous"] = v.is_contiguous()
        for how in ("contiguous", "reshape", "flatten"):
            x = lib.arange(24.0).reshape(2, 3, 4)
            v = _LAYOUTS[name](x)
            if name == "expand" and how != "contiguous":
                continue
            r = v.contiguous() if how == "contiguous" else v.reshape(-1) if how == "reshape" else v.flatten()
            with lib.no_grad():
                r.view(-1)[0] = -1.0   # (view of a contiguous result: always allowed)
            out[how] = x.flatten().tolist()
        try:
            _LAYOUTS[name](lib.arange(24.0).reshape(2, 3, 4)).view(-1)
            out["view"] = "ok"
        except RuntimeError as e:
            out["view"] = "view size is not compatible" in str(e)
        return out
    assert run(dj) == run(torch)


@pytest.mark.parametrize("shape,args", [((10,), (0, 3, 2)), ((2, 5, 4), (1, 2, 1)), ((2, 3, 6), (-1, 3, 3)),
                                        ((4, 3), (0, 4, 1))])
def test_tensor_unfold_matches_torch(shape, args):
    """``Tensor.unfold(dim, size, step)``: PyTorch's windows as a new last dim, values and first and second
    derivatives (overlapping windows sum their gradients); a view whose writes reach the base and whose
    contiguity is PyTorch's; its errors."""
    x = np.random.default_rng(0).standard_normal(shape)
    compare(lambda t: t.unfold(*args) ** 2, lambda t: t.unfold(*args) ** 2, x, double=True)
    gradcheck(lambda t: (t.unfold(*args) ** 2).sum(), x, order=2)

    def run(lib):
        base = lib.tensor(x)
        v = base.unfold(*args)
        with lib.no_grad():
            v[(0,) * v.dim()] = 100.0
        return base.tolist(), v.is_contiguous(), tuple(v.shape)
    assert run(dj) == run(torch)
    raises_like_torch(lambda lib: lib.tensor(x).unfold(0, shape[0] + 1, 1), RuntimeError, "maximum size for tensor")
    raises_like_torch(lambda lib: lib.tensor(x).unfold(0, 1, 0), RuntimeError, "step is 0 but must be > 0")


# ---------------------------------------------------------------- flip(dims=), Tensor.unfold of batch 0
# Regression tests of issue 37's fixes, each side by side with PyTorch: flip(dims=) and Tensor.unfold of an
# empty batch, which were refused where PyTorch computes them.
FLIP_DIMS_AND_EMPTY_UNFOLD = {
    "Tensor.unfold batch 0": lambda L: list(L.zeros(0, 5).unfold(1, 2, 1).shape),
    "flip dims=": lambda L: L.flip(L.arange(6).reshape(2, 3), dims=(0,)),
    "Tensor.flip dims=": lambda L: L.arange(6).reshape(2, 3).flip(dims=[1]),
}


@pytest.mark.parametrize("case", sorted(FLIP_DIMS_AND_EMPTY_UNFOLD))
def test_flip_dims_keyword_and_empty_unfold_like_torch(case):
    same(FLIP_DIMS_AND_EMPTY_UNFOLD[case])
