"""nn.init (distributions, gains, reproducibility) and nn.utils (clipping, vectors, pad_sequence) vs torch."""
import math

import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
from dynajax.nn import init
from helpers import assert_close


def test_calculate_gain_matches_torch():
    for nl, p in [("linear", None), ("relu", None), ("tanh", None), ("leaky_relu", None), ("leaky_relu", 0.2),
                  ("selu", None), ("sigmoid", None), ("conv2d", None)]:
        assert init.calculate_gain(nl, p) == torch.nn.init.calculate_gain(nl, p)
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("foo")


@pytest.mark.parametrize("name,kw,std", [
    ("uniform_", dict(a=-2.0, b=2.0), 4 / math.sqrt(12)),
    ("normal_", dict(mean=1.0, std=0.5), 0.5),
    ("xavier_uniform_", dict(gain=2.0), 2.0 * math.sqrt(2.0 / (64 + 32))),
    ("xavier_normal_", dict(), math.sqrt(2.0 / (64 + 32))),
    ("kaiming_uniform_", dict(nonlinearity="relu"), math.sqrt(2.0 / 32)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2.0 / 64)),
    ("trunc_normal_", dict(std=1.0, a=-2.0, b=2.0), 0.8796),
])
def test_random_inits_statistics_and_seed(name, kw, std):
    w = nn.Parameter(dj.empty(64, 32))
    dj.manual_seed(0)
    out = getattr(init, name)(w, **kw)
    assert out is w and w.requires_grad and w.grad_fn is None
    a = w.detach().numpy().copy()
    assert abs(a.std() - std) < 0.05 * std + 0.01
    dj.manual_seed(0)
    getattr(init, name)(w, **kw)
    np.testing.assert_array_equal(w.detach().numpy(), a)
    if name == "trunc_normal_":
        assert a.min() >= -2.0 and a.max() <= 2.0


def test_deterministic_inits():
    w = dj.empty(3, 5)
    init.constant_(w, 0.3)
    assert_close(w, dj.full((3, 5), 0.3))
    init.ones_(w)
    assert float(w.sum()) == 15
    init.zeros_(w)
    assert float(w.abs().sum()) == 0
    init.eye_(w)
    assert_close(w, dj.tensor(np.eye(3, 5, dtype=np.float32)))
    c = dj.empty(4, 2, 3, 3)
    init.dirac_(c, groups=2)
    t = torch.empty(4, 2, 3, 3)
    torch.nn.init.dirac_(t, groups=2)
    assert_close(c, t)
    q = dj.empty(6, 4)
    dj.manual_seed(0)
    init.orthogonal_(q, gain=2.0)
    np.testing.assert_allclose(q.numpy().T @ q.numpy(), 4 * np.eye(4), atol=1e-5)
    q = dj.empty(3, 8)
    init.orthogonal_(q)
    np.testing.assert_allclose(q.numpy() @ q.numpy().T, np.eye(3), atol=1e-5)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(dj.empty(3))


def test_default_layer_init_bounds():
    dj.manual_seed(0)
    m = nn.Linear(50, 40)
    assert float(m.weight.abs().max()) <= 1 / math.sqrt(50) + 1e-6
    assert float(m.weight.abs().max()) > 0.8 / math.sqrt(50)
    c = nn.Conv2d(4, 8, 3)
    assert float(c.bias.abs().max()) <= 1 / math.sqrt(36) + 1e-6
    e = nn.Embedding(10, 4, padding_idx=2)
    assert float(e.weight[2].abs().sum()) == 0.0
    dj.manual_seed(5)
    a = nn.Linear(3, 3).weight.detach().numpy().copy()
    dj.manual_seed(5)
    np.testing.assert_array_equal(nn.Linear(3, 3).weight.detach().numpy(), a)


def _grads(lib):
    rng = np.random.default_rng(1)
    ps = [lib.tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 4), (4,)]]
    for p in ps:
        p.grad = lib.tensor(rng.standard_normal(tuple(p.shape)) * 3)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm_matches_torch(norm_type):
    pd, pt = _grads(dj), _grads(torch)
    nd = nn.utils.clip_grad_norm_(pd, 1.5, norm_type)
    nt = torch.nn.utils.clip_grad_norm_(pt, 1.5, norm_type)
    assert_close(nd, nt)
    for a, b in zip(pd, pt):
        assert_close(a.grad, b.grad)


def test_clip_value_vectors_and_pad_sequence():
    pd, pt = _grads(dj), _grads(torch)
    nn.utils.clip_grad_value_(pd, 0.5)
    torch.nn.utils.clip_grad_value_(pt, 0.5)
    for a, b in zip(pd, pt):
        assert_close(a.grad, b.grad)
    v = nn.utils.parameters_to_vector(pd)
    assert_close(v, torch.nn.utils.parameters_to_vector(pt))
    nn.utils.vector_to_parameters(v * 2, pd)
    assert_close(pd[1], pt[1] * 2)
    seqs = [np.ones((2, 3)), np.full((4, 3), 2.0), np.full((1, 3), 3.0)]
    for bf in (False, True):
        for side in ("right", "left"):
            assert_close(nn.utils.rnn.pad_sequence([dj.tensor(s) for s in seqs], batch_first=bf, padding_value=-1,
                                                   padding_side=side),
                         torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=bf,
                                                         padding_value=-1, padding_side=side))
