"""Regression tests of issue 37's fixes, each side by side with PyTorch (and the tape with jax.vjp of the
lowered graph where a gradient was wrong): duplicate indices in index_fill's value gradient and max_unpool's
lowered gradient, lowered norms at zero, conv_transpose with groups + dilation + output_padding, ops that
refused what PyTorch computes (0-d index_* ops, negative take_along_dim indices, normalize(p=0), batch-0
unfold, size-1 tensordot dims, flip(dims=), positional Tensor.to, norm(p='nuc')), and dropout2d on inputs
that are not 4-D."""
import math
import warnings

import jax
import numpy as np
import pytest

import dynajax as dj
import dynajax.nn.functional as F
from helpers import compare, same

torch = pytest.importorskip("torch")


def _lowered_grad(fn, x: np.ndarray, cot: np.ndarray) -> np.ndarray:
    low = dj.lower(fn, dj.tensor(x))
    return np.asarray(jax.grad(lambda a: (low.fn(a) * cot).sum())(x))


# ---------------------------------------------------------------- gradients that were wrong
def test_index_fill_value_gradient_counts_each_slice_once():
    x = np.random.default_rng(0).standard_normal((3, 5))
    idx = [1, 1, 3, 1]   # a repeated index
    compare(lambda x, v: x.index_fill(1, dj.tensor(idx), v), lambda x, v: x.index_fill(1, torch.tensor(idx), v),
            x, np.array(0.7))
    dj.testing.check_grads(lambda x, v: x.index_fill(1, dj.tensor(idx), v), [x, np.array(0.7)])


def test_max_unpool_lowered_gradient_with_duplicate_indices():
    x = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    idx = [[[[0, 0], [0, 5]]]]
    cot = np.arange(16.0).reshape(1, 1, 4, 4) - 3
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_unpool2d(xt, torch.tensor(idx), 2).backward(torch.tensor(cot))
    xd = dj.tensor(x, requires_grad=True)
    F.max_unpool2d(xd, dj.tensor(idx), 2).backward(dj.tensor(cot))
    lowered = _lowered_grad(lambda a: F.max_unpool2d(a, dj.tensor(idx), 2), x, cot)
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(lowered, xt.grad.numpy())


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, math.inf, -math.inf])
@pytest.mark.parametrize("x", [[0.0, 0.0, 0.0], [0.0, 1.0, -2.0]])
@pytest.mark.parametrize("fn", ["vector_norm", "linalg.norm", "Tensor.norm"])
def test_norm_gradients_at_zero(fn, x, p):
    f = {"vector_norm": lambda L, a: L.linalg.vector_norm(a, p), "linalg.norm": lambda L, a: L.linalg.norm(a, p),
         "Tensor.norm": lambda L, a: a.norm(p)}[fn]
    x = np.array(x)
    xt = torch.tensor(x, requires_grad=True)
    f(torch, xt).backward()
    xd = dj.tensor(x, requires_grad=True)
    f(dj, xd).backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(_lowered_grad(lambda a: f(dj, a), x, np.array(1.0)), xt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 1), (2, 1)])
def test_conv_transpose_groups_dilation_output_padding(nd, stride, padding):
    rng = np.random.default_rng(nd)
    x, w = rng.standard_normal((1, 4) + (4,) * nd), rng.standard_normal((4, 3) + (3,) * nd)
    kw = dict(groups=2, dilation=3, output_padding=2 if stride == 1 else 1, stride=stride, padding=padding)
    name = f"conv_transpose{nd}d"
    compare(lambda a, b: getattr(F, name)(a, b, **kw), lambda a, b: getattr(torch.nn.functional, name)(a, b, **kw),
            x, w)


# ---------------------------------------------------------------- refusals of what PyTorch computes
CASES = {
    "normalize p=0": lambda L: L.nn.functional.normalize(L.tensor([[1.0, 0, 2], [0, 0, 0]]), p=0),
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
    "unique_consecutive 0-d": lambda L: [t.tolist() for t in L.unique_consecutive(L.tensor(3), return_inverse=True,
                                                                                  return_counts=True)],
    "unique_consecutive 1 element": lambda L: L.unique_consecutive(L.tensor([3])),
    "unique_consecutive 0-d dim": lambda L: L.unique_consecutive(L.tensor(3), dim=0),
    "unfold batch 0": lambda L: list(L.nn.functional.unfold(L.zeros(0, 2, 4, 4), 2).shape),
    "fold batch 0": lambda L: list(L.nn.functional.fold(L.zeros(0, 8, 9), (4, 4), 2).shape),
    "Tensor.unfold batch 0": lambda L: list(L.zeros(0, 5).unfold(1, 2, 1).shape),
    "tensordot size-1 first": lambda L: L.tensordot(L.ones(2, 1), L.tensor([[1.0, 2], [3, 4], [5, 6]]),
                                                    dims=([1], [0])),
    "tensordot size-1 second": lambda L: L.tensordot(L.arange(6.0).reshape(2, 3), L.ones(1, 2), dims=([1], [0])),
    "tensordot size-1 dims=1": lambda L: L.tensordot(L.arange(6.0).reshape(2, 3), L.ones(1, 4), dims=1),
    "tensordot size-1 ints": lambda L: L.tensordot(L.ones(2, 1, dtype=L.int32), L.ones(3, 2, dtype=L.int32),
                                                   dims=([1], [0])),
    "flip dims=": lambda L: L.flip(L.arange(6).reshape(2, 3), dims=(0,)),
    "Tensor.flip dims=": lambda L: L.arange(6).reshape(2, 3).flip(dims=[1]),
    "to device dtype flags": lambda L: L.ones(2).to("cpu", L.float64, False, True),
    "to dtype flags": lambda L: L.ones(2).to(L.float64, False, True),
    "to tensor flags": lambda L: L.ones(2).to(L.ones(1, dtype=L.float64), False, False),
    "to copy twice": lambda L: L.ones(2).to("cpu", L.float64, False, True, copy=True),
    "norm nuc": lambda L: round(L.norm(L.tensor([[1.0, 2, 3], [4, 5, 6]], dtype=L.float64), p="nuc").item(), 10),
    "norm nuc dim keepdim": lambda L: np.round(L.norm(L.arange(24.0, dtype=L.float64).reshape(2, 3, 4).sin(),
                                                      p="nuc", dim=(0, 2), keepdim=True).tolist(), 10).tolist(),
    "norm nuc 3-d": lambda L: L.norm(L.ones(2, 3, 4), p="nuc"),
    "norm nuc int": lambda L: L.norm(L.ones(2, 3, dtype=L.int64), p="nuc", dim=(0, 1)),
    "norm unknown order": lambda L: L.norm(L.ones(2, 3), p="foo"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_torch(case):
    same(CASES[case])


def test_to_copy_flag_copies():
    x = dj.ones(2)
    assert x.to(dj.float32, False, True) is not x and x.to(dj.float32, False, False) is x


def test_zero_d_index_ops_gradients_like_torch():
    compare(lambda x, s: x.index_add(0, dj.tensor([0]), s, alpha=3), lambda x, s: x.index_add(0, torch.tensor([0]), s,
            alpha=3), np.array(1.0), np.array(2.0))
    compare(lambda x, s: x.index_copy(0, dj.tensor([0]), s), lambda x, s: x.index_copy(0, torch.tensor([0]), s),
            np.array(1.0), np.array(2.0))
    compare(lambda x: dj.take_along_dim(x, dj.tensor([[-1, 0]]), 1), lambda x: torch.take_along_dim(
        x, torch.tensor([[-1, 0]]), 1), np.random.default_rng(0).standard_normal((2, 3)))


def test_normalize_gradients_like_torch():
    x = np.array([[0.0, 0, 0], [1, 2, 0], [-1, 0.5, 3]])
    for p in (0, 1, 2, 3):
        compare(lambda a: F.normalize(a, p=p), lambda a: torch.nn.functional.normalize(a, p=p), x)


def test_nuclear_norm_gradients_like_torch():
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    compare(lambda a: dj.norm(a, p="nuc", dim=(1, 2)), lambda a: torch.norm(a, p="nuc", dim=(1, 2)), x, double=True)
    dj.testing.check_grads(lambda a: a.norm(p="nuc", dim=(0, 2)), [x])


def test_tensordot_size_one_gradients_like_torch():
    rng = np.random.default_rng(0)
    compare(lambda a, b: dj.tensordot(a, b, dims=([1], [0])), lambda a, b: torch.tensordot(a, b, dims=([1], [0])),
            rng.standard_normal((2, 1)), rng.standard_normal((3, 2)))


# ---------------------------------------------------------------- dropout2d on inputs that are not 4-D
def test_dropout2d_masks_dims_0_and_1_like_torch_2_13():
    # PyTorch 2.13 takes any input as (N, C, ...) and masks (N, C) together: a 2-D input's elements one by one,
    # a 3-D one's (N, C) rows (warning that it assumes (N, C, L)); it warns for every input that is not 4-D
    for L in (torch, dj):
        with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
            y = L.nn.functional.dropout2d(L.ones(8, 64), 0.5, training=True).numpy()
        assert set(np.unique(y)) <= {0.0, 2.0}
        assert any(0 < (row == 0).sum() < 64 for row in y), f"{L.__name__}: whole rows zeroed"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            z = L.nn.Dropout2d(0.5)(L.ones(4, 16, 5)).numpy()
        assert any("Received a 3D input to dropout2d" in str(w.message) for w in seen)
        assert all(len(np.unique(z[n, c])) == 1 for n in range(4) for c in range(16))   # (N, C) rows whole
        assert len(np.unique(z[:, :, 0])) == 2
    raises = [pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"), pytest.warns()]
    with raises[0], raises[1]:
        F.dropout2d(dj.ones(5), 0.5)


# ---------------------------------------------------------------- LBFGS inside dynajax.compile
_LBFGS_SCRIPT = """
import numpy as np
import dynajax as dj


def run(compiled):
    dj.manual_seed(0)
    model = dj.nn.Linear(3, 1)
    opt = dj.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3, line_search_fn="strong_wolfe")
    x, y = dj.randn(8, 3), dj.randn(8, 1)

    def step(x, y):
        def closure():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            return loss
        return opt.step(closure)
    s = dj.compile(step) if compiled else step
    return [float(s(x, y)) for _ in range(2)]


np.testing.assert_allclose(run(True), run(False), rtol=1e-5)
"""


def test_lbfgs_step_compiles():
    """An LBFGS step (its closure, line search and ``.item()`` reads) inside ``dynajax.compile`` gives eager's
    losses. It runs in a process of its own: in two full-suite runs XLA:CPU crashed (SIGSEGV, then SIGABRT)
    compiling this step after some thousands of earlier compiles in the same process, never alone; the
    cause is not found yet."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _LBFGS_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
