"""Index bounds inside compiled steps (``dynajax.compile(check_indices=True)``, ``compile.checks``): an index
computed on the device and out of range makes the step change nothing, and the op's eager error (PyTorch's
exception type and message) is raised at the next host read or at a later compiled call; good steps are
unaffected; ``check_indices=False`` checks nothing (JAX clamps)."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax import _deferred

from helpers import train_step

MODES = [{}, {"replay": True}]
MODE_IDS = ["default", "replay"]


@pytest.fixture(autouse=True)
def _no_pending():
    """No report left pending from one test to the next (a test that expects no error reads its results)."""
    _deferred.clear()
    yield
    _deferred.clear()


@pytest.fixture(params=["select", "cond"])
def gate(request, monkeypatch):
    """Both ways a checked step keeps its updates from a bad step: selects (small state) and one cond."""
    import importlib
    checks = importlib.import_module("dynajax.compile.checks")
    monkeypatch.setattr(checks, "COND_FROM", 0 if request.param == "cond" else 1 << 40)
    return request.param


def _snapshot(*tensors):
    return [np.array(t.detach().numpy()) for t in tensors]


def _same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


# ------------------------------------------------------------------ the probes
@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_getitem_of_an_index_computed_in_the_step(kw):
    x = dj.arange(5.0)
    f = dj.compile(lambda x, i: x[i + 0], **kw)
    for _ in range(3):   # (replay: the third call runs the recorded executable)
        np.testing.assert_array_equal(f(x, dj.tensor([1, 3])).numpy(), [1.0, 3.0])
    out = f(x, dj.tensor([2, 10]))
    if kw:
        assert f.stats.replayed >= 1
    with pytest.raises(IndexError, match=r"index 10 is out of bounds for dimension 0 with size 5.*'index'.*"
                                         r"test_compile_index_checks.py:\d+ \(f = dj.compile"):
        out.numpy()
    # raised once; the next good call runs as usual
    np.testing.assert_array_equal(f(x, dj.tensor([4])).numpy(), [4.0])


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_replayed_call_checks_the_indices_passed_in(kw):
    """An argument's indices in host memory are read at the call: a recorded call raises at once, and a
    replayed call, which runs no Python, runs the recording's check on its own arrays before its executable,
    so it raises at the call too, having run nothing. The executable has no check of them."""
    x = dj.arange(5.0)
    f = dj.compile(lambda x, i: x[i], **kw)
    with pytest.raises(IndexError, match="index 5 is out of bounds"):   # recorded: raised at the call
        f(x, dj.tensor([5]))
    for k in range(4):
        np.testing.assert_array_equal(f(x, dj.tensor([0, k])).numpy(), [0.0, float(k)])
    replayed = f.stats.replayed
    assert replayed >= 1
    with pytest.raises(IndexError, match="index -6 is out of bounds for dimension 0 with size 5"):
        f(x, dj.tensor([1, -6]))
    assert not _deferred.PENDING and f.stats.replayed == replayed
    np.testing.assert_array_equal(f(x, dj.tensor([4, -5])).numpy(), [4.0, 0.0])
    assert f.stats.replayed == replayed + 1
    unchecked = dj.compile(lambda x, i: x[i], check_indices=False)
    unchecked(x, dj.tensor([1]))
    assert f.stats.recorded_ops == unchecked.stats.recorded_ops


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_token_and_reshaped_target_arguments_are_checked_on_the_host(kw):
    """An LM step's tokens (embedding) and targets (cross-entropy, reshaped in the step) are arguments: read at
    each call, recorded or replayed, so its executable is the unchecked one's; a bad one raises PyTorch's
    error at that call and changes nothing; training matches eager before and after."""
    def loss_fn(out, y):
        return F.cross_entropy(out.reshape(-1, 4), y.reshape(-1))
    model, opt = _lm()
    ref_model, ref_opt = _lm()
    f = dj.compile(train_step(model, opt, loss_fn), **kw)
    ref = train_step(ref_model, ref_opt, loss_fn)
    idx = dj.tensor([[1, 2], [3, 9]])
    targets = [[[0, 1], [2, 3]], [[3, 2], [1, 0]], [[1, 1], [2, 2]], [[0, 0], [3, 3]], [[2, 0], [1, 3]]]
    for t in targets[:4]:
        np.testing.assert_allclose(f(idx, dj.tensor(t)).item(), ref(idx, dj.tensor(t)).item(), rtol=1e-6)
    replayed = f.stats.replayed
    assert replayed >= 1
    unchecked_model, unchecked_opt = _lm()
    unchecked = dj.compile(train_step(unchecked_model, unchecked_opt, loss_fn), check_indices=False)
    unchecked(idx, dj.tensor(targets[0]))
    assert f.stats.recorded_ops == unchecked.stats.recorded_ops
    before = _state(model, opt)
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        f(idx, dj.tensor([[0, 1], [4, 3]]))
    with pytest.raises(IndexError, match="index out of range in self"):
        f(dj.tensor([[1, 2], [3, 10]]), dj.tensor(targets[0]))
    assert f.stats.replayed == replayed and not _deferred.PENDING
    assert _same(_state(model, opt), before)
    np.testing.assert_allclose(f(idx, dj.tensor(targets[4])).item(), ref(idx, dj.tensor(targets[4])).item(),
                               rtol=1e-6)
    for a, b in zip(_state(model, opt), _state(ref_model, ref_opt)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_setitem_of_a_bad_index_changes_nothing(kw):
    buf = dj.zeros(5)

    @dj.compile(**kw)
    def put(i):
        buf[i * 1] = 100.0
        return buf.sum()

    for k in range(3):
        put(dj.tensor([k]))
    before = _snapshot(buf)
    np.testing.assert_array_equal(before[0], [100, 100, 100, 0, 0])
    loss = put(dj.tensor([10]))
    with pytest.raises(IndexError, match="index 10 is out of bounds for dimension 0 with size 5"):
        loss.item()
    assert _same(_snapshot(buf), before)


def _lm(classes=4):
    dj.manual_seed(0)
    emb, head = nn.Embedding(10, 6), nn.Linear(6, classes)
    model = nn.Sequential(emb, head)
    return model, dj.optim.Adam(model.parameters(), lr=0.05)


def _state(model, opt):
    """Every tensor of a model and its optimizer (parameters, grads, Adam's moments and step counts)."""
    ts = list(model.parameters()) + [p.grad for p in model.parameters()]
    ts += [v for s in opt.state.values() for v in s.values() if isinstance(v, dj.Tensor)]
    return _snapshot(*ts)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("bad", ["embedding", "target"])
def test_a_bad_training_step_leaves_parameters_grads_and_optimizer_state_as_before(kw, bad, gate):
    model, opt = _lm()

    def step(idx, t, shift, tshift):
        opt.zero_grad()
        loss = F.cross_entropy(model(idx + shift).reshape(-1, 4), t - tshift)
        loss.backward()
        opt.step()
        return loss

    f = dj.compile(step, **kw)
    idx, t = dj.tensor([[1, 2], [3, 9]]), dj.tensor([1, 2, 3, 4])
    one = dj.tensor(1)
    for _ in range(3):
        f(idx, t, dj.tensor(0), one).item()
    before, grads = _state(model, opt), [p.grad for p in model.parameters()]
    if bad == "embedding":   # 9 + 5 on 10 rows
        loss = f(idx, t, dj.tensor(5), one)
        err, msg = IndexError, "index out of range in self.*'embedding'"
    else:   # class 4 - 0 of 4
        loss = f(idx, t, dj.tensor(0), dj.tensor(0))
        err, msg = IndexError, r"Target 4 is out of bounds.*'nll_loss'"
    with pytest.raises(err, match=msg):
        loss.item()
    assert _same(_state(model, opt), before)
    assert all(g is p.grad for g, p in zip(grads, model.parameters()))
    # and training goes on from there as if the bad step had never run
    ref_model, ref_opt = _lm()
    ref = train_step(ref_model, ref_opt, lambda out, y: F.cross_entropy(out.reshape(-1, 4), y))
    for _ in range(3):
        ref(idx, t - 1)
    # (to float rounding: the compiled update, fused with its gate's select, may round an ulp away from eager's)
    for a, b in zip(_state(ref_model, ref_opt), before):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(f(idx, t, dj.tensor(0), one).item(), ref(idx, t - 1).item(), rtol=1e-6)
    for a, b in zip(_state(model, opt), _state(ref_model, ref_opt)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _bn_mlp():
    dj.manual_seed(0)
    # (no bias before the BatchNorm: its grad is rounding noise, which Adam scales up to the learning rate)
    model = nn.Sequential(nn.Linear(5, 8, bias=False), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    return model, dj.optim.Adam(model.parameters(), lr=0.05)


def _bn_state(model, opt):
    return _state(model, opt) + _snapshot(*model.buffers())


def test_updates_selected_where_made_keep_a_bad_step_from_changing_anything(gate):
    """The selects of a small step's gated state (``compile.checks._select_where_made``) go into the eqns
    making the new values (the fused Adam update reads its moments selected), except for BatchNorm's
    running statistics, updated in the forward before the loss's target check (they keep the gate at the
    end), and a value the step also returns as it is: training matches eager, and a bad target changes
    nothing, buffers included."""
    from dynajax.compile import checks

    made = []
    real = checks._select_where_made

    def spy(*a, **k):
        out = real(*a, **k)
        made.append(out)
        return out
    x = dj.tensor(np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32))
    model, opt = _bn_mlp()
    ref_model, ref_opt = _bn_mlp()
    w = model[3].weight

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y * 1)   # (a target computed in the step: checked on the device)
        loss.backward()
        opt.step()
        return loss, w.detach()   # (the updated weight, returned as the update made it)

    ref = train_step(ref_model, ref_opt, F.cross_entropy)
    f = dj.compile(step)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "_select_where_made", spy)
        for t in ([0, 1, 2, 3, 0, 1], [3, 3, 2, 1, 0, 0], [1, 2, 3, 0, 1, 2]):
            loss, wd = f(x, dj.tensor(t))
            np.testing.assert_allclose(loss.item(), ref(x, dj.tensor(t)).item(), rtol=1e-5)
            np.testing.assert_allclose(wd.numpy(), ref_model[3].weight.detach().numpy(), rtol=1e-5, atol=1e-7)
    for a, b in zip(_bn_state(model, opt), _bn_state(ref_model, ref_opt)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if gate == "select":
        kinds = [e[0] for e in made[0]]
        assert checks._gated_eqn in kinds and checks._gate in kinds   # (both ways, in one step)
    else:
        assert not made
    before = _bn_state(model, opt)
    loss, _ = f(x, dj.tensor([0, 1, 4, 3, 0, 1]))
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        loss.item()
    assert _same(_bn_state(model, opt), before)


@pytest.mark.parametrize("poison", [0, 1])
def test_an_eqn_gated_where_it_makes_its_values(poison):
    """``checks._gated_eqn``: the outputs it gates are the new values where the poison is clear, each one's own
    old value where it is set (one array returned at two gated positions, an input returned as it is, a
    constant); the others are what the function computes, reading the gated values."""
    import jax
    import jax.numpy as jnp
    from dynajax.compile import checks

    def fn(a, b, scale):
        m = a * scale
        return m, m, b, m + 1, jnp.float32(2)
    a, b = jnp.arange(3, dtype=jnp.float32), jnp.full(3, 7.0, jnp.float32)
    olds = [jnp.full(3, -1.0), jnp.full(3, -2.0), jnp.full(3, -3.0), jnp.float32(-4)]
    out = jax.jit(lambda *v: checks._gated_eqn(*v, fn=fn, params={}, nref=3, which=(0, 1, 2, 4)))(
        a, b, 3.0, jnp.int32(poison), *olds)
    m = np.asarray(a) * 3
    want = [m, m, np.asarray(b), m + 1, 2.0] if poison == 0 else [-1.0, -2.0, -3.0, olds[0] + 1, -4.0]
    assert len(out) == 5
    for got, w in zip(out, want):
        np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(np.asarray(w), np.shape(got)))


def test_ignore_index_is_no_out_of_range_target():
    model, opt = _lm()
    f = dj.compile(train_step(model, opt, lambda out, y: F.cross_entropy(out.reshape(-1, 4), y, ignore_index=-7)))
    idx = dj.tensor([[1, 2], [3, 4]])
    ref_model, ref_opt = _lm()
    ref = train_step(ref_model, ref_opt, lambda out, y: F.cross_entropy(out.reshape(-1, 4), y, ignore_index=-7))
    for t in ([0, -7, 3, 1], [-7, 2, 2, 0], [1, 1, -7, -7]):
        np.testing.assert_allclose(f(idx, dj.tensor(t)).item(), ref(idx, dj.tensor(t)).item(), rtol=1e-6)
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        f(idx, dj.tensor([0, -7, -1, 1])).item()


def test_later_compiled_calls_change_nothing_and_one_of_them_raises(gate):
    """Without a host read, the error surfaces at a later compiled call, at most ``_deferred.READ_EVERY``
    calls on, once the reports are computed (that call waits for no step; it reads one flag for all of
    them); every call from the bad one on changes nothing."""
    w = dj.ones(6, requires_grad=True)
    opt = dj.optim.SGD([w], lr=0.1)

    @dj.compile
    def step(i):
        opt.zero_grad()
        loss = (w[i + 0] ** 2).sum()   # (computed in the step: checked on the device)
        loss.backward()
        opt.step()
        return loss

    step(dj.tensor([0, 1])).item()
    before = _snapshot(w, w.grad)
    for good in range(2 * _deferred.READ_EVERY):   # good calls read no device array until READ_EVERY are pending
        step(dj.tensor([good % 6]))._value.block_until_ready()
        assert len(_deferred.PENDING) == 1 + good % _deferred.READ_EVERY
    step(dj.tensor([0, 1])).item()
    _deferred.surface()
    before = _snapshot(w, w.grad)
    out = step(dj.tensor([1, 6]))
    out._value.block_until_ready()   # (its report computed)
    calls = 0
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 0 with size 6"):
        for calls in range(1, _deferred.READ_EVERY + 1):   # (the bad call's report among them, not the newest)
            step(dj.tensor([2]))._value.block_until_ready()   # (no host read in between: that would raise)
    assert calls == _deferred.READ_EVERY and not _deferred.PENDING   # (16 pending as the 16th call starts)
    assert _same(_snapshot(w, w.grad), before)
    # a bad call, then a good one without a read in between: the error is raised once, at that call (if the
    # report is computed by then) or at the read, and neither call changed anything
    raised = []
    for i in ([7], [2, 3]):
        try:
            step(dj.tensor(i))
        except IndexError as exc:
            raised.append(str(exc))
    try:
        print(w)
    except IndexError as exc:
        raised.append(str(exc))
    assert len(raised) == 1 and "index 7 is out of bounds" in raised[0]
    assert _same(_snapshot(w, w.grad), before)
    step(dj.tensor([2, 3])).item()
    np.testing.assert_allclose(w.detach().numpy(), before[0] * [1, 1, 0.8, 0.8, 1, 1], rtol=1e-6)   # SGD on w^2


def test_pending_reports_keep_a_bounded_amount_of_replaced_grads_alive(monkeypatch):
    """Each pending report keeps the ``.grad`` tensors its call replaced (its undo): past ``HOLD_BYTES`` of
    them a compiled call reads the reports, so a large model does not keep ``READ_EVERY`` sets of gradients
    alive; an error still surfaces at a later call with every tensor as it was before the bad call."""
    monkeypatch.setattr(_deferred, "HOLD_BYTES", 3 * 4 * 64 * 64)   # three 64x64 float32 grads' worth
    w = dj.ones(64, 64, requires_grad=True)
    opt = dj.optim.SGD([w], lr=0.1)

    @dj.compile
    def step(i):
        opt.zero_grad()
        loss = (w[i + 0] ** 2).sum()
        loss.backward()
        opt.step()
        return loss

    step(dj.tensor([0, 1])).item()
    most = 0
    for good in range(2 * _deferred.READ_EVERY):
        step(dj.tensor([good % 64]))._value.block_until_ready()
        most = max(most, len(_deferred.PENDING))
        assert _deferred.HELD[0] == sum(p.held for p in _deferred.PENDING)
    assert step.stats.replayed > _deferred.READ_EVERY
    assert most == 4   # (read at the call after the fourth: 4 grads of 16 KiB > 48 KiB)
    _deferred.surface()
    before = _snapshot(w, w.grad)
    step(dj.tensor([1, 64]))._value.block_until_ready()
    with pytest.raises(IndexError, match="index 64 is out of bounds for dimension 0 with size 64"):
        for _ in range(4):
            step(dj.tensor([2]))._value.block_until_ready()
    assert not _deferred.PENDING and _deferred.HELD[0] == 0
    assert _same(_snapshot(w, w.grad), before)


# ------------------------------------------------------------------ every checked op, against torch
def _ops():
    """name -> (fn(lib, x, i) of a float state tensor x (5, 4) and an int64 index tensor i computed in the step,
    a good i, a bad i)."""
    gi, bi = [[0, 4], [2, 1]], [[0, 5], [2, 1]]
    return {
        "getitem": (lambda lib, x, i: x[i], [1, 4], [1, 5]),
        "getitem_negative": (lambda lib, x, i: x[:, i], [-4, 3], [-5, 0]),
        "index_put": (lambda lib, x, i: x.index_put((i,), lib.ones(2, 4)), [0, 4], [0, 5]),
        "index_put_acc": (lambda lib, x, i: x.index_put((i,), lib.ones(2, 4), accumulate=True), [0, 4], [-6, 0]),
        "index_select": (lambda lib, x, i: lib.index_select(x, 0, i), [0, 4], [0, 5]),
        "index_add": (lambda lib, x, i: x.index_add(0, i, lib.ones(2, 4)), [0, 4], [0, 5]),
        "index_copy": (lambda lib, x, i: x.index_copy(0, i, lib.ones(2, 4)), [0, 4], [0, 5]),
        "index_fill": (lambda lib, x, i: x.index_fill(1, i, 2.0), [0, 3], [0, 4]),
        "gather": (lambda lib, x, i: lib.gather(x, 0, i), gi, bi),
        "scatter": (lambda lib, x, i: x.scatter(0, i, lib.ones(2, 2)), gi, bi),
        "scatter_add": (lambda lib, x, i: x.scatter_add(0, i, lib.ones(2, 2)), gi, bi),
        "take": (lambda lib, x, i: lib.take(x, i), [0, 19], [0, 20]),
        # (torch 2.13's CPU take_along_dim reads out of bounds unchecked: dynajax raises gather's error)
        "take_along_dim": (lambda lib, x, i: lib.take_along_dim(x, i, 0) if lib is dj else lib.gather(x, 0, i),
                           [[0, 4, 1, 2], [1, 0, 3, 3]], [[0, 4, 1, 2], [5, 0, 3, 3]]),
        "embedding": (lambda lib, x, i: lib.nn.functional.embedding(i, x), [0, 4], [0, 5]),
        "one_hot": (lambda lib, x, i: x[:2, :1] * lib.nn.functional.one_hot(i, 5), [0, 4], [0, 5]),
    }


def _torch_error(fn, i):
    lib = torch
    x = torch.arange(20.0).reshape(5, 4)
    try:
        fn(lib, x, torch.tensor(i))
    except Exception as exc:   # noqa: BLE001 - the type is what is compared
        return type(exc), str(exc)
    return None, None


@pytest.mark.parametrize("name", list(_ops()))
def test_each_checked_op_raises_torchs_exception_and_changes_nothing(name):
    fn, good, bad = _ops()[name]
    want, msg = _torch_error(fn, bad)
    assert want is not None
    x = dj.arange(20.0).reshape(5, 4)
    acc = dj.zeros(())

    @dj.compile
    def step(i, k):
        out = fn(dj, x, i + k)
        acc.add_(out.sum())
        return out

    zero = dj.tensor(0)
    got = step(dj.tensor(good), zero)
    np.testing.assert_allclose(got.numpy(), fn(torch, torch.arange(20.0).reshape(5, 4), torch.tensor(good)).numpy())
    before = _snapshot(acc)
    out = step(dj.tensor(bad), zero)
    with pytest.raises(want) as info:
        out.numpy()
    # the eager message (PyTorch's) first, then where the compiled step checked it
    try:
        fn(dj, dj.arange(20.0).reshape(5, 4), dj.tensor(bad))
    except want as exc:
        assert str(info.value).startswith(str(exc)), (str(info.value), str(exc))
    assert "dynajax.compile: checked on the device" in str(info.value)
    assert _same(_snapshot(acc), before)


# ------------------------------------------------------------------ no check
def test_check_indices_false_checks_nothing():
    x = dj.arange(5.0)
    f = dj.compile(lambda x, i: x[i + 0], check_indices=False)
    np.testing.assert_array_equal(f(x, dj.tensor([1, 3])).numpy(), [1.0, 3.0])
    out = f(x, dj.tensor([10]))
    assert not _deferred.PENDING
    np.testing.assert_array_equal(out.numpy(), [4.0])   # JAX's clamp, unchecked
    # and its executable has none of the checks' ops
    checked = dj.compile(lambda x, i: x[i + 0])
    checked(x, dj.tensor([1]))
    assert f.stats.recorded_ops < checked.stats.recorded_ops


def test_an_unchecked_step_waits_for_a_pending_report():
    """A compiled step with no checks of its own does not run on a bad step's results: it reads the pending
    report first."""
    x = dj.arange(5.0)
    bad = dj.compile(lambda x, i: x[i + 0])
    plain = dj.compile(lambda x: x * 2)
    out = bad(x, dj.tensor([7]))
    with pytest.raises(IndexError, match="index 7"):
        plain(x)
    np.testing.assert_array_equal(plain(x).numpy(), [0, 2, 4, 6, 8])
    del out
