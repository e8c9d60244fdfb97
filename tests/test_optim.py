"""Optimizers and lr schedulers against torch.optim: same params and grads, 20 steps, same results."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.optim as optim
from helpers import assert_close
import warnings

RNG = np.random.default_rng(0)
P0 = [RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)]
GRADS = [[RNG.standard_normal(p.shape).astype(np.float32) for p in P0] for _ in range(20)]


def run(lib, cls, kwargs, groups=False):
    params = [(dj.tensor(p, requires_grad=True) if lib is dj else torch.tensor(p, requires_grad=True)) for p in P0]
    arg = [{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05}] if groups else params
    opt = cls(arg, **kwargs)
    for gs in GRADS:
        for p, g in zip(params, gs):
            p.grad = dj.tensor(g) if lib is dj else torch.tensor(g)
        opt.step()
    return params, opt


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.3, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1, maximize=True)),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("Adadelta", dict(lr=1.0, weight_decay=0.01)),
    ("Adamax", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, betas=(0.9, 0.5), decoupled_weight_decay=True, weight_decay=0.1)),
]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_matches_torch(name, kwargs):
    pd, od = run(dj, getattr(optim, name), kwargs, groups=name == "SGD")
    pt, ot = run(torch, getattr(torch.optim, name), kwargs, groups=name == "SGD")
    for a, b in zip(pd, pt):
        assert_close(a, b, rtol=1e-5, atol=1e-6)
    sd, st = od.state_dict(), ot.state_dict()
    assert sd["param_groups"][0].keys() == st["param_groups"][0].keys() or \
        set(sd["param_groups"][0]) >= set(st["param_groups"][0]) - {"decoupled_weight_decay"}
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in st["param_groups"]]
    for i in st["state"]:
        assert list(sd["state"][i]) == list(st["state"][i])
        for k in st["state"][i]:
            assert_close(sd["state"][i][k], st["state"][i][k], rtol=1e-5, atol=1e-6, check_dtype=False)


FUSED = [("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1), "adam_update"),
         ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True), "adam_update"),
         ("SGD", dict(lr=0.1, weight_decay=0.01), "sgd_momentum_update"),
         ("RMSprop", dict(lr=0.01), "rmsprop_update"),
         ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1), "rmsprop_update"),
         ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.1), "adagrad_update"),
         ("Adadelta", dict(lr=1.0, rho=0.8, weight_decay=0.01), "adadelta_update"),
         ("Adamax", dict(lr=0.01, weight_decay=0.1), "adamax_update"),
         ("NAdam", dict(lr=0.01, weight_decay=0.1), "nadam_update"),
         ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), "nadam_update"),
         ("RAdam", dict(lr=0.01, weight_decay=0.1), "radam_update"),   # rectified from step 6 on
         ("RAdam", dict(lr=0.01, betas=(0.9, 0.5), decoupled_weight_decay=True, weight_decay=0.1), "radam_update")]


@pytest.mark.parametrize("name,kwargs,op", FUSED, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(FUSED)])
def test_updates_are_one_fused_op_per_step(name, kwargs, op, monkeypatch):
    """These optimizers update all of a group's parameters in one op per step (PyTorch's ``foreach`` form),
    counted at dispatch; values and state as torch.optim's."""
    from dynajax.ops import registry
    names = []
    real = registry.run
    monkeypatch.setattr(registry, "run", lambda o, fn, args, params: names.append(o.name) or real(o, fn, args, params))
    pd, od = run(dj, getattr(optim, name), kwargs)
    if kwargs.get("maximize"):   # (the gradients are negated first, one op each)
        names = [n for n in names if n != "neg"]
    assert names == [op] * len(GRADS)   # the step counts' +1 included
    pt, ot = run(torch, getattr(torch.optim, name), kwargs)
    for a, b in zip(pd, pt):
        assert_close(a, b, rtol=1e-5, atol=1e-6)
    for i in ot.state_dict()["state"]:
        for k, v in ot.state_dict()["state"][i].items():
            assert_close(od.state_dict()["state"][i][k], v, rtol=1e-5, atol=1e-6, check_dtype=False)


@pytest.mark.parametrize("name,kwargs", [("NAdam", dict(lr=0.01, weight_decay=0.1)),
                                         ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                         ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1))])
def test_compiled_steps_match_torch_without_reading_values(name, kwargs):
    """Under dynajax.compile: NAdam's momentum product is known on the host (no graph break per step) and
    SGD's momentum buffers exist before the first update (one executable); values as torch.optim's."""
    params = [dj.tensor(p, requires_grad=True) for p in P0]
    opt = getattr(optim, name)(params, **kwargs)

    @dj.compile
    def step(*grads):
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    for gs in GRADS:
        step(*(dj.tensor(g) for g in gs))
    want, _ = run(torch, getattr(torch.optim, name), kwargs)
    for a, b in zip(params, want):
        assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert step.stats.graph_breaks == 0
    # one executable: NAdam's 1 - beta2 ** 1 at step 1 equals its 1 - beta2, and those still take two slots
    assert step.stats.compiles == 1


@pytest.mark.parametrize("grad_mode", ["no_grad", "enable_grad"])
def test_fused_update_written_in_place_like_eager(grad_mode):
    """A fused update writes its results into the parameters and state tensors: recorded straight into them
    under dynajax.compile (under no_grad, as optimizers call it) or, under grad mode, as an op and a write
    each; either way the values and the version counters are the eager call's."""
    from dynajax.autograd import grad_mode as gm
    from dynajax.optim._fused import adam_update

    group = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, decoupled_weight_decay=False)

    def make():
        return [tuple(dj.tensor(a) for a in (p, g, np.zeros_like(p), np.zeros_like(p)))
                + (dj.tensor(np.float32(3.0)),) for p, g in zip(P0, GRADS[0])]

    def update(items):
        with getattr(gm, grad_mode)():
            adam_update(items, group)
        return items[0][0]

    eager, compiled = make(), make()
    versions = [[t._version for t in item] for item in compiled]
    update(eager)
    step = dj.compile(update)
    step(compiled)
    for a, b, v0 in zip(eager, compiled, versions):
        for ta, tb, v in zip(a, b, v0):
            assert_close(tb, ta, rtol=1e-6, atol=0)
            assert tb._version == ta._version
        assert [t._version - v for t in b] == [1, 0, 1, 1, 1]   # every tensor but the gradient was written


def test_step_bumps_version_and_keeps_identity():
    p = nn.Parameter(dj.ones(3))
    opt = optim.SGD([p], lr=0.1)
    v = p._version
    p.grad = dj.ones(3)
    opt.step()
    assert p._version > v and isinstance(p, nn.Parameter)
    assert_close(p, dj.full((3,), 0.9))


def test_state_dict_round_trip_continues_identically():
    pd, od = run(dj, optim.Adam, dict(lr=0.01))
    q = [dj.tensor(np.asarray(p.detach()), requires_grad=True) for p in pd]
    o2 = optim.Adam(q, lr=0.5)
    o2.load_state_dict(od.state_dict())
    assert o2.param_groups[0]["lr"] == 0.01
    for opt, ps in ((od, pd), (o2, q)):
        for p, g in zip(ps, GRADS[0]):
            p.grad = dj.tensor(g)
        opt.step()
    for a, b in zip(pd, q):
        assert_close(a, b)
    # torch's state dict loads too
    _, ot = run(torch, torch.optim.Adam, dict(lr=0.01))
    o3 = optim.Adam([dj.tensor(p, requires_grad=True) for p in P0])
    o3.load_state_dict(ot.state_dict())
    assert_close(o3.state[o3.param_groups[0]["params"][0]]["exp_avg"], ot.state_dict()["state"][0]["exp_avg"])


STEPPED = [("Adam", {"lr": 0.01}), ("AdamW", {"lr": 0.01, "amsgrad": True}), ("RMSprop", {"lr": 0.01}),
           ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}), ("Adadelta", {"lr": 1.0}), ("Adamax", {"lr": 0.01}),
           ("NAdam", {"lr": 0.01}), ("RAdam", {"lr": 0.01})]


@pytest.mark.parametrize("name,kwargs", STEPPED, ids=[n for n, _ in STEPPED])
def test_step_counters_share_one_array_until_one_is_changed_like_torch(name, kwargs):
    """A group's step counters hold one array while they count alike (a fused update reads and writes it once),
    each its own tensor as in PyTorch: one counter set on its own parts from the others, and the updates match
    torch's before and after; a loaded state dict's equal counters share one array again."""
    libs = {}
    for lib, make in ((dj, getattr(optim, name)), (torch, getattr(torch.optim, name))):
        params = [(dj.tensor(p, requires_grad=True) if lib is dj else torch.tensor(p, requires_grad=True))
                  for p in P0]
        libs[lib] = params, make(params, **kwargs)
    ps, opt = libs[dj]
    for i, gs in enumerate(GRADS[:12]):
        if i == 3:
            steps = [opt.state[p]["step"] for p in ps]
            assert steps[0] is not steps[1] and steps[0]._v is steps[1]._v
        if i == 6:   # one counter set on its own (as a resumed or surgically edited state would)
            for lib, (params, o) in libs.items():
                with (torch.no_grad() if lib is torch else dj.no_grad()):
                    o.state[params[1]]["step"].fill_(40.0)
        for lib, (params, o) in libs.items():
            for p, g in zip(params, gs):
                p.grad = dj.tensor(g) if lib is dj else torch.tensor(g)
            o.step()
        for a, b in zip(*(libs[lib][0] for lib in (dj, torch))):
            assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert [float(opt.state[p]["step"]) for p in ps] == [float(libs[torch][1].state[p]["step"])
                                                             for p in libs[torch][0]]
    assert opt.state[ps[0]]["step"]._v is not opt.state[ps[1]]["step"]._v
    fresh = [dj.tensor(p, requires_grad=True) for p in P0]
    loaded = getattr(optim, name)(fresh, **kwargs)
    tstate = libs[torch][1].state_dict()
    for k in tstate["state"]:
        tstate["state"][k]["step"] = torch.tensor(7.0)
    loaded.load_state_dict(tstate)
    assert loaded.state[fresh[0]]["step"]._v is loaded.state[fresh[1]]["step"]._v
    assert [float(loaded.state[p]["step"]) for p in fresh] == [7.0, 7.0]


def test_zero_grad_add_param_group_and_errors():
    a, b = nn.Parameter(dj.ones(2)), nn.Parameter(dj.ones(2))
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.2})
    assert opt.param_groups[1]["lr"] == 0.2 and opt.param_groups[1]["momentum"] == 0
    a.grad = dj.ones(2)
    opt.zero_grad()
    assert a.grad is None
    a.grad = dj.ones(2)
    opt.zero_grad(set_to_none=False)
    assert float(a.grad.sum()) == 0
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.Adam([a], lr=-1)
    with pytest.raises(TypeError, match="can only optimize Tensors"):
        optim.SGD([1.0], lr=0.1)


SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[2, 5, 5], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.01)),
    ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (e + 1))),
    ("LinearLR", dict(start_factor=0.25, total_iters=4)),
    ("ConstantLR", dict(factor=0.5, total_iters=3)),
    ("OneCycleLR", dict(max_lr=1.0, total_steps=21)),
    ("OneCycleLR", dict(max_lr=[1.0, 2.0], total_steps=21, three_phase=True, anneal_strategy="linear")),
    ("PolynomialLR", dict(total_iters=6, power=2.0)),
    ("CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2, eta_min=0.01)),
    ("SequentialLR", dict(schedulers=lambda o, opt: [o.lr_scheduler.LinearLR(opt, 0.1, total_iters=3),
                                                    o.lr_scheduler.ExponentialLR(opt, 0.8),
                                                    o.lr_scheduler.CosineAnnealingLR(opt, 4)], milestones=[3, 6])),
    ("ChainedScheduler", dict(schedulers=lambda o, opt: [o.lr_scheduler.ConstantLR(opt, 0.5, total_iters=2),
                                                        o.lr_scheduler.ExponentialLR(opt, 0.9)])),
]


@pytest.mark.parametrize("name,kw", SCHEDULERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULERS)])
def test_schedulers_match_torch(name, kw):
    seqs = []
    for lib, o in ((dj, optim), (torch, torch.optim)):
        ps = [lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)]
        opt = o.SGD([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.2}], lr=0.1, momentum=0.9)
        kwo = {k: (v(o, opt) if k == "schedulers" else v) for k, v in kw.items()}
        if name == "ChainedScheduler":
            sched = o.lr_scheduler.ChainedScheduler(kwo["schedulers"])
        else:
            sched = getattr(o.lr_scheduler, name)(opt, **kwo)
        seq = []
        for _ in range(20):
            opt.step()
            sched.step()
            seq.append(list(sched.get_last_lr()) + [opt.param_groups[0]["momentum"]])
        seqs.append(seq)
    np.testing.assert_allclose(seqs[0], seqs[1], rtol=1e-12)


def test_reduce_lr_on_plateau_matches_torch():
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85, 0.85, 0.85]
    seqs = []
    for lib, o in ((dj, optim), (torch, torch.optim)):
        opt = o.Adam([lib.zeros(1, requires_grad=True)], lr=0.1)
        s = o.lr_scheduler.ReduceLROnPlateau(opt, patience=1, cooldown=1, factor=0.5)
        seq = []
        for m in metrics:
            s.step(m)
            seq.append(opt.param_groups[0]["lr"])
        seqs.append(seq)
    assert seqs[0] == seqs[1]


def test_mlp_training_matches_torch_loss_curve():
    x = RNG.standard_normal((16, 4)).astype(np.float32)
    y = RNG.integers(0, 3, 16)
    md = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    mt = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    md.load_state_dict(mt.state_dict())
    od, ot = optim.Adam(md.parameters(), lr=0.05), torch.optim.Adam(mt.parameters(), lr=0.05)
    ld, lt = [], []
    for _ in range(3):
        for m, o, X, Y, F, out in ((md, od, dj.tensor(x), dj.tensor(y), nn.functional, ld),
                                   (mt, ot, torch.tensor(x), torch.tensor(y), torch.nn.functional, lt)):
            o.zero_grad()
            loss = F.cross_entropy(m(X), Y)
            loss.backward()
            o.step()
            out.append(float(loss.detach()))
    np.testing.assert_allclose(ld, lt, rtol=1e-5)
    assert ld[-1] < ld[0]


def test_lbfgs_matches_torch():
    target = RNG.standard_normal(4)
    res = []
    for lib, o in ((dj, optim), (torch, torch.optim)):
        x = lib.tensor(np.zeros(4), requires_grad=True)
        tt = lib.tensor(target)
        opt = o.LBFGS([x], lr=0.5, max_iter=6, history_size=3)

        def closure():
            opt.zero_grad()
            loss = ((x - tt) ** 4).sum() + (x * x).sum()
            loss.backward()
            return loss
        losses = [float(opt.step(closure).detach()) for _ in range(3)]
        res.append((losses, x.detach().numpy().copy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-9)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-9, atol=1e-12)

# ------------------------------------------------------------
# Optimizer and lr-scheduler edge cases side by side with torch.optim (float64, exact or to rounding): warnings,
# duplicate parameters, scheduler state dicts (PyTorch's loadable here), resumed and cyclic schedules, argument
# errors, LBFGS with a strong-Wolfe line search, named parameters.

LIBS = ((torch, torch.optim), (dj, optim))


def _opt(lib, o, cls="SGD", **kw):
    ps = [lib.zeros(1, dtype=lib.float64, requires_grad=True), lib.zeros(1, dtype=lib.float64, requires_grad=True)]
    kw = {"lr": 0.1, "momentum": 0.9, **kw} if cls == "SGD" else {"lr": 0.1, **kw}
    return getattr(o, cls)([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.2}], **kw)


def _messages(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [(x.category, str(x.message)) for x in w]


def test_scheduler_warnings_match_torch():
    def scenario(lib, o):
        def run():
            opt = _opt(lib, o)
            s = o.lr_scheduler.StepLR(opt, 2)
            s.step()          # before any optimizer.step(): warns
            s.step()          # (only the first call checks)
            s.get_lr()        # outside step(): warns
            opt.step()
            s2 = o.lr_scheduler.ExponentialLR(opt, 0.9)
            s2.step()         # the optimizer has stepped: no warning
            s.step(4)         # the deprecated epoch argument
            opt.step()
            s2.step()
        return run
    got = []
    for lib, o in LIBS:
        got.append(_messages(scenario(lib, o)))
    assert got[0] == got[1]
    assert [m[:30] for _, m in got[1]] == ["Detected call of `lr_scheduler", "To get the last learning rate ",
                                          "The epoch parameter in `schedu"]


def test_scheduler_warns_when_optimizer_step_overridden_like_torch():
    got = []
    for lib, o in LIBS:
        opt = _opt(lib, o)
        s = o.lr_scheduler.StepLR(opt, 2)
        opt.step = lambda *a, **k: None
        got.append(_messages(lambda: (opt.step(), s.step())))
    assert got[0] == got[1] and "overridden" in got[1][0][1]


@pytest.mark.parametrize("cls,kw", [("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.1, momentum=0.9)),
                                    ("Adam", dict(lr=0.1)), ("NAdam", dict(lr=0.1)), ("Adagrad", dict(lr=0.1))])
def test_duplicate_parameters_warn_and_update_twice_like_torch(cls, kw):
    out = []
    for lib, o in LIBS:
        a = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
        b = lib.tensor(np.array([3.0]), requires_grad=True)
        msgs = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            opt = getattr(o, cls)([a, b, a], **kw)
            msgs = [str(x.message) for x in w]
        assert len(opt.param_groups[0]["params"]) == 3
        for _ in range(3):
            a.grad, b.grad = lib.tensor(np.array([0.5, -1.0])), lib.tensor(np.array([0.3]))
            opt.step()
        sd = opt.state_dict()
        with pytest.raises(ValueError, match="more than one parameter group"):
            opt.add_param_group({"params": [a]})
        out.append((msgs, a.detach().numpy(), b.detach().numpy(), [g["params"] for g in sd["param_groups"]],
                    sorted(sd["state"])))
    (mt, at, bt, it, st), (md, ad, bd, id_, sd_) = out
    assert mt == md and mt[0].startswith("optimizer contains a parameter group with duplicate parameters")
    np.testing.assert_allclose(ad, at, rtol=1e-12)
    np.testing.assert_allclose(bd, bt, rtol=1e-12)
    assert (it, st) == (id_, sd_)


def _plain(v):
    """A torch state dict as plain Python values."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    return v.item() if isinstance(v, torch.Tensor) else v


class _Scale:
    """A callable object: its attributes are part of a LambdaLR state dict."""

    def __init__(self, f):
        self.f = f

    def __call__(self, e):
        return self.f ** e


SCHED_BUILDERS = {
    "StepLR": lambda o, opt: o.lr_scheduler.StepLR(opt, 3, 0.5),
    "MultiStepLR": lambda o, opt: o.lr_scheduler.MultiStepLR(opt, [2, 4, 4, 9], 0.5),
    "LambdaLR": lambda o, opt: o.lr_scheduler.LambdaLR(opt, [_Scale(0.9), lambda e: 1 / (e + 1)]),
    "MultiplicativeLR": lambda o, opt: o.lr_scheduler.MultiplicativeLR(opt, lambda e: 0.9),
    "CosineAnnealingWarmRestarts": lambda o, opt: o.lr_scheduler.CosineAnnealingWarmRestarts(opt, 3, 2, 0.01),
    "CyclicLR": lambda o, opt: o.lr_scheduler.CyclicLR(opt, 0.01, [0.1, 0.2], 3, 4, mode="triangular2"),
    "OneCycleLR": lambda o, opt: o.lr_scheduler.OneCycleLR(opt, 1.0, total_steps=30),
    "ReduceLROnPlateau": lambda o, opt: o.lr_scheduler.ReduceLROnPlateau(opt, patience=1, mode="max"),
    "SequentialLR": lambda o, opt: o.lr_scheduler.SequentialLR(
        opt, [o.lr_scheduler.ConstantLR(opt, 0.5, 2), o.lr_scheduler.MultiplicativeLR(opt, lambda e: 0.8)], [3]),
    "ChainedScheduler": lambda o, opt: o.lr_scheduler.ChainedScheduler(
        [o.lr_scheduler.ConstantLR(opt, 0.5, 2), o.lr_scheduler.ExponentialLR(opt, 0.9)]),
}


@pytest.mark.parametrize("name", list(SCHED_BUILDERS))
def test_scheduler_state_dict_keys_and_torch_state_loads(name):
    build = SCHED_BUILDERS[name]

    def advance(s, opt, i):
        opt.step()
        s.step(1.0 / (1 + i % 3)) if name == "ReduceLROnPlateau" else s.step()
        return [g["lr"] for g in opt.param_groups]

    (ot, st), (od, sd) = [(opt, build(o, opt)) for opt, o in ((_opt(torch, torch.optim), torch.optim),
                                                               (_opt(dj, optim), optim))]
    for i in range(7):
        advance(st, ot, i), advance(sd, od, i)
    torch_state = st.state_dict()
    assert list(sd.state_dict()) == list(torch_state)
    restored = []
    for state in (_plain(torch_state), sd.state_dict()):   # PyTorch's (plain values), and our own
        opt = _opt(dj, optim)
        s = build(optim, opt)
        s.load_state_dict(state)
        for g, g0 in zip(opt.param_groups, ot.param_groups):
            g.update({k: v for k, v in g0.items() if k != "params"})
        restored.append((s, opt))
    seqs = [[advance(s, opt, i) for i in range(7, 20)] for s, opt in [(st, ot)] + restored]
    np.testing.assert_allclose(seqs[1], seqs[0], rtol=1e-12)
    np.testing.assert_allclose(seqs[2], seqs[0], rtol=1e-12)


SCHEDULES = [
    ("ExponentialLR", dict(gamma=0.9)), ("CosineAnnealingLR", dict(T_max=7)),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.01)), ("MultiplicativeLR", dict(lr_lambda=lambda e: 0.95)),
    ("LinearLR", dict(start_factor=0.5, end_factor=0.1, total_iters=6)),
    ("PolynomialLR", dict(total_iters=6, power=2.0)), ("ConstantLR", dict(factor=0.5, total_iters=8)),
    ("CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2, eta_min=0.01)),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4)),
    ("CyclicLR", dict(base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3, step_size_down=5, mode="triangular2")),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="exp_range", gamma=0.9)),
]


@pytest.mark.parametrize("name,kw", SCHEDULES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULES)])
@pytest.mark.parametrize("resume", [None, 5])
def test_schedules_fresh_and_resumed_match_torch(name, kw, resume):
    seqs = []
    for lib, o in LIBS:
        opt = _opt(lib, o)
        if resume is not None:
            for g in opt.param_groups:
                g.update(initial_lr=g["lr"], max_momentum=0.9, base_momentum=0.8)
            kw = dict(kw, last_epoch=resume)
        s = getattr(o.lr_scheduler, name)(opt, **kw)
        seq = [list(s.get_last_lr()) + [opt.param_groups[0]["momentum"]]]
        for _ in range(30):
            opt.step()
            s.step()
            seq.append(list(s.get_last_lr()) + [opt.param_groups[0]["momentum"]])
        seqs.append(seq)
    np.testing.assert_allclose(seqs[1], seqs[0], rtol=1e-12)


ERRORS = [
    ("SGD", dict(lr=0.1, momentum=-1)), ("SGD", dict(lr=0.1, weight_decay=-1)), ("SGD", dict(lr=float("nan"))),
    ("SGD", dict(lr=0.1, fused=True, differentiable=True)), ("Adam", dict(fused=True, foreach=True)),
    ("Adam", dict(betas=(0, 0.9))), ("Adam", dict(lr=-1, eps=-1)), ("Adam", dict(eps=-1, betas=(1.0, 0.9))),
    ("Adam", dict(lr="tensor", foreach=True)), ("AdamW", dict(betas=(0.9, 1.5))),
    ("NAdam", dict(momentum_decay=-1)), ("NAdam", dict(betas=(0.9, 1.0), weight_decay=-1)),
    ("Adadelta", dict(rho=1.5, eps=-1)), ("Adagrad", dict(initial_accumulator_value=-1)),
    ("RMSprop", dict(alpha=-1)), ("LBFGS", dict(lr=-1)), ("Adagrad", dict(fused=True, differentiable=True)),
]


@pytest.mark.parametrize("cls,kw", ERRORS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ERRORS)])
def test_argument_errors_match_torch(cls, kw):
    got = []
    for lib, o in LIBS:
        args = {k: (lib.tensor(0.1) if v == "tensor" else v) for k, v in kw.items()}
        try:
            getattr(o, cls)([lib.zeros(2, dtype=lib.float64, requires_grad=True)], **args)
            got.append("ok")
        except Exception as e:   # noqa: BLE001 -- the type and message are what is compared
            got.append(f"{type(e).__name__}: {e}")
    assert got[1] == got[0]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_on_a_quadratic_matches_torch(line_search_fn):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 5))
    A = A @ A.T + np.eye(5)
    b = rng.standard_normal(5)
    res = []
    for lib, o in LIBS:
        x = lib.tensor(np.zeros(5), requires_grad=True)
        AA, bb = lib.tensor(A), lib.tensor(b)
        opt = o.LBFGS([x], lr=1 if line_search_fn else 0.5, max_iter=7, history_size=3, line_search_fn=line_search_fn)

        def closure():
            opt.zero_grad()
            loss = 0.5 * (x * (AA @ x)).sum() - (bb * x).sum() + ((x - 1) ** 4).sum()
            loss.backward()
            return loss
        losses = [float(opt.step(closure).detach()) for _ in range(3)]
        st = opt.state[x]
        res.append((losses, x.detach().numpy().copy(), st["func_evals"], st["n_iter"]))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-12)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-10, atol=1e-14)
    assert res[1][2:] == res[0][2:]


def test_named_parameters_groups_and_adamw_state_like_torch():
    out = []
    for lib, o in LIBS:
        m = lib.nn.Linear(2, 1)
        opt = o.SGD(m.named_parameters(), lr=0.1)
        group = {"params": [("extra", lib.zeros(1, requires_grad=True))], "lr": 0.3}
        opt.add_param_group(group)
        with pytest.raises(ValueError) as e:
            opt.add_param_group({"params": [lib.zeros(1, requires_grad=True)]})
        group["lr"] = 0.5   # the dict given is the group itself
        sd = opt.state_dict()
        w = o.AdamW([lib.zeros(1, requires_grad=True)])
        w.load_state_dict(o.Adam([lib.zeros(1, requires_grad=True)]).state_dict())
        out.append((sd["param_groups"][0]["param_names"], sd["param_groups"][1]["param_names"],
                    opt.param_groups[1]["lr"], str(e.value), w.param_groups[0]["decoupled_weight_decay"]))
    assert out[1] == out[0]


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
