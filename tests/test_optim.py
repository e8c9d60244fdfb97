"""Optimizers and lr schedulers against torch.optim: same params and grads, 20 steps, same results."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.optim as optim
from helpers import assert_close

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
