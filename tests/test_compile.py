"""dynajax.compile: compiled training steps equal eager ones (losses, params, grads, optimizer and RNG state)."""
import copy
import warnings

import jax
import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax import optim
from dynajax.ops.registry import apply, op
from helpers import train_step, xla_compiles

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 8)


def _mlp():
    dj.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _train(model, make_opt, loss_fn, y, compiled: bool, steps: int = 10, **kw):
    opt = make_opt(model.parameters())
    step = train_step(model, opt, loss_fn)
    if compiled:
        step = dj.compile(step, **kw)
    x = dj.tensor(X)
    losses = [step(x, y).item() for _ in range(steps)]
    return losses, [p.detach().numpy() for p in model.parameters()], step


def _assert_same(a, b, rtol=1e-5, atol=1e-6):
    (la, pa), (lb, pb) = a[:2], b[:2]
    np.testing.assert_allclose(la, lb, rtol=rtol, atol=atol)
    for u, v in zip(pa, pb):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


@pytest.mark.parametrize("make_opt, loss", [
    (lambda ps: optim.Adam(ps, lr=0.01), "ce"),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), "mse"),
])
def test_mlp_training_matches_eager(make_opt, loss):
    if loss == "ce":
        loss_fn, y = F.cross_entropy, dj.tensor(Y)
    else:
        loss_fn, y = F.mse_loss, dj.tensor(np.eye(3, dtype=np.float32)[Y])
    eager = _train(_mlp(), make_opt, loss_fn, y, compiled=False)
    comp = _train(_mlp(), make_opt, loss_fn, y, compiled=True)
    _assert_same(eager, comp)
    st = comp[2].stats
    # the first step is the program of every later one: Adam's moments and SGD's momentum buffers start
    # from zeros made before it
    assert st.calls == 10 and st.compiles == 1 and st.cache_hits == 9
    assert eager[0][-1] < eager[0][0]


def test_a_cache_hit_compiles_nothing():
    # the first call's parameters are fresh arrays with no device pinned, later calls' are executable
    # outputs (pinned); with data pinned to a device too (device=), jax.jit alone would compile the
    # same executable again on the second call
    model = _mlp()
    opt = optim.Adam(model.parameters(), lr=0.01)
    step = dj.compile(train_step(model, opt, F.cross_entropy))
    step(dj.tensor(X, device="cpu"), dj.tensor(Y)).item()
    n = xla_compiles()
    for _ in range(3):
        step(dj.tensor(X, device="cpu"), dj.tensor(Y)).item()
    assert xla_compiles() == n and step.stats.compiles == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_is_paused_during_a_call_and_restored_after(enabled):
    """The cyclic GC is off while a compiled step runs (capture allocates many short-lived objects) and
    back in the caller's state afterwards: after a normal call, after a step that raises, and left off
    when the caller had turned it off."""
    import gc
    seen = []
    w = dj.ones(3, requires_grad=True)

    def step(x, fail=False):
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("boom")
        return (x * w).sum()
    f = dj.compile(step)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        assert f(dj.ones(3)).item() == 3.0
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError, match="boom"):
            f(dj.ones(3), fail=True)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen and not any(seen)


def _square_loss_step(m, o, x):
    """A training step of model ``m`` with optimizer ``o`` on the mean squared output."""
    o.zero_grad()
    loss = (m(x) ** 2).mean()
    loss.backward()
    o.step()
    return loss


@pytest.mark.parametrize("speculate", [None, True])
def test_a_compiled_step_leaves_no_reference_cycles(speculate):
    """Everything a call allocates (the capture, its backward's node table, Nodes, Tensors, arrays, a
    speculative run's prediction) dies by reference counting when the call returns: no cyclic garbage is
    left for the GC, which would otherwise hold the step's arrays until a collection and pay for it (a
    collection per few steps)."""
    import gc
    model = _mlp()
    opt = optim.Adam(model.parameters(), lr=0.01)
    c = dj.compile(_square_loss_step, speculate=speculate)
    x = dj.tensor(X)
    c(model, opt, x).item()
    c(model, opt, x).item()
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        losses = [c(model, opt, x).item() for _ in range(3)]
        found = gc.collect()
        kinds = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable() if was else gc.disable()
    assert losses[2] < losses[0]
    assert found == 0, f"{found} objects in reference cycles after 3 compiled steps: {kinds}"
    assert c.stats.speculated == (3 if speculate else 0)


def test_grads_and_optimizer_state_written_back():
    model, model2 = _mlp(), _mlp()
    opt, opt2 = optim.Adam(model.parameters(), lr=0.01), optim.Adam(model2.parameters(), lr=0.01)
    c = dj.compile(_square_loss_step)
    x = dj.tensor(X)
    for _ in range(3):
        _square_loss_step(model, opt, x)
        c(model2, opt2, x)
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
        s, t = opt.state[p], opt2.state[q]
        for k in s:
            np.testing.assert_allclose(np.asarray(s[k]), np.asarray(t[k]), rtol=1e-5, atol=1e-6)
    # Adam creates its state from fresh zeros: the first step's graph is the same as the later ones
    assert c.stats.compiles == 1 and c.stats.graph_breaks == 0  # the step count is tracked on the host


@pytest.mark.parametrize("replay", [False, True])
def test_state_and_the_rng_key_are_donated_not_copied(monkeypatch, replay):
    """Parameters, optimizer state and the generator's key reach the executable as they are: nothing
    but the step holds them, so none is copied before being donated (a copy is for an array something
    else still holds, which donating would delete). The same on replayed calls (``replay=True``)."""
    import importlib
    compile_module = importlib.import_module("dynajax.compile")
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    c = dj.compile(train_step(model, opt, F.cross_entropy), replay=replay)
    x, y = dj.tensor(X), dj.tensor(Y)
    copied = []

    class CountingJnp:
        def __getattr__(self, name):
            return getattr(jax.numpy, name)

        def copy(self, a):
            copied.append(a.shape)
            return jax.numpy.copy(a)
    monkeypatch.setattr(compile_module, "jnp", CountingJnp())
    for _ in range(5):
        c(x, y)
    assert copied == [] and c.stats.replayed == 2   # the default mode replays too, once guarded (guards.py)
    held = model[0].weight._value   # now something else holds a parameter's array: that one is copied
    c(x, y)
    assert copied == [held.shape] and not held.is_deleted()


def test_python_branch_on_argument_gives_two_entries():
    w = dj.tensor([1.0, -2.0, 3.0])

    @dj.compile
    def f(x, square: bool):
        return (x * w) ** 2 if square else (x * w).relu()
    x = dj.tensor([0.5, 1.0, -1.0])
    for sq in (True, False, True, False):
        want = (x * w) ** 2 if sq else (x * w).relu()
        np.testing.assert_allclose(f(x, sq).numpy(), want.numpy())
    assert f.stats.compiles == 2 and f.stats.cache_hits == 2
    assert "graph changed at op 1" in f.stats.recompile_reasons[0]


def test_item_inside_step_is_a_graph_break():
    model = _mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)

    @dj.compile
    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        scale = 2.0 if loss.item() > 1e9 else 0.5     # a Python branch on a tensor value
        (loss * scale).backward()
        opt.step()
        return loss, scale
    ref = copy.deepcopy(model)
    ropt = optim.SGD(ref.parameters(), lr=0.1)
    x = dj.tensor(X)
    for _ in range(3):
        loss, scale = step(x)
        ropt.zero_grad()
        rl = ref(x).pow(2).mean()
        (rl * 0.5).backward()
        ropt.step()
        assert scale == 0.5
        np.testing.assert_allclose(loss.item(), rl.item(), rtol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.stats.graph_breaks == 3 and step.stats.compiles == 1


def test_a_long_chain_read_mid_step_runs_as_one_executable_with_the_steps_numbers():
    """``.item()`` of a value 24 ops deep runs those ops as one cached executable (a graph break), passed the
    ops' Python numbers (as device arrays, as the step's executable takes them): values are eager's."""
    def step(x, a):
        h = x
        for i in range(12):
            h = h * a + 0.1 * i
        v = h.sum().item()
        return h * v, v
    x = dj.arange(3.0)
    comp = dj.compile(step)
    for a in (0.9, 0.8, 0.9):
        want_h, want_v = step(x, a)
        got_h, got_v = comp(x, a)
        np.testing.assert_allclose(got_v, want_v, rtol=1e-6)
        np.testing.assert_allclose(got_h.numpy(), want_h.numpy(), rtol=1e-6)
    assert comp.stats.graph_breaks == 3 and len(comp._prefix) == 1 and comp.stats.compiles == 1, comp.stats


def test_batch_size_change_recompiles_with_explanation():
    model = nn.Linear(6, 2)

    @dj.compile(recompile_limit=2, dynamic=False)   # (without dynamic=False the batch dim is padded)
    def f(x):
        return model(x).sum()
    f(dj.tensor(X))
    f(dj.tensor(X[:5]))
    assert f.stats.recompile_reasons == ["arg 'x' dim 0: 8 -> 5"]
    with pytest.warns(UserWarning, match="recompiled 2 times"):
        f(dj.tensor(X[:3]))
    np.testing.assert_allclose(f(dj.tensor(X[:3])).item(), model(dj.tensor(X[:3])).sum().item(), rtol=1e-5)


def test_cache_size_is_respected():
    @dj.compile(cache_size=2, dynamic=False)
    def f(x):
        return x.sum()
    for n in (1, 2, 3, 1):
        assert f(dj.ones(n)).item() == n
    assert f.stats.compiles == 4 and len(f._cache) == 2


def test_verify_passes_on_correct_step():
    model = _mlp()
    step = train_step(model, optim.Adam(model.parameters(), lr=0.01), F.cross_entropy)
    c = dj.compile(step, verify=True)
    ref = _train(_mlp(), lambda ps: optim.Adam(ps, lr=0.01), F.cross_entropy, dj.tensor(Y), False, steps=3)
    losses = [c(dj.tensor(X), dj.tensor(Y)).item() for _ in range(3)]
    np.testing.assert_allclose(losses, ref[0], rtol=1e-5)
    assert c.stats.compiles == 1 and c.stats.cache_hits == 2


_calls = {"n": 0}


@op("test_impure_scale")
def _impure_scale(x):
    _calls["n"] += 1          # deliberately impure: the constant depends on how often the impl is traced
    return x * float(_calls["n"])


_impure_scale.defvjp(lambda g, out, x: (g,))


def test_verify_catches_a_mismatch_and_restores_state():
    w = nn.Parameter(dj.ones(3))

    @dj.compile(verify=True)
    def step(x):
        y = apply(_impure_scale, x * w).sum()
        y.backward()
        with dj.no_grad():
            w.sub_(w.grad)
        return y
    before = w.detach().numpy().copy()
    with pytest.raises(RuntimeError, match="disagree on"):
        step(dj.ones(3))
    np.testing.assert_array_equal(w.detach().numpy(), before)
    assert w.grad is None


def test_dropout_rng_and_batchnorm_stats_advance_like_eager():
    def make():
        dj.manual_seed(1)
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    y = dj.tensor(Y)
    dj.manual_seed(5)
    eager_model = make()
    eager = _train(eager_model, lambda ps: optim.SGD(ps, lr=0.1), F.cross_entropy, y, False, steps=4)
    key_after = np.asarray(dj.random.default_generator._key)
    comp_model = make()
    dj.manual_seed(5)
    comp_model = make()
    comp = _train(comp_model, lambda ps: optim.SGD(ps, lr=0.1), F.cross_entropy, y, True, steps=4)
    _assert_same(eager, comp)
    np.testing.assert_array_equal(np.asarray(dj.random.default_generator._key), key_after)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(eager_model[1], name).numpy(), getattr(comp_model[1], name).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_outer_tensor_mutation_is_functionalized():
    counter = dj.zeros(())
    acc = dj.zeros(3)

    @dj.compile
    def f(x):
        counter.add_(1)
        acc[1:].add_(x[1:])          # a write through a view into a tensor created outside
        return x.sum()
    for _ in range(3):
        f(dj.tensor([1.0, 2.0, 3.0]))
    assert counter.item() == 3
    np.testing.assert_allclose(acc.numpy(), [0.0, 6.0, 9.0])


def test_exception_in_step_propagates_without_state_change():
    w = dj.tensor([1.0, 2.0])

    @dj.compile
    def f(fail):
        w.mul_(2)
        if fail:
            raise KeyError("boom")
        return w.sum()
    assert f(False).item() == 6.0
    with pytest.raises(KeyError, match="boom"):
        f(True)
    np.testing.assert_allclose(w.numpy(), [2.0, 4.0])


def test_bad_return_value_names_its_path():
    @dj.compile
    def f(x):
        return {"loss": x.sum(), "extra": [object()]}
    with pytest.raises(TypeError, match=r"result\['extra'\]\[0\]"):
        f(dj.ones(2))


def test_print_inside_step(capsys):
    @dj.compile
    def f(x):
        y = x * 2
        print(y)
        return y
    f(dj.tensor([1.0, 2.0]))
    assert "tensor([2., 4.])" in capsys.readouterr().out
    assert f.stats.graph_breaks == 1


def _train_steps(make_model, make_opt, batches, loss_fn, compiled: bool, **kw):
    """Losses and final parameters (and buffers) of training on ``batches`` from seed 3."""
    dj.manual_seed(3)
    model = make_model()
    opt = make_opt(model.parameters())
    step = train_step(model, opt, loss_fn)
    if compiled:
        step = dj.compile(step, **kw)
    dj.manual_seed(4)   # the dropout stream starts at the same place in both runs
    losses = [step(dj.tensor(x), dj.tensor(y)).item() for x, y in batches]
    return losses, [t.detach().numpy() for t in list(model.parameters()) + list(model.buffers())], step


@pytest.mark.parametrize("kw", [{}, {"speculate": True}, {"replay": True}], ids=["default", "speculate", "replay"])
def test_cnn_with_batchnorm_and_dropout_20_steps_match_eager(kw):
    def make():
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
                             nn.Flatten(), nn.Linear(6 * 2 * 2, 5))
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal((6, 1, 8, 8)).astype(np.float32), rng.integers(0, 5, 6)) for _ in range(20)]
    def make_opt(ps):
        return optim.SGD(ps, lr=0.05, momentum=0.9)
    eager = _train_steps(make, make_opt, batches, F.cross_entropy, False)
    comp = _train_steps(make, make_opt, batches, F.cross_entropy, True, **kw)
    _assert_same(eager, comp, rtol=1e-4, atol=1e-5)
    assert comp[2].stats.compiles == 1 and comp[2].stats.graph_breaks == 0   # momentum buffers made before step 1
    # speculate=True: from the third call on, each call's results come from the run dispatched before its
    # capture (the RNG key, BatchNorm's in-place buffers and the momentum buffers found again each call);
    # replay=True: from the fourth on, calls run without the step's Python at all (the first read the
    # momentum buffers as arrays it made, the second from the tensors holding them: two recordings agree
    # from the second and third)
    assert comp[2].stats.speculated == (18 if "speculate" in kw else 0) and comp[2].stats.speculation_misses == 0
    # the default mode replays too (from the fourth call, as replay=True), once guards.py has seen two
    # recordings agree
    assert comp[2].stats.replayed == (0 if "speculate" in kw else 17)
    assert eager[0][-1] < eager[0][0]


def _lm_batches(seed: int, n: int, length: int) -> list:
    """``n`` (tokens, next tokens) batches of 4 sequences over 11 symbols, learnable: each token is the one
    before + 3 (mod 11)."""
    rng = np.random.default_rng(seed)
    seqs = [(rng.integers(0, 11, (4, 1)) + 3 * np.arange(length)) % 11 for _ in range(n)]
    return [(s[:, :-1], s[:, 1:]) for s in seqs]


def _lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1))


def _lm_adam(ps):
    return optim.Adam(ps, lr=0.02)


@pytest.mark.parametrize("kw", [{}, {"speculate": True}, {"replay": True}], ids=["default", "speculate", "replay"])
def test_lstm_language_model_20_steps_match_eager(kw):
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lstm, self.out = nn.Embedding(11, 6), nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 11)

        def forward(self, tokens):
            return self.out(self.lstm(self.emb(tokens))[0])
    batches = _lm_batches(8, 20, 7)
    eager = _train_steps(LM, _lm_adam, batches, _lm_loss, False)
    comp = _train_steps(LM, _lm_adam, batches, _lm_loss, True, **kw)
    _assert_same(eager, comp, rtol=1e-4, atol=1e-5)
    assert comp[2].stats.compiles == 1 and comp[2].stats.cache_hits == 19
    assert comp[2].stats.speculated == (18 if "speculate" in kw else 0)
    assert comp[2].stats.replayed == (0 if "speculate" in kw else 17)   # (as the CNN's)
    assert eager[0][-1] < eager[0][0]


class _CellLM(nn.Module):
    """A Python loop over a GRUCell whose first state is made as PyTorch code makes it:
    ``zeros(batch, hidden, device=tokens.device)``."""

    def __init__(self):
        super().__init__()
        self.emb, self.cell, self.out = nn.Embedding(11, 6), nn.GRUCell(6, 8), nn.Linear(8, 11)

    def forward(self, tokens):
        h, hs = dj.zeros(tokens.shape[0], 8, device=tokens.device), []
        for x in self.emb(tokens).unbind(1):
            h = self.cell(x, h)
            hs.append(h)
        return self.out(dj.stack(hs, 1))


def test_a_state_made_on_the_inputs_device_is_recorded_so_the_step_speculates():
    """``zeros(..., device=x.device)`` in a step is recorded like ``zeros(...)`` (made inside the executable),
    not made eagerly and passed in as a new array every call, which no speculative run could find again."""
    batches = _lm_batches(9, 8, 6)
    eager = _train_steps(_CellLM, _lm_adam, batches, _lm_loss, False)
    comp = _train_steps(_CellLM, _lm_adam, batches, _lm_loss, True, speculate=True)
    _assert_same(eager, comp, rtol=1e-4, atol=1e-5)
    st = comp[2].stats
    assert st.compiles == 1 and st.speculated == 6 and st.speculation_misses == 0, st
    # the executable's inputs: tokens, labels, parameters and Adam's state (one step array, which the 7 step
    # tensors share), not the (4, 8) first state (and no index-check flag: the tokens and labels, arguments in
    # host memory, are checked on the host)
    key, = comp[2]._cache
    assert [shape for shape, _ in key[0]].count((4, 8)) == 0 and len(key[0]) == 2 + 7 * 3 + 1


_MADE = {   # tensors made from Python values in a step, the PyTorch way: lib is dynajax or torch
    "zeros": lambda lib, d: lib.zeros(3, 4, device=d),
    "ones_dtype": lambda lib, d: lib.ones(2, 3, dtype=lib.float64, device=d),
    "full": lambda lib, d: lib.full((2, 3), 0.5, device=d),
    "arange_int": lambda lib, d: lib.arange(7, device=d),
    "arange_float": lambda lib, d: lib.arange(0.5, -1.0, -0.3, device=d),
    "arange_dtype": lambda lib, d: lib.arange(1, 10, 2, dtype=lib.float32),
    "eye": lambda lib, d: lib.eye(3, 5, device=d),
    "linspace": lambda lib, d: lib.linspace(-1, 2, 7, device=d),
    "logspace": lambda lib, d: lib.logspace(-1, 2, 5, base=2.0, device=d),
    "causal_mask": lambda lib, d: lib.triu(lib.ones(4, 4, device=d), diagonal=1).bool(),
}


@pytest.mark.parametrize("name", list(_MADE))
def test_tensors_made_from_python_values_in_a_step_are_recorded_and_equal_eagers(name):
    """zeros/ones/full/arange/eye/linspace/logspace made in a step (``device=x.device`` or none) are ops of the
    executable: their values are eager's and PyTorch's, and no made array is an input of the executable (one
    would be a new array every call, which no speculative run finds again)."""
    torch = pytest.importorskip("torch")
    make = _MADE[name]

    def step(x):
        return x.sum() + 0, make(dj, x.device).clone()   # (read by an op: an input if made eagerly)
    x = dj.ones(2)
    want = make(torch, "cpu").numpy()
    eager = step(x)[1].numpy()
    comp = dj.compile(step, speculate=True)
    got = [comp(x)[1].numpy() for _ in range(4)]
    for g in [eager] + got:
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
    key, = comp._cache
    assert len(key[0]) == 1 and comp.stats.speculated == 2   # the executable reads x alone


def test_a_steps_numbers_reach_its_executable_as_device_arrays_made_once_per_kind():
    """``Numbers``: an executable takes its Python numbers as device arrays made once per set of values (a jit
    call copies every Python number it is passed to the device: 0.2 ms a call for Adam's 7 on an H200), one
    array per kind (dtype and weak type), each read back inside it as the value jit makes of the number alone
    -- its dtype (a Python float weakly typed, a numpy scalar strongly), value and the sign of a zero, -0.0
    apart from 0.0."""
    from dynajax._device import number_layout
    from dynajax._dtype import x64
    nums = [0.1, -0.0, 3, True, np.float32(0.5), 0.0, 2.5, False, -7, 0.1]
    layout = number_layout(nums)
    assert [(np.dtype(d).name, w, n) for d, w, n in layout.kinds] == [
        ("float64", True, 5), ("int64", True, 2), ("bool", False, 2), ("float32", False, 1)]
    dev = jax.devices()[0]
    with x64():
        packed = layout.pack(nums, dev)
        got = jax.jit(layout.unpack)(packed)
        want = [jax.numpy.asarray(n) for n in nums]
    assert len(packed) == 4 and all(isinstance(a, jax.Array) for a in packed)
    assert layout.pack(nums, dev) is packed and number_layout(list(nums)) is layout
    for n, g, w in zip(nums, got, want):
        assert (g.dtype, g.weak_type) == (w.dtype, w.weak_type), n
        assert np.asarray(g) == n and np.signbit(np.asarray(g)) == np.signbit(n), n
    flipped = layout.pack([0.1, 0.0, 3, True, np.float32(0.5), -0.0, 2.5, False, -7, 0.1], dev)
    assert flipped is not packed and list(np.signbit(np.asarray(flipped[0]))) == [False, False, True, False, False]
    host = layout.pack(nums, None)   # (a mesh's layout: numpy arrays, which jit places)
    assert all(type(a) is np.ndarray for a in host) and host[0].tolist() == [0.1, -0.0, 0.0, 2.5, 0.1]


@pytest.mark.parametrize("kw", [{}, {"speculate": True}, {"replay": True}], ids=["default", "speculate", "replay"])
def test_numbers_of_every_kind_give_eagers_results_recorded_and_replayed(kw):
    """A step passing Python floats, ints, bools, a numpy float32 and a negative zero to ops computes eager's
    values on every call, recorded, speculated or replayed; and, but under ``replay=True`` (whose contract
    freezes them), with a number changed in a dict the step reads."""
    x = dj.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    cfg = {"scale": 0.5}

    def step(x):
        y = x * cfg["scale"] + 3
        y = y.clamp(min=-0.25, max=np.float32(2.5)) * -0.0 + y.pow(2)
        return y.sum(dim=1, keepdim=True), (y > 1).sum(), y.masked_fill(y < 0.5, -7)

    comp = dj.compile(step, **kw)
    for i in range(8):
        if i == 5 and "replay" not in kw:
            cfg["scale"] = 0.25
        want = [t.numpy() for t in step(x)]
        got = [t.numpy() for t in comp(x)]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"call {i}")
    st = comp.stats
    assert st.compiles == 1 and (kw == {"speculate": True} or st.replayed >= 3), st


@pytest.mark.parametrize("kw", [{"speculate": False}, {"speculate": True}, {"replay": True}],
                         ids=["plain", "speculate", "replay"])
def test_numbers_passed_as_arrays_keep_a_float16_steps_dtype_and_values(kw):
    """Recorded, speculated and replayed calls pass a step's Python numbers (SGD's lr, momentum, weight
    decay) as device arrays: a float16 model stays float16 (the arrays are weakly typed, as the numbers
    were) with eager's values."""
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((8, 6)).astype(np.float16), rng.integers(0, 3, 8)) for _ in range(8)]

    def make():
        return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).half()

    def sgd(ps):
        return optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3)
    eager = _train_steps(make, sgd, batches, F.cross_entropy, False)
    comp = _train_steps(make, sgd, batches, F.cross_entropy, True, **kw)
    assert all(p.dtype == np.float16 for p in eager[1] + comp[1])
    _assert_same(eager, comp, rtol=2e-3, atol=2e-3)
    st = comp[2].stats
    assert st.compiles == 1 and st.speculated + st.replayed >= (0 if kw.get("speculate") is False else 4), st


def test_a_value_the_step_computes_is_on_the_steps_device():
    """Inside a step, a computed value's ``devices()`` (and so ``.device``) is the device the step runs on: its
    first committed input's, as eager mode would put the value there."""
    x = dj.tensor(X, device="cpu")
    seen = []

    def step(x):
        h = x * 2
        seen.append((h._value.devices(), h.device))
        return h.sum()
    dj.compile(step)(x)
    assert seen == [({next(iter(x._value.devices()))}, x.device)]


def test_moving_a_value_the_step_computes_to_another_device_reads_it_there(monkeypatch):
    """``.cpu()`` of a value a step computes, where the step runs on another device (a GPU), reads the value
    there (a counted graph break, as ``.item()``) and moves it, as eager mode does; it crashed in JAX's
    ``device_put``. Here every computed value reports a GPU as its device, which a CPU machine lacks."""
    import dynajax._device as D
    real = D.device_of
    monkeypatch.setattr(D, "device_of", lambda a: D.device("cuda") if type(a).__name__ == "Sym" else real(a))

    def step(x):
        return (x * 2).cpu(), (x + 1).sum()
    x = dj.arange(4.0)
    comp = dj.compile(step)
    for _ in range(3):
        y, s = comp(x)
        np.testing.assert_array_equal(y.numpy(), [0.0, 2.0, 4.0, 6.0])
        assert y.device == "cpu" and float(s) == 10.0
    assert comp.stats.graph_breaks == 3 and comp.stats.compiles == 1, comp.stats


def test_random_tensors_made_on_the_default_device_in_a_step_follow_the_eager_stream():
    def step(x):
        return (x + dj.randn(2, 3, device=x.device), dj.rand(3, device="cpu" if x.device.type == "cpu" else x.device),
                x[dj.randperm(2, device=x.device)] * 1)
    x = dj.tensor(np.arange(6.0).reshape(2, 3))
    dj.manual_seed(5)
    eager = [[t.numpy() for t in step(x)] for _ in range(3)]
    comp = dj.compile(step)
    dj.manual_seed(5)
    got = [[t.numpy() for t in comp(x)] for _ in range(3)]
    for e, g in zip(eager, got):
        for a, b in zip(e, g):
            np.testing.assert_allclose(b, a, rtol=1e-6)
    assert not np.allclose(got[0][0], got[1][0]) and comp.stats.compiles == 1


def test_small_data_made_into_tensors_in_a_step_is_found_again_by_speculative_runs():
    """``tensor(python data)`` in a step: the same data gives the same array every call (so a speculative run
    finds it), other data a miss, and an accumulator made that way and updated in place is never donated
    away (its array is shared by every call that makes it)."""
    lin = nn.Linear(3, 2)
    opt = optim.SGD(lin.parameters(), lr=0.1)

    def step(x, w):
        opt.zero_grad()
        total = dj.tensor(0.0)
        for i, c in enumerate(w):
            total += dj.tensor([c, 2 * c]).dot(lin(x[i]))   # (in place: the made tensor's array is an input)
        total.backward()
        opt.step()
        return total, dj.tensor(w) * 1
    x = dj.tensor(RNG.standard_normal((2, 3)).astype(np.float32))
    weights = [(0.5, -1.0)] * 4 + [(0.25, 1.0)] * 3
    state = copy.deepcopy(lin.state_dict())
    eager = [[t.detach().numpy() for t in step(x, w)] for w in weights]
    lin.load_state_dict(state)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    comp = dj.compile(step, speculate=True)
    got = [[t.detach().numpy() for t in comp(x, w)] for w in weights]
    for e, g in zip(eager, got):
        for a, b in zip(e, g):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # calls 3, 4, 6 and 7 found the arrays of the call before's data again; call 5 (new data) missed
    st = comp.stats
    assert (st.speculated, st.speculation_misses, st.compiles) == (4, 1, 1), st
    # the kept array of tensor(0.0), updated in place by every call, was copied before each donation
    kept = dj.ops.creation._KEPT[(np.dtype(np.float32).str, (), np.float32(0.0).tobytes())]
    assert not kept.is_deleted() and float(kept) == 0.0


def test_zeroed_grads_and_copies_of_recorded_tensors_are_recorded_too():
    """``zero_grad(set_to_none=False)`` (``grad.zero_()``, an in-place fill) and ``tensor(t)`` of a tensor the step
    computed are ops of the graph: no fill array made eagerly per call (a new input each time, which no
    speculative run finds), no graph break to read ``t``; values as eager's."""
    def run(compiled):
        dj.manual_seed(0)
        model = _mlp()
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad(set_to_none=False)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            opt.step()
            return loss, dj.tensor(logits.detach(), dtype=dj.float64).softmax(-1)
        if compiled:
            step = dj.compile(step, speculate=True)
        x, y = dj.tensor(X), dj.tensor(Y)
        out = [[t.detach().numpy() for t in step(x, y)] for _ in range(6)]
        return out, [p.detach().numpy() for p in model.parameters()], step
    eager, comp = run(False), run(True)
    for e, g in zip(eager[0], comp[0]):
        for a, b in zip(e, g):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(eager[1], comp[1]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    st = comp[2].stats
    # the first call zeroes no grad (none yet), the second zeroes the first's: the graph settles at the third
    assert st.graph_breaks == 0 and st.compiles == 2 and st.speculated == 3 and st.speculation_misses == 0, st


_IDIOMS = {   # PyTorch idioms inside a training step: h = the layer's output (4, 8), y = labels (4,)
    "new_empty_fill_": lambda h, y: h + h.new_empty(4, 8).fill_(1.0),
    "empty_like_uniform_": lambda h, y: h * dj.empty_like(h).uniform_(0, 1),
    "shape_as_tensor": lambda h, y: h * dj.tensor(h.shape).float().sum(),
    "bernoulli": lambda h, y: h * dj.bernoulli(dj.full_like(h, 0.3)),
    "randint_like_float": lambda h, y: h * dj.randint_like(h, 0, 3),
    "masked_fill_softmax": lambda h, y: h.masked_fill(h < -0.5, float("-inf")).softmax(-1),
}


@pytest.mark.parametrize("name", list(_IDIOMS))
def test_pytorch_idioms_in_a_step_match_eager_and_speculate(name):
    """Each idiom, inside a compiled step (clip_grad_norm_, then an EMA of the parameters under no_grad, as
    training loops do), gives eager's losses and parameters, and the step speculates from its third call:
    nothing in it is made eagerly as a new input per call."""
    make = _IDIOMS[name]

    def run(compiled):
        dj.manual_seed(0)
        lin = nn.Linear(6, 8)
        ema = copy.deepcopy(lin)
        opt = optim.SGD(lin.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = make(lin(x[:4]), y[:4]).sum()
            loss.backward()
            nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
            opt.step()
            with dj.no_grad():
                for e, p in zip(ema.parameters(), lin.parameters()):
                    e.mul_(0.9).add_(p.detach(), alpha=0.1)
            return loss
        step = dj.compile(step, speculate=True) if compiled else step
        dj.manual_seed(1)
        losses = [step(dj.tensor(X), dj.tensor(Y)).item() for _ in range(3)]
        return losses, [p.detach().numpy() for p in list(lin.parameters()) + list(ema.parameters())], step
    eager, comp = run(False), run(True)
    _assert_same(eager, comp, rtol=1e-5, atol=1e-5)
    st = comp[2].stats
    assert st.compiles == 1 and st.graph_breaks == 0 and st.speculated == 1, st


def test_a_tensor_made_on_a_missing_device_in_a_compiled_step_raises_eagers_error():
    from helpers import unavailable_device
    dev = unavailable_device()
    with pytest.raises(RuntimeError) as eager:
        dj.zeros(2, 3, device=dev)
    step = dj.compile(lambda x: x + dj.zeros(2, 3, device=dev))
    with pytest.raises(RuntimeError) as compiled:
        step(dj.ones(2, 3))
    assert str(compiled.value) == str(eager.value) and dev in str(eager.value)


@pytest.mark.parametrize("make_opt", [lambda ps: optim.SGD(ps, lr=0.05), lambda ps: optim.Adam(ps, lr=0.01)],
                         ids=["sgd", "adam"])
def test_depth_dependent_model_compiles_one_executable_per_depth(make_opt):
    """Also with Adam, whose deeper blocks' step counts fall behind (they are updated only by deep batches):
    the bias corrections come from the step tensors, so they do not change the graph's key."""
    dj.manual_seed(0)
    blocks = nn.ModuleList([nn.Linear(5, 5) for _ in range(4)])
    ref_blocks = copy.deepcopy(blocks)

    def make_step(blocks):
        opt = make_opt(blocks.parameters())

        def step(x, depth):
            opt.zero_grad()
            h = x
            for b in blocks[:depth]:
                h = b(h).tanh()
            loss = (h ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step
    step, ref_step = make_step(blocks), make_step(ref_blocks)
    c = dj.compile(step)
    x = dj.tensor(RNG.standard_normal((3, 5)).astype(np.float32))
    depths = [1, 3, 2, 3, 1, 4, 2, 4, 3, 1]
    for d in depths:
        np.testing.assert_allclose(c(x, d).item(), ref_step(x, d).item(), rtol=1e-5, atol=1e-6)
    assert c.stats.compiles == 4 and len(c._cache) == 4 and c.stats.cache_hits == len(depths) - 4
    for p, q in zip(blocks.parameters(), ref_blocks.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


class _Square(dj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class _WrongSquare(_Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x                  # deliberately wrong: d(x^2)/dx is 2x


@pytest.mark.parametrize("fn_cls", [_Square, _WrongSquare])
def test_verify_checks_custom_function_backward_against_jax_vjp(fn_cls):
    w = nn.Parameter(dj.tensor([1.5, -0.5, 2.0]))
    opt = optim.SGD([w], lr=0.1)

    @dj.compile(verify=True)
    def step(x):
        opt.zero_grad()
        y = fn_cls.apply(x * w).sum()
        y.backward()
        opt.step()
        return y
    x = dj.tensor([1.0, 2.0, 3.0])
    if fn_cls is _Square:
        assert step(x).item() == pytest.approx(float(np.sum((np.array([1.5, -1.0, 6.0])) ** 2)))
        np.testing.assert_allclose(w.detach().numpy(), [1.5, -0.5, 2.0] - 0.1 * 2 * np.array([1.5, -1.0, 6.0])
                                   * np.array([1.0, 2.0, 3.0]), rtol=1e-6)
        return
    with pytest.raises(RuntimeError, match=r"backward of custom Function _WrongSquare disagrees with jax\.vjp"):
        step(x)
    np.testing.assert_array_equal(w.detach().numpy(), np.float32([1.5, -0.5, 2.0]))   # nothing half-applied
    assert w.grad is None


def _vjp_ops(step, *args):
    """How many backward passes of one call of compiled ``step`` were recorded as one jax.vjp op."""
    from dynajax.compile.backward import backward_grads as vjp_grads
    seen = []
    orig = step._plan

    def grab(cap, result, a):
        seen.append(sum(e[0] is vjp_grads for e in cap.eqns))
        return orig(cap, result, a)
    step._plan = grab
    step(*args)
    step._plan = orig
    return seen[0]


def _detach_step(w, x):
    w.grad = None
    loss = (w * w.detach()).sum() + (x * w).tanh().sum()    # the tape differentiates one factor only
    loss.backward()
    return loss


def _in_place_step(w, x):
    w.grad = None
    a = w.sum() * 3.0
    with dj.no_grad():
        w.mul_(2.0)                                          # the second read of w sees another value
    loss = a + (w * x).tanh().sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("body", [_detach_step, _in_place_step])
def test_backward_recorded_as_one_vjp_matches_the_tape(body):
    w = nn.Parameter(dj.tensor([0.5, -1.0, 2.0]))
    w_ref = nn.Parameter(dj.tensor([0.5, -1.0, 2.0]))
    x = dj.tensor([1.0, 2.0, 3.0])
    c = dj.compile(lambda x: body(w, x))
    assert _vjp_ops(c, x) == 1
    body(w_ref, x)
    np.testing.assert_allclose(w.grad.numpy(), w_ref.grad.numpy(), rtol=1e-6)
    for _ in range(2):
        np.testing.assert_allclose(c(x).item(), body(w_ref, x).item(), rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), w_ref.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(w.detach().numpy(), w_ref.detach().numpy())


def test_backward_with_hooks_or_custom_functions_runs_the_tape():
    w = nn.Parameter(dj.tensor([0.5, -1.0, 2.0]))
    seen = []

    def with_hook(x):
        w.grad = None
        h = x * w
        h.register_hook(lambda g: seen.append(g.shape) or g * 3)
        h.sum().backward()
        return w.grad

    def with_function(x):
        w.grad = None
        _Square.apply(x * w).sum().backward()
        return w.grad
    x = dj.tensor([1.0, 2.0, 3.0])
    c1, c2 = dj.compile(with_hook), dj.compile(with_function)
    assert _vjp_ops(c1, x) == 0 and _vjp_ops(c2, x) == 0
    np.testing.assert_allclose(c1(x).numpy(), 3 * x.numpy())
    assert len(seen) == 2    # the hook ran in both recordings, as it would eagerly
    np.testing.assert_allclose(c2(x).numpy(), 2 * x.numpy() ** 2 * np.array([0.5, -1.0, 2.0]), rtol=1e-6)


def test_backward_op_falls_back_to_jax_vjp_when_a_rule_branches_on_a_python_number():
    """``pow``'s rule tests its exponent; as an executable input the exponent is a traced value, so the
    recorded backward differentiates the forward with jax.vjp instead -- and changing it does not recompile."""
    w = nn.Parameter(dj.tensor([0.5, 1.5, 2.0]))

    @dj.compile
    def step(p):
        w.grad = None
        loss = (w ** p).sum()
        loss.backward()
        return loss
    wn = np.array([0.5, 1.5, 2.0], np.float32)
    for p in (2.0, 3.0, 0.5):
        np.testing.assert_allclose(step(p).item(), np.sum(wn ** p), rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), p * wn ** (p - 1), rtol=1e-6)
    assert step.stats.compiles == 1 and _vjp_ops(step, 2.5) == 1


@pytest.mark.parametrize("case", ["gru", "lstm_batch_first", "linear", "padding_idx", "table_changed", "few_rows"])
def test_linear_of_an_embedding_lookup_matches_eager(case):
    """Inside a compiled step ``linear(embedding(E, idx), W, b)`` is computed as a lookup in the projected
    table ``linear(E, W, b)`` when idx selects more rows than E has: losses, gradients and updated
    parameters equal the eager steps. The rewrite is skipped (and the result still equal) with
    padding_idx, when the table changed in place after the lookup, or when idx selects few rows."""
    from dynajax.nn import _ops
    r = np.random.default_rng(5)
    T = 2 if case == "few_rows" else 7
    toks = [dj.tensor(r.integers(0, 6, (T, 4))) for _ in range(3)]

    def build():
        dj.manual_seed(1)
        emb = nn.Embedding(6, 5, padding_idx=0 if case == "padding_idx" else None)
        body = {"gru": lambda: nn.GRU(5, 3), "lstm_batch_first": lambda: nn.LSTM(5, 3, batch_first=True,
                                                                                  bidirectional=True)
                }.get(case, lambda: nn.Linear(5, 3))()
        params = [*emb.parameters(), *body.parameters()]
        opt = optim.SGD(params, lr=0.1)

        def step(idx):
            opt.zero_grad()
            x = emb(idx)
            if case == "table_changed":
                with dj.no_grad():
                    emb.weight.mul_(2.0)
            y = body(x)[0] if case in ("gru", "lstm_batch_first") else body(x)
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            return loss
        return step, params

    eager_step, eager_params = build()
    want = [eager_step(t).item() for t in toks]
    step, params = build()
    fired = []
    orig = _ops._linear_of_lookup

    def spy(x, w, b):
        res = orig(x, w, b)
        fired.append(res is not None)
        return res
    _ops._linear_of_lookup = spy
    try:
        got = [dj.compile(step)(t).item() for t in toks[:1]]
        f = dj.compile(step)
        got += [f(t).item() for t in toks[1:]]
    finally:
        _ops._linear_of_lookup = orig
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(params, eager_params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert any(fired) == (case in ("gru", "lstm_batch_first", "linear"))


def _changing_run(compiled: bool, **kw):
    """Ten SGD steps with changes between calls: a parameter given a new array, a new learning rate (a
    scheduler's), a Python branch, a Python number in the forward."""
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y, extra, scale):
        opt.zero_grad()
        h = model(x) * scale
        if extra:
            h = h * 2.0
        loss = F.cross_entropy(h, y)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        step = dj.compile(step, **kw)
    losses = []
    for i in range(10):
        if i == 3:
            with dj.no_grad():
                model[0].bias.copy_(dj.zeros(16))
        if i == 4:
            opt.param_groups[0]["lr"] = 0.05
        losses.append(step(dj.tensor(X), dj.tensor(Y), i == 5, 0.5 if i == 8 else 1.0).item())
    return losses, [p.detach().numpy() for p in model.parameters()], step


def test_speculation_drops_runs_whose_graph_numbers_or_inputs_changed():
    eager = _changing_run(False)
    comp = _changing_run(True, speculate=True)
    _assert_same(eager, comp)
    st = comp[2].stats
    # kept: calls 2, 3 (the bias array given between calls, read at the call's start) and 4 (the new learning
    # rate, read again from the param group); dropped: call 5 (another graph), 8 and 9 (the forward's number
    # differed from the last call's); calls 6 and 7 follow a key change and did not speculate
    assert st.speculated == 3 and st.speculation_misses == 3, (st.speculated, st.speculation_misses)


def test_an_exception_after_a_speculative_dispatch_leaves_state_unchanged():
    w = nn.Parameter(dj.tensor([1.0, 2.0]))
    opt = optim.SGD([w], lr=0.5)

    @dj.compile(speculate=True)
    def f(x, fail):
        opt.zero_grad()
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        if fail:
            raise KeyError("boom")
        return loss
    x = dj.tensor([1.0, 3.0])
    for _ in range(3):
        f(x, False)
    before = w.detach().numpy().copy()
    with pytest.raises(KeyError, match="boom"):
        f(x, True)   # dispatched before capture, then dropped
    np.testing.assert_array_equal(w.detach().numpy(), before)
    f(x, False)
    np.testing.assert_allclose(w.detach().numpy(), before - 0.5 * np.float32([1.0, 3.0]))
    assert f.stats.speculated == 1   # the third call; the one after the exception records before it dispatches


def test_default_speculation_buys_the_twin_then_keeps_what_its_trial_measured(monkeypatch):
    from dynajax.compile import guards, speculate as sp
    monkeypatch.setattr(sp, "TRIAL", 3)
    monkeypatch.setattr(guards, "ENABLED", False)   # (guarded replay would take over from speculation)
    eager = _train(_mlp(), lambda ps: optim.Adam(ps, lr=0.01), F.cross_entropy, dj.tensor(Y), False, steps=16)
    model = _mlp()
    opt = optim.Adam(model.parameters(), lr=0.01)
    step = dj.compile(train_step(model, opt, F.cross_entropy))
    x, y = dj.tensor(X), dj.tensor(Y)
    losses = [step(x, y).item()]
    (key, made), = step._made.items()
    step._made[key] = made[:2] + (0.0,)   # a free twin: the capture time saved up pays for it at once
    losses += [step(x, y).item() for _ in range(15)]
    _assert_same(eager, (losses, [p.detach().numpy() for p in model.parameters()]))
    ks = step._speculator.keys[key]
    assert ks.verdict is not None and len(ks.times[0]) >= 3 and len(ks.times[1]) >= 3
    assert step.stats.speculated >= 4 and step.stats.speculation_misses == 0


def test_a_step_that_donates_nothing_speculates_on_its_own_executable(monkeypatch):
    from dynajax.compile import guards, speculate as sp
    monkeypatch.setattr(sp, "TRIAL", 2)
    monkeypatch.setattr(guards, "ENABLED", False)
    eager = _train(_mlp(), lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), F.mse_loss,
                   dj.tensor(np.eye(3, dtype=np.float32)[Y]), False, steps=12)
    n0 = xla_compiles()
    comp = _train(_mlp(), lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), F.mse_loss,
                  dj.tensor(np.eye(3, dtype=np.float32)[Y]), True, steps=12, donate=False)
    _assert_same(eager, comp)
    ks, = comp[2]._speculator.keys.values()
    # no twin to buy: the trial starts at once, on the executable itself, and compiles nothing more; it
    # keeps that executable as its twin if speculating measured faster (timing: on a loaded machine it
    # may not), else drops it
    assert xla_compiles() - n0 == 1 and ks.verdict is not None
    assert ks.twin is (next(iter(comp[2]._cache.values())) if ks.verdict else None)
    assert comp[2].stats.speculated >= 2


@pytest.mark.parametrize("make_opt", [lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01),
                                      lambda ps: optim.AdamW(ps, lr=0.01, amsgrad=True),
                                      lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                      lambda ps: optim.SGD(ps, lr=0.1),
                                      lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
                                      lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01),
                                      lambda ps: optim.Adadelta(ps, lr=1.0, weight_decay=0.01),
                                      lambda ps: optim.Adamax(ps, lr=0.01),
                                      lambda ps: optim.NAdam(ps, lr=0.01, decoupled_weight_decay=True, weight_decay=0.1),
                                      lambda ps: optim.RAdam(ps, lr=0.01)],
                         ids=["adam_l2", "adamw_amsgrad", "sgd_momentum", "sgd", "rmsprop", "adagrad", "adadelta",
                              "adamax", "nadam", "radam"])
def test_a_per_step_learning_rate_schedule_keeps_its_speculative_runs(make_opt):
    def run(compiled):
        model = _mlp()
        opt = make_opt(model.parameters())
        sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
        step = train_step(model, opt, F.cross_entropy)
        if compiled:
            step = dj.compile(step, speculate=True)
        x, y = dj.tensor(X), dj.tensor(Y)
        losses = []
        for _ in range(8):
            losses.append(step(x, y).item())
            sched.step()
        return losses, [p.detach().numpy() for p in model.parameters()], step
    eager, comp = run(False), run(True)
    _assert_same(eager, comp)
    # the optimizer's numbers are read again from its param group when a run is dispatched
    assert comp[2].stats.speculated == 6 and comp[2].stats.speculation_misses == 0


@pytest.mark.parametrize("read", ["norm_item", "clip_grad_norm", "isfinite_bool"])
def test_reading_a_gradient_mid_step_is_a_graph_break_with_eagers_values(read):
    """A value read from the gradients inside a step (a logged grad norm, ``float(clip_grad_norm_(...))``, a
    skip-if-not-finite check): the graph break computes the recorded backward on arrays, and the step gives
    eager's values and parameters."""
    reads = {"norm_item": lambda m: m[0].weight.grad.norm().item(),
             "clip_grad_norm": lambda m: float(nn.utils.clip_grad_norm_(m.parameters(), 0.5)),
             "isfinite_bool": lambda m: bool(dj.isfinite(m[0].weight.grad).all())}

    def run(compiled):
        dj.manual_seed(0)
        m = _mlp()
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            r = reads[read](m)
            opt.step()
            return loss, r
        f = dj.compile(step) if compiled else step
        got = [f(dj.tensor(X), dj.tensor(Y)) for _ in range(3)]
        return [(float(loss), r) for loss, r in got], [p.detach().numpy() for p in m.parameters()], f
    (want, wp, _), (got, gp, f) = run(False), run(True)
    np.testing.assert_allclose(np.array(got, dtype=np.float64), np.array(want, dtype=np.float64), rtol=1e-5)
    for a, b in zip(gp, wp):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert f.stats.graph_breaks >= 3


def test_two_threads_calling_one_compiled_step_on_shared_inputs_get_eagers_losses():
    """Calls from two threads on the same input tensors (separate models): each call holds its recording's
    values in the shared tensors until its results are written back, so calls run one at a time and each
    thread's losses are eager's."""
    import threading

    def build():
        dj.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        return m, optim.SGD(m.parameters(), lr=0.1)

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss
    x, y = dj.tensor(X), dj.tensor(Y)
    m, opt = build()
    want = [float(step(m, opt, x, y)) for _ in range(5)]
    compiled = dj.compile(step)
    models = [build() for _ in range(2)]
    got, errors = {0: [], 1: []}, []

    def worker(k):
        try:
            for _ in range(5):
                got[k].append(float(compiled(*models[k], x, y)))
        except Exception as e:   # reported below, with the thread
            errors.append((k, repr(e)))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(2):
        np.testing.assert_allclose(got[k], want, rtol=1e-5)


def test_an_error_while_compiling_leaves_the_state_as_before(monkeypatch):
    """An exception from compiling a new graph (after the recording) propagates, and every tensor the recording
    touched holds its array again: later calls work."""
    dj.manual_seed(0)
    m = _mlp()
    step = dj.compile(train_step(m, optim.SGD(m.parameters(), lr=0.1), F.cross_entropy))
    before = [p.detach().numpy().copy() for p in m.parameters()]
    cls = type(step)

    def broken(self, *a):
        raise MemoryError("out of memory while compiling")
    monkeypatch.setattr(cls, "_compile", broken)
    with pytest.raises(MemoryError, match="while compiling"):
        step(dj.tensor(X), dj.tensor(Y))
    for p, b in zip(m.parameters(), before):
        np.testing.assert_array_equal(p.detach().numpy(), b)
        assert p.grad is None
    monkeypatch.undo()
    assert np.isfinite(float(step(dj.tensor(X), dj.tensor(Y))))


@pytest.mark.parametrize("case", ["grad_changing_backward_hook", "bfloat16"])
def test_verify_accepts_what_eager_does(case):
    """``verify=True`` compares the compiled step with eager's, and only where they may differ: a module's full
    backward hook that changes the input gradient (the hook's own Function is not a custom backward to check
    against jax.vjp), a bfloat16 model (compared to a few of its roundings, not exactly)."""
    def run(compiled):
        dj.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        if case == "bfloat16":
            m = m.to(dj.bfloat16)
        else:
            m[2].register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,))
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(m(x).float(), y)
            loss.backward()
            opt.step()
            return loss
        f = dj.compile(step, verify=True) if compiled else step
        x = dj.tensor(X).to(dj.bfloat16) if case == "bfloat16" else dj.tensor(X)
        return [float(f(x, dj.tensor(Y))) for _ in range(3)]
    np.testing.assert_allclose(run(True), run(False), rtol=1e-2 if case == "bfloat16" else 1e-5)


def test_a_step_drawing_from_a_generator_it_does_not_rekey_warns_nothing():
    """A ``Generator`` whose key the step reads but does not replace is not donated (JAX warned that the
    donated buffer was unusable); the draws still follow eager's."""
    def run(compiled):
        g = dj.Generator().manual_seed(0)
        dj.manual_seed(0)
        m = nn.Linear(3, 2)
        opt = dj.optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (m(x) + dj.randn(4, 2, generator=g)).pow(2).sum()
            loss.backward()
            opt.step()
            return loss
        s = dj.compile(step) if compiled else step
        return [float(s(dj.ones(4, 3))) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run(True)
    np.testing.assert_allclose(got, run(False), rtol=1e-5)
