"""dynajax.compile's default mode skips the step's Python while its guards hold (``compile.guards``): every way
the step's Python can change between calls must still give eager's results on every call."""
import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import train_step

STEPS = 10


def _data(n=STEPS):
    rng = np.random.default_rng(0)
    return [(dj.tensor(rng.standard_normal((8, 6)).astype(np.float32)), dj.tensor(rng.integers(0, 3, 8)))
            for _ in range(n)]


def _model(dropout=0.0):
    dj.manual_seed(0)
    layers = [nn.Linear(6, 8), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(8, 3)]
    return nn.Sequential(*layers)


def _run(step, model, opt, between):
    """Call the step on the data, calling ``between(i)`` before call i: the losses and, after each call, the
    parameters, grads and optimizer state (as numpy arrays)."""
    out = []
    for i, (x, y) in enumerate(_data()):
        between(i)
        loss = float(step(x, y))
        params = [(n, p.detach().numpy().copy(), None if p.grad is None else p.grad.numpy().copy())
                  for n, p in model.named_parameters()]
        state = [(k, np.asarray(v.numpy()).copy()) for g in opt.param_groups for p in g["params"]
                 for k, v in sorted(opt.state[p].items())]
        out.append((loss, params, state))
    return out


def _check(make, expect_replays=True):
    """Run the scenario eagerly, then compiled (default mode) from the same seed, comparing the loss, every
    parameter, every grad and the optimizer state after each call. Returns the compiled step."""
    eager = _run(*make(False))
    step, *rest = make(True)
    got = _run(step, *rest)
    for i, ((le, pe, se), (lc, pc, sc)) in enumerate(zip(eager, got)):
        np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-6, err_msg=f"loss at call {i}")
        for (n, p, g), (_, q, h) in zip(pe, pc):
            np.testing.assert_allclose(q, p, rtol=1e-5, atol=1e-6, err_msg=f"{n} at call {i}")
            assert (g is None) == (h is None), (n, i)
            if g is not None:
                np.testing.assert_allclose(h, g, rtol=1e-5, atol=1e-6, err_msg=f"{n}.grad at call {i}")
        assert [k for k, _ in se] == [k for k, _ in sc], i
        for (k, a), (_, b) in zip(se, sc):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"{k} at call {i}")
    if expect_replays:
        assert step.stats.replayed > 0, "the guards never let a call skip the Python"
    return step


def _plain(compiled, body, between=lambda i: None, opt_kw=None, dropout=0.0, opt_cls=dj.optim.SGD):
    model = _model(dropout)
    opt = opt_cls(model.parameters(), **(opt_kw or {"lr": 0.1, "momentum": 0.9}))

    def step(x, y):
        opt.zero_grad()
        loss = body(model, x, y)
        loss.backward()
        opt.step()
        return loss
    return (dj.compile(step) if compiled else step), model, opt, between


def test_a_pure_step_skips_its_python_after_two_recordings():
    cs = _check(lambda c: _plain(c, lambda m, x, y: F.cross_entropy(m(x), y)))
    # (call 0 makes the momentum buffers, so calls 1 and 2 are the two recordings that agree)
    assert cs.stats.replayed == STEPS - 3 and cs.stats.compiles == 1


def test_a_number_in_a_dict():
    def make(c):
        coef = {"v": 1.0}

        def between(i):
            coef["v"] = [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 2.0, 2.0, 2.0][i]
        return _plain(c, lambda m, x, y: F.cross_entropy(m(x), y) * coef["v"], between)
    _check(make)


def test_a_number_in_a_closure_cell():
    def make(c):
        scale = 1.0

        def body(m, x, y):
            return F.cross_entropy(m(x), y) * scale

        def between(i):
            nonlocal scale
            if i in (4, 7):
                scale = scale * 3
        return _plain(c, body, between)
    _check(make)


def test_a_branch_on_a_counter_kept_outside():
    def make(c):
        state = {"n": 0}

        def body(m, x, y):
            loss = F.cross_entropy(m(x), y)
            if state["n"] % 4 == 3:   # another graph every fourth call
                loss = loss + m[0].weight.pow(2).sum((0, 1)) * 0.1
            return loss

        def between(i):
            state["n"] = i
        return _plain(c, body, between)
    cs = _check(make, expect_replays=False)   # (a number the step reads changes every call: recorded every call)
    assert cs.stats.replayed == 0


def test_a_counter_the_step_increments_is_recorded_every_call():
    def make(c):
        calls = [0]

        def body(m, x, y):
            calls[0] += 1
            loss = F.cross_entropy(m(x), y)
            return loss * 2.0 if calls[0] % 3 == 0 else loss
        return _plain(c, body)
    cs = _check(make, expect_replays=False)
    assert cs.stats.replayed == 0


def test_a_step_that_prints_prints_every_call(capsys):
    def make(c):
        def body(m, x, y):
            print("step")
            return F.cross_entropy(m(x), y)
        return _plain(c, body)
    cs = _check(make, expect_replays=False)
    assert cs.stats.replayed == 0
    assert capsys.readouterr().out.count("step") == 2 * STEPS   # eager's and the compiled step's


def test_a_scheduler_stepped_outside_keeps_replaying():
    def make(c):
        out = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y))
        sch = dj.optim.lr_scheduler.StepLR(out[2], 2, 0.5)
        return out[:3] + (lambda i: sch.step() if i else None,)
    cs = _check(make)
    assert cs.stats.replayed >= STEPS - 3


def test_a_scheduler_stepped_inside_the_step_is_recorded_every_call():
    def make(c):
        model = _model()
        opt = dj.optim.SGD(model.parameters(), lr=0.1)
        sch = dj.optim.lr_scheduler.StepLR(opt, 2, 0.5)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sch.step()
            return loss
        return (dj.compile(step) if c else step), model, opt, lambda i: None
    cs = _check(make, expect_replays=False)
    assert cs.stats.replayed == 0


def test_a_frozen_layer():
    def make(c):
        out = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y))
        model = out[1]
        return out[:3] + (lambda i: model[0].requires_grad_(i < 4 or i >= 7),)
    _check(make)


def test_a_reassigned_parameter():
    def make(c):
        out = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y))
        model = out[1]

        def between(i):
            if i == 5:
                model[2].weight = nn.Parameter(dj.ones(3, 8) * 0.1)
        return out[:3] + (between,)
    _check(make)


def test_optimizer_param_group_changes():
    def make(c):
        model = _model()
        first, last = list(model[0].parameters()), list(model[2].parameters())
        opt = dj.optim.SGD(first, lr=0.1, momentum=0.9, weight_decay=0.0)

        def step(x, y):
            opt.zero_grad()
            model.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        def between(i):
            g = opt.param_groups[0]
            if i == 3:
                g["lr"] = 0.05
            if i == 5:
                g["weight_decay"] = 0.1
            if i == 7:
                opt.add_param_group({"params": last, "lr": 0.2})
            if i == 9:
                g["momentum"] = 0.0
        return (dj.compile(step) if c else step), model, opt, between
    _check(make)


def test_a_param_group_changed_in_place_while_replayed():
    """A group's ``params`` list and options changed in place (the group and the list stay the same objects,
    which the optimizer's fingerprint keeps by identity) while calls skip the Python: eager's results."""
    def make(c):
        out = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y), opt_kw={"lr": 0.1})
        g = out[2].param_groups[0]

        def between(i):
            if i == 5:
                g["params"].pop()
            if i == 8:
                g["nesterov"], g["momentum"] = False, 0.5
        return out[:3] + (between,)
    step = _check(make)
    assert step.stats.replayed >= 4


def test_an_optimizer_step_counter_changed_on_its_own_while_replayed():
    """Adam's step counters share one array, which a replayed call reads once for all of them: a counter set on
    its own between calls (the others still sharing theirs) sends that call to be recorded, and every call
    gives eager's results."""
    def make(c):
        step, model, opt, _ = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y), opt_kw={"lr": 0.05},
                                     opt_cls=dj.optim.Adam)

        def between(i):
            if i == 5:
                with dj.no_grad():
                    opt.state[model[2].weight]["step"].fill_(30.0)
        return step, model, opt, between
    step = _check(make)
    assert step.stats.replayed >= 4


def test_train_and_eval_switches():
    def make(c):
        out = _plain(c, lambda m, x, y: F.cross_entropy(m(x), y), dropout=0.3)
        model = out[1]

        def between(i):
            if i == 4:
                model.eval()
            if i == 7:
                model.train()
            if i == 9:
                model[2].p = 0.6   # an option a forward reads: Module.__setattr__
        return out[:3] + (between,)
    _check(make)


def test_a_global_config_object_and_a_module_attribute():
    class Cfg:
        def __init__(self):
            self.scale = 1.0
            self.extra = False

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = _model()
            self.opts = {"square": False}

        def forward(self, x):
            h = self.body(x)
            return h * h if self.opts["square"] else h

    def make(c):
        cfg = Cfg()
        dj.manual_seed(0)
        net = Net()
        opt = dj.optim.SGD(net.parameters(), lr=0.05)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y) * cfg.scale
            if cfg.extra:
                loss = loss + 0.01 * net.body[0].weight.abs().sum((0, 1))
            loss.backward()
            opt.step()
            return loss

        def between(i):
            if i == 3:
                cfg.scale = 0.5
            if i == 5:
                cfg.extra = True
            if i == 7:
                net.opts["square"] = True   # a dict mutated in place: no setattr
        return (dj.compile(step) if c else step), net, opt, between
    _check(make)


def test_a_replayed_call_returns_fresh_results_and_the_guard_says_why_it_records():
    model = _model()
    opt = dj.optim.SGD(model.parameters(), lr=0.1)
    coef = {"v": 1.0}

    @dj.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y) * coef["v"]
        loss.backward()
        opt.step()
        return loss
    (x, y), = _data(1)
    a, b, c = step(x, y), step(x, y), step(x, y)
    assert step.stats.replayed == 1 and a is not b and b is not c
    entry = next(iter(step._replayer.entries.values()))
    assert entry.py.changed() is None
    coef["v"] = 2.0
    assert entry.py.changed() is not None   # (coef is a closure cell of the compiled function: that root)


@pytest.mark.parametrize("replay", [False, True])
def test_a_step_that_raises_leaves_grad_as_it_was(replay):
    model = _model()
    opt = dj.optim.SGD(model.parameters(), lr=0.1)
    boom = {"on": False}

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if boom["on"]:
            raise ValueError("boom")
        loss.backward()
        opt.step()
        return loss
    c = dj.compile(step, replay=replay)
    (x, y), = _data(1)
    for _ in range(4):
        c(x, y)
    before = {n: p.grad for n, p in model.named_parameters()}
    values = {n: g.numpy().copy() for n, g in before.items()}
    weights = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    boom["on"] = True
    with pytest.raises(ValueError, match="boom"):
        c(x, y) if not replay else step_recorded(c, x, y)
    for n, p in model.named_parameters():
        assert p.grad is before[n], n
        np.testing.assert_array_equal(p.grad.numpy(), values[n])
        np.testing.assert_array_equal(p.detach().numpy(), weights[n])


def step_recorded(c, x, y):
    """Call a replay=True step so that it is recorded (a replay would not run the raising Python): after
    clearing its replay entries."""
    c._replayer.entries.clear()
    return c(x, y)


_HEARD: list = []


def test_a_callback_another_library_makes_during_the_step_is_not_the_steps_python():
    """A JAX monitoring listener of the user's runs during the recorded calls (JAX compiles there) and
    appends to a global: that is JAX calling back, not the step's Python, so the step still replays."""
    import jax
    jax.monitoring.register_event_duration_secs_listener(lambda name, *a, **k: _HEARD.append(name))
    cs = _check(lambda c: _plain(c, lambda m, x, y: F.cross_entropy(m(x), y).mul(1.5)))
    assert _HEARD and cs.stats.replayed == STEPS - 3


def test_the_watch_is_back_after_each_recorded_op_and_sees_the_steps_own_python():
    """The Watch (a profile function) is off while an op is recorded, ops recorded inside another's
    included (padding's masks): after each, the step's own Python runs watched again, so a Python number
    it reads later is still guarded."""
    import sys
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = dj.optim.SGD(model.parameters(), lr=0.1)
    seen, scale = [], {"s": 1.0}

    @dj.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)   # (padded rows: its mean is masked, ops inside ops)
        seen.append(sys.getprofile())
        loss = loss * scale["s"]
        loss.backward()
        opt.step()
        return loss
    rng = np.random.default_rng(0)
    losses = []
    for i, n in enumerate((5, 7, 6, 9, 7, 6, 7)):
        scale["s"] = 1.0 if i < 4 else 3.0
        x, y = rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)
        losses.append(step(dj.tensor(x), dj.tensor(y)).item())
    assert step.stats.dynamic_dims and step.stats.compiles >= 2
    recorded = [p for p in seen if p is not None]
    from dynajax.compile import guards
    assert recorded and all(getattr(p, "__func__", None) is guards.Watch._event for p in recorded)
    dj.manual_seed(0)
    model2 = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt2 = dj.optim.SGD(model2.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for i, n in enumerate((5, 7, 6, 9, 7, 6, 7)):
        x, y = rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)
        opt2.zero_grad()
        loss = F.cross_entropy(model2(dj.tensor(x)), dj.tensor(y)) * (1.0 if i < 4 else 3.0)
        loss.backward()
        opt2.step()
        np.testing.assert_allclose(losses[i], loss.item(), rtol=1e-5)


@pytest.mark.parametrize("hook", ["post_accumulate_grad", "tensor", "forward"])
def test_a_hooks_closure_reading_a_python_number_is_watched(hook):
    """A hook is the user's code that the library calls, a closure whose cells no root of the step reaches:
    the Watch roots its closure when it runs (and the backward that runs unwatched, ``compile.backward``,
    leaves a graph with a post-accumulate-grad hook to the tape), so a change to the number it reads is
    eager's on that call."""
    def train(compiled):
        dj.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        opt = dj.optim.SGD(model.parameters(), lr=0.1)
        scale = {"s": 1.0}
        w = model[0].weight
        if hook == "post_accumulate_grad":
            w.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(scale["s"]))
        elif hook == "tensor":
            w.register_hook(lambda g: g * scale["s"])
        else:
            model[1].register_forward_hook(lambda m, a, o: o * scale["s"])
        step = train_step(model, opt, F.cross_entropy)
        step = dj.compile(step) if compiled else step
        rng = np.random.default_rng(1)
        x, y = dj.tensor(rng.standard_normal((6, 4)).astype(np.float32)), dj.tensor(rng.integers(0, 3, 6))
        losses = []
        for i in range(STEPS):
            scale["s"] = 1.0 if i < 5 else 4.0
            losses.append(step(x, y).item())
        return losses, model[0].weight.detach().numpy(), step
    eager, w_eager, _ = train(False)
    comp, w_comp, step = train(True)
    np.testing.assert_allclose(comp, eager, rtol=1e-5)
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-5, atol=1e-6)


def test_a_forward_calling_super_is_not_scanned_for_its_closure(monkeypatch):
    """A method calling ``super()`` has one closure cell, its class, bound once: the Watch does not look
    for its function among the heap's objects (``guards._closures_of``) when a module's forward is one."""
    from dynajax.compile import guards
    scanned = []
    real = guards._closures_of
    monkeypatch.setattr(guards, "_closures_of", lambda frame: scanned.append(frame.f_code.co_name) or real(frame))

    class Scaled(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2.0
    dj.manual_seed(0)
    model = nn.Sequential(Scaled(4, 8), nn.Tanh(), nn.Linear(8, 3))
    step = dj.compile(train_step(model, dj.optim.SGD(model.parameters(), lr=0.1), F.cross_entropy))
    rng = np.random.default_rng(2)
    x, y = dj.tensor(rng.standard_normal((6, 4)).astype(np.float32)), dj.tensor(rng.integers(0, 3, 6))
    for _ in range(4):
        step(x, y)
    assert "forward" not in scanned and step.stats.replayed > 0
