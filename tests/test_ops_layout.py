"""tril_indices/triu_indices, block_diag, unravel_index, hsplit/vsplit/dsplit, cross, Tensor.stride, cdist and
pdist against PyTorch (values, dtypes, errors); gradients of block_diag, cross, cdist and pdist against torch
in float64 (zero distances included) and the tape against jax.vjp of the lowered graph."""
import warnings

import numpy as np
import pytest

import dynajax as dj
from helpers import compare, raises_like_torch, same

torch = pytest.importorskip("torch")
A, B = np.random.default_rng(0).standard_normal((2, 2, 3))
CASES = {
    "tril_indices": lambda L: L.tril_indices(3, 4, 1),
    "triu_indices int32": lambda L: L.triu_indices(3, 2, -1, dtype=L.int32),
    "tril_indices empty": lambda L: L.tril_indices(0, 0),
    "tril_indices negative row": lambda L: L.tril_indices(-1, 2),
    "triu_indices negative col": lambda L: L.triu_indices(2, -2),
    "tril_indices float": lambda L: L.tril_indices(2, 2, dtype=L.float32),
    "block_diag": lambda L: L.block_diag(L.tensor(2), L.tensor([1.0, 2]), L.ones(2, 1, dtype=L.int32)),
    "block_diag none": lambda L: L.block_diag(),
    "block_diag empty blocks": lambda L: L.block_diag(L.ones(0, 2), L.ones(1, 0)),
    "block_diag 3-d": lambda L: L.block_diag(L.ones(1, 1, 1)),
    "unravel_index": lambda L: L.unravel_index(L.tensor([4, 1, -1]), (2, 3)),
    "unravel_index 0-d": lambda L: L.unravel_index(L.tensor(7), (2, 3)),
    "unravel_index int shape": lambda L: L.unravel_index(L.tensor([[3, 4]]), 6),
    "unravel_index empty shape": lambda L: L.unravel_index(L.tensor(3), ()),
    "unravel_index negative shape": lambda L: L.unravel_index(L.tensor(3), (2, -3)),
    "hsplit 1-d": lambda L: L.hsplit(L.arange(6), 3),
    "hsplit indices": lambda L: L.ones(2, 3).hsplit([1]),
    "hsplit indivisible": lambda L: L.hsplit(L.ones(2, 3), 2),
    "hsplit 0-d": lambda L: L.hsplit(L.tensor(1.0), 1),
    "vsplit": lambda L: L.vsplit(L.arange(8).reshape(4, 2), 2),
    "vsplit 1-d": lambda L: L.vsplit(L.ones(3), 1),
    "vsplit zero": lambda L: L.vsplit(L.ones(4, 2), 0),
    "dsplit": lambda L: L.dsplit(L.arange(8).reshape(1, 2, 4), [1, 3]),
    "dsplit 2-d": lambda L: L.dsplit(L.ones(2, 2), 1),
    "cross": lambda L: L.cross(L.tensor(A), L.tensor(B), dim=1),
    "cross dim 0": lambda L: L.cross(L.tensor(A).T, L.tensor(B).T, dim=0),
    "cross broadcast": lambda L: L.cross(L.ones(1, 3), L.tensor(B), dim=1),
    "cross default dim": lambda L: L.cross(L.tensor(A).T.contiguous(), L.tensor(B).T.contiguous()),
    "cross no size 3": lambda L: L.cross(L.ones(2, 2), L.ones(2, 2)),
    "cross wrong size": lambda L: L.cross(L.ones(2, 3), L.ones(2, 3), dim=0),
    "cross dtypes": lambda L: L.cross(L.ones(3), L.ones(3, dtype=L.float64), dim=0),
    "stride": lambda L: L.ones(2, 3, 4).stride(),
    "stride dim": lambda L: L.ones(2, 3, 4).stride(-2),
    "stride t": lambda L: L.ones(2, 3).t().stride(),
    "stride expand": lambda L: L.ones(2, 3).expand(4, 2, 3).stride(),
    "stride slice": lambda L: L.ones(4, 6)[::2, 1:].stride(),
    "stride 0-d": lambda L: L.tensor(1.0).stride(),
    "stride 0-d dim": lambda L: L.tensor(1.0).stride(0),
    "stride bad dim": lambda L: L.ones(2, 3).stride(5),
    "stride contiguous copy": lambda L: L.ones(2, 3).permute(1, 0).contiguous().stride(),
    "cdist int": lambda L: L.cdist(L.ones(2, 3, dtype=L.int64), L.ones(2, 3)),
    "cdist 1-d": lambda L: L.cdist(L.ones(3), L.ones(2, 3)),
    "cdist columns": lambda L: L.cdist(L.ones(2, 3), L.ones(2, 4)),
    "cdist negative p": lambda L: L.cdist(L.ones(2, 3), L.ones(2, 3), p=-1),
    "cdist mode": lambda L: L.cdist(L.ones(2, 3), L.ones(2, 3), compute_mode="foo"),
    "cdist batch": lambda L: list(L.cdist(L.ones(4, 2, 3), L.ones(1, 5, 3)).shape),
    "pdist 3-d": lambda L: L.pdist(L.ones(2, 3, 3)),
    "pdist int": lambda L: L.pdist(L.ones(2, 3, dtype=L.int64)),
    "pdist negative p": lambda L: L.pdist(L.ones(2, 3), p=-1),
    "pdist one row": lambda L: L.pdist(L.ones(1, 3)),
}


def _lists(r):
    return tuple(t.tolist() if hasattr(t, "tolist") else t for t in r) if isinstance(r, tuple) else r


@pytest.mark.parametrize("case", sorted(CASES))
def test_like_torch(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (cross without dim warns, in both)
        same(lambda L: _lists(CASES[case](L)))


def test_cross_without_dim_warns():
    with pytest.warns(UserWarning, match="Using torch.cross without specifying the dim arg is deprecated"):
        dj.cross(dj.ones(3), dj.ones(3))


def test_batch_shape_mismatch_raises_like_torch():
    raises_like_torch(lambda L: L.cdist(L.ones(4, 2, 3), L.ones(3, 5, 3)), RuntimeError,
                      "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 0")
    raises_like_torch(lambda L: L.cross(L.ones(4, 3), L.ones(2, 3), dim=1), RuntimeError,
                      "The size of tensor a (4) must match the size of tensor b (2) at non-singleton dimension 0")


P = np.random.default_rng(1).standard_normal((4, 3))
Q = np.random.default_rng(2).standard_normal((5, 3))
P[1] = P[0]      # a zero distance: its gradient is 0 (PyTorch's)
Q[2] = P[3]


@pytest.mark.parametrize("p", [0.5, 1.0, 2.0, 3.0, float("inf")])
def test_distances_like_torch(p):
    compare(lambda a, b: dj.cdist(a, b, p=p), lambda a, b: torch.cdist(a, b, p=p), P, Q)
    compare(lambda a: dj.pdist(a, p=p), lambda a: torch.pdist(a, p=p), P)
    compare(lambda a: dj.nn.functional.pdist(a, p), lambda a: torch.nn.functional.pdist(a, p), P)


def test_values_and_gradients_like_torch():
    compare(lambda a, b: dj.block_diag(a, b[0], b[0, 0]), lambda a, b: torch.block_diag(a, b[0], b[0, 0]), A, B)
    compare(lambda a, b: dj.cross(a, b, dim=1), lambda a, b: torch.cross(a, b, dim=1), A, B, double=True)
    compare(lambda a: dj.hsplit(a, [1])[1] * 2, lambda a: torch.hsplit(a, [1])[1] * 2, A)


def test_tape_matches_lowered_and_finite_differences():
    dj.testing.check_grads(lambda a, b: dj.cross(a, b, dim=1) + dj.block_diag(a[:1], b[:1])[:, :3], [A, B])
    far = np.random.default_rng(3).standard_normal((3, 3)) * 3
    dj.testing.check_grads(lambda a, b: dj.cdist(a, b, p=1.5), [far, far[::-1] + 1], order=1)
