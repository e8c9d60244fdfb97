"""One fused op per recurrent layer and direction: the whole time loop of an
``RNN``/``LSTM``/``GRU`` as a single ``jax.lax.scan``; and one op per step of an
``RNNCell``/``LSTMCell``/``GRUCell`` (at the end of this module).

Recording one op instead of a dozen per time step makes eager dispatch, the
native tape and ``dynajax.compile``'s capture cost independent of the sequence
length, and gives XLA one loop to compile instead of an unrolled graph.

The input projection ``x W_ih^T + b_ih`` of all steps is computed outside the
op (one large matmul); the op runs the recurrence on it and also returns, as
residuals for its backward, the hidden projections ``gh = h W_hh^T + b_hh`` of
every step (LSTM also its cell states). Its backward is one op too: a reverse
scan carries the state cotangents (one matmul per step) and ``dW_hh`` is one
matmul after it. Saving ``gh`` instead of recomputing it from the states saves
a ``(T*B, H) x (H, G)`` matmul per backward (~15% of a GRU layer's forward and backward).
A cotangent reaching a residual (only ``jax.vjp`` of the op or a second
derivative gives one) is added where that residual is used, so the rule is
exact for every output. The backward's own backward is ``jax.vjp`` of it, so
second derivatives work.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._device import cpu_loop_flag
from ..ops.registry import VARIADIC, apply, op

_ACT = {"RNN_TANH": jnp.tanh, "RNN_RELU": jax.nn.relu}


def _cell(mode, gi, h, c, w_hh, b_hh):
    """One step on arrays: (h', c', gh) (c is None except for LSTM; gh = h W_hh^T + b_hh)."""
    gh = jnp.matmul(h, w_hh.T) + b_hh
    return (*_gates(mode, gi, gh, h, c), gh)


def _gates(mode, gi, gh, h, c):
    """The elementwise part of a step, given both projections ``gi`` and ``gh = h W_hh^T + b_hh``."""
    if mode == "GRU":
        ir, iz, in_ = jnp.split(gi, 3, -1)
        hr, hz, hn = jnp.split(gh, 3, -1)
        r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
        n = jnp.tanh(in_ + r * hn)
        return (1 - z) * n + z * h, None
    if mode == "LSTM":
        i, f, g, o = jnp.split(gi + gh, 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c
    return _ACT[mode](gi + gh), None


def _scan(mode, reverse, has_mask, *args):
    """Inputs ``gi, h0, [c0], w_hh, b_hh, [mask]`` -> ``ys, h_n, ghs`` (LSTM: ``ys, h_n, c_n, cs, ghs``, ``cs``
    the cell state after each step and ``ghs`` each step's ``h W_hh^T + b_hh``, which its backward reads;
    zeros at a skipped step); a masked step (mask False for a batch row) keeps that row's state, as a
    packed sequence past its end."""
    it = iter(args)
    gi, h0 = next(it), next(it)
    c0 = next(it) if mode == "LSTM" else None
    w_hh, b_hh = next(it), next(it)
    mask = next(it) if has_mask else None

    def body(carry, xs):
        h, c = carry
        g_t, m_t, a_t = xs

        def run(_):
            h2, c2, gh = _cell(mode, g_t, h, c, w_hh, b_hh)
            if m_t is not None:
                h2 = jnp.where(m_t, h2, h)
                c2 = None if c is None else jnp.where(m_t, c2, c)
            return h2, c2, gh
        zeros = lambda _: (h, c, jnp.zeros(h.shape[:-1] + w_hh.shape[:1], h.dtype))  # noqa: E731
        h2, c2, gh = _unless_padding(cpu_loop_flag() if m_t is None else a_t, run, zeros)
        return (h2, c2), (h2, c2, gh)

    (h, c), (ys, cs, ghs) = jax.lax.scan(body, (h0, c0), (gi, mask, _active(mask)), reverse=reverse)
    return (ys, h, c, cs, ghs) if mode == "LSTM" else (ys, h, ghs)


def _active(mask):
    """Per step of a mask ``(T, B, 1)``: whether any batch row is unmasked (None for no mask); computed
    once before a scan, so that each iteration reads one flag instead of reducing its mask rows."""
    return None if mask is None else jnp.any(mask, axis=tuple(range(1, mask.ndim)))


def _unless_padding(a_t, run, skip):
    """``run(None)``, or ``skip(None)`` at a step masked for every batch row (``a_t`` False: padding past
    the end of all sequences, e.g. up to a ``dynajax.compile(dynamic=...)`` bucket): a padded step then
    costs no matmul, so a long bucket costs the recurrence of the real length (a ``lax.cond``, which
    ``jax.vjp`` of the scan differentiates). ``a_t`` None: ``run(None)``."""
    return run(None) if a_t is None else jax.lax.cond(a_t, run, skip, None)


def vjp_chain(name: str, f, nout: int, ndiff, depth: int):
    """Register op ``name`` running ``f(*args, **params)`` (``nout`` outputs; its first ``ndiff`` arguments
    differentiable, the rest not), whose rule is the op ``name_backward``: ``jax.vjp`` of this one, declared
    the same way down to ``depth`` levels (the last one has no rule). ``ndiff`` may be a function of the
    op's params (an op taking only the cotangents it was given); that op's backward then has a variable
    number of outputs, so it must be the last level."""
    fwd = op(name, nout=nout)(f)
    if depth == 0:
        return fwd
    count = ndiff if callable(ndiff) else (lambda params: ndiff)
    if callable(ndiff) and depth > 1:
        raise ValueError(f"{name}: a params-dependent number of differentiable inputs needs depth 1")

    def bwd_impl(*args, inner):
        params = dict(inner)
        k = count(params)
        cts, prim = args[:nout], args[nout:]
        diff, rest = prim[:k], prim[k:]
        _, vjp = jax.vjp(lambda *d: f(*d, *rest, **params), *diff)
        return tuple(vjp(tuple(cts) if nout > 1 else cts[0]))

    bwd = vjp_chain(name + "_backward", bwd_impl, VARIADIC if callable(ndiff) else ndiff,
                    None if callable(ndiff) else nout + ndiff, depth - 1)

    def rule(g, out, *args, **params):
        gs = tuple(g) if isinstance(g, tuple) else (g,)
        res = apply(bwd, *gs, *args, inner=tuple(sorted(params.items())))
        return tuple(res) + (None,) * (len(args) - count(params))
    fwd.defvjp(rule)
    return fwd


def _rnn_impl(*args, mode, reverse, has_mask):
    return _scan(mode, reverse, has_mask, *args)


def _before(seq, first, reverse: bool):
    """The state before each step of a scan whose states after each step are ``seq``."""
    return jnp.concatenate([seq[1:], first[None]]) if reverse else jnp.concatenate([first[None], seq[:-1]])


def _scan_backward(mode, reverse, m, g_ys, g_h, g_c, g_cs, g_gh, gi, gh, h0, c0, w_hh, ys, cs):
    """Cotangents ``(dgi, dh0, dc0, dw_hh, db_hh)`` of a recurrence from its outputs and their cotangents
    (``c0, cs, g_c, g_cs`` and ``dc0`` None except for LSTM; ``g_gh`` that of the ``gh`` residual; a
    cotangent None: no gradient reached that output). The states before each step and their projections
    ``gh`` are known, so the reverse scan carries only the state cotangents (one ``(B, G) x (G, H)``
    matmul per step) and ``dW_hh`` is one matmul after it."""
    g_h = jnp.zeros_like(h0) if g_h is None else g_h
    g_c = jnp.zeros_like(c0) if g_c is None and c0 is not None else g_c
    hprev = _before(ys, h0, reverse)
    cprev = None if c0 is None else _before(cs, c0, reverse)

    def body(carry, xs):
        dh, dc = carry
        gi_t, gh_t, hp_t, cp_t, gy_t, gc_t, ggh_t, m_t, a_t = xs
        ct = (_plus(dh, gy_t), None if dc is None else _plus(dc, gc_t))

        def run(_):
            dgi, dgh, dhp, dcp = _step_backward(mode, ct, gi_t, gh_t, hp_t, cp_t, w_hh, m_t, ggh_t)
            return (dhp, dcp), (dgi, dgh)
        # a step masked for every row passed its state through (and its gh is a constant): so do the
        # cotangents
        return _unless_padding(cpu_loop_flag() if m_t is None else a_t, run,
                               lambda _: (ct, (jnp.zeros_like(gi_t), jnp.zeros_like(gh_t))))

    xs = (gi, gh, hprev, cprev, g_ys, g_cs, g_gh, m, _active(m))
    (dh0, dc0), (dgi, dgh) = jax.lax.scan(body, (g_h, g_c), xs, reverse=not reverse)
    return dgi, dh0, dc0, jnp.einsum("tbg,tbh->gh", dgh, hprev), dgh.sum((0, 1))


def _step_backward(mode, ct, gi, gh, hp, cp, w_hh, m=None, g_gh=None):
    """One step's backward from its projections ``gi``, ``gh`` (saved, not recomputed) and the state before
    it: ``(dgi, dgh, dh, dc)`` for the cotangents ``ct = (dh', dc')`` of the state after it (``dc``, ``cp``
    None except for LSTM; ``m`` a row mask: masked rows keep their state; ``g_gh``: a cotangent reaching
    ``gh`` itself). ``dh`` includes the path through ``gh = h W_hh^T + b_hh``."""
    def f(a, b, h, c):
        h2, c2 = _gates(mode, a, b, h, c)
        if m is not None:
            h2 = jnp.where(m, h2, h)
            c2 = None if c is None else jnp.where(m, c2, c)
        return h2, c2
    _, vjp = jax.vjp(f, gi, gh, hp, cp)
    dgi, dgh, dh, dc = vjp(ct)
    dgh = _plus(dgh, g_gh)
    return dgi, dgh, dh + jnp.matmul(dgh, w_hh), dc


def _plus(x, y):
    return x if y is None else x + y


def _given(args, given):
    """The cotangents an op's rule was given (``given``: which outputs had one), None for the others,
    then an iterator over the remaining arguments."""
    it = iter(args)
    return [next(it) if g else None for g in given], it


def _rnn_backward_impl(*args, mode, reverse, has_mask, given):
    """Cotangents of ``gi, h0, w_hh, b_hh`` of an RNN/GRU scan. Inputs: the given ones of the cotangents of
    ``ys, h_n, gh``, then ``gi, h0, w_hh, ys, gh, [mask]``."""
    (g_ys, g_h, g_gh), it = _given(args, given)
    gi, h0, w_hh, ys, gh = (next(it) for _ in range(5))
    dgi, dh0, _, dw, db = _scan_backward(mode, reverse, next(it, None), g_ys, g_h, None, None,
                                         g_gh, gi, gh, h0, None, w_hh, ys, None)
    return dgi, dh0, dw, db


def _lstm_backward_impl(*args, mode, reverse, has_mask, given):
    """Cotangents of ``gi, h0, c0, w_hh, b_hh`` of an LSTM scan. Inputs: the given ones of the cotangents of
    ``ys, h_n, c_n, cs, gh``, then ``gi, h0, c0, w_hh, ys, cs, gh, [mask]``."""
    (g_ys, g_h, g_c, g_cs, g_gh), it = _given(args, given)
    gi, h0, c0, w_hh, ys, cs, gh = (next(it) for _ in range(7))
    return _scan_backward(mode, reverse, next(it, None), g_ys, g_h, g_c, g_cs, g_gh,
                          gi, gh, h0, c0, w_hh, ys, cs)


# second order: jax.vjp of the backward, every input but the mask differentiable
_rnn_backward = vjp_chain("rnn_scan_backward", _rnn_backward_impl, 4, lambda p: sum(p["given"]) + 5, 1)
_lstm_backward = vjp_chain("lstm_scan_backward", _lstm_backward_impl, 5, lambda p: sum(p["given"]) + 7, 1)


def _present(g):
    """The cotangents that are not None, and which outputs they belong to."""
    return [x for x in g if x is not None], tuple(x is not None for x in g)


def _rnn_rule(g, out, gi, h0, w_hh, b_hh, *mask, **params):
    cts, given = _present(g)
    gs = apply(_rnn_backward, *cts, gi, h0, w_hh, out[0], out[2], *mask, given=given, **params)
    return tuple(gs) + (None,) * len(mask)


def _lstm_rule(g, out, gi, h0, c0, w_hh, b_hh, *mask, **params):
    cts, given = _present(g)
    gs = apply(_lstm_backward, *cts, gi, h0, c0, w_hh, out[0], out[3], out[4], *mask, given=given, **params)
    return tuple(gs) + (None,) * len(mask)


# the final states and the residuals are often unused: their rules take None cotangents
# Only the residuals count as saved (an in-place write to the output sequence or final state, which PyTorch's
# RNNs allow, is not an error); the rules read the saved arrays, which no in-place write reaches.
rnn_scan = op("rnn_scan", nout=3)(_rnn_impl)
rnn_scan.defvjp(_rnn_rule, saves_out=(2,))
lstm_scan = op("lstm_scan", nout=5)(_rnn_impl)
lstm_scan.defvjp(_lstm_rule, saves_out=(3, 4))
rnn_scan.none_cotangents = lstm_scan.none_cotangents = True


def _bias(b, w):
    """``b``, or zeros of the gate size of ``w`` for a layer without bias."""
    if b is not None:
        return b
    from ..ops.creation import zeros
    return zeros(w.shape[0], dtype=w.dtype)


def run_layer(mode: str, gi, state, w_hh, b_hh, mask, reverse: bool):
    """The recurrence of one layer and direction over the projected inputs ``gi`` (T, B, G*H):
    returns ``(ys, state_n)`` with ``state`` ``h`` or ``(h, c)``; ``b_hh`` None: no bias."""
    b_hh = _bias(b_hh, w_hh)
    args = [gi, *(state if mode == "LSTM" else (state,)), w_hh, b_hh]
    if mask is not None:
        args.append(mask)
    o = lstm_scan if mode == "LSTM" else rnn_scan
    res = apply(o, *args, mode=mode, reverse=bool(reverse), has_mask=mask is not None)
    return (res[0], (res[1], res[2])) if mode == "LSTM" else (res[0], res[1])


# ---------------------------------------------------------------- single steps (RNNCell, LSTMCell, GRUCell)
def _cell_impl(*args, mode):
    """One cell step from its input: ``x, h, [c], w_ih, w_hh, b_ih, b_hh`` -> ``h', [c'], gi, gh``: the new
    state and, for its backward, the projections ``gi = x W_ih^T + b_ih`` and ``gh = h W_hh^T + b_hh``."""
    if mode == "LSTM":
        x, h, c, w_ih, w_hh, b_ih, b_hh = args
    else:
        (x, h, w_ih, w_hh, b_ih, b_hh), c = args, None
    gi = jnp.matmul(x, w_ih.T) + b_ih
    h2, c2, gh = _cell(mode, gi, h, c, w_hh, b_hh)
    return (h2, c2, gi, gh) if mode == "LSTM" else (h2, gi, gh)


def _cell_backward_impl(*args, mode, given):
    """Cotangents ``dx, dh, [dc], dw_ih, dw_hh, db_ih, db_hh`` of a cell step. Inputs: the given ones of
    the cotangents of its outputs (``h', [c'], gi, gh``), then ``x, h, [c], w_ih, w_hh, gi, gh``."""
    lstm = mode == "LSTM"
    cts, it = _given(args, given)
    g_h, g_c, g_gi, g_gh = cts if lstm else (cts[0], None, cts[1], cts[2])
    x, h = next(it), next(it)
    c = next(it) if lstm else None
    w_ih, w_hh, gi, gh = (next(it) for _ in range(4))
    ct = (jnp.zeros_like(h) if g_h is None else g_h, (jnp.zeros_like(c) if g_c is None else g_c) if lstm else None)
    dgi, dgh, dh, dc = _step_backward(mode, ct, gi, gh, h, c, w_hh, g_gh=g_gh)
    dgi = _plus(dgi, g_gi)
    return (jnp.matmul(dgi, w_ih), dh, *((dc,) if lstm else ()), jnp.matmul(dgi.T, x), jnp.matmul(dgh.T, h),
            dgi.sum(0), dgh.sum(0))


# One op per step (saving its projections) and one for its backward, instead of the ~20 ops of the step
# and ~50 of its backward when composed: a Python loop over a cell records (and, compiled, captures) a few
# ops per time step, and its backward recomputes no matmul. Second derivatives: jax.vjp of the backward.
_cell_backward = vjp_chain("rnn_cell_backward", _cell_backward_impl, 6, lambda p: sum(p["given"]) + 6, 1)
_lstm_cell_backward = vjp_chain("lstm_cell_backward", _cell_backward_impl, 7, lambda p: sum(p["given"]) + 7, 1)


def _cell_rule(g, out, *args, mode):
    cts, given = _present(g)
    ins = args[:-2]   # the biases' cotangents are sums of those of the projections
    o = _lstm_cell_backward if mode == "LSTM" else _cell_backward
    return tuple(apply(o, *cts, *ins, out[-2], out[-1], given=given, mode=mode))


rnn_cell = op("rnn_cell", nout=3)(_cell_impl)
lstm_cell = op("lstm_cell", nout=4)(_cell_impl)
rnn_cell.defvjp(_cell_rule, saves_out=(1, 2))   # the projections, not the new state (as for the scans)
lstm_cell.defvjp(_cell_rule, saves_out=(2, 3))
rnn_cell.none_cotangents = lstm_cell.none_cotangents = True   # the projections are usually unused


def cell_step(mode: str, x, state, w_ih, w_hh, b_ih, b_hh):
    """One step of an ``RNN_TANH``/``RNN_RELU``/``GRU`` cell (``state`` h) or an ``LSTM`` cell (``state``
    ``(h, c)``) on a batch ``x`` (B, I), with PyTorch's checks; returns ``h'`` or ``(h', c')``. A bias
    None: none."""
    hs = state if mode == "LSTM" else (state,)
    # shapes and dtypes read off the values: a Python loop over a cell runs these checks every step
    xs, wis, whs = x._v.shape, w_ih._v.shape, w_hh._v.shape
    if xs[1] != wis[1]:
        raise RuntimeError(f"input has inconsistent input_size: got {xs[1]} expected {wis[1]}")
    for i, h in enumerate(hs):
        hs_ = h._v.shape
        if hs_[0] != xs[0]:
            raise RuntimeError(f"Input batch size {xs[0]} doesn't match hidden{i} batch size {hs_[0]}")
        if hs_[1] != whs[1]:
            raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got {hs_[1]}, expected {whs[1]}")
    b_ih, b_hh = _bias(b_ih, w_ih), _bias(b_hh, w_hh)
    wdt = w_ih._v.dtype
    for t in (x, *hs, w_hh, b_ih, b_hh):
        if t._v.dtype != wdt:
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {t.dtype.legacy_name} and "
                               f"{w_ih.dtype.legacy_name}")
    if mode == "LSTM":
        return tuple(apply(lstm_cell, x, *hs, w_ih, w_hh, b_ih, b_hh, mode=mode)[:2])
    return apply(rnn_cell, x, *hs, w_ih, w_hh, b_ih, b_hh, mode=mode)[0]
