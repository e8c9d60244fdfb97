"""Optimizer and lr-scheduler edge cases side by side with torch.optim (float64, exact or to rounding): warnings,
duplicate parameters, scheduler state dicts (PyTorch's loadable here), resumed and cyclic schedules, argument
errors, LBFGS with a strong-Wolfe line search, named parameters."""
import warnings

import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.optim as optim

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
