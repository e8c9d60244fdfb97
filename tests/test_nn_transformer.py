"""Transformer-style training against PyTorch: attention masks, MultiheadAttention's other key/value
layouts, embeddings with ``max_norm``/``scale_grad_by_freq``, LayerNorm's dtypes, gradient clipping,
and a small GPT-like language model trained the same way by PyTorch, dynajax eagerly and compiled."""
from __future__ import annotations

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import assert_close, to_np

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _arr(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _same_weights(tm, dm) -> None:
    """Give the dynajax module the PyTorch module's parameters (same names, same order)."""
    assert list(dm.state_dict()) == list(tm.state_dict())
    dm.load_state_dict(tm.state_dict())


def _grads_match(tm, dm, **tol) -> None:
    for (name, tp), (_, dp) in zip(tm.named_parameters(), dm.named_parameters()):
        assert (tp.grad is None) == (dp.grad is None), name
        if tp.grad is not None:
            assert_close(dp.grad, tp.grad, msg=f"grad of {name}", **tol)


# ---------------------------------------------------------------- MultiheadAttention
_MHA_OPTIONS = [dict(kdim=5, vdim=3, bias=False), dict(add_bias_kv=True),
                dict(kdim=5, vdim=6, add_bias_kv=True, add_zero_attn=True)]


@pytest.mark.parametrize("opts", _MHA_OPTIONS, ids=lambda o: "-".join(o))
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_key_value_layouts_match_torch(opts, batch_first):
    """Keys and values of other sizes (separate q/k/v projection weights), the learned bias key/value and
    the zero key/value: outputs, weights, parameter and input gradients, with a causal mask and padding."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    E, H, L, S, N = 8, 2, 3, 4, 2
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, **opts)
    dm = nn.MultiheadAttention(E, H, batch_first=batch_first, **opts)
    _same_weights(tm, dm)
    kd, vd = opts.get("kdim", E), opts.get("vdim", E)
    lay = (lambda *s: (s[1], s[0], s[2])) if batch_first else (lambda *s: s)
    arrays = [_arr(rng, *lay(L, N, E)), _arr(rng, *lay(S, N, kd)), _arr(rng, *lay(S, N, vd))]
    kpm = np.zeros((N, S), bool)
    kpm[0, -1] = True
    causal = np.triu(np.ones((L, S), bool), 1)
    # the causal hint without weights or padding: PyTorch applies the causal mask over every key, the
    # appended bias/zero ones included, instead of the given mask
    for need_weights, masks in ((True, dict(key_padding_mask=kpm, attn_mask=causal)),
                                (False, dict(key_padding_mask=kpm, attn_mask=causal)),
                                (False, dict(attn_mask=causal, is_causal=True))):
        tx = [torch.tensor(a, requires_grad=True) for a in arrays]
        dx = [dj.tensor(a, requires_grad=True) for a in arrays]
        conv = lambda lib: {k: lib.tensor(v) if isinstance(v, np.ndarray) else v  # noqa: E731
                            for k, v in masks.items()}
        to, tw = tm(*tx, need_weights=need_weights, average_attn_weights=False, **conv(torch))
        do, dw = dm(*dx, need_weights=need_weights, average_attn_weights=False, **conv(dj))
        assert_close(do, to, rtol=1e-5, atol=1e-6)
        assert (dw is None) == (tw is None)
        if tw is not None:
            assert_close(dw, tw, rtol=1e-5, atol=1e-6)
        g = _arr(rng, *to.shape)
        tm.zero_grad()
        dm.zero_grad()
        (to * torch.tensor(g)).sum().backward()
        (do * dj.tensor(g)).sum().backward()
        _grads_match(tm, dm, rtol=1e-5, atol=1e-6)
        for a, b in zip(dx, tx):
            assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def test_multihead_attention_unbatched_kdim():
    rng = np.random.default_rng(1)
    tm, dm = torch.nn.MultiheadAttention(8, 2, kdim=3, vdim=5), nn.MultiheadAttention(8, 2, kdim=3, vdim=5)
    _same_weights(tm, dm)
    q, k, v = _arr(rng, 3, 8), _arr(rng, 4, 3), _arr(rng, 4, 5)
    kpm = np.array([False, True, False, False])
    to, tw = tm(torch.tensor(q), torch.tensor(k), torch.tensor(v), key_padding_mask=torch.tensor(kpm))
    do, dw = dm(dj.tensor(q), dj.tensor(k), dj.tensor(v), key_padding_mask=dj.tensor(kpm))
    assert_close(do, to, rtol=1e-5, atol=1e-6)
    assert_close(dw, tw, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- rows whose every key is masked
def test_sdpa_row_with_every_key_masked_is_zero():
    """PyTorch's attention gives 0 (and a 0 gradient) for a query row that may attend to nothing, for a
    bool mask and for a float mask of -inf alike; the plain softmax's NaN spread to every gradient."""
    rng = np.random.default_rng(2)
    q, k, v = _arr(rng, 2, 2, 3, 4), _arr(rng, 2, 2, 5, 4), _arr(rng, 2, 2, 5, 4)
    keep = rng.random((3, 5)) > 0.3
    keep[1] = False
    for mask in (keep, np.where(keep, 0.0, -np.inf).astype(np.float32)):
        tx = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        dx = [dj.tensor(a, requires_grad=True) for a in (q, k, v)]
        to = TF.scaled_dot_product_attention(*tx, attn_mask=torch.tensor(mask))
        do = F.scaled_dot_product_attention(*dx, attn_mask=dj.tensor(mask))
        assert_close(do, to, rtol=1e-5, atol=1e-6)
        g = _arr(rng, *to.shape)
        (to * torch.tensor(g)).sum().backward()
        (do * dj.tensor(g)).sum().backward()
        for a, b in zip(dx, tx):
            assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_with_a_fully_padded_sequence_matches_torch(norm_first):
    """A batch entry whose every position is padding: PyTorch's encoder layer (attention without weights)
    gives finite outputs and gradients, so a padded batch trains; NaN here poisoned every parameter."""
    rng = np.random.default_rng(3)
    kw = dict(dim_feedforward=16, dropout=0.0, norm_first=norm_first)
    tm, dm = torch.nn.TransformerEncoderLayer(8, 2, **kw), nn.TransformerEncoderLayer(8, 2, **kw)
    _same_weights(tm, dm)
    x = _arr(rng, 4, 3, 8)
    kpm = np.zeros((3, 4), bool)
    kpm[1] = True
    to = tm(torch.tensor(x), src_key_padding_mask=torch.tensor(kpm))
    do = dm(dj.tensor(x), src_key_padding_mask=dj.tensor(kpm))
    assert_close(do, to, rtol=1e-5, atol=1e-5)
    to.pow(2).sum().backward()
    do.pow(2).sum().backward()
    _grads_match(tm, dm, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stack", [False, True])
def test_decoder_memory_is_causal_hint_as_torch(stack):
    """``memory_is_causal`` reaches the cross-attention (it was dropped): without weights or padding PyTorch
    applies the causal mask there in place of ``memory_mask``, and requires a mask with the hint."""
    rng = np.random.default_rng(9)
    tl = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    dl = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    _same_weights(tl, dl)
    tm, dm = (torch.nn.TransformerDecoder(tl, 1), nn.TransformerDecoder(dl, 1)) if stack else (tl, dl)
    _same_weights(tm, dm)
    x, mem = _arr(rng, 3, 2, 8), _arr(rng, 4, 2, 8)
    other = np.zeros((3, 4), bool)
    other[0, 1] = True   # not the causal mask
    to = tm(torch.tensor(x), torch.tensor(mem), memory_mask=torch.tensor(other), memory_is_causal=True)
    do = dm(dj.tensor(x), dj.tensor(mem), memory_mask=dj.tensor(other), memory_is_causal=True)
    assert_close(do, to, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        dm(dj.tensor(x), dj.tensor(mem), memory_is_causal=True)


# ---------------------------------------------------------------- Embedding
def _embedding_steps(module, lib, idxs, compiled=None):
    opt = lib.optim.SGD(module.parameters(), lr=0.5)

    def step(i):
        loss = module(i).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    if compiled is not None:
        step = dj.compile(step, replay=compiled == "replay")
    losses = [to_np(step(lib.tensor(i))) for i in idxs]
    return losses, to_np(module.weight)


@pytest.mark.parametrize("kw", [dict(scale_grad_by_freq=True), dict(scale_grad_by_freq=True, padding_idx=1),
                                dict(max_norm=1.5), dict(max_norm=1.5, norm_type=1.0, padding_idx=1),
                                dict(max_norm=0.8, norm_type=float("inf"), scale_grad_by_freq=True)],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_embedding_options_train_as_torch(kw):
    """``scale_grad_by_freq`` (each row's gradient divided by how often the batch used it; it was
    ignored) and ``max_norm`` (the used rows renormalized in place; it raised NotImplementedError),
    eagerly, compiled and replayed."""
    rng = np.random.default_rng(4)
    idxs = [rng.integers(0, 10, (3, 4)) for _ in range(4)]
    torch.manual_seed(0)
    tm = torch.nn.Embedding(10, 4, **kw)
    init = tm.weight.detach().clone()
    expect = _embedding_steps(tm, torch, idxs)
    for compiled in (None, "default", "replay"):
        dm = nn.Embedding(10, 4, **kw)
        dm.load_state_dict({"weight": init})
        losses, weight = _embedding_steps(dm, dj, idxs, compiled)
        for a, e in zip(losses + [weight], expect[0] + [expect[1]]):
            assert_close(a, e, rtol=1e-5, atol=1e-6, msg=f"{compiled}")


@pytest.mark.parametrize("kw", [dict(padding_idx=2), dict(scale_grad_by_freq=True),
                                dict(padding_idx=2, scale_grad_by_freq=True)],
                         ids=lambda kw: "-".join(kw))
@pytest.mark.x64
def test_embedding_lowered_gradients_are_torch_semantics(kw):
    """``lower`` + ``jax.grad`` and ``dj.func.grad`` differentiate the op's impl with JAX: it must give
    PyTorch's gradient as the tape does (none into the padding row, rows divided by their counts), to
    first and second order. (PyTorch's own double backward leaves the count scaling out of the transpose
    of its backward; the tape transposes it.)"""
    import jax
    rng = np.random.default_rng(5)
    w, idx = dj.tensor(rng.standard_normal((5, 3))), dj.tensor(rng.integers(0, 5, (12,)))
    first = lambda w: F.embedding(idx, w, **kw).pow(3).sum()  # noqa: E731

    def second(w):
        g = dj.autograd.grad(first(w), w, create_graph=True)[0]
        return g.pow(2).sum()

    tw = torch.tensor(to_np(w), requires_grad=True)
    TF.embedding(torch.tensor(to_np(idx)), tw, **kw).pow(3).sum().backward()
    for f in (first, second):
        leaf = w.detach().requires_grad_()
        tape = dj.autograd.grad(f(leaf), leaf)[0]
        lowered = jax.grad(dj.lower(f, w).fn)(w._value)
        assert_close(lowered, tape, rtol=1e-10, atol=1e-10, msg=f.__name__)
        if f is first:
            assert_close(tape, tw.grad, rtol=1e-10, atol=1e-10)
    assert_close(dj.func.grad(first)(w), tw.grad, rtol=1e-10, atol=1e-10)   # (through the lowering too)


def test_embedding_scale_grad_by_freq_in_a_projected_lookup():
    """A compiled ``linear(embedding(...))`` (which the compiler may compute as a lookup in the projected
    table) keeps the scaling."""
    rng = np.random.default_rng(5)
    idx = dj.tensor(rng.integers(0, 5, (12,)))
    emb, lin = nn.Embedding(5, 3, scale_grad_by_freq=True), nn.Linear(3, 2)

    def step(i):
        emb.zero_grad()
        lin(emb(i)).pow(2).sum().backward()
        return emb.weight.grad

    eager = to_np(step(idx)).copy()
    assert_close(dj.compile(step)(idx), eager, rtol=1e-5, atol=1e-6)


def test_embedding_repr_shows_every_option():
    kw = dict(padding_idx=1, max_norm=2.0, norm_type=1.0, scale_grad_by_freq=True, sparse=True)
    assert repr(nn.Embedding(5, 3, **kw)) == repr(torch.nn.Embedding(5, 3, **kw))


# ---------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("params", ["same", "float32"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_layer_norm_low_precision_input(dtype, params):
    """A half/bfloat16 input is normalized in float32 and returned in its own dtype, float32 weights
    included (the result was float32, promoted by the weights)."""
    rng = np.random.default_rng(6)
    x, w, b = _arr(rng, 3, 8) * 3 + 1, _arr(rng, 8), _arr(rng, 8)
    td, dd = getattr(torch, dtype), getattr(dj, dtype)
    tp, dp = (td, dd) if params == "same" else (torch.float32, dj.float32)
    to = TF.layer_norm(torch.tensor(x).to(td), (8,), torch.tensor(w).to(tp), torch.tensor(b).to(tp))
    do = F.layer_norm(dj.tensor(x).to(dd), (8,), dj.tensor(w).to(dp), dj.tensor(b).to(dp))
    assert do.dtype == dd
    assert_close(do.to(dj.float32), to.float(), rtol=0, atol=0)


# ---------------------------------------------------------------- gradient clipping
def test_get_total_norm_and_clip_grads_with_norm_match_torch():
    rng = np.random.default_rng(7)
    grads = [_arr(rng, 3, 4), _arr(rng, 5)]
    tp = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    dp = [dj.zeros(*g.shape, requires_grad=True) for g in grads]
    for t, d, g in zip(tp, dp, grads):
        t.grad, d.grad = torch.tensor(g), dj.tensor(g)
    for norm_type in (2.0, 1.0, float("inf")):
        tn = torch.nn.utils.get_total_norm([p.grad for p in tp], norm_type)
        dn = nn.utils.get_total_norm([p.grad for p in dp], norm_type)
        assert_close(dn, tn, rtol=1e-6, atol=1e-6)
    torch.nn.utils.clip_grads_with_norm_(tp, 0.5, tn)
    nn.utils.clip_grads_with_norm_(dp, 0.5, dn)
    for t, d in zip(tp, dp):
        assert_close(d.grad, t.grad, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- errors
def _errors(lib, F_):
    """Calls PyTorch rejects, each made with ``lib`` (torch or dynajax)."""
    nn_ = lib.nn
    z = lambda *s: lib.zeros(*s)  # noqa: E731
    mha = nn_.MultiheadAttention(8, 2)
    b = lambda *s: lib.zeros(*s, dtype=lib.bool)  # noqa: E731
    return {
        "mha is_causal without mask": lambda: mha(z(3, 2, 8), z(3, 2, 8), z(3, 2, 8), is_causal=True),
        "mha 2-D key for 3-D query": lambda: mha(z(3, 2, 8), z(4, 8), z(4, 8)),
        "mha 4-D query": lambda: mha(z(1, 3, 2, 8), z(1, 4, 2, 8), z(1, 4, 2, 8)),
        "mha padding mask length": lambda: mha(z(3, 2, 8), z(4, 2, 8), z(4, 2, 8), key_padding_mask=b(2, 3)),
        "mha 4-D attn_mask": lambda: mha(z(3, 2, 8), z(4, 2, 8), z(4, 2, 8), attn_mask=b(2, 2, 3, 4)),
        "mha attn_mask shape": lambda: mha(z(3, 2, 8), z(4, 2, 8), z(4, 2, 8), attn_mask=b(3, 3)),
        "mha integer mask": lambda: mha(z(3, 2, 8), z(4, 2, 8), z(4, 2, 8),
                                        attn_mask=lib.zeros(3, 4, dtype=lib.int64)),
        "sdpa integer mask": lambda: F_.scaled_dot_product_attention(
            z(1, 3, 4), z(1, 3, 4), z(1, 3, 4), attn_mask=lib.zeros(3, 3, dtype=lib.int64)),
        "sdpa 1-D inputs": lambda: F_.scaled_dot_product_attention(z(4), z(4), z(4)),
        "sdpa dtypes": lambda: F_.scaled_dot_product_attention(z(1, 3, 4), z(1, 3, 4).double(), z(1, 3, 4)),
        "sdpa dropout_p": lambda: F_.scaled_dot_product_attention(z(1, 3, 4), z(1, 3, 4), z(1, 3, 4), dropout_p=1.5),
        "transformer batch": lambda: nn_.Transformer(8, 2, 1, 1, 16)(z(4, 2, 8), z(3, 3, 8)),
        "transformer d_model": lambda: nn_.Transformer(8, 2, 1, 1, 16)(z(4, 2, 6), z(3, 2, 6)),
        "embedding float indices": lambda: F_.embedding(z(3), z(5, 2)),
        "embedding padding_idx": lambda: F_.embedding(lib.zeros(3, dtype=lib.int64), z(5, 2), padding_idx=7),
        "embedding 1-D weight": lambda: F_.embedding(lib.zeros(3, dtype=lib.int64), z(5)),
        "layer_norm weight shape": lambda: F_.layer_norm(z(2, 4), (4,), z(3)),
        "layer_norm mixed dtype": lambda: F_.layer_norm(z(2, 4).double(), (4,), z(4)),
        "gelu of integers": lambda: F_.gelu(lib.ones(3, dtype=lib.int64), approximate="tanh"),
        "embedding _weight shape": lambda: nn_.Embedding(5, 3, _weight=z(4, 3)),
    }


@pytest.mark.parametrize("case", list(_errors(dj, F)))
def test_rejects_what_torch_rejects(case):
    with pytest.raises(Exception) as te:
        _errors(torch, TF)[case]()
    with pytest.raises(Exception) as de:
        _errors(dj, F)[case]()
    assert type(de.value) is type(te.value)
    assert str(de.value) == str(te.value)


# ---------------------------------------------------------------- a small GPT-like LM
V, E, H, T, B = 13, 8, 2, 5, 3


def _gpt(lib):
    nn_ = lib.nn

    class GPT(nn_.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn_.Embedding(V, E, padding_idx=0, max_norm=2.0)
            self.pos = nn_.Embedding(T, E)
            layer = nn_.TransformerEncoderLayer(E, H, 2 * E, dropout=0.0, batch_first=True, norm_first=True,
                                                activation=lambda x: lib.nn.functional.gelu(x, approximate="tanh"))
            extra = {"enable_nested_tensor": False} if lib is torch else {}
            self.blocks = nn_.TransformerEncoder(layer, 1, **extra)
            self.ln = nn_.LayerNorm(E, bias=False)
            self.head = nn_.Linear(E, V, bias=False)
            self.head.weight = self.tok.weight   # tied

        def forward(self, idx, pad):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1]))
            causal = lib.ones(idx.shape[1], idx.shape[1], dtype=lib.bool).triu(1)
            return self.head(self.ln(self.blocks(x, mask=causal, src_key_padding_mask=pad)))

    return GPT()


def _train_gpt(lib, model, batches, compiled=None):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = lib.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                          lr=1e-2, betas=(0.9, 0.95))
    sched = lib.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))

    def step(x, y, pad):
        loss = lib.nn.functional.cross_entropy(model(x, pad).reshape(-1, V), y.reshape(-1), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss

    if compiled is not None:
        step = dj.compile(step, replay=compiled == "replay")
    losses = []
    for x, y, pad in batches:
        losses.append(step(lib.tensor(x), lib.tensor(y), lib.tensor(pad)).item())
        sched.step()
    return losses, step


def test_gpt_like_lm_trains_as_torch():
    """Ten AdamW steps (weight decay, warmup schedule, clipping) of a tied-embedding causal LM with a
    ``max_norm`` token table and a padded sequence, by PyTorch and by dynajax compiled with ``replay=True``
    (whose first calls are recorded and run as the default mode runs them, the rest replayed; eager runs
    of the same layers are compared with PyTorch above)."""
    rng = np.random.default_rng(8)
    batches = []
    for _ in range(10):
        x, y = rng.integers(1, V, (B, T)), rng.integers(0, V, (B, T))
        pad = np.zeros((B, T), bool)
        pad[0, -2:] = True
        batches.append((x, y, pad))
    torch.manual_seed(0)
    tm = _gpt(torch)
    init = {k: v.detach().clone() for k, v in tm.state_dict().items()}
    expect, _ = _train_gpt(torch, tm, batches)
    # the key bias's gradient is 0 up to rounding (softmax ignores a shift shared by a row), so Adam's
    # normalized steps of that rounding noise are not compared
    key_bias = slice(E, 2 * E)
    dm = _gpt(dj)
    dm.load_state_dict(init)
    losses, step = _train_gpt(dj, dm, batches, "replay")
    assert step.stats.replayed >= 5 and step.stats.compiles == 1
    assert_close(np.array(losses), np.array(expect), rtol=1e-4, atol=1e-5)
    for (name, tp), (_, dp) in zip(tm.named_parameters(), dm.named_parameters()):
        a, e = to_np(dp), to_np(tp)
        if name.endswith("in_proj_bias"):
            a, e = np.delete(a, key_bias), np.delete(e, key_bias)
        assert_close(a, e, rtol=1e-4, atol=1e-5, msg=name)
