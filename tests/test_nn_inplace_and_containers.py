"""PyTorch-API details of ``nn``: the ``inplace=`` option of activations and dropouts (functional and
modules), and the list/dict operations of ``Sequential``, ``ModuleList`` and ``ModuleDict``, side by side
with torch."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.nn.modules.activation import RReLU
from helpers import assert_close

TF = torch.nn.functional
RNG = np.random.default_rng(0)
LEAF_MSG = "a leaf Variable that requires grad is being used in an in-place operation."

# (name, keyword arguments): every torch.nn.functional activation with an ``inplace`` parameter
ACTIVATIONS = [
    ("relu", {}), ("relu6", {}), ("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.7}), ("selu", {}),
    ("celu", {"alpha": 1.3}), ("hardtanh", {"min_val": -0.5, "max_val": 0.8}), ("hardsigmoid", {}),
    ("hardswish", {}), ("silu", {}), ("mish", {}), ("threshold", {"threshold": 0.1, "value": -2.0}),
    ("rrelu", {"lower": 0.1, "upper": 0.3}),   # (eval: the mean slope, deterministic)
]


def _values(*shape, dtype=np.float64):
    # spread over every branch of the activations (below -3, around 0, above 6)
    return (RNG.standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("name,kw", ACTIVATIONS, ids=[n for n, _ in ACTIVATIONS])
def test_functional_inplace_on_a_non_leaf_matches_torch(name, kw):
    a, w = _values(3, 5), _values(3, 5)
    xd, xt = dj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    hd, ht = xd * 1.5, xt * 1.5
    vd, vt = hd._version, ht._version
    od, ot = getattr(F, name)(hd, **kw, inplace=True), getattr(TF, name)(ht, **kw, inplace=True)
    assert od is hd and ot is ht
    assert hd._version - vd == ht._version - vt == 1
    assert_close(hd, ht)
    assert_close(getattr(F, name)(dj.tensor(a), **kw), getattr(TF, name)(torch.tensor(a), **kw))
    (od * dj.tensor(w)).sum().backward()
    (ot * torch.tensor(w)).sum().backward()
    assert_close(xd.grad, xt.grad)


@pytest.mark.parametrize("name,kw", ACTIVATIONS, ids=[n for n, _ in ACTIVATIONS])
def test_functional_inplace_on_a_leaf(name, kw):
    a = _values(4)
    # a leaf that requires grad: the same error as torch's
    for lib, mod in ((dj, F), (torch, TF)):
        with pytest.raises(RuntimeError, match=LEAF_MSG):
            getattr(mod, name)(lib.tensor(a, requires_grad=True), **kw, inplace=True)
    # a plain tensor, and a leaf under no_grad: written in place
    for rg in (False, True):
        xd, xt = dj.tensor(a, requires_grad=rg), torch.tensor(a, requires_grad=rg)
        with dj.no_grad(), torch.no_grad():
            od, ot = getattr(F, name)(xd, **kw, inplace=True), getattr(TF, name)(xt, **kw, inplace=True)
        assert od is xd and ot is xt and xd._version == xt._version == 1
        assert_close(xd, xt)
    # the default leaves the input alone
    xd = dj.tensor(a)
    assert getattr(F, name)(xd, **kw) is not xd and xd._version == 0
    np.testing.assert_array_equal(xd.numpy(), a)


@pytest.mark.parametrize("name,args", [
    ("relu_", ()), ("elu_", (0.5,)), ("selu_", ()), ("celu_", (2.0,)), ("leaky_relu_", (0.3,)),
    ("hardtanh_", (-0.5, 2.0)), ("threshold_", (0.5, 9.0)), ("rrelu_", (0.2, 0.4))])
def test_trailing_underscore_functionals_match_torch(name, args):
    a = _values(6)
    xd, xt = dj.tensor(a), torch.tensor(a)
    assert getattr(F, name)(xd, *args) is xd and getattr(TF, name)(xt, *args) is xt
    assert xd._version == xt._version == 1
    assert_close(xd, xt)


def test_inplace_activation_on_a_view_writes_its_base():
    a = _values(4, 3)
    xd, xt = dj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    hd, ht = xd * 2.0, xt * 2.0
    assert F.elu(hd[1:], inplace=True)._base is hd
    TF.elu(ht[1:], inplace=True)
    assert hd._version == ht._version == 1
    assert_close(hd, ht)
    (hd * hd).sum().backward()
    (ht * ht).sum().backward()
    assert_close(xd.grad, xt.grad)


def test_inplace_activation_over_a_saved_output_fails_at_backward_as_torch():
    a = _values(5)
    for lib, mod in ((dj, F), (torch, TF)):
        x = lib.tensor(a, requires_grad=True)
        h = x.exp()   # exp saves its output; the in-place relu overwrites it
        mod.relu(h, inplace=True)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            h.sum().backward()


ACT_MODULES = [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.5,)), ("CELU", (2.0,)), ("SELU", ()),
    ("SiLU", ()), ("Mish", ()), ("Hardtanh", (-2.0, 2.0)), ("Hardsigmoid", ()), ("Hardswish", ()),
    ("Threshold", (0.1, 20.0)), ("RReLU", (0.1, 0.3)),
]


def _dj_module(name):
    return RReLU if name == "RReLU" else getattr(nn, name)


@pytest.mark.parametrize("name,args", ACT_MODULES, ids=[n for n, _ in ACT_MODULES])
def test_inplace_modules_match_torch(name, args):
    md, mt = _dj_module(name)(*args, inplace=True), getattr(torch.nn, name)(*args, inplace=True)
    # reprs as torch's: ``inplace=True`` shown (Hardsigmoid and Hardswish show nothing)
    assert repr(md) == repr(mt)
    assert repr(_dj_module(name)(*args)) == repr(getattr(torch.nn, name)(*args))
    assert repr(_dj_module(name)(*args, True)) == repr(getattr(torch.nn, name)(*args, True))
    assert md.inplace is True and _dj_module(name)(*args).inplace is False
    md.eval(), mt.eval()   # (RReLU: the mean slope)
    a, w = _values(2, 6), _values(2, 6)
    xd, xt = dj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    hd, ht = xd - 0.25, xt - 0.25
    assert md(hd) is hd and mt(ht) is ht and hd._version == ht._version == 1
    assert_close(hd, ht)
    (hd * dj.tensor(w)).sum().backward()
    (ht * torch.tensor(w)).sum().backward()
    assert_close(xd.grad, xt.grad)
    with pytest.raises(RuntimeError, match=LEAF_MSG):
        md(dj.tensor(a, requires_grad=True))
    out = _dj_module(name)(*args).eval()(hd)   # the default: a new tensor
    assert out is not hd and hd._version == 1


def test_rrelu_training_draws_slopes_in_bounds():
    a = _values(400)
    x = dj.tensor(a, requires_grad=True)
    h = x * 1.0
    out = F.rrelu(h, 0.1, 0.3, training=True, inplace=True)
    assert out is h and h._version == 1
    out.sum().backward()
    neg, pos = a <= 0, a > 0
    slope = out.detach().numpy()[neg] / a[neg]
    assert ((slope >= 0.1) & (slope <= 0.3)).all() and slope.std() > 0.01   # one draw per element
    np.testing.assert_allclose(x.grad.numpy()[neg], slope, rtol=1e-12)     # the gradient: the drawn slope
    np.testing.assert_array_equal(out.detach().numpy()[pos], a[pos])
    np.testing.assert_array_equal(x.grad.numpy()[pos], 1.0)
    m = RReLU(0.1, 0.3)
    assert m.training and not np.allclose(m(dj.tensor(a)).numpy(), F.leaky_relu(dj.tensor(a), 0.2).numpy())
    m.eval()
    assert_close(m(dj.tensor(a)), torch.nn.RReLU(0.1, 0.3).eval()(torch.tensor(a)))
    for lib, mod in ((dj, F), (torch, TF)):
        for training in (True, False):
            with pytest.raises(RuntimeError, match="Lower bound should be less than or equal to the upper bound"):
                mod.rrelu(lib.tensor(a), 0.5, 0.1, training)


@pytest.mark.parametrize("name,shape", [
    ("dropout", (4, 6)), ("dropout1d", (4, 6, 5)), ("dropout2d", (4, 6, 2, 3)), ("dropout3d", (4, 6, 2, 2, 2))])
def test_inplace_dropout_matches_torch(name, shape):
    a = _values(*shape, dtype=np.float32) + 100.0   # (no zeros of its own)
    for lib, mod in ((dj, F), (torch, TF)):
        x = lib.tensor(a)
        assert getattr(mod, name)(x, 0.5, True, inplace=True) is x and x._version == 1
        v = x.numpy()
        kept = v != 0
        assert 0 < kept.mean() < 1
        np.testing.assert_allclose(v[kept], a[kept] * 2, rtol=1e-6)
        if name != "dropout":   # whole channels
            assert (kept.reshape(shape[0], shape[1], -1).all(-1) | ~kept.reshape(shape[0], shape[1], -1).any(-1)).all()
        # eval, and p=0: the input itself, not written
        x = lib.tensor(a, requires_grad=True)
        assert getattr(mod, name)(x, 0.5, False, inplace=True) is x and x._version == 0
        assert getattr(mod, name)(x, 0.0, True, inplace=True) is x and x._version == 0
        assert getattr(mod, name)(x, 0.5, False) is x
        with pytest.raises(RuntimeError, match=LEAF_MSG):
            getattr(mod, name)(x, 0.5, True, inplace=True)
        # a non-leaf: the gradient is the mask
        x = lib.tensor(a, requires_grad=True)
        h = x * 1.0
        getattr(mod, name)(h, 0.5, True, inplace=True).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), (h.detach().numpy() != 0) * 2.0)
    xd = dj.tensor(a)
    assert F.dropout(xd, 1.0, True, inplace=True) is xd and not xd.numpy().any()


def test_dropout_modules_pass_inplace_on():
    a = _values(3, 4, dtype=np.float32) + 100.0
    for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d):
        m = cls(0.5, inplace=True)
        assert repr(m) == repr(getattr(torch.nn, cls.__name__)(0.5, inplace=True))
        x = dj.tensor(a) * 1.0
        assert m(x) is x and x._version == 1


def test_compiled_step_with_an_inplace_relu_matches_eager():
    dj.manual_seed(0)
    lin1, lin2 = nn.Linear(5, 8), nn.Linear(8, 2)
    params = [*lin1.parameters(), *lin2.parameters()]

    def step(x, y):
        for p in params:
            p.grad = None
        h = lin1(x)
        out = F.relu(h, inplace=True)
        assert out is h
        loss = ((lin2(h) - y) ** 2).mean()
        loss.backward()
        return loss

    compiled = dj.compile(step)
    tl1, tl2 = torch.nn.Linear(5, 8), torch.nn.Linear(8, 2)
    tl1.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin1.state_dict().items()})
    tl2.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin2.state_dict().items()})
    for i in range(4):   # (recorded, then replayed)
        x, y = dj.tensor(_values(6, 5, dtype=np.float32)), dj.tensor(_values(6, 2, dtype=np.float32))
        want = step(x, y)
        want_grads = [p.grad.numpy() for p in params]
        got = compiled(x, y)
        assert_close(got, want)
        for p, g in zip(params, want_grads):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-5, atol=1e-6)
        tl1.zero_grad(), tl2.zero_grad()
        ht = tl1(torch.tensor(x.numpy()))
        TF.relu(ht, inplace=True)
        lt = ((tl2(ht) - torch.tensor(y.numpy())) ** 2).mean()
        lt.backward()
        assert_close(got, lt)
        assert_close(lin1.weight.grad, tl1.weight.grad)


# ---------------------------------------------------------------- containers
def _names(c):
    return [type(m).__name__ for m in c]


def _modulelist_ops(nnm):
    a, b, c, d, e = nnm.ReLU(), nnm.Tanh(), nnm.Sigmoid(), nnm.ELU(), nnm.SiLU()
    lst = nnm.ModuleList([a, b, c])
    out = []
    p = lst.pop(1)
    out += [p is b, _names(lst), list(lst._modules)]
    out += [lst.pop(-1) is c, _names(lst)]
    out += [lst.insert(0, d), _names(lst), lst.insert(len(lst), e), _names(lst), list(lst._modules)]
    out += [lst.insert(1, b), _names(lst)]
    out += [lst.extend([c]) is lst, _names(lst)]
    sl = lst.pop(slice(1, 3))
    out += [type(sl).__name__, _names(sl), _names(lst), list(lst._modules)]
    lst2 = lst
    lst2 += [a, b]
    out += [lst2 is lst, _names(lst)]
    summed = lst + nnm.ModuleList([d])
    out += [type(summed).__name__, summed is not lst, _names(summed), _names(lst)]
    del lst[::2]
    out += [_names(lst), list(lst._modules)]
    del lst[-1]
    out += [_names(lst)]
    lst[0] = c
    out += [_names(lst), lst[0] is c, repr(lst)]
    try:
        lst.extend(3)
    except TypeError as exc:
        out.append(str(exc))
    try:
        lst.pop(5)
    except IndexError as exc:
        out.append(str(exc))
    out.append([k for k in dir(nnm.ModuleList([a, b])) if k.isdigit()])
    return out


def test_modulelist_operations_match_torch():
    assert _modulelist_ops(nn) == _modulelist_ops(torch.nn)


def _sequential_ops(nnm):
    a, b, c, d = nnm.ReLU(), nnm.Tanh(), nnm.Sigmoid(), nnm.ELU()
    s = nnm.Sequential(a, b, c)
    out = [s.pop(1) is b, _names(s), list(s._modules)]
    out += [s.append(d) is s, _names(s)]
    out += [s.insert(0, b) is s, _names(s), s.insert(-1, nnm.SiLU()) is s, _names(s), list(s._modules)]
    out += [s.insert(len(s), nnm.Mish()) is s, _names(s)]
    out += [s.extend([nnm.Identity()]) is s, _names(s)]
    sl = s.pop(slice(0, 2))
    out += [type(sl).__name__, _names(sl), _names(s), list(s._modules)]
    s2 = s
    s2 += nnm.Sequential(a)
    out += [s2 is s, _names(s)]
    t = s + nnm.Sequential(b)
    out += [type(t).__name__, t is not s, _names(t), _names(s)]
    two = nnm.Sequential(a, b)
    out += [_names(two * 2), _names(2 * two), (two * 2)[2] is a]
    two *= 3
    out += [_names(two), list(two._modules)]
    for bad in (lambda: s.insert(99, a), lambda: s.insert(0, 3), lambda: s + [a], lambda: s.__iadd__([a]),
                lambda: s * 0, lambda: s * 1.5):
        try:
            bad()
            out.append(None)
        except Exception as exc:   # noqa: BLE001  (the type and message are what is compared)
            out.append(type(exc).__name__)
    named = nnm.Sequential(__import__("collections").OrderedDict([("first", a), ("second", b), ("third", c)]))
    out += [named.pop(1) is b, list(named._modules), repr(named)]
    out.append([k for k in dir(nnm.Sequential(a, b)) if k.isdigit()])
    return out


def test_sequential_operations_match_torch():
    assert _sequential_ops(nn) == _sequential_ops(torch.nn)


def test_sequential_after_pop_computes_and_registers_as_torch():
    md, mt = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Linear(4, 2)), None
    mt = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    md.load_state_dict({k: dj.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    pd, pt = md.pop(2), mt.pop(2)
    assert isinstance(pd, nn.Linear) and isinstance(pt, torch.nn.Linear)
    assert list(md.state_dict()) == list(mt.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(list(md.parameters())) == len(list(mt.parameters())) == 4
    a = _values(5, 3, dtype=np.float32)
    assert_close(md(dj.tensor(a)), mt(torch.tensor(a)))


def _moduledict_ops(nnm):
    a, b, c = nnm.ReLU(), nnm.Tanh(), nnm.Sigmoid()
    d = nnm.ModuleDict({"a": a, "b": b, "c": c})
    out = [d.pop("b") is b, list(d.keys()), "b" in d, len(d)]
    try:
        d.pop("missing")
    except KeyError as exc:
        out.append(str(exc))
    del d["a"]
    out += [list(d.keys()), hasattr(d, "popitem")]
    d.update([("x", a), ("y", b)])
    out += [list(d.keys()), repr(d)]
    d.clear()
    out += [list(d.keys()), len(list(d.modules()))]
    return out


def test_moduledict_operations_match_torch():
    assert _moduledict_ops(nn) == _moduledict_ops(torch.nn)


def test_compiled_call_follows_container_edits():
    dj.manual_seed(1)
    seq = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    heads = nn.ModuleDict({"p": nn.Linear(3, 2), "q": nn.Linear(3, 2)})
    f = dj.compile(lambda x: seq(x).sum() + sum(h(x).sum() for h in heads.values()))
    x = dj.tensor(_values(2, 3, dtype=np.float32))

    def eager():
        return seq(x).sum() + sum(h(x).sum() for h in heads.values())
    for edit in (lambda: None, lambda: seq.pop(1), lambda: heads.pop("q"), lambda: seq.insert(1, nn.ReLU()),
                 lambda: seq.append(nn.Sigmoid())):
        edit()
        for _ in range(3):
            assert_close(f(x), eager())
