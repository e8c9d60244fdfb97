"""dynajax.compile(replay=True): calls that run the recorded executable without the step's Python must
leave parameters, grads, optimizer state, buffers and the RNG stream exactly as eager steps do."""
import copy
import gc
import warnings
import weakref

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.compile import replay as _replay
from helpers import train_step


def _data(n, batch=8, width=12, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(dj.tensor(rng.standard_normal((batch, width)).astype(np.float32)),
             dj.tensor(rng.integers(0, classes, batch))) for _ in range(n)]


def _trainer(mode, *, norm=False, zero_grad=True, sched=True, returns="loss"):
    """A dropout (and BatchNorm) MLP trained by Adam under a StepLR schedule: eager (mode None) or compiled
    with ``replay=mode``. Returns (step, model, optimizer, scheduler)."""
    dj.manual_seed(0)
    layers = [nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4)]
    model = nn.Sequential(*([nn.BatchNorm1d(12)] if norm else []), *layers)
    opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    sch = dj.optim.lr_scheduler.StepLR(opt, 3, 0.5) if sched else None

    def step(x, y):
        if zero_grad:
            opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if returns == "loss":
            return loss
        return {"loss": loss, "pair": (out, 7), "first": model[-1].weight, "tag": "mlp"}
    return (step if mode is None else dj.compile(step, replay=mode)), model, opt, sch


def _train(mode, data, **kw):
    step, model, opt, sch = _trainer(mode, **kw)
    outs = []
    for x, y in data:
        outs.append(step(x, y))
        if sch is not None:
            sch.step()
    return step, model, opt, outs


def _assert_same_state(a, b, opt_a, opt_b):
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=2e-6, atol=2e-7, err_msg=n)
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-6, atol=2e-7)
        for k in ("exp_avg", "exp_avg_sq"):
            # on a GPU the executable's fused reductions round differently from eager's kernels, and the moments
            # carry it over the steps: 2.8e-5 relative (8e-9 absolute, 1e-6 of the largest entry) was seen on
            # an H200 in an entry near zero
            want = opt_b.state[q][k].numpy()
            np.testing.assert_allclose(opt_a.state[p][k].numpy(), want, rtol=1e-5, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("norm", [False, True])
def test_replayed_training_matches_eager(norm):
    """20 steps with dropout (the shared RNG stream), BatchNorm running stats, Adam and a learning-rate
    schedule: replayed calls give eager's losses, parameters, grads, moments and buffers."""
    data = _data(20)
    _, m0, o0, eager = _train(None, data, norm=norm)
    step, m1, o1, got = _train(True, data, norm=norm)
    # the first call makes Adam's moments (found nowhere before it): replays start at the third
    assert step.stats.replayed == 17 and step.stats.compiles == 1 and step.stats.calls == 20
    np.testing.assert_allclose([float(v) for v in got], [float(v) for v in eager], rtol=2e-6)
    _assert_same_state(m1, m0, o1, o0)


def test_replay_returns_new_tensors_and_the_recorded_structure():
    """Each replayed call returns fresh tensors (a loss kept from an earlier call keeps its value), Python
    values as recorded, and a tensor from before the step as itself, updated."""
    data = _data(6)
    _, m0, _, eager = _train(None, data, returns="dict")
    step, m1, _, got = _train(True, data, returns="dict")
    assert step.stats.replayed == 3
    for g, e in zip(got, eager):
        assert g.keys() == e.keys() and g["tag"] == "mlp" and g["pair"][1] == 7
        np.testing.assert_allclose(float(g["loss"]), float(e["loss"]), rtol=2e-6)
        np.testing.assert_allclose(g["pair"][0].numpy(), e["pair"][0].detach().numpy(), rtol=2e-6, atol=1e-7)
        assert g["first"] is m1[-1].weight and not g["loss"].requires_grad
    assert len({id(g["loss"]) for g in got}) == 6


def test_replay_accumulates_grads_like_eager():
    """Without zero_grad the first call reads no grads and the second does: the key settles at the second
    call and replays accumulate into the same .grad values as eager."""
    data = _data(7)
    _, m0, o0, _ = _train(None, data, zero_grad=False, sched=False)
    step, m1, o1, _ = _train(True, data, zero_grad=False, sched=False)
    assert step.stats.compiles == 2 and step.stats.replayed == 4
    _assert_same_state(m1, m0, o1, o0)


def test_each_argument_shape_replays_its_own_executable():
    """The guard includes the arguments' shapes: two batch sizes alternate, each replayed after it
    repeats, and the results stay eager's."""
    data = [d for pair in zip(_data(6, batch=8), _data(6, batch=5, seed=1)) for d in pair]
    _, m0, o0, eager = _train(None, data, sched=False)
    step, m1, o1, got = _train(True, data, sched=False)
    assert step.stats.compiles == 2 and step.stats.replayed == 3 + 4
    np.testing.assert_allclose([float(v) for v in got], [float(v) for v in eager], rtol=2e-6)
    _assert_same_state(m1, m0, o1, o0)


def test_python_arguments_are_part_of_the_guard():
    """A Python number argument that changes the graph (a branch on it) is recorded again when it
    changes, so both branches run; a mutated tensor from outside the step is functionalized."""
    w = dj.ones(3, requires_grad=True)
    count = dj.zeros(())

    def step(x, double):
        count.add_(1)
        y = (x * w).sum()
        return y * 2 if double else y

    c = dj.compile(step, replay=True)
    x = dj.arange(3.0)
    got = [float(c(x, flag)) for flag in (True, True, True, False, False, False, True)]
    assert got == [6.0, 6.0, 6.0, 3.0, 3.0, 3.0, 6.0]
    assert float(count) == 7 and c.stats.replayed == 3


def test_a_check_call_warns_when_the_graph_changed_under_replay():
    """Python state the guard cannot see (a global flag) changes the graph: replayed calls run the old
    graph until the next recorded check, which warns naming the change and replays the new graph after."""
    state = {"tanh": False}
    w = dj.ones(3)

    def step(x):
        return (x * w).tanh().sum() if state["tanh"] else (x * w).sum()

    c = dj.compile(step, replay=4)
    x = dj.arange(3.0)
    assert [float(c(x)) for _ in range(3)] == [3.0] * 3   # two recordings, then a replay
    state["tanh"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [float(c(x)) for _ in range(4)]
    expected = float(np.tanh(np.arange(3.0)).sum())
    assert got[:2] == [3.0, 3.0] and got[2] == pytest.approx(expected)   # the 4th call of the guard checks
    found = [m for m in caught if issubclass(m.category, RuntimeWarning)]
    assert len(found) == 1 and "graph changed at op" in str(found[0].message) and "replay=True" in str(found[0].message)
    assert found[0].filename == __file__   # it points at the caller's line
    assert [float(c(x)) for _ in range(3)] == pytest.approx([expected] * 3)


def test_a_module_attribute_changed_between_calls_warns_with_the_op_that_changed():
    """A module attribute changed between calls behind ``Module.__setattr__``'s back (written into its
    ``__dict__``: Python the guard does not read) is replayed with the old graph until a check, whose warning
    names the first op that changed: the random draw that stopped, not an input shifted by it into another
    position (which read as a parameter's dtype change). (``m[1].p = 0.0`` bumps ``_epoch``: recorded at once.)"""
    dj.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    opt = dj.optim.SGD(m.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    f = dj.compile(step, replay=4)
    x = dj.ones(16, 4)
    for _ in range(3):
        f(x)
    m[1].__dict__["p"] = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            f(x)
    found = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(found) == 1 and "graph changed at op 1" in found[0] and "dtype" not in found[0], found
    replayed = f.stats.replayed
    m[1].p = 0.5   # through Module.__setattr__: the very next call is recorded
    f(x)
    assert f.stats.replayed == replayed


def test_replay_does_not_donate_an_array_held_elsewhere():
    """Arrays are shared freely (a deepcopy's parameters, a raw array kept by the user): a replayed call
    must not delete one under its other holder, and it copies only those."""
    data = _data(9)
    step, model, opt, sch = _trainer(True, sched=False)
    for x, y in data[:4]:
        step(x, y)
    held = [p._value for p in model.parameters()]   # held here while the next call is replayed
    before = [np.asarray(a).copy() for a in held]
    step(*data[4])
    assert step.stats.replayed == 2 and not any(a.is_deleted() for a in held)
    for a, b in zip(held, before):
        np.testing.assert_array_equal(np.asarray(a), b)
    del held
    snap = copy.deepcopy(model)   # (building modules sends one call to be recorded: _epoch)
    before = [p.detach().numpy().copy() for p in snap.parameters()]
    for x, y in data[5:]:
        step(x, y)
    assert step.stats.replayed == 5
    for p, b in zip(snap.parameters(), before):
        np.testing.assert_array_equal(p.detach().numpy(), b)
    assert not np.array_equal(model[0].weight.detach().numpy(), before[0])   # (model[0]: the first Linear)


def test_unhashable_arguments_are_recorded_every_call():
    w = dj.ones(2)
    c = dj.compile(lambda x, a: (x * w).sum() + float(a.sum()), replay=True)
    for _ in range(3):
        assert float(c(dj.ones(2), np.ones(3))) == 5.0
    assert c.stats.replayed == 0


@pytest.mark.parametrize("kw, match", [({"verify": True}, "verify=True"), ({"dynamic": {"x": {0: 8}}}, "dynamic="),
                                       ({"replay": 1}, "an int >= 2"), ({"replay": "yes"}, "an int >= 2")])
def test_replay_refuses_what_it_cannot_honour(kw, match):
    kw = {"replay": True, **kw}
    with pytest.raises(ValueError, match=match):
        dj.compile(lambda x: x.sum(), **kw)


def test_a_step_reading_a_tensor_it_stored_is_not_replayed():
    """A hidden state carried between calls (truncated BPTT) is a new tensor each call: where the next
    call's input will be is known only by running the step, so it is recorded every call, and correct."""
    w = dj.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def make():
        box = {"h": dj.zeros(3)}

        def step(x):
            h = (box["h"] * 0.5 + x * w).tanh()
            box["h"] = h.detach()
            return h.sum()
        return step, box
    (eager, be), (comp, bc) = make(), make()
    c = dj.compile(comp, replay=True)
    xs = [dj.tensor(np.full(3, i, np.float32)) for i in range(6)]
    for x in xs:
        np.testing.assert_allclose(float(c(x)), float(eager(x)), rtol=1e-6)
    np.testing.assert_allclose(bc["h"].numpy(), be["h"].numpy(), rtol=1e-6)
    assert c.stats.replayed == 0


def test_train_eval_switches_are_part_of_the_guard():
    """``model.eval()`` between calls changes the graph (dropout off) with the same arguments: the modules'
    training flags are checked, so eval calls run the eval graph, silently; and back."""
    x = _data(1)[0][0]
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 4), nn.Dropout(0.5))
    c = dj.compile(lambda x: model(x).sum(), replay=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train = [float(c(x)) for _ in range(4)]
        model.eval()
        want = float(model(x).sum())
        assert [float(c(x)) for _ in range(4)] == pytest.approx([want] * 4, rel=1e-6)
        model.train()
        again = [float(c(x)) for _ in range(4)]
    assert len(set(train + again)) == 8 and c.stats.replayed == 2 + 2 + 2


def test_state_moved_to_other_tensors_is_found():
    """A checkpoint loaded into the optimizer (new moment tensors) and a parameter replaced by a new one
    while the old objects stay alive: the next call is recorded again and reads the new tensors, so the
    run continues exactly as eager's."""
    data = _data(12)
    runs = []
    for mode in (None, True):
        step, model, opt, _ = _trainer(mode, sched=False)
        keep = []
        for i, (x, y) in enumerate(data):
            if i == 5:
                keep.append(opt.state_dict())   # the old moments stay alive
                saved = copy.deepcopy(opt.state_dict())
                for st in saved["state"].values():
                    st["exp_avg"] = st["exp_avg"] * 0.5
                opt.load_state_dict(saved)
            if i == 8:
                old = model[-1].bias
                keep.append(old)
                model[-1].bias = nn.Parameter(old.detach() + 1.0)
                opt.param_groups[0]["params"][-1] = model[-1].bias
            step(x, y)
        runs.append((model, opt, step))
    (m0, o0, _), (m1, o1, step) = runs
    assert step.stats.replayed > 0
    _assert_same_state(m1, m0, o1, o0)


def test_a_returned_argument_is_the_calls_own():
    w = dj.ones(3)
    c = dj.compile(lambda x: (x, (x * w).sum()), replay=True)
    for i in range(4):
        x = dj.full((3,), float(i))
        got, total = c(x)
        assert got is x and float(total) == 3 * i
    assert c.stats.replayed == 2


def test_a_python_loop_with_a_state_made_in_the_step_replays():
    """A define-by-run RNN: a Python loop over GRUCell from a zero state the step makes. The zeros are
    the same array on every recording, so the step replays; losses and parameters stay eager's."""
    data = [(dj.tensor(np.random.default_rng(i).standard_normal((4, 5, 6)).astype(np.float32)),
             dj.tensor(np.random.default_rng(i).standard_normal((4, 3)).astype(np.float32))) for i in range(6)]
    runs = []
    for mode in (None, True):
        dj.manual_seed(0)
        cell, head = nn.GRUCell(6, 8), nn.Linear(8, 3)
        params = list(cell.parameters()) + list(head.parameters())
        opt = dj.optim.SGD(params, lr=0.1)

        def step(x, y):
            opt.zero_grad()
            h = dj.zeros(x.shape[0], 8)
            for t in x.unbind(1):
                h = cell(t, h)
            loss = F.mse_loss(head(h), y)
            loss.backward()
            opt.step()
            return loss
        fn = step if mode is None else dj.compile(step, replay=True)
        runs.append(([float(fn(x, y)) for x, y in data], params, fn))
    (l0, p0, _), (l1, p1, fn) = runs
    assert fn.stats.replayed == 4
    np.testing.assert_allclose(l1, l0, rtol=2e-6)
    for a, b in zip(p1, p0):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=2e-6, atol=1e-7)


def test_a_tensor_made_from_changing_python_data_is_not_replayed():
    """A tensor the step makes from a Python number that changes every call differs between recordings,
    so the step is recorded every call (and stays right)."""
    w, state = dj.ones(2), {"v": 0.0}

    def step(x):
        state["v"] += 1.0
        return (x * w + dj.tensor([state["v"], 0.0])).sum()
    c = dj.compile(step, replay=True)
    assert [float(c(dj.ones(2))) for _ in range(4)] == [3.0, 4.0, 5.0, 6.0]
    assert c.stats.replayed == 0


def test_a_python_number_computed_anew_each_call_is_not_replayed():
    """A number the step computes from its own Python state (a warm-up factor) changes between
    recordings: it would be frozen by a replay, so the step is recorded every call. The optimizer's own
    numbers (a StepLR schedule) are read again and do not stop replay (test_replayed_training_matches_eager)."""
    w, state = dj.ones(2, requires_grad=True), {"n": 0}

    def step(x):
        state["n"] += 1
        return (x * w).sum() * min(1.0, state["n"] / 10)
    c = dj.compile(step, replay=True)
    got = [float(c(dj.ones(2))) for _ in range(4)]
    np.testing.assert_allclose(got, [0.2, 0.4, 0.6, 0.8], rtol=1e-6)
    assert c.stats.replayed == 0


def test_grad_mode_is_part_of_the_guard_and_the_decorator_form_takes_replay():
    dj.manual_seed(0)
    lin = nn.Linear(3, 2)

    @dj.compile(replay=True)
    def f(x):
        return lin(x).sum()
    x = dj.ones(4, 3)
    want = float(lin(x).sum())
    got = [float(f(x)) for _ in range(3)]
    with dj.no_grad():
        got += [float(f(x)) for _ in range(3)]
    assert got == pytest.approx([want] * 6, rel=1e-6)
    assert f.stats.replayed == 2 and f.stats.compiles == 1   # two guards, one graph: each replays after two


def test_replay_with_a_small_cache_evicts_cleanly():
    """Three shapes rotating through a cache of two executables: evicted executables' entries go with
    them, and every call is still right."""
    w = dj.tensor([1.0, 2.0, 3.0])
    c = dj.compile(lambda x: (x * w).sum(-1), cache_size=2, replay=True)
    with pytest.warns(UserWarning, match="recompiled 8 times"):   # (LRU order: each call evicts the next shape)
        for _ in range(4):
            for n in (1, 2, 3):
                x = dj.ones(n, 3)
                np.testing.assert_allclose(c(x).numpy(), np.full(n, 6.0))
    assert len(c._cache) <= 2 and all(type(e) is not _replay._Entry or any(e.exe is v for v in c._cache.values())
                                      for e in c._replayer.entries.values())


def test_an_exception_in_a_recorded_call_propagates_and_leaves_state_alone():
    w = dj.ones(2, requires_grad=True)
    opt = dj.optim.SGD([w], lr=0.5)
    calls = {"n": 0}

    @dj.compile(replay=True)
    def step(x):
        calls["n"] += 1
        opt.zero_grad()
        loss = (x * w).sum()
        loss.backward()
        if calls["n"] == 2:
            raise ValueError("bad batch")
        opt.step()
        return loss
    step(dj.ones(2))
    with pytest.raises(ValueError, match="bad batch"):
        step(dj.ones(2))
    np.testing.assert_allclose(w.detach().numpy(), [0.5, 0.5])
    for _ in range(3):
        step(dj.ones(2))
    np.testing.assert_allclose(w.detach().numpy(), [-1.0, -1.0])
    assert step.stats.replayed == 2   # recorded: the first and the third (the failed one noted nothing)


def test_grads_zeroed_in_place_replay_like_eager():
    """``zero_grad(set_to_none=False)`` zeroes the grads in place, which the backward then adds into: replays
    read each parameter's grad where it is now, and give eager's losses, grads and state; recorded and replayed
    calls alike keep each grad the same tensor (a reference held to it sees every call's)."""
    def run(replay):
        dj.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        opt = dj.optim.Adam(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad(set_to_none=False)
            loss = m(x).pow(2).sum()
            loss.backward()
            opt.step()
            return loss
        f = dj.compile(step, replay=replay) if replay is not None else step
        losses, held = [], None
        for i in range(8):
            losses.append(float(f(dj.tensor(np.random.default_rng(i).standard_normal((4, 3)).astype(np.float32)))))
            held = held or [p.grad for p in m.parameters()]   # as gradient buckets hold them
        for g, p in zip(held, m.parameters()):   # the same tensors all along, as in eager and PyTorch
            assert g is p.grad
        return losses, m, opt, f
    (l0, m0, o0, _), (l1, m1, o1, f), (l2, m2, o2, _) = run(None), run(True), run(False)
    assert f.stats.replayed == 5
    np.testing.assert_allclose(l1, l0, rtol=2e-6)
    np.testing.assert_allclose(l2, l0, rtol=2e-6)
    _assert_same_state(m1, m0, o1, o0)
    _assert_same_state(m2, m0, o2, o0)


def test_freezing_a_layer_between_calls_is_seen():
    """``requires_grad_(False)`` on a layer mid-training (fine-tuning) changes the graph without touching
    the arguments: the next call is recorded again (no graph-change warning: the change was seen), and the
    frozen layer stays as eager leaves it."""
    data = _data(10)
    runs = []
    for mode in (None, True):
        step, model, opt, _ = _trainer(mode, sched=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for i, (x, y) in enumerate(data):
                if i == 5:
                    model[0].requires_grad_(False)
                step(x, y)
        runs.append((model, opt, step))
    (m0, _, _), (m1, _, step) = runs
    assert step.stats.replayed > 3
    for (n, p), (_, q) in zip(m1.state_dict().items(), m0.state_dict().items()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=2e-6, atol=2e-7, err_msg=n)


def test_replays_write_the_calls_own_arguments_views_and_returned_grads_as_eager():
    """What a replay writes reaches the tensors eager's step would have written: an argument the step changes
    in place is the replayed call's own (not the recording's), views and ``.data``/``detach()`` aliases of a
    parameter follow its update (a new version), and a grad the step returns is the parameter's ``.grad``."""
    def run(replay):
        dj.manual_seed(0)
        m = nn.Linear(3, 2)
        opt = dj.optim.SGD(m.parameters(), lr=0.1)

        def step(x, scale):
            x.mul_(scale)   # the caller's tensor, changed in place
            opt.zero_grad()
            loss = m(x).pow(2).sum()
            loss.backward()
            opt.step()
            return loss, m.weight.grad
        f = dj.compile(step, replay=True) if replay else step
        seen, refs = [], []
        for i in range(6):
            if i == 3:
                aliases = (m.weight.detach(), m.weight.data, m.weight[0])
            x = dj.full((2, 3), float(i + 1))
            refs.append(weakref.ref(x))
            loss, g = f(x, 0.5)
            assert g is m.weight.grad
            seen.append((x.numpy(), float(loss), g.detach().numpy()))
        seen.append(tuple(a.detach().numpy() for a in aliases) + (m.weight.detach().numpy(),))
        del x
        gc.collect()
        assert [r() for r in refs] == [None] * 6   # the replay keeps no argument of the calls it recorded
        return seen, f
    (eager, _), (got, f) = run(False), run(True)
    assert f.stats.replayed == 4
    for e, g in zip(eager, got):
        for a, b in zip(e, g):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    det, data, row, w = got[-1]
    np.testing.assert_array_equal(det, w)
    np.testing.assert_array_equal(data, w)
    np.testing.assert_array_equal(row, w[0])


def test_results_returned_as_views_keep_their_values_through_later_replays():
    """A step returning views of tensors it made (``out[0]``, ``loss.detach()``): every call's results, the
    recorded ones included, keep their values while later calls replay -- the views' bases live on only through
    those results, and a replay writes nothing into them."""
    def run(replay):
        dj.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        opt = dj.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            out = m(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return out[0], loss.detach()
        f = dj.compile(step, replay=True) if replay else step
        x, y = dj.tensor(np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 6)), dj.tensor(np.arange(5) % 3)
        kept = [f(x, y) for _ in range(6)]
        return [[t.detach().numpy() for t in r] for r in kept], f
    (want, _), (got, f) = run(False), run(True)
    assert f.stats.replayed == 3   # (the first call makes the momentum buffers: two more recordings agree)
    for w, g in zip(want, got):
        for a, b in zip(w, g):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def _coef_step(replay):
    dj.manual_seed(0)
    model = nn.Linear(12, 4)
    opt = dj.optim.SGD(model.parameters(), lr=0.1)
    coef = {"v": 1.0, "branch": False}

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y) * coef["v"]
        if coef["branch"]:
            loss = loss + model.weight.abs().sum((0, 1)) * 0.01
        loss.backward()
        opt.step()
        return loss
    return dj.compile(step, replay=replay), coef


@pytest.mark.parametrize("what", ["number", "branch"])
def test_a_replay_check_warns_naming_a_changed_number_or_branch_then_records_again(what):
    """replay=5: the 5th call of a guard is a recorded check. A Python number (or branch) that changed since the
    replays started is named in the warning, and the calls after the check are recorded until two agree."""
    step, coef = _coef_step(5)
    (x, y), = _data(1, classes=4)
    for _ in range(3):
        step(x, y)
    assert step.stats.replayed == 1
    if what == "number":
        coef["v"] = 0.5
    else:
        coef["branch"] = True
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(4):   # replayed (stale, as replay=True's contract says), then the check
            step(x, y)
    msgs = [str(m.message) for m in w if issubclass(m.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    if what == "number":
        assert "Python number passed to mul changed: 1.0 -> 0.5" in msgs[0], msgs[0]
    else:
        assert "graph changed" in msgs[0] or "graph length changed" in msgs[0], msgs[0]
    replayed = step.stats.replayed
    step(x, y)   # recorded again: the check's recording alone does not make an entry
    assert step.stats.replayed == replayed


def test_a_replayed_state_tensor_given_another_shape_is_recorded():
    dj.manual_seed(0)
    w = dj.randn(12, 4)

    @dj.compile(replay=True)
    def step(x):
        return (x @ w).sum((0, 1))
    x = dj.randn(3, 12)
    for _ in range(4):
        step(x)
    assert step.stats.replayed == 2
    w._value = dj.randn(12, 5)._value   # (no epoch bump: a raw rebind of the array)
    got = step(x)
    np.testing.assert_allclose(float(got), float((x @ w).sum((0, 1))), rtol=1e-5)
    assert step.stats.replayed == 2


@pytest.mark.parametrize("mode", [True, "default"])
def test_replayed_calls_leave_arguments_they_only_read_unversioned(mode):
    """A replayed call wrote each argument's own array back into it, bumping its version: a graph outside the
    step that saved the argument then refused its backward ('modified by an inplace operation')."""
    dj.manual_seed(0)
    m = nn.Linear(4, 2)
    step = train_step(m, dj.optim.SGD(m.parameters(), lr=0.1), F.cross_entropy)
    step = dj.compile(step, replay=True) if mode is True else dj.compile(step)
    x, y = dj.randn(3, 4, requires_grad=False), dj.tensor([0, 1, 1])
    w = dj.ones(3, 4, requires_grad=True)
    outside = (w * x).sum()             # saves x for its backward
    for _ in range(5):
        step(x, y)
    assert step.stats.replayed >= 2
    assert (x._version, y._version) == (0, 0)
    outside.backward()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy())
