"""Padded calls that replay: ``dynajax.compile``'s default mode pads a dim that varies to a bucket
(``compile.bucketing``) and, once two recordings of a bucket agree, runs later calls of that bucket without
the step's Python (``compile.guards``), their masks made for each call's true sizes
(``compile.padding.SizeMask``). Every call must still be the unpadded step: checked against PyTorch eager
step for step (loss, parameters, optimizer state), with guards still seeing a changed Python value."""
import numpy as np
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.compile import padding
from helpers import train_step

TOL = dict(rtol=2e-5, atol=2e-6)


def _copy_into_torch(mod, tmod):
    with torch.no_grad():
        for p, q in zip(mod.parameters(), tmod.parameters()):
            q.copy_(torch.from_numpy(np.array(p.detach().numpy())))


def _mlp_pair():
    dj.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
    t = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    _copy_into_torch(m, t)
    return m, t


def _check_params(m, t, what):
    for (n, p), q in zip(m.named_parameters(), t.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **TOL, err_msg=f"{n} {what}")


def test_batch_sizes_of_one_bucket_replay_and_match_torch():
    m, t = _mlp_pair()
    opt, topt = dj.optim.Adam(m.parameters(), lr=1e-2), torch.optim.Adam(t.parameters(), lr=1e-2)
    scale = {"w": 1.0}

    step = dj.compile(train_step(m, opt, lambda out, y: F.cross_entropy(out, y) * scale["w"]))

    r = np.random.default_rng(0)
    sizes = [5, 7, 6, 7, 5, 8, 6, 7, 5, 6, 8, 7, 6, 5, 7]
    for i, n in enumerate(sizes):
        if i == 11:
            scale["w"] = 0.5   # a Python value the step reads: that call is recorded again, not replayed
        x = r.standard_normal((n, 6)).astype(np.float32)
        y = r.integers(0, 4, n)
        replayed = step.stats.replayed
        got = step(dj.tensor(x), dj.tensor(y))
        if i == 11:
            assert step.stats.replayed == replayed, "a changed Python value was replayed"
        topt.zero_grad()
        want = torch.nn.functional.cross_entropy(t(torch.from_numpy(x)), torch.from_numpy(y)) * scale["w"]
        want.backward()
        topt.step()
        assert got.shape == ()
        np.testing.assert_allclose(got.item(), want.item(), **TOL, err_msg=f"call {i}, batch {n}")
        _check_params(m, t, f"after call {i}")
        for p, q in zip(m.parameters(), t.parameters()):
            np.testing.assert_allclose(opt.state[p]["exp_avg_sq"].numpy(), topt.state[q]["exp_avg_sq"].numpy(),
                                       rtol=1e-5, atol=1e-9)
    st = step.stats
    assert st.dynamic_dims == ["x dim 0", "y dim 0"] and st.padding_stopped is None
    assert st.compiles == 2          # the first size exactly, then the bucket of 8
    assert st.replayed >= 8, st.replayed


def test_a_gru_cell_loop_over_lengths_of_one_bucket_replays_and_matches_torch():
    """The recurrent case: the loop runs to the bucket's length, the masks of each call's true length make
    the padded steps no-ops; replayed calls get theirs from the recipes."""
    V, E, H, B = 11, 6, 8, 3
    dj.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.cell, self.head = nn.Embedding(V, E), nn.GRUCell(E, H), nn.Linear(H, V)

        def forward(self, tok):
            e = self.emb(tok)
            h = dj.zeros(tok.shape[0], H)
            outs = []
            for k in range(tok.shape[1]):
                h = self.cell(e[:, k], h)
                outs.append(h)
            return self.head(dj.stack(outs, 1))

    m = M()
    temb, tcell, thead = torch.nn.Embedding(V, E), torch.nn.GRUCell(E, H), torch.nn.Linear(H, V)
    tparams = [*temb.parameters(), *tcell.parameters(), *thead.parameters()]
    with torch.no_grad():
        for p, q in zip(m.parameters(), tparams):
            q.copy_(torch.from_numpy(np.array(p.detach().numpy())))
    opt, topt = dj.optim.Adam(m.parameters(), lr=1e-2), torch.optim.Adam(tparams, lr=1e-2)

    step = dj.compile(train_step(m, opt, lambda out, y: F.cross_entropy(out.reshape(-1, V), y.reshape(-1))))

    r = np.random.default_rng(1)
    for i, T in enumerate([12, 10, 14, 11, 16, 13, 10, 15, 12, 9]):
        tok = r.integers(0, V, (B, T + 1))
        x, y = tok[:, :-1].copy(), tok[:, 1:].copy()
        got = step(dj.tensor(x), dj.tensor(y)).item()
        topt.zero_grad()
        e, h, outs = temb(torch.from_numpy(x)), torch.zeros(B, H), []
        for k in range(T):
            h = tcell(e[:, k], h)
            outs.append(h)
        want = torch.nn.functional.cross_entropy(thead(torch.stack(outs, 1)).reshape(-1, V),
                                                 torch.from_numpy(y).reshape(-1))
        want.backward()
        topt.step()
        np.testing.assert_allclose(got, want.item(), **TOL, err_msg=f"call {i}, length {T}")
        for p, q in zip(m.parameters(), tparams):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"after call {i}")
    st = step.stats
    assert st.padding_stopped is None and st.dynamic_dims == ["x dim 1", "y dim 1"]
    assert st.replayed >= 5, st.replayed


def test_a_replayed_padded_call_writes_its_argument_in_place_and_returns_its_true_shape():
    """What a replayed padded call returns is cut back to the call's sizes, and an argument the step
    changed in place gets the real part of the padded copy, as in a recorded padded call."""
    w = dj.tensor(np.linspace(-1, 1, 4).astype(np.float32), requires_grad=True)
    opt = dj.optim.SGD([w], lr=0.1)

    @dj.compile
    def step(x):
        opt.zero_grad()
        out = x * w
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        x.mul_(2)
        return out, loss

    wn = w.detach().numpy().copy()
    r = np.random.default_rng(2)
    for i, n in enumerate([3, 5, 6, 7, 5, 6, 8, 7, 6]):
        xn = r.standard_normal((n, 4)).astype(np.float32)
        x = dj.tensor(xn)
        out, loss = step(x)
        assert tuple(out.shape) == (n, 4)
        np.testing.assert_allclose(out.numpy(), xn * wn, **TOL, err_msg=f"call {i}")
        np.testing.assert_allclose(loss.item(), ((xn * wn) ** 2).mean(), **TOL)
        np.testing.assert_allclose(x.numpy(), 2 * xn, **TOL, err_msg=f"call {i}: in-place write")
        wn = (wn - 0.1 * 2 * wn * (xn ** 2).mean(0) / 4).astype(np.float32)   # d mean((x w)^2) / dw, 4 columns
        np.testing.assert_allclose(w.detach().numpy(), wn, rtol=1e-4, atol=1e-6, err_msg=f"call {i}: weights")
    assert step.stats.replayed >= 3, step.stats.replayed


def test_size_mask_recipes_are_the_calls_own():
    """The recipe gives the running padded call's mask; equal recipes compare equal (replay's test that two
    recordings made the same inputs), other shapes or dims do not."""
    a, b = padding.SizeMask((8, 3), (0,)), padding.SizeMask((8, 3), (0,))
    assert a == b and hash(a) == hash(b) and a != padding.SizeMask((8, 3), (1,)) and a() is None
    with padding.call([], {8: 5}):
        np.testing.assert_array_equal(np.asarray(a()), (np.arange(8) < 5).reshape(8, 1))
        with padding.call([], {8: 6}):
            assert int(np.asarray(b()).sum()) == 6
        assert int(np.asarray(b()).sum()) == 5
        assert padding.SizeMask((4, 3), (0,))() is None   # 4 is no padded size of this call
