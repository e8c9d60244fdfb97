"""Recurrent and attention layers against torch.nn (same weights, outputs, gradients)."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import XLA_CPU_ONLY, assert_close, compare
from test_nn_layers import check_module, randn


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_recurrent_layers(name):
    kw = dict(num_layers=2, bidirectional=True, batch_first=True)
    check_module(getattr(nn, name)(3, 4, **kw), getattr(torch.nn, name)(3, 4, **kw), randn(2, 5, 3), atol=1e-5)


def test_lstm_initial_state_unbatched_and_cells():
    m, t = nn.LSTM(3, 4), torch.nn.LSTM(3, 4)
    m.load_state_dict(t.state_dict())
    x, h, c = randn(5, 3), randn(1, 4), randn(1, 4)
    od, (hd, cd) = m(dj.tensor(x), (dj.tensor(h), dj.tensor(c)))
    ot, (ht, ct) = t(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
    assert_close(od, ot, atol=1e-6)
    assert_close(hd, ht, atol=1e-6)
    assert_close(cd, ct, atol=1e-6)
    for name in ["RNNCell", "LSTMCell", "GRUCell"]:
        check_module(getattr(nn, name)(3, 4), getattr(torch.nn, name)(3, 4), randn(2, 3))
    check_module(nn.RNN(3, 4, nonlinearity="relu", bias=False), torch.nn.RNN(3, 4, nonlinearity="relu", bias=False),
                 randn(4, 2, 3))
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        nn.GRU(3, 4)(dj.zeros(5, 2, 3), dj.zeros(1, 3, 4))


@pytest.mark.parametrize("name, kw", [("RNNCell", dict(nonlinearity="relu")), ("RNNCell", dict(bias=False)),
                                      ("GRUCell", dict(bias=False)), ("LSTMCell", dict(bias=False))])
def test_cells_with_given_state_and_options(name, kw):
    m, t = getattr(nn, name)(3, 4, **kw), getattr(torch.nn, name)(3, 4, **kw)
    if name == "LSTMCell":
        _check_lstm_cell(m, t, randn(2, 3), randn(2, 4), randn(2, 4))
    else:
        check_module(m, t, randn(2, 3), randn(2, 4), atol=1e-6)


def _check_lstm_cell(m, t, x, h, c):
    m.load_state_dict(t.state_dict())
    xs = [dj.tensor(a, requires_grad=True) for a in (x, h, c)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, h, c)]
    hd, cd = m(xs[0], (xs[1], xs[2]))
    ht, ct = t(ts[0], (ts[1], ts[2]))
    assert_close(hd, ht, atol=1e-6)
    assert_close(cd, ct, atol=1e-6)
    (hd.sum() * 2 + (cd * cd).sum()).backward()
    (ht.sum() * 2 + (ct * ct).sum()).backward()
    for a, b in zip(xs + list(m.parameters()), ts + list(t.parameters())):
        assert_close(a.grad, b.grad, atol=1e-5)


def test_a_cell_step_is_one_op_and_its_backward_one_op():
    cell = nn.GRUCell(3, 4)
    h = cell(dj.randn(2, 3, requires_grad=True), dj.randn(2, 4))
    assert h.grad_fn.name() == "RnnCellBackward0"
    assert [type(e[0]).__name__ for e in h.grad_fn.next_functions if e[0] is not None].count("AccumulateGrad") == 5


@pytest.mark.parametrize("call", [
    lambda m, lib: m.GRUCell(3, 4)(lib.randn(2, 5)),
    lambda m, lib: m.GRUCell(3, 4)(lib.randn(2, 3, dtype=lib.float64)),
    lambda m, lib: m.GRUCell(3, 4)(lib.randn(2, 3), lib.randn(3, 4)),
    lambda m, lib: m.RNNCell(3, 4)(lib.randn(2, 3), lib.randn(2, 5)),
    lambda m, lib: m.GRUCell(3, 4)(lib.randn(2, 3), lib.randn(2, 4, dtype=lib.float64)),
    lambda m, lib: m.LSTMCell(3, 4)(lib.randn(2, 3), (lib.randn(2, 4), lib.randn(3, 4))),
    lambda m, lib: m.LSTMCell(3, 4)(lib.randn(2, 2, 3)),
])
def test_cell_errors_match_pytorch(call):
    with pytest.raises(Exception) as want:
        call(torch.nn, torch)
    with pytest.raises(type(want.value)) as got:
        call(nn, dj)
    assert str(got.value) == str(want.value)


def test_rnn_dropout_between_layers_train_only():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = dj.randn(3, 2, 3)
    m.eval()
    a, b = m(x)[0], m(x)[0]
    assert_close(a, b)


def test_multihead_attention():
    for kw in [dict(), dict(batch_first=True)]:
        m, t = nn.MultiheadAttention(8, 2, **kw), torch.nn.MultiheadAttention(8, 2, **kw)
        assert list(m.state_dict()) == list(t.state_dict())
        m.load_state_dict(t.state_dict())
        q, k = randn(3, 2, 8), randn(4, 2, 8)
        if kw:
            q, k = q.transpose(1, 0, 2).copy(), k.transpose(1, 0, 2).copy()
        kpm = np.array([[False, False, True, False], [False, False, False, False]])
        od, wd = m(dj.tensor(q), dj.tensor(k), dj.tensor(k), key_padding_mask=dj.tensor(kpm))
        ot, wt = t(torch.tensor(q), torch.tensor(k), torch.tensor(k), key_padding_mask=torch.tensor(kpm))
        assert_close(od, ot, atol=1e-6)
        assert_close(wd, wt, atol=1e-6)
    m, t = nn.MultiheadAttention(8, 2), torch.nn.MultiheadAttention(8, 2)
    m.load_state_dict(t.state_dict())
    q = randn(3, 2, 8)
    mask = np.triu(np.ones((3, 3), bool), 1)
    od, _ = m(dj.tensor(q), dj.tensor(q), dj.tensor(q), attn_mask=dj.tensor(mask))
    ot, _ = t(torch.tensor(q), torch.tensor(q), torch.tensor(q), attn_mask=torch.tensor(mask))
    assert_close(od, ot, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer(norm_first):
    kw = dict(dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=norm_first)
    check_module(nn.TransformerEncoderLayer(8, 2, **kw), torch.nn.TransformerEncoderLayer(8, 2, **kw),
                 randn(2, 3, 8), atol=1e-5)


def test_transformer_stacks_state_dict_names():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2)
    tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    assert list(enc.state_dict()) == list(tenc.state_dict())
    dec = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    tdec = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    dec.load_state_dict(tdec.state_dict())
    x, mem = randn(3, 2, 8), randn(4, 2, 8)
    assert_close(dec(dj.tensor(x), dj.tensor(mem), tgt_is_causal=True,
                     tgt_mask=dj.tensor(np.triu(np.ones((3, 3), bool), 1))),
                 tdec(torch.tensor(x), torch.tensor(mem), tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(3),
                      tgt_is_causal=True), atol=1e-5)


def test_scaled_dot_product_attention():
    compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
            randn(2, 3, 4), randn(2, 3, 4), randn(2, 3, 5), atol=1e-6)
    mask = np.array([[True, False, True], [True, True, True]])
    compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dj.tensor(mask)),
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(mask)),
            randn(2, 2, 4), randn(2, 3, 4), randn(2, 3, 5), atol=1e-6)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_packed_sequences_through_rnn(name):
    from dynajax.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    kw = dict(num_layers=1, bidirectional=True, batch_first=True)
    m, t = getattr(nn, name)(3, 4, **kw), getattr(torch.nn, name)(3, 4, **kw)
    m.load_state_dict(t.state_dict())
    x, lengths = randn(3, 5, 3), [2, 5, 3]
    xd, xt = dj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pd = pack_padded_sequence(xd, lengths, batch_first=True, enforce_sorted=False)
    pt = torch.nn.utils.rnn.pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
    od, hd = m(pd)
    ot, ht = t(pt)
    assert_close(od.data, ot.data, atol=1e-6)
    hd, ht = (hd[0], ht[0]) if name == "LSTM" else (hd, ht)
    assert_close(hd, ht, atol=1e-6)
    ud, ld = pad_packed_sequence(od, batch_first=True)
    ut, lt = torch.nn.utils.rnn.pad_packed_sequence(ot, batch_first=True)
    assert_close(ud, ut, atol=1e-6)
    assert ld.tolist() == lt.tolist()
    (ud.sum() + hd.sum()).backward()
    (ut.sum() + ht.sum()).backward()
    assert_close(xd.grad, xt.grad, atol=1e-6)
    assert_close(m.weight_hh_l0_reverse.grad, t.weight_hh_l0_reverse.grad, atol=1e-5)


def test_full_transformer_matches_torch():
    kw = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
              batch_first=True)
    m, t = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert list(m.state_dict()) == list(t.state_dict())
    m.load_state_dict(t.state_dict())
    src, tgt = randn(2, 4, 8), randn(2, 3, 8)
    md = nn.Transformer.generate_square_subsequent_mask(3)
    assert_close(md, torch.nn.Transformer.generate_square_subsequent_mask(3))
    assert_close(m(dj.tensor(src), dj.tensor(tgt), tgt_mask=md),
                 t(torch.tensor(src), torch.tensor(tgt), tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(3)),
                 atol=1e-5)


@pytest.mark.x64
@pytest.mark.parametrize("only_ys", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("mode", ["RNN_TANH", "RNN_RELU", "GRU", "LSTM"])
def test_scan_backward_equals_jax_vjp_of_the_scan(mode, masked, only_ys):
    """The recurrences' backward op (a reverse scan over the saved states) against jax.vjp of the
    forward scan, in float64, with a step masked for every row (a skipped padding step) when masked.
    Every output gets a random cotangent, the residuals (LSTM cell states, the saved projections
    ``h W_hh^T + b_hh``) included; or (only_ys) only the outputs ``ys`` do, the others are given to the
    backward as absent (None, as the engine passes them) and to jax.vjp as zeros."""
    import jax
    from dynajax.nn import _rnn_scan as R
    r = np.random.default_rng(3)
    T, B, H = 4, 3, 2
    G = {"GRU": 3, "LSTM": 4}.get(mode, 1) * H
    gi, h0, c0 = r.standard_normal((T, B, G)), r.standard_normal((B, H)), r.standard_normal((B, H))
    w, b = r.standard_normal((G, H)), r.standard_normal(G)
    mask = np.array([True, True, False, False, True, False, False, False, False, False, False, False])
    mask = mask.reshape(T, B, 1)
    lstm = mode == "LSTM"
    state = (h0, c0) if lstm else (h0,)
    extra = (mask,) if masked else ()
    kw = dict(mode=mode, reverse=False, has_mask=masked)
    out, vjp = jax.vjp(lambda gi, *p: R._rnn_impl(gi, *p, *extra, **kw), gi, *state, w, b)
    cts = [r.standard_normal(np.shape(o)) if i == 0 or not only_ys else np.zeros(np.shape(o))
           for i, o in enumerate(out)]
    want = vjp(tuple(cts))
    given = tuple(i == 0 or not only_ys for i in range(len(out)))
    cts = [c for c, g in zip(cts, given) if g]
    if lstm:
        got = R._lstm_backward_impl(*cts, gi, h0, c0, w, out[0], out[3], out[4], *extra, **kw, given=given)
    else:
        got = R._rnn_backward_impl(*cts, gi, h0, w, out[0], out[2], *extra, **kw, given=given)
    for g, e in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-10, atol=1e-12)


@XLA_CPU_ONLY
@pytest.mark.parametrize("mode", ["GRU", "LSTM"])
def test_unmasked_scan_steps_run_as_a_conditional_on_cpu(mode, monkeypatch):
    """On XLA:CPU a recurrence without a mask runs each step as the branch of a conditional whose
    predicate XLA cannot fold (``_device.cpu_loop_flag``: it runs about twice as fast there); its
    forward, its jax.vjp and its own backward op equal the plain loop's to float32 rounding, and the
    compiled program has the conditional."""
    import jax
    from dynajax.nn import _rnn_scan as R
    r = np.random.default_rng(5)
    T, B, H = 6, 3, 4
    G = {"GRU": 3, "LSTM": 4}[mode] * H
    gi, h0, c0 = (r.standard_normal(s).astype(np.float32) for s in ((T, B, G), (B, H), (B, H)))
    w, b = r.standard_normal((G, H)).astype(np.float32), r.standard_normal(G).astype(np.float32)
    state = (h0, c0) if mode == "LSTM" else (h0,)
    kw = dict(mode=mode, reverse=False, has_mask=False)

    def program():   # a new function each time: jax.jit would reuse the first one's trace
        def fwd_bwd(gi, *p):
            out, vjp = jax.vjp(lambda gi, *p: R._rnn_impl(gi, *p, **kw), gi, *p)
            cts = tuple(o * 0.5 for o in out)
            if mode == "LSTM":   # the backward op the tape and dynajax.compile use
                own = R._lstm_backward_impl(*cts, gi, *p[:3], out[0], out[3], out[4], **kw, given=(True,) * 5)
            else:
                own = R._rnn_backward_impl(*cts, gi, *p[:2], out[0], out[2], **kw, given=(True,) * 3)
            return out, vjp(cts), own
        return jax.jit(fwd_bwd)

    fast = program()
    assert " conditional(" in fast.lower(gi, *state, w, b).compile().as_text()
    got = fast(gi, *state, w, b)
    monkeypatch.setattr(R, "cpu_loop_flag", lambda: None)
    plain = program()
    assert " conditional(" not in plain.lower(gi, *state, w, b).compile().as_text()
    want = plain(gi, *state, w, b)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):   # (XLA fuses the
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6)     # two differently)


@pytest.mark.parametrize("name", ["GRUCell", "LSTMCell", "RNNCell"])
@pytest.mark.parametrize("x_shape, h_shape, x_dtype", [((2, 5), (2, 4), "float32"), ((2, 3), (3, 4), "float32"),
                                                       ((2, 3), (2, 5), "float32"), ((2, 3), (2, 4), "float64")],
                         ids=["input_size", "batch", "hidden_size", "dtype"])
def test_cell_checks_raise_as_pytorch(name, x_shape, h_shape, x_dtype):
    x, h = np.zeros(x_shape, x_dtype), np.zeros(h_shape, np.float32)
    th, dh = torch.tensor(h), dj.tensor(h)
    if name == "LSTMCell":
        th, dh = (th, th), (dh, dh)
    with pytest.raises(RuntimeError) as want:
        getattr(torch.nn, name)(3, 4)(torch.tensor(x), th)
    with pytest.raises(RuntimeError) as got:
        getattr(nn, name)(3, 4)(dj.tensor(x), dh)
    assert str(got.value) == str(want.value)
