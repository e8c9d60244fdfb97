"""Loop rolling and shape bucketing in ``dynajax.compile``: rolled loops (lax.scan) give the values and
gradients of the eager step, compile a graph whose size does not grow with the trip count, and bucketed
steps run one executable per bucket."""
from __future__ import annotations

import collections
import copy
import warnings

import numpy as np
import pytest
import torch
from helpers import assert_close, train_step

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.utils.data import BucketBatchSampler, pad_sequence


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def _cell_loop_step(cell, head):
    def step(x):
        for p in (*cell.parameters(), *head.parameters()):
            p.grad = None
        h = dj.zeros(x.shape[1], cell.hidden_size)
        for xt in x.unbind(0):
            h = cell(xt, h)
        loss = head(h).pow(2).mean()
        loss.backward()
        return loss
    return step


def _compiled_equals_eager(compiled, step, x, *models):
    """The compiled step's loss and the models' grads equal those of the step run eagerly on ``x``."""
    want = step(x)
    g_want = [g for m in models for g in _grads(m)]
    assert_close(compiled(x), want, rtol=1e-5, atol=1e-6)
    for a, b in zip([g for m in models for g in _grads(m)], g_want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


class _HandWrittenGRUCell(nn.Module):
    """A GRU step written by hand from two Linear layers and elementwise ops: ~20 ops per time step and
    ~50 in its backward, where ``nn.GRUCell`` is one op and one backward op."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.ih, self.hh = nn.Linear(input_size, 3 * hidden_size), nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x, h):
        ir, iz, in_ = self.ih(x).chunk(3, -1)
        hr, hz, hn = self.hh(h).chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        return (1 - z) * (in_ + r * hn).tanh() + z * h


def test_custom_cell_loop_rolled_equals_eager_and_graph_does_not_grow():
    dj.manual_seed(0)
    cell, head = _HandWrittenGRUCell(3, 5), nn.Linear(5, 2)
    step = _cell_loop_step(cell, head)
    compiled = dj.compile(step)
    sizes = []
    for T in (6, 12):
        _compiled_equals_eager(compiled, step, dj.randn(T, 2, 3), cell, head)
        trips = sorted(lp.k for lp in compiled.last_loops)
        assert trips == [T - 2, T], trips      # backward (first and last steps differ) and forward
        sizes.append(compiled.stats.compiled_ops)
    assert compiled.stats.rolled_loops == 4 and compiled.stats.compiles == 2
    assert sizes[0] == sizes[1] < 150, sizes   # ~70 ops per step unrolled; the rolled graph is the same


def test_nn_gru_cell_loop_records_a_few_ops_per_step_and_rolls():
    dj.manual_seed(0)
    cell, head = nn.GRUCell(3, 5), nn.Linear(5, 2)
    step = _cell_loop_step(cell, head)
    compiled = dj.compile(step)
    recorded, sizes = [], []
    for T in (50, 60):
        _compiled_equals_eager(compiled, step, dj.randn(T, 2, 3), cell, head)
        assert T in [lp.k for lp in compiled.last_loops]     # the forward steps, one cell op each
        recorded.append(compiled.stats.recorded_ops)
        sizes.append(compiled.stats.compiled_ops)
    assert recorded[1] - recorded[0] <= 10 * 8, recorded   # per step: the cell, its backward, a few more
    assert sizes[0] == sizes[1], sizes


def test_a_loop_reading_x_colon_t_rolls_forward_and_backward_and_equals_torch():
    """``e[:, t]`` inside the loop (the usual way to write it) is a slice at a different position each step:
    rolled with the position read per iteration, forward and backward, and the step equals PyTorch's."""
    dj.manual_seed(3)
    emb, cell, head = nn.Embedding(7, 4), nn.GRUCell(4, 6), nn.Linear(6, 7)
    mods = (emb, cell, head)
    t_mods = _to_torch(*mods)

    def step(tokens, targets, emb=emb, cell=cell, head=head, lib=dj, ce=F.cross_entropy):
        for m in (emb, cell, head):
            m.zero_grad()
        e = emb(tokens)
        h = lib.zeros(tokens.shape[0], 6)
        outs = []
        for t in range(tokens.shape[1]):
            h = cell(e[:, t], h)
            outs.append(h)
        loss = ce(head(lib.stack(outs, 1)).reshape(-1, 7), targets.reshape(-1))
        loss.backward()
        return loss

    compiled = dj.compile(step, dynamic=False)
    rng = np.random.default_rng(0)
    for T in (12, 30):
        seq = rng.integers(0, 7, (3, T + 1))
        want = step(torch.tensor(seq[:, :-1]), torch.tensor(seq[:, 1:]), *t_mods, torch,
                    torch.nn.functional.cross_entropy)
        assert_close(compiled(dj.tensor(seq[:, :-1]), dj.tensor(seq[:, 1:])), want, rtol=1e-5, atol=1e-6)
        for m, tm in zip(mods, t_mods):
            for p, q in zip(m.parameters(), tm.parameters()):
                assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        trips = sorted(lp.k for lp in compiled.last_loops)
        assert trips[-1] >= T - 2 and len(trips) >= 2, trips   # the forward loop and the backward loop
        assert compiled.stats.compiled_ops < 120, compiled.stats


def test_a_bucket_that_is_another_inputs_size_pads_one_past_it():
    """Geometric buckets skip the sizes of the step's other inputs (a padded size must say which dims are
    padded): a length of 45 beside weights of sizes 64 and 128 pads to 65, not to 128 and then 256."""
    import inspect

    from dynajax.compile.bucketing import declared

    def f(x):
        return x
    sig = inspect.signature(f)
    _, dims = declared(sig, {"x": {1: [16, 32, 64, 128, 256]}}, (dj.zeros(2, 45),), {}, avoid={64, 128})
    assert dims == [(("x", 1), 45, 65)]
    _, dims = declared(sig, {"x": {1: [16, 32, 64, 128, 256]}}, (dj.zeros(2, 64),), {}, avoid={64, 128})
    assert dims == [(("x", 1), 64, 64)]   # (a true size equal to another input's is not padded)


def test_rolling_can_be_switched_off():
    dj.manual_seed(0)
    cell, head = _HandWrittenGRUCell(3, 5), nn.Linear(5, 2)
    compiled = dj.compile(_cell_loop_step(cell, head), roll=False)
    compiled(dj.randn(6, 2, 3))
    assert compiled.stats.rolled_loops == 0 and compiled.stats.compiled_ops == compiled.stats.recorded_ops


def test_24_identical_blocks_compile_as_a_scan_and_match_eager():
    dj.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(24)]
    model = nn.Sequential(nn.Linear(4, 8), *blocks, nn.Linear(8, 1))
    twin = copy.deepcopy(model)
    opts = [dj.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]

    compiled = dj.compile(train_step(model, opts[0], F.mse_loss))
    eager = train_step(twin, opts[1], F.mse_loss)
    for _ in range(2):
        x, y = dj.randn(5, 4), dj.randn(5, 1)
        assert_close(compiled(x, y), eager(x, y), rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert_close(a, b, rtol=1e-5, atol=1e-6)
    trips = sorted(lp.k for lp in compiled.last_loops)
    assert compiled.stats.compiles == 1
    assert trips.count(24) >= 2, trips   # the forward and the backward through the blocks (and SGD's update)
    assert compiled.stats.compiled_ops < compiled.stats.recorded_ops / 2


def test_nn_gru_records_one_op_per_layer_whatever_the_length():
    dj.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=2)
    counts = []

    @dj.compile(dynamic=False)   # (the length would be padded: this is about recording one op per layer)
    def step(x):
        gru.zero_grad()
        out, h = gru(x)
        (out.sum() + h.sum()).backward()
        return h
    for T in (3, 9):
        step(dj.randn(T, 2, 3))
        counts.append(step.stats.recorded_ops)
    assert counts[0] == counts[1], counts


def _to_torch(*mods):
    out = []
    for m in mods:
        t = getattr(torch.nn, type(m).__name__)(*_ctor_args(m))
        t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
        out.append(t)
    return out


def _ctor_args(m):
    if isinstance(m, nn.Embedding):
        return m.num_embeddings, m.embedding_dim
    if isinstance(m, nn.Linear):
        return m.in_features, m.out_features
    return m.input_size, m.hidden_size


def test_bucketed_gru_cell_language_model_lengths_10_to_50():
    dj.manual_seed(1)
    emb, cell, head = nn.Embedding(7, 4), nn.GRUCell(4, 6), nn.Linear(6, 7)
    params = [*emb.parameters(), *cell.parameters(), *head.parameters()]
    t_emb, t_cell, t_head = _to_torch(emb, cell, head)
    t_params = [*t_emb.parameters(), *t_cell.parameters(), *t_head.parameters()]

    def step(tokens, targets, emb=emb, cell=cell, head=head, params=params, lib=dj, ce=F.cross_entropy):
        for p in params:
            p.grad = None
        h = lib.zeros(tokens.shape[1], 6)
        logits = []
        for xt in emb(tokens).unbind(0):
            h = cell(xt, h)
            logits.append(head(h))
        loss = ce(lib.stack(logits).reshape(-1, 7), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        return loss

    buckets = [16, 32, 64]
    compiled = dj.compile(step, dynamic={"tokens": {0: buckets}, "targets": {0: buckets}}, pad={"targets": -100})
    rng = np.random.default_rng(0)
    for T in range(10, 51):   # the oracle is PyTorch eager (dynajax eager would jit its ops for 41 new shapes)
        seq = rng.integers(0, 7, (T + 1, 2))
        want = step(torch.tensor(seq[:-1]), torch.tensor(seq[1:]), t_emb, t_cell, t_head, t_params, torch,
                    torch.nn.functional.cross_entropy)
        got = compiled(dj.tensor(seq[:-1]), dj.tensor(seq[1:]))
        assert_close(got, want, rtol=1e-5, atol=1e-6)
        for p, q in zip(params, t_params):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    assert compiled.stats.compiles == 3       # one executable per bucket
    assert compiled.stats.bucket_hits == 41 - 3
    # each compile rolls the forward loop; the backward is a loop where the graph is long enough for the tape
    # (buckets 32 and 64; bucket 16's backward is one op, see _capture_backward.MAX_NODES)
    assert compiled.stats.rolled_loops >= 5


def test_bucketed_nn_gru_keeps_state_past_the_true_length_and_slices_outputs():
    dj.manual_seed(0)
    m = nn.GRU(3, 4)
    t = torch.nn.GRU(3, 4)
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})

    @dj.compile(dynamic={"x": {0: 8}})
    def run(x):
        return m(x)
    for T in (5, 7, 3):
        x = np.random.default_rng(T).standard_normal((T, 2, 3)).astype(np.float32)
        out, h = run(dj.tensor(x))
        out_t, h_t = t(torch.tensor(x))
        assert tuple(out.shape) == (T, 2, 4)
        assert_close(out, out_t, atol=1e-5)
        assert_close(h, h_t, atol=1e-5)
    assert run.stats.compiles == 1 and run.stats.bucket_hits == 2


def _bucketed_gru_lm_matches_torch(lengths, seed: int, **compile_kw):
    """A GRU language model step compiled with buckets of 16, run on sequences of ``lengths``: each call's
    loss and grads equal PyTorch's on the true length. Returns the compiled step."""
    dj.manual_seed(0)
    emb, gru, head = nn.Embedding(7, 4), nn.GRU(4, 5), nn.Linear(5, 7)
    t_emb, t_gru, t_head = _to_torch(emb, gru, head)
    params = [*emb.parameters(), *gru.parameters(), *head.parameters()]
    t_params = [*t_emb.parameters(), *t_gru.parameters(), *t_head.parameters()]

    def step(tokens, targets, emb=emb, gru=gru, head=head, params=params, ce=F.cross_entropy):
        for p in params:
            p.grad = None
        loss = ce(head(gru(emb(tokens))[0]).reshape(-1, 7), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        return loss
    compiled = dj.compile(step, dynamic={"tokens": {0: 16}, "targets": {0: 16}}, pad={"targets": -100},
                          **compile_kw)
    rng = np.random.default_rng(seed)
    for T in lengths:
        seq = rng.integers(0, 7, (T + 1, 3))
        want = step(torch.tensor(seq[:-1]), torch.tensor(seq[1:]), t_emb, t_gru, t_head, t_params,
                    torch.nn.functional.cross_entropy)
        got = compiled(dj.tensor(seq[:-1]), dj.tensor(seq[1:]))
        assert_close(got, want, rtol=1e-5, atol=1e-6)
        for p, q in zip(params, t_params):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    return compiled


def test_a_length_whose_bucket_has_no_executable_runs_in_a_larger_one():
    """Buckets of 16: length 40 compiles bucket 48; lengths 12 and 25 then run padded to 48 (values and grads
    as PyTorch's on the true length) instead of compiling buckets 16 and 32; 45 runs at 48 as its own."""
    compiled = _bucketed_gru_lm_matches_torch((40, 12, 25, 45), seed=0)
    st = compiled.stats
    assert st.compiles == 1 and st.bucket_hits == 3 and st.bucket_reuses == 2
    assert [s for s in compiled._padder.sizes.debt] == [(16, 16), (32, 32)]   # the padding they cost, summed


def test_bucket_sizes_follow_the_ski_rental_rule():
    """A call whose own sizes never ran runs at the smallest larger sizes that did, until the time it lost
    there (time between calls x the fraction of padded work) reaches the mean compile time; then its own
    sizes compile. Dims of equal true size pad alike; other dims independently."""
    from dynajax.compile import bucketing as _bucketing

    s = _bucketing.Sizes()
    a, b = ("x", 0), ("y", 1)
    s.done([(a, 40, 48), (b, 40, 48)], (48, 48), compiled=True)
    s.done([(a, 60, 64), (b, 20, 32)], (64, 32), compiled=True)
    s.gaps.extend([0.03, 0.03, 0.03])         # 30 ms a call
    dims = [(a, 10, 16), (b, 10, 16)]
    # (64, 32) would pad two equal lengths unequally: only (48, 48) fits
    assert s.choose(dims, compile_cost=0.05) == (48, 48)   # lost 30 ms * (1 - 16/48) = 20 ms
    s.done(dims, (48, 48), compiled=True)
    assert s.choose(dims, compile_cost=0.05) == (48, 48)   # 40 ms
    s.done(dims, (48, 48), compiled=True)
    assert s.choose(dims, compile_cost=0.05) == (16, 16)   # 60 ms >= 50 ms: compile its own
    s.done(dims, (16, 16), compiled=True)
    assert s.choose(dims, compile_cost=0.05) == (16, 16) and not s.debt
    # unequal true sizes: each dim fits on its own
    assert s.choose([(a, 50, 64), (b, 30, 32)], compile_cost=1.0) == (64, 32)
    # nothing that ran fits: its own sizes
    assert s.choose([(a, 70, 80), (b, 10, 16)], compile_cost=1.0) == (80, 16)
    # other dims declared (an argument left out): nothing fits
    assert s.choose([(a, 10, 16)], compile_cost=1.0) == (16,)
    # it remembers as many sizes as the step's executable cache holds, the most recently run
    small = _bucketing.Sizes(keep=1)
    small.done([(a, 40, 48)], (48,), compiled=True)
    small.done([(a, 60, 64)], (64,), compiled=True)
    assert list(small.ran) == [(64,)] and small.choose([(a, 10, 16)], compile_cost=1.0) == (64,)


def test_dynamic_spec_errors():
    def step(x):
        return x
    with pytest.raises(TypeError, match="does not take"):
        dj.compile(step, dynamic={"y": {0: 8}})
    with pytest.raises(TypeError, match="positive int"):
        dj.compile(step, dynamic={"x": {0: [0]}})
    with pytest.raises(RuntimeError, match="requires grad"):
        dj.compile(step, dynamic={"x": {0: 8}})(dj.ones(3, requires_grad=True))


def test_recompile_warning_suggests_dynamic():
    @dj.compile(recompile_limit=2, dynamic=False)
    def step(x):
        return x * 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (2, 3, 4):
            step(dj.ones(n))
    assert any("dynamic=" in str(x.message) for x in w)


def test_eager_recompile_storm_warns_once_at_the_callers_line(monkeypatch):
    """Eager ops whose input shapes keep changing compile a kernel per shape: past a threshold (lowered
    here) one warning names the op and the way out (compile with dynamic=), at the user's line."""
    from dynajax import _device
    monkeypatch.setattr(_device, "STORM_SECONDS", 0.0)
    monkeypatch.setattr(_device, "STORM_KERNELS", 4)
    monkeypatch.setattr(_device, "_EAGER_COMPILES", collections.Counter())
    monkeypatch.setitem(_device._STORM, "warned", False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(301, 304):   # shapes no other test makes: each compiles the kernel
            dj.ones(n, 13).expm1()
        assert w == []
        x = dj.ones(304, 13)
        x.expm1()   # the fourth shape: one warning, here
        for n in range(305, 308):
            dj.ones(n, 13).expm1()
    storm = [x for x in w if "eager ops have compiled" in str(x.message)]
    assert len(storm) == 1 and "'expm1'" in str(storm[0].message) and "dynamic=" in str(storm[0].message)
    assert storm[0].filename == __file__ and storm[0].lineno == x_line(__file__, "x.expm1()   # the fourth")
    assert _device._EAGER_COMPILES["jit(expm1)"] == 7


def x_line(path: str, text: str) -> int:
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "x_line" not in line)


def test_bucket_batch_sampler_and_pad_sequence():
    lengths = [3, 17, 5, 30, 31, 12, 9, 40, 2]
    s = BucketBatchSampler(lengths, 2, [8, 16, 32, 64], seed=0)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(9)) and len(s) == len(batches) == 6
    for b in batches:
        assert len({s.bucket_of(lengths[i]) for i in b}) == 1 and len(b) <= 2
    seqs = [dj.ones(3, 2), dj.ones(5, 2)]
    out = pad_sequence(seqs, batch_first=True, padding_value=-1.0, multiple_of=4)
    ref = torch.nn.utils.rnn.pad_sequence([torch.ones(3, 2), torch.ones(5, 2)], batch_first=True, padding_value=-1.0)
    assert tuple(out.shape) == (2, 8, 2)
    assert_close(out[:, :5], ref)
    assert (out[:, 5:].numpy() == -1).all()
    assert tuple(pad_sequence(seqs, multiple_of=[4, 16]).shape) == (16, 2, 2)


def _step_keys(compiled, *args) -> tuple:
    """The structural key of one call of ``compiled`` (the recorded graph, inputs and outputs)."""
    keys, orig = [], compiled._plan

    def grab(cap, result, a):
        plan = orig(cap, result, a)
        keys.append(plan.key)
        return plan
    compiled._plan = grab
    try:
        compiled(*args)
    finally:
        compiled._plan = orig
    return keys[0]


def test_a_loops_backward_is_recorded_by_the_tape_once_then_replayed(monkeypatch):
    from dynajax.autograd import engine
    from dynajax.compile import backward as cb
    from dynajax.compile import capture as capture
    dj.manual_seed(0)
    cell, head = _HandWrittenGRUCell(3, 5), nn.Linear(5, 2)
    step = _cell_loop_step(cell, head)
    tape_runs, tape = [], engine.run_backward

    def counted(*a, **kw):   # the tape's runs while a compiled step records
        if getattr(capture._state, "cap", None) is not None:
            tape_runs.append(1)
        return tape(*a, **kw)
    monkeypatch.setattr(engine, "run_backward", counted)
    from dynajax.compile import guards
    monkeypatch.setattr(guards, "ENABLED", False)   # (every call recorded: the test counts the tape's runs)
    compiled = dj.compile(step)
    x = dj.randn(7, 2, 3)
    keys = []
    for _ in range(3):
        _compiled_equals_eager(compiled, step, x, cell, head)
        keys.append(_step_keys(compiled, x))
    assert compiled.stats.compiles == 1 and len(set(keys)) == 1
    assert len(tape_runs) == 1, tape_runs              # the first call's tape; the others replayed its eqns
    monkeypatch.setattr(cb, "TEMPLATES", False)
    by_tape = dj.compile(step)
    assert _step_keys(by_tape, x) == keys[0]             # the replayed graph is the tape's, op for op


def test_a_replayed_loop_backward_follows_what_changes_between_calls():
    """Detach points, frozen parameters, grads left from an earlier backward and forward Python numbers
    each change the backward; every call's grads equal eager (a stale template would not)."""
    dj.manual_seed(0)
    cell, head = _HandWrittenGRUCell(3, 5), nn.Linear(5, 2)

    def step(x, cut, p, clear):
        if clear:
            for q in (*cell.parameters(), *head.parameters()):
                q.grad = None
        h = dj.zeros(x.shape[1], cell.hidden_size)
        for t, xt in enumerate(x.unbind(0)):
            h = cell(xt, h)
            if t == cut:
                h = h.detach()
        loss = head(h).abs().pow(p).mean()
        loss.backward()
        return loss
    compiled = dj.compile(step)
    x = dj.randn(9, 2, 3)
    calls = [(-1, 2.0, True), (4, 2.0, True), (-1, 2.0, True), (-1, 3.0, True), (-1, 2.0, False),
             (-1, 2.0, True), (4, 2.0, True)]
    for i, (cut, p, clear) in enumerate(calls):
        if i == 5:
            cell.hh.weight.requires_grad_(False)
            cell.hh.weight.grad = None
        state = [q.grad.numpy().copy() if q.grad is not None else None for q in (*cell.parameters(), *head.parameters())]
        want = step(x, cut, p, clear)
        g_want = [q.grad.numpy().copy() if q.grad is not None else None for q in (*cell.parameters(), *head.parameters())]
        for q, g in zip((*cell.parameters(), *head.parameters()), state):   # back to the state before
            q.grad = None if g is None else dj.tensor(g)
        got = compiled(x, cut, p, clear)
        assert_close(got, want, rtol=1e-5, atol=1e-6)
        for q, g in zip((*cell.parameters(), *head.parameters()), g_want):
            if g is None:
                assert q.grad is None
            else:
                np.testing.assert_allclose(q.grad.numpy(), g, rtol=1e-4, atol=1e-6, err_msg=f"call {i}")


def test_a_bucketed_step_speculates_across_lengths_of_one_bucket():
    """Each call pads new argument tensors; the speculative run finds them by their place among the
    arguments, and the masks of the call's true sizes through their recipes (``padding.SizeMask``), so
    lengths in one bucket keep their runs, and every call's loss and grads are PyTorch's."""
    compiled = _bucketed_gru_lm_matches_torch((9, 12, 16, 10, 11, 14), seed=1, speculate=True)
    st = compiled.stats
    assert st.compiles == 1 and st.speculated == 4 and st.speculation_misses == 0


def test_a_loop_over_positions_infers_the_slice_shape_once(monkeypatch):
    """``x[:, t]`` for every ``t`` (and its backward) is one op whose result shape does not depend on ``t``:
    recording the loop infers that shape once per input shape, not once per position."""
    import importlib
    capture = importlib.import_module("dynajax.compile.capture")
    inferred = collections.Counter()
    real = capture.shapes_of

    def counting(fn, *a):
        inferred[fn.__name__] += 1
        return real(fn, *a)
    monkeypatch.setattr(capture, "shapes_of", counting)
    w = dj.tensor(np.linspace(-1, 1, 7, dtype=np.float32), requires_grad=True)

    def step(x):
        w.grad = None
        acc = dj.zeros(x.shape[0])
        for t in range(x.shape[1]):
            acc = acc + x[:, t] * w[t % 7]
        loss = acc.pow(2).sum()
        loss.backward()
        return loss
    x = np.random.default_rng(0).standard_normal((3, 41)).astype(np.float32)
    got = dj.compile(step, roll=False)(dj.tensor(x)).item()
    gw = w.grad.numpy().copy()
    tw = torch.tensor(np.linspace(-1, 1, 7, dtype=np.float32), requires_grad=True)
    tx = torch.from_numpy(x)
    want = sum(tx[:, t] * tw[t % 7] for t in range(41)).pow(2).sum()
    want.backward()
    assert_close(got, want.item(), rtol=1e-5)
    assert_close(gw, tw.grad.numpy(), rtol=1e-5)
    assert inferred["_index_impl"] <= 2 and inferred["_index_backward"] <= 2, inferred


@pytest.mark.parametrize("live", [[0, 1, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 1, 1], [0, 0, 0, 0, 0], [1, 0, 1, 0, 1]],
                         ids=["middle", "prefix", "suffix", "none", "gaps"])
@pytest.mark.parametrize("walk", [0, 1, -1])
def test_a_gated_loop_runs_its_gated_ops_only_where_live(live, walk):
    """A rolled loop over a padded length (``rolling._run_loop`` with ``gated`` eqns) runs them only at its live
    iterations: there their carries advance and their rows are stacked; elsewhere their carries pass on (and
    stack their last value) and their other rows are zeros, while the ungated eqns run at every iteration.
    Checked against the loop written out, wherever the live iterations are (``_live_span_loop`` runs those
    before the first live one and after the last without their gated eqns, those between with a select), and
    whichever end ``walk`` says they are at (a wrong guess only costs time)."""
    import jax.numpy as jnp

    from dynajax.compile.rolling import _run_loop
    body = (
        (lambda c: c + 1.0, {}, (("carry", (0, 0)),), 1),                  # ungated: a counter
        (lambda a, n, x: a + n * x, {}, (("carry", (1, 0)), ("int", (0, 0)), ("xs", 0)), 1),   # gated
        (lambda a: a * 2.0, {}, (("int", (1, 0)),), 1),                    # gated, stacked only
    )
    xs = np.arange(1.0, 6.0)
    got = _run_loop(jnp.float32(0.0), jnp.float32(10.0), jnp.asarray(xs, jnp.float32),
                    jnp.asarray(np.array(live, bool)), body=body, carry=((0, 0), (1, 0)), ncarry=2, nconst=0,
                    ys=((0, 0), (1, 0), (2, 0)), length=5, ngroups=1, gated=(1, 2), walk=walk)
    count, acc, rows = 0.0, 10.0, []
    for on, x in zip(live, xs):
        count += 1
        if on:
            acc += count * x
        rows.append((count, acc, 2 * acc if on else 0.0))
    np.testing.assert_array_equal([float(g) for g in got[:2]], [count, acc])
    for k in range(3):
        np.testing.assert_array_equal(np.asarray(got[2 + k]), [r[k] for r in rows])


@pytest.mark.parametrize("gated", [False, True], ids=["scan", "gated"])
def test_a_loop_reads_runs_of_rows_in_place_as_their_stack(gated):
    """A rolled loop's per-iteration inputs made of runs of rows of arrays (``rolling._view``: a backward loop
    reads the forward's states in reverse and then the initial state; ``e[:, t]`` reads along dim 1) are read in
    place at each iteration: the same results as the loop over their stack, made by numpy."""
    import jax.numpy as jnp

    from dynajax.compile.rolling import _run_loop
    rng = np.random.default_rng(0)
    states = rng.standard_normal((6, 2, 3)).astype(np.float32)   # a forward loop's stacked states
    h0 = rng.standard_normal((2, 3)).astype(np.float32)
    e = rng.standard_normal((2, 9, 3)).astype(np.float32)        # read along dim 1, from position 7 down
    body = ((lambda c, a, b: c * 0.5 + a * b, {}, (("carry", (0, 0)), ("xs", 0), ("xs", 1)), 1),)
    # group 0: states 4, 3, 2, 1, 0 then h0; group 1: e[:, 7], e[:, 6], ..., e[:, 2]
    want_a = np.concatenate([states[4::-1], h0[None]])
    want_b = np.moveaxis(e[:, 7:1:-1], 1, 0)
    live = np.array([1, 1, 1, 1, 1, 1], bool)
    extra = (jnp.asarray(live),) if gated else ()
    kw = {"body": body, "carry": ((0, 0),), "ncarry": 1, "nconst": 0, "ys": ((0, 0),), "length": 6, "ngroups": 2,
          "gated": (0,) if gated else None}
    stacked = _run_loop(jnp.zeros((2, 3)), jnp.asarray(want_a), jnp.asarray(want_b), *extra, **kw)
    viewed = _run_loop(jnp.zeros((2, 3)), jnp.asarray(states), jnp.asarray(h0), jnp.asarray(e), *extra,
                       views=(((5, 0, 4, -1), (1, None, 0, 0)), ((6, 1, 7, -1),)), **kw)
    c, rows = np.zeros((2, 3), np.float32), []
    for a, b in zip(want_a, want_b):
        c = c * 0.5 + a * b
        rows.append(c)
    for got in (stacked, viewed):
        np.testing.assert_allclose(np.asarray(got[0]), c, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(got[1]), np.stack(rows), rtol=1e-6)
