"""Exact padding (``compile.padding``) and the automatic dynamic-shape policy of ``dynajax.compile``: a step
run at padded sizes equals the unpadded eager step -- values, every gradient, optimizer state -- for every
op with a padding rule (from the op table), and for whole training steps fed new sizes every call."""
import copy

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax.compile import padding
from dynajax.ops.registry import OPS
from op_table import TABLE

TOL = dict(rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------- (a) every op: a rule or a reason
def test_every_registered_op_has_a_padding_rule_or_is_declared_unpaddable():
    library = {n for n, o in OPS.items() if o.impl.__module__.startswith("dynajax.")}
    missing = sorted(library - set(padding.RULES) - set(padding.CREATION) - set(padding.UNPADDABLE))
    assert not missing, f"ops with neither a padding rule nor a reason they cannot be padded: {missing}"
    both = sorted(set(padding.RULES) & set(padding.UNPADDABLE))
    assert not both, f"ops declared both paddable and unpaddable: {both}"
    assert all(padding.UNPADDABLE[n] for n in padding.UNPADDABLE)


def _run_entry(e, arrays, dim, compiled):
    """The entry's op on ``arrays`` (the first one data, padded along ``dim`` when ``compiled``; the others
    parameters): its outputs and the gradients of sum(out ** 2) w.r.t. the parameters and a scale of x."""
    params = [dj.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays[1:]]
    scale = dj.tensor(1.0, requires_grad=True)

    def run(x):
        for p in params + [scale]:
            p.grad = None
        xs = x * scale if x.is_floating_point() else x
        out = e.fn(xs, *params)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        loss = sum((o.double() ** 2).sum() for o in outs if o.is_floating_point())
        if isinstance(loss, dj.Tensor) and loss.requires_grad:
            loss.backward()
        return tuple(outs)
    fn = dj.compile(run, dynamic={"x": {dim: [8]}}) if compiled else run
    outs = fn(dj.tensor(arrays[0]))
    grads = [p.grad for p in params + [scale] if p.requires_grad]
    return [o.detach().numpy() for o in outs], [None if g is None else g.numpy() for g in grads], fn


# ops whose table sample cannot grow along its first input's dims (a shape written into the sample), or
# whose padded sample is not what the rule is about; every other op with a rule is tested on each dim
PADDED_MUST_RUN = ["add", "mul", "exp", "tanh", "sum", "mean", "var", "amax", "amin", "prod",
                   "logsumexp", "softmax", "log_softmax", "cumsum", "linear", "linear_bias",
                   "embedding", "to_dtype"]


@pytest.mark.parametrize("name", sorted(set(padding.RULES) & set(TABLE)))
def test_op_padding_rule_padded_equals_unpadded(name):
    """Each op with a padding rule, its first input padded along each of its dims in turn: outputs and
    gradients equal the unpadded eager op's (or, where the rule refuses that dim, padding stops and the
    call runs at its true shapes, still equal)."""
    e = TABLE[name]
    arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in e.inputs(np.random.default_rng(0))]
    if arrays[0].ndim == 0:
        pytest.skip("a 0-d first input has no dim to pad")   # counted below: PADDED_MUST_RUN
    padded = 0
    for dim in range(arrays[0].ndim):
        want, want_g, _ = _run_entry(e, arrays, dim, False)
        try:
            got, got_g, fn = _run_entry(e, arrays, dim, True)
        except (RuntimeError, ValueError, IndexError, TypeError):
            continue   # the sample's shape is written into the entry (``x.reshape(3, 2)``): not growable
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, err_msg=f"{name} padded along dim {dim}", equal_nan=True, **TOL)
        for a, b in zip(got_g, want_g):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(a, b, err_msg=f"{name} grad, padded along dim {dim}", **TOL)
        padded += fn.stats.padding_stopped is None
    if name in PADDED_MUST_RUN:
        assert padded, f"{name}: no dim of its sample ran padded"


def test_unpaddable_op_stops_padding_and_says_which():
    def step(x):
        return x.cummax(0)[1]                   # positions along a padded dim
    c = dj.compile(step, dynamic={"x": {0: [8]}})
    x = dj.tensor(np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32))
    with pytest.warns(UserWarning, match="stops padding"):
        got = c(x)
    np.testing.assert_allclose(got.numpy(), step(x).numpy(), rtol=1e-5)
    assert c.stats.padding_stopped.startswith("cummax")


def test_shape_arithmetic_and_stored_padded_values_stop_padding():
    kept = {}

    def divides(x):
        return x.sum() / x.shape[0]             # a Python number equal to the padded size

    def stores(x):
        kept["y"] = x * 2                        # a padded value left alive after the step
        return x.sum()

    x = dj.tensor(np.arange(5.0, dtype=np.float32))
    for fn, want in ((divides, 2.0), (stores, 10.0)):
        c = dj.compile(fn)
        c(dj.tensor(np.arange(3.0, dtype=np.float32)))
        assert np.allclose(c(x).item(), want)     # the second size: automatic padding, stopped
        assert c.stats.padding_stopped is not None
    assert kept["y"].shape == (5,)


# ---------------------------------------------------------------- (b) training steps, step for step
def _train(make_model, batches, loss_fn, dynamic=None, opt=dj.optim.Adam, stops=False):
    """Eager and compiled (automatic, or ``dynamic=``) training side by side from equal weights; asserts loss,
    parameters and optimizer state equal after every step; returns the compiled step."""
    dj.manual_seed(0)
    m1 = make_model()
    m2 = copy.deepcopy(m1)
    o1, o2 = opt(m1.parameters(), lr=1e-2), opt(m2.parameters(), lr=1e-2)

    def make(m, o):
        def step(x, y):
            o.zero_grad()
            loss = loss_fn(m, x, y)
            loss.backward()
            o.step()
            return loss
        return step
    eager = make(m1, o1)
    comp = dj.compile(make(m2, o2)) if dynamic is None else dj.compile(make(m2, o2), dynamic=dynamic)
    for x, y in batches:
        a = eager(dj.tensor(x), dj.tensor(y)).item()
        b = comp(dj.tensor(x), dj.tensor(y)).item()
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        for (n, p), q in zip(m1.named_parameters(), m2.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
        for p, q in zip(m1.parameters(), m2.parameters()):
            for k, v in o1.state[p].items():
                if isinstance(v, dj.Tensor):
                    np.testing.assert_allclose(o2.state[q][k].numpy(), v.numpy(), rtol=1e-5, atol=1e-7)
        for b1, b2 in zip(m1.buffers(), m2.buffers()):
            np.testing.assert_allclose(b2.numpy(), b1.numpy(), rtol=1e-5, atol=1e-6)
    assert (comp.stats.padding_stopped is not None) == stops, comp.stats.padding_stopped
    return comp


def _batches(sizes, feat=6, classes=4, ignore=None, seed=0):
    r = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = r.integers(0, classes, n)
        if ignore is not None:
            y[r.random(n) < 0.3] = ignore
        out.append((r.standard_normal((n, feat)).astype(np.float32), y))
    return out


SIZES = [5, 7, 3, 12, 6]


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))


@pytest.mark.parametrize("dynamic", [None, {"x": {0: [8, 16]}, "y": {0: [8, 16]}}])
@pytest.mark.parametrize("ignore", [None, 2])
def test_cross_entropy_with_and_without_ignore_index(dynamic, ignore):
    kw = {} if ignore is None else {"ignore_index": ignore}
    comp = _train(_mlp, _batches(SIZES, ignore=ignore), lambda m, x, y: F.cross_entropy(m(x), y, **kw), dynamic)
    assert comp.stats.dynamic_dims == ["x dim 0", "y dim 0"]
    assert comp.stats.compiles < len(SIZES)


def test_cross_entropy_class_weights_and_mean_sum_reductions():
    w = dj.tensor(np.linspace(0.5, 2.0, 4).astype(np.float32))

    def loss(m, x, y):
        out = m(x)
        return (F.cross_entropy(out, y, weight=w, ignore_index=1) + F.mse_loss(out, out.detach() * 0.5,
                reduction="sum") * 0.01 + out.pow(2).mean() + F.l1_loss(out, out.detach() + 1))
    _train(_mlp, _batches(SIZES), loss)


def test_batch_norm_and_layer_norm():
    def make():
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 4))
    _train(make, _batches(SIZES), lambda m, x, y: F.cross_entropy(m(x), y), opt=dj.optim.SGD)


def test_batch_norm_running_statistics_stay_alive_padded_steps_without_index_checks():
    """BatchNorm's running statistics outlive the step; computed from the real rows only, their masks span no
    padded dim, so padding goes on (a step with no index check: once, their gated copies hid this)."""
    def make():
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    comp = _train(make, _batches(SIZES), lambda m, x, y: (m(x).sum(1) - y.float()).pow(2).mean(), opt=dj.optim.SGD)
    assert comp.stats.dynamic_dims


def _seq_batches(lengths, batch=3, vocab=11, seed=0):
    r = np.random.default_rng(seed)
    return [(r.integers(0, vocab, (batch, t)), r.integers(0, vocab, (batch, t))) for t in lengths]


class _Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 11)

    def forward(self, tok):
        h = self.emb(tok)
        q, k, v = self.qkv(h).chunk(3, -1)
        s = q @ k.transpose(-1, -2) / 8 ** 0.5
        pad = tok == 0                                  # token 0: the data's own padding (a key mask)
        s = s.masked_fill(pad.unsqueeze(1), float("-inf"))
        return self.out(F.softmax(s, -1) @ v)


def test_attention_with_a_padding_mask_over_padded_keys():
    batches = _seq_batches([5, 9, 4, 7])
    for x, _ in batches:
        x[:, 0] = np.maximum(x[:, 0], 1)                # some real key in every row
        x[0, -1] = 0
    # (SGD: Adam would blow the rounding of the key bias's gradient, zero but for rounding, up to a step)
    _train(_Attn, batches, lambda m, x, y: F.cross_entropy(m(x).reshape(-1, 11), y.reshape(-1)), opt=dj.optim.SGD)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_recurrent_layer_over_padded_lengths(kind):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 6)
            self.rnn = getattr(nn, kind)(6, 8, batch_first=True)
            self.head = nn.Linear(8, 11)

        def forward(self, tok):
            ys, _ = self.rnn(self.emb(tok))
            return self.head(ys)
    _train(M, _seq_batches([5, 9, 4, 7]), lambda m, x, y: F.cross_entropy(m(x).reshape(-1, 11), y.reshape(-1)))


def test_python_loop_over_a_gru_cell_with_varying_lengths():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 6)
            self.cell = nn.GRUCell(6, 8)
            self.head = nn.Linear(8, 11)

        def forward(self, tok):
            e = self.emb(tok)
            h = dj.zeros(tok.shape[0], 8)
            outs = []
            for t in range(tok.shape[1]):
                h = self.cell(e[:, t], h)
                outs.append(self.head(h))
            return dj.stack(outs, 1)
    comp = _train(M, _seq_batches([5, 9, 4, 7, 6]),
                  lambda m, x, y: F.cross_entropy(m(x).reshape(-1, 11), y.reshape(-1)))
    assert comp.stats.dynamic_dims == ["x dim 1", "y dim 1"]
    assert comp.stats.compiles <= 3
    # the loop and its backward are rolled, and both skip the iterations that are padding
    assert len(comp.last_loops) >= 2 and all(lp.gate is not None for lp in comp.last_loops)


class _CellLoop(nn.Module):
    """A Python loop over an LSTM cell: forwards (``unbind``) or backwards over the positions, the per-step
    outputs stacked in their places, or a loss per position stacked."""

    def __init__(self, order="forward", per_step_loss=False):
        super().__init__()
        self.emb, self.cell, self.head = nn.Embedding(11, 6), nn.LSTMCell(6, 8), nn.Linear(8, 11)
        self.order, self.per_step_loss = order, per_step_loss

    def forward(self, tok, y):
        hc = (dj.zeros(tok.shape[0], 8), dj.zeros(tok.shape[0], 8))
        steps = list(enumerate(self.emb(tok).unbind(1)))
        outs = [None] * len(steps)
        for t, et in (steps if self.order == "forward" else steps[::-1]):
            hc = self.cell(et, hc)
            outs[t] = self.head(hc[0])
        if self.per_step_loss:
            return dj.stack([F.cross_entropy(o, y[:, t]) for t, o in enumerate(outs)]).mean()
        return F.cross_entropy(dj.stack(outs, 1).reshape(-1, 11), y.reshape(-1))


def test_rolled_loop_over_a_padded_length_skips_its_padding_exactly():
    comp = _train(_CellLoop, _seq_batches([5, 9, 4, 7, 6, 13, 10]), lambda m, x, y: m(x, y))
    assert comp.stats.padding_stopped is None
    gated = [lp for lp in comp.last_loops if lp.gate is not None]
    assert len(gated) >= 2                      # the forward loop and its backward
    # the scan's live rows for a true length 10 in a bucket of 16: an iteration runs while it or a neighbour
    # is real (iterations need not start where a time step does)
    import importlib
    rolling = importlib.import_module("dynajax.compile.rolling")
    fwd = gated[0]
    mask, axis, rank, at, _ = fwd.gate
    m = np.arange(16) < 10
    live = np.asarray(rolling._live_rows(m, axis=0, rank=1, at=at))
    assert live.tolist() == [min(ts) < 10 for ts in at]
    assert live.sum() < len(at)


@pytest.mark.parametrize("order, per_step_loss, why", [
    ("backward", False, "a loop running backwards over a padded length"),
    ("forward", True, "without their masks"),
])
def test_values_that_padding_would_reach_stop_padding(order, per_step_loss, why):
    """A loop running backwards over a padded length would start from padding; losses per position stacked
    without masks would average padding in: both record at the true shapes, equal to eager."""
    comp = _train(lambda: _CellLoop(order, per_step_loss), _seq_batches([5, 9, 4, 7]), lambda m, x, y: m(x, y),
                  stops=True)
    assert why in comp.stats.padding_stopped


def test_the_state_after_a_loop_over_a_padded_length_stops_padding():
    """The state a Python loop carries past a padded length (``h`` after ``for xt in x.unbind(0)``) went
    through padded steps: a loss made from it would not be eager's, so padding stops there (stacked
    per-step outputs, as in the test above, stay padded and exact)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.cell, self.head = nn.Embedding(11, 6), nn.GRUCell(6, 8), nn.Linear(8, 11)

        def forward(self, tok):
            h = dj.zeros(tok.shape[0], 8)
            for et in self.emb(tok).unbind(1):
                h = self.cell(et, h)
            return self.head(h)
    comp = _train(M, _seq_batches([5, 9, 4, 7, 6]), lambda m, x, y: F.cross_entropy(m(x), y[:, 0]), stops=True)
    assert "taken at one position of a padded dim" in comp.stats.padding_stopped


def test_a_padded_recording_returns_only_what_the_step_keeps():
    """The masks of a padded recording (one per position a loop reads) are the analysis's, not the step's:
    the padded executable has the outputs of the unpadded one."""
    comps = {}
    for dynamic in (False, None):
        comps[dynamic] = _train(_CellLoop, _seq_batches([5, 9, 4, 7]), lambda m, x, y: m(x, y), dynamic=dynamic)
    assert comps[None].stats.dynamic_dims and comps[None].stats.padding_stopped is None
    assert comps[None].stats.compiled_outputs == comps[False].stats.compiled_outputs > 0


def test_a_call_that_must_compile_covers_the_largest_size_seen():
    """The automatic policy: a call that fits no compiled bucket compiles the bucket of the largest size met so
    far, so later sizes up to it reuse that executable instead of compiling their own buckets."""
    a = dj.compile(lambda x: (x * x).sum())
    sizes = [40, 10, 20, 30, 50, 12]
    for n in sizes:
        x = np.arange(n, dtype=np.float32) / 7
        np.testing.assert_allclose(a(dj.tensor(x)).item(), float((x * x).sum()), rtol=1e-5)
    # 40 at its own size, then 10 in the bucket of 40 (64), which every later size fits: 20, 30 and 12 run in
    # it although their own buckets are smaller
    assert a.stats.compiles == 2 and a.stats.bucket_hits == 4 and a.stats.bucket_reuses == 3


def test_the_bucket_price_counts_compiles_not_disk_loads():
    from dynajax.compile.bucketing import Padder
    p = Padder(lambda x: x, auto=True)
    assert p.price() == 0.0
    p.paid += [(0.2, True), (0.4, True)]
    assert p.price() == pytest.approx(5 * 0.3)     # only loads: a new size would compile
    p.paid.append((2.0, False))
    assert p.price() == pytest.approx(2.0)


def test_a_dim_that_varies_after_another_is_padded_too():
    """The automatic policy keeps watching: once dim 1 is padded, a batch (dim 0) that starts changing joins
    it, rather than compiling an executable per batch size at the padded length (six before)."""
    a = dj.compile(lambda x: (x * x).sum(1).max())
    for shape in [(3, 5), (3, 6), (4, 6), (5, 6), (6, 7), (7, 5)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 9
        np.testing.assert_allclose(a(dj.tensor(x)).item(), float((x * x).sum(1).max()), rtol=1e-6)
    assert a.stats.dynamic_dims == ["x dim 1", "x dim 0"] and a.stats.compiles <= 4, a.stats


def test_dynamic_false_turns_the_automatic_policy_off():
    c = dj.compile(lambda x: x.sum(), dynamic=False)
    for n in (3, 4, 5):
        c(dj.ones(n))
    assert c.stats.compiles == 3 and c.stats.dynamic_dims == []
    a = dj.compile(lambda x: x.sum())
    for n in (3, 4, 5, 6, 7):
        assert a(dj.ones(n)).item() == n
    assert a.stats.compiles == 3 and a.stats.dynamic_dims == ["x dim 0"]
    assert "padded dims x dim 0" in a.stats.recompile_reasons[-1]
