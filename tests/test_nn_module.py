"""nn.Module machinery against torch.nn.Module: registration, iteration, state_dict, hooks, repr."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
from helpers import assert_close


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.head = nn.Sequential(nn.Linear(8, 3), nn.Tanh())
        self.register_buffer("scale", dj.ones(3))
        self.register_buffer("tmp", dj.zeros(1), persistent=False)

    def forward(self, x):
        x = self.act(self.fc1(x))
        for b in self.blocks:
            x = b(x).relu()
        return self.head(x) * self.scale


class TNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.act = torch.nn.ReLU()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)])
        self.head = torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.Tanh())
        self.register_buffer("scale", torch.ones(3))
        self.register_buffer("tmp", torch.zeros(1), persistent=False)

    def forward(self, x):
        x = self.act(self.fc1(x))
        for b in self.blocks:
            x = b(x).relu()
        return self.head(x) * self.scale


def test_names_state_dict_and_forward_match_torch():
    m, t = Net(), TNet()
    assert [k for k, _ in m.named_parameters()] == [k for k, _ in t.named_parameters()]
    assert list(m.state_dict()) == list(t.state_dict())
    assert [k for k, _ in m.named_buffers()] == [k for k, _ in t.named_buffers()]
    assert [k for k, _ in m.named_modules()] == [k for k, _ in t.named_modules()]
    assert [k for k, _ in m.named_children()] == [k for k, _ in t.named_children()]
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    yd, yt = m(dj.tensor(x)), t(torch.tensor(x))
    assert_close(yd, yt)
    yd.sum().backward()
    yt.sum().backward()
    for (n, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        assert_close(p.grad, q.grad, msg=n)
    assert repr(m) == repr(t).replace("TNet", "Net")


def test_load_state_dict_torch_tensors_and_errors():
    m, t = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    m.load_state_dict(t.state_dict())
    assert_close(m.weight, t.weight)
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict({"weight": t.weight.detach(), "foo": t.bias.detach()})
    with pytest.raises(RuntimeError) as et:
        t.load_state_dict({"weight": t.weight.detach(), "foo": t.bias.detach()})
    assert str(e.value) == str(et.value)
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        m.load_state_dict({"weight": np.zeros((3, 3), np.float32), "bias": np.zeros(2, np.float32)})
    assert_close(m.weight, t.weight)  # nothing half-applied
    r = m.load_state_dict({"weight": np.zeros((2, 3), np.float32)}, strict=False)
    assert r.missing_keys == ["bias"] and r.unexpected_keys == []
    assert float(m.weight.abs().sum()) == 0.0


def test_parameter_and_buffer_registration():
    m = nn.Module()
    m.w = nn.Parameter(dj.ones(2))
    assert isinstance(m.w, nn.Parameter) and m.w.requires_grad
    assert repr(m.w) == repr(torch.nn.Parameter(torch.ones(2))).replace("torch.", "")
    with pytest.raises(TypeError):
        m.w = dj.ones(2)
    m.w = None
    assert list(m.parameters()) == []
    m.register_buffer("b", dj.zeros(2))
    m.b = dj.ones(2)
    assert float(m.b.sum()) == 2.0
    with pytest.raises(KeyError):
        m.register_buffer("a.b", dj.zeros(1))
    with pytest.raises(AttributeError):
        m.nothing
    shared = nn.Linear(2, 2)
    s = nn.Sequential(shared, shared)
    assert len(list(s.parameters())) == 2


def test_train_eval_apply_zero_grad_requires_grad():
    m = Net()
    m.eval()
    assert all(not x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[-1] == "Net" and seen[0] == "Linear"
    m(dj.randn(2, 4)).sum().backward()
    assert m.fc1.weight.grad is not None
    m.zero_grad()
    assert m.fc1.weight.grad is None
    m(dj.randn(2, 4)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert float(m.fc1.weight.grad.abs().sum()) == 0.0
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_to_dtype_keeps_parameter_identity():
    m = Net()
    w = m.fc1.weight
    w.grad = dj.ones(w.shape)
    g = w.grad
    m.double()
    assert m.fc1.weight is w and w.dtype == dj.float64 and m.scale.dtype == dj.float64
    assert w.grad is g and g.dtype == dj.float64   # the grad converted in place too, as PyTorch's
    m.to(dj.float32)
    assert w.dtype == dj.float32
    m.to("cpu")
    with pytest.raises(TypeError):
        m.to(dj.int64)


def test_hooks():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1)
    y = m(dj.ones(1, 2))
    assert_close(y, (m.bias + 1).detach().reshape(1, 2), check_dtype=False)
    assert calls == [(1, 2)]
    h1.remove()
    h2.remove()
    m(dj.ones(1, 2))
    assert calls == [(1, 2)]


def test_containers():
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    s.append(nn.Linear(3, 1))
    assert len(s) == 3 and isinstance(s[-1], nn.Linear) and isinstance(s[1:], nn.Sequential)
    assert len(s[1:]) == 2
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    tl = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    assert repr(ml) == repr(tl)
    md = nn.ModuleDict({"a": nn.Linear(1, 1), "b": nn.ReLU()})
    assert list(md.keys()) == ["a", "b"] and "a" in md
    assert list(md.state_dict()) == ["a.weight", "a.bias"]
    f = nn.Flatten()
    assert f(dj.zeros(2, 3, 4)).shape == (2, 12)
    assert nn.Unflatten(1, (3, 4))(dj.zeros(2, 12)).shape == (2, 3, 4)
    assert nn.Identity(5, k=1)(dj.ones(1)) is not None
    assert repr(f) == repr(torch.nn.Flatten())


def test_state_dict_is_detached_and_keep_vars():
    m = nn.Linear(2, 2)
    sd = m.state_dict()
    assert not sd["weight"].requires_grad
    assert m.state_dict(keep_vars=True)["weight"] is m.weight


def test_full_backward_hooks():
    m = nn.Linear(3, 2)
    x = dj.ones(4, 3, requires_grad=True)
    m(x).sum().backward()
    plain = x.grad.clone()
    seen = []
    m.register_full_backward_pre_hook(lambda mod, go: seen.append(("pre", tuple(go[0].shape))))
    h = m.register_full_backward_hook(
        lambda mod, gi, go: seen.append(("post", gi[0] is None, tuple(go[0].shape))) or
        ((gi[0] * 2,) if gi[0] is not None else None))
    x.grad = None
    m(x).sum().backward()
    assert_close(x.grad, plain * 2)
    m(dj.ones(4, 3)).sum().backward()
    assert seen == [("pre", (4, 2)), ("post", False, (4, 2)), ("pre", (4, 2)), ("post", True, (4, 2))]
    h.remove()
    x.grad = None
    m(x).sum().backward()
    assert_close(x.grad, plain)


def test_checkpoint_matches_plain_and_replays_dropout():
    from dynajax.utils.checkpoint import checkpoint, checkpoint_sequential
    m = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Tanh(), nn.Linear(4, 2))
    x = dj.randn(5, 3, requires_grad=True)
    dj.manual_seed(0)
    checkpoint(m, x, use_reentrant=False).sum().backward()
    g1 = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    dj.manual_seed(0)
    m(x).sum().backward()
    for a, b in zip(g1, [p.grad for p in m.parameters()] + [x.grad]):
        assert_close(a, b)
    m.eval()
    m.zero_grad()
    checkpoint_sequential(m, 2, dj.randn(5, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())


@pytest.mark.filterwarnings("ignore:.*weight_norm. is deprecated")
def test_weight_norm_matches_torch():
    t = torch.nn.utils.weight_norm(torch.nn.Linear(3, 2))
    m = nn.utils.weight_norm(nn.Linear(3, 2))
    assert list(m.state_dict()) == list(t.state_dict())
    m.load_state_dict(t.state_dict())
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    yd, yt = m(dj.tensor(x)), t(torch.tensor(x))
    assert_close(yd, yt)
    yd.sum().backward()
    yt.sum().backward()
    assert_close(m.weight_g.grad, t.weight_g.grad)
    assert_close(m.weight_v.grad, t.weight_v.grad)
    nn.utils.remove_weight_norm(m)
    assert isinstance(m.weight, nn.Parameter) and sorted(m.state_dict()) == ["bias", "weight"]
    assert_close(m(dj.tensor(x)), yt)


def test_container_mutation_keeps_order_like_torch():
    def edit(nnm, lib):
        s = nnm.Sequential(nnm.Linear(1, 1), nnm.ReLU())
        s.insert(1, nnm.Tanh())
        del s[0]
        s.append(nnm.Identity())
        s[0] = nnm.Sigmoid()
        lin = nnm.Linear(2, 2)
        lin.weight = nnm.Parameter(lib.zeros(2, 2))
        return repr(s), list(lin.state_dict())
    assert edit(nn, dj) == edit(torch.nn, torch)


def test_forward_hooks_with_always_call_run_when_forward_raises_as_torchs():
    """``register_forward_hook(always_call=True)``: the hook runs with output None when ``forward`` raises (the
    others do not), an error of its own is silenced with a warning, and the forward's error propagates."""
    import warnings
    torch = pytest.importorskip("torch")

    def run(lib):
        class Bad(lib.nn.Module):
            def forward(self, x):
                raise ValueError("forward failed")
        m, seen = Bad(), []
        m.register_forward_hook(lambda mod, args, out: seen.append(("always", out)), always_call=True)
        m.register_forward_hook(lambda mod, args, out: seen.append(("plain", out)))
        m.register_forward_hook(lambda mod, args, out: 1 / 0, always_call=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="forward failed"):
                m(lib.ones(1))
        ok = lib.nn.Linear(2, 1)
        ok.register_forward_hook(lambda mod, args, out: seen.append(("ran", tuple(out.shape))), always_call=True)
        ok(lib.ones(1, 2))
        return seen, ["silenced" in str(w.message) for w in caught]
    assert run(dj) == run(torch)
