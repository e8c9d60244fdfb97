"""Fused ops of the neural-network layers, each declared once with its VJP rule:
``linear``, convolutions (with their input/weight gradients as ops, so double
backward works), ``softmax``/``log_softmax``, ``embedding``, ``one_hot``, max pooling,
padding, and ``resample`` (avg/adaptive pooling and interpolation as per-dim matrices).

Ops that are piecewise linear in their input (pooling, padding, resampling) are
declared with :func:`linearized`: the forward, its VJP and its JVP are three ops
whose rules call each other, so gradients of any order are exact.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from ..ops.dispatch import Sym, recorded_args, value_aval
from .._tensor import _make
from ..ops import registry
from ..ops.registry import apply, op
from ._rnn_scan import vjp_chain


# ---------------------------------------------------------------- linear
@op("linear", backward_name="MmBackward0")
def _linear(x, w):
    return jnp.matmul(x, w.T)


def _linear_vjp_x(g, out, x, w, *bias):   # ``bias``: linear_bias's third input (its own rule)
    return apply(_matmul_nn, g, w)


def _linear_vjp_w(g, out, x, w, *bias):
    return apply(_outer_sum, g, x)


_linear.defvjp(_linear_vjp_x, _linear_vjp_w)  # per input: no input gradient for a data batch


@op("linear_input_grad")
def _matmul_nn(g, w):
    """``g @ w`` for ``g`` of any leading dims (a linear layer's input gradient; one op, where ``w.t()``
    would copy the weight transposed at every backward)."""
    return jnp.matmul(g, w)


@op("linear_weight_grad")
def _outer_sum(g, x):
    """``sum over leading dims of g[..., :, None] * x[..., None, :]`` as one contraction (a linear
    layer's weight gradient; one op and one kernel per new batch shape, instead of two reshapes, two
    transposes and a matmul)."""
    lead = tuple(range(g.ndim - 1))
    return jax.lax.dot_general(g, x, ((lead, lead), ((), ())))


_matmul_nn.defvjp(lambda c, out, g, w: apply(_linear, c, w),
                  lambda c, out, g, w: apply(_outer_sum, g, c))
_outer_sum.defvjp(lambda c, out, g, x: apply(_linear, x, c),
                  lambda c, out, g, x: apply(_matmul_nn, g, c))


@op("linear_bias", backward_name="AddmmBackward0")
def _linear_bias(x, w, b):
    return jnp.matmul(x, w.T) + b


def _linear_bias_vjp_b(g, out, x, w, b):
    return g.sum(tuple(range(g.dim() - 1))) if g.dim() > 1 else g


# the same rules for x and w as without a bias: one recorded op per layer instead of a matmul and an add
_linear_bias.defvjp(_linear_vjp_x, _linear_vjp_w, _linear_bias_vjp_b)


def linear(x, w, b=None):
    """``x @ w.T + b`` (``b`` None: no bias) over any leading dims of ``x``, one op."""
    y = _linear_of_lookup(x, w, b)
    if y is not None:
        return y
    if b is None:
        return apply(_linear, x, w)
    (bs, bd), (ws, _) = value_aval(b._v), value_aval(w._v)   # (no Tensor or jax array properties)
    if len(bs) != 1 or bd != value_aval(x._v)[1] or bs[0] != ws[0]:
        # broadcasting/promotion as ``+``
        return apply(_linear, x, w) + b
    return apply(_linear_bias, x, w, b)


def _linear_of_lookup(x, w, b):
    """``linear(embedding(E, idx), w, b)`` recorded as ``embedding(linear(E, w, b), idx)`` while
    ``dynajax.compile`` records a step, when ``idx`` selects more than twice as many rows as ``E`` has
    (an RNN's input projection of embedded tokens): the matmul then runs over the table's rows instead of
    every position, and so do the two of its backward (the scatter-add moves to the projected table's
    gradient). The same function (rounding aside); XLA drops the lookup of ``E`` if nothing else reads
    it. Only for a lookup whose table is a leaf tensor unchanged since (the graph var it read is its
    current value), without ``padding_idx`` (whose zeroed gradient row would be the projected one's);
    None otherwise."""
    if not registry._hooks:   # eager (the common hot path): nothing to look up
        return None
    fn = getattr(x, "grad_fn", None)
    if (fn is None or fn.op is not _embedding or fn.freed or x._base is not None or x._out_idx != 0
            or x._vc[0] != 0):
        return None
    edge, idx = fn.edges[0], fn.consts[1]
    if (fn.params["padding_idx"] is not None or fn.params.get("scale_grad_by_freq") or edge is None
            or edge[1] != -1 or idx is None):
        return None
    table = edge[0]
    refs = recorded_args(x._value)
    if refs is None or type(table._value) is not Sym or refs[0] != table._value.idx:
        return None
    if math.prod(idx.shape) <= 2 * table.shape[0] or table.dim() != 2 or x.dtype != table.dtype:
        return None
    return apply(_embedding, linear(table, w, b), _make(idx), num=int(table.shape[0]), padding_idx=None)


# ---------------------------------------------------------------- convolution
def _dimension_numbers(nd: int):
    sp = "DHW"[3 - nd:] if nd <= 3 else None
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _xla_conv(x, w, *, stride, padding, dilation, groups):
    return jax.lax.conv_general_dilated(
        x, w, stride, padding, rhs_dilation=dilation, feature_group_count=groups,
        dimension_numbers=_dimension_numbers(x.ndim - 2), precision=jax.lax.Precision.HIGHEST)


# Most taps (input channels per group x kernel elements) a convolution computed by ``_conv_by_taps``
# may have. XLA:CPU runs grouped (depthwise) convolutions far below its speed elsewhere:
# measured, batch 64, a depthwise 3x3 forward on 32 channels of 28x28 took 49 ms, by taps 1.3 ms; with
# its gradients, in one program, ~85 ms vs ~23 ms on 64 channels of 14x14. Ungrouped convolutions
# with few input channels are slow too (a 3x3 forward from 1 channel to 16 on batch 64 of 28x28:
# 2.2-3.0 ms; as an eager op by taps 0.4 ms; inside a whole program by patches, ``_conv_by_patches``);
# their gradients stay XLA's (see ``_conv_cpu``).
TAPS_MAX = 27
# Most elements the patches of ``_conv_by_patches`` may have (256 MiB of float32); they may also hold
# at most twice the output's elements (taps <= 2 x output channels). Above either: XLA's convolution,
# which needs no such buffer.
PATCHES_MAX = 1 << 26


def _conv_out_size(spatial, k, padding, stride, dilation) -> list:
    """Output size of each spatial dim of a convolution of input size ``spatial`` by kernel size ``k``."""
    return [(n + lo + hi - dl * (kk - 1) - 1) // st + 1
            for n, kk, (lo, hi), st, dl in zip(spatial, k, padding, stride, dilation)]


def _tap_window(tap, size, stride, dilation) -> tuple:
    """Spatial starts and limits of one tap's strided slice of a padded input (output ``size``)."""
    start = tuple(t * dl for t, dl in zip(tap, dilation))
    return start, tuple(b + (m - 1) * st + 1 for b, m, st in zip(start, size, stride))


def _conv_by_taps(x, w, *, stride, padding, dilation, groups):
    """The convolution as a sum of one elementwise product per tap: each tap's strided slice of the padded
    input times that tap's weights, broadcast over the group's output channels. XLA fuses the sum into
    one loop over the output. Accumulates in float32 at least (as the convolution does)."""
    nd = x.ndim - 2
    n, k, og, cg = x.shape[0], w.shape[2:], w.shape[0] // groups, w.shape[1]
    acc = jnp.promote_types(x.dtype, jnp.float32)
    size = _conv_out_size(x.shape[2:], k, padding, stride, dilation)
    xp = jax.lax.pad(x.astype(acc), jnp.zeros((), acc), [(0, 0, 0)] * 2 + [(lo, hi, 0) for lo, hi in padding])
    xp = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = w.astype(acc).reshape(groups, og, cg, *k)
    out = None
    for c in range(cg):
        for tap in np.ndindex(*k):
            start, limit = _tap_window(tap, size, stride, dilation)
            term = jax.lax.slice(xp, (0, 0, c) + start, (n, groups, c + 1) + limit, (1, 1, 1) + tuple(stride)) * \
                wg[(slice(None), slice(None), c) + tap].reshape((1, groups, og) + (1,) * nd)
            out = term if out is None else out + term
    return out.reshape(n, groups * og, *size).astype(x.dtype)


def _conv_by_patches(x, w, *, stride, padding, dilation, groups):
    """An ungrouped convolution as one matrix product: the taps' strided slices of the padded input,
    channels-last, concatenated into patches (one row of taps x channels per output position), times the
    weights. For few taps inside a whole program on CPU: the product's result is computed once (the
    taps' fused sum would be recomputed in each consumer) and XLA's own convolution of few input
    channels is slow (measured, batch 64, 3x3 forward: 1 channel to 16 at 28x28 1.5 vs 3.0 ms; 3 to 16
    at 32x32 4.7 vs 10.9 ms; 3 to 32 at 32x32, batch 32, 2.1 ms both)."""
    n, k, c = x.shape[0], w.shape[2:], w.shape[1]
    acc = jnp.promote_types(x.dtype, jnp.float32)
    size = _conv_out_size(x.shape[2:], k, padding, stride, dilation)
    xp = jax.lax.pad(to_channels_last(x.astype(acc)), jnp.zeros((), acc),
                     [(0, 0, 0)] + [(lo, hi, 0) for lo, hi in padding] + [(0, 0, 0)])
    cols = []
    for tap in np.ndindex(*k):
        start, limit = _tap_window(tap, size, stride, dilation)
        cols.append(jax.lax.slice(xp, (0,) + start + (0,), (n,) + limit + (c,), (1,) + tuple(stride) + (1,)))
    wm = to_channels_last(w.astype(acc)).reshape(w.shape[0], -1)   # (out, taps x channels), as the patches
    out = jnp.einsum("...k,ok->...o", jnp.concatenate(cols, -1), wm, precision=jax.lax.Precision.HIGHEST)
    return from_channels_last(out).astype(x.dtype)


def _batch_halves_conv(x, w, p: dict):
    """XLA's convolution of each half of the batch, concatenated. As the tangent in ``w`` of
    ``_conv_cpu`` it transposes to two weight-gradient convolutions summed: XLA:CPU runs one such
    convolution on one core, and the two halves run side by side (measured on 2 cores, batch 64, 3x3
    from 16 channels to 32 at 14x14: 3.9 ms whole, 2.4 ms in halves)."""
    h = x.shape[0] // 2
    if not h:
        return _xla_conv(x, w, **p)
    return jnp.concatenate([_xla_conv(x[:h], w, **p), _xla_conv(x[h:], w, **p)])


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _conv_cpu(x, w, spec):
    """An ungrouped convolution on CPU (``spec``: the static params as sorted items, and how: by taps,
    by patches or XLA's). Its derivatives are XLA's own convolutions (faster than the taps' own:
    measured, batch 64 of 32x32, 3x3 from 3 channels to 16: input gradient 5.2 vs 10.6 ms, weight
    gradient 3.7 vs 8.5 ms), the weight's split over the batch (``_batch_halves_conv``)."""
    p, how = dict(spec[0]), spec[1]
    return {"taps": _conv_by_taps, "patches": _conv_by_patches, "xla": _xla_conv}[how](x, w, **p)


def _conv_cpu_jvp(spec, primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    p = dict(spec[0])
    y = _conv_cpu(x, w, spec)
    terms = ([] if type(dx) is SymbolicZero else [_xla_conv(dx, w, **p)]) + \
        ([] if type(dw) is SymbolicZero else [_batch_halves_conv(x, dw, p)])
    return y, functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(y)


_conv_cpu.defjvp(_conv_cpu_jvp, symbolic_zeros=True)


def _conv_fn(x_shape, w_shape, dtype, p: dict):
    """The convolution the ops below compute (and differentiate, for the gradient ops): XLA's own, except
    on CPU for floating inputs: a grouped one of at most ``TAPS_MAX`` taps by taps (differentiated
    through them: XLA's grouped gradients are as slow), an ungrouped one by ``_conv_cpu``."""
    out = _conv_out_size(x_shape[2:], w_shape[2:], p["padding"], p["stride"], p["dilation"])
    xla = functools.partial(_xla_conv, **p)
    if min(out, default=0) < 1 or not math.prod(x_shape) or not jnp.issubdtype(dtype, jnp.floating):
        return xla
    taps = w_shape[1] * math.prod(w_shape[2:])
    by_taps = taps <= TAPS_MAX
    if p["groups"] == 1:
        # by taps only as an eager op: inside a whole program XLA fuses the taps' sum into each of its
        # consumers (the batch norm and its gradient after a CNN's first convolution) and recomputes it
        # there (an optimization barrier does not stop it on CPU): the benchmark's CNN step took 1.3x
        # longer so; by patches there instead
        patches_fit = taps <= 2 * w_shape[0] and x_shape[0] * math.prod(out) * taps <= PATCHES_MAX
        how = "xla" if not by_taps else "taps" if registry.eager_kernel() else "patches" if patches_fit else "xla"
        spec = (tuple(sorted(p.items())), how)
        cpu = lambda x, w: _conv_cpu(x, w, spec)   # noqa: E731
    elif by_taps:
        cpu = functools.partial(_conv_by_taps, **p)
    else:
        return xla
    return lambda x, w: jax.lax.platform_dependent(x, w, cpu=cpu, default=xla)


def _conv_impl(x, w, **p):   # p: stride, padding, dilation, groups
    return _conv_fn(x.shape, w.shape, x.dtype, p)(x, w)


conv = op("convolution", backward_name="ConvolutionBackward0")(_conv_impl)


@op("convolution_input_grad", backward_name="ConvolutionBackwardInput0")
def conv_input_grad(g, w, *, in_shape, **p):
    f = _conv_fn(in_shape, w.shape, g.dtype, p)
    return jax.vjp(lambda x: f(x, w), jnp.zeros(in_shape, g.dtype))[1](g)[0]


@op("convolution_weight_grad", backward_name="ConvolutionBackwardWeight0")
def conv_weight_grad(x, g, *, w_shape, **p):
    f = _conv_fn(x.shape, w_shape, x.dtype, p)
    return jax.vjp(lambda w: f(x, w), jnp.zeros(w_shape, g.dtype))[1](g)[0]


def _conv_vjp_x(g, out, x, w, *bias, **p):   # ``bias``: convolution_bias's third input (its own rule)
    return apply(conv_input_grad, g, w, in_shape=tuple(x.shape), **p)


def _conv_vjp_w(g, out, x, w, *bias, **p):
    return apply(conv_weight_grad, x, g, w_shape=tuple(w.shape), **p)


conv.defvjp(_conv_vjp_x, _conv_vjp_w)


@conv_input_grad.defvjp
def _conv_input_grad_vjp(gg, out, gy, w, *, in_shape, **p):
    return apply(conv, gg, w, **p), apply(conv_weight_grad, gg, gy, w_shape=tuple(w.shape), **p)


@conv_weight_grad.defvjp
def _conv_weight_grad_vjp(gg, out, x, gy, *, w_shape, **p):
    return apply(conv_input_grad, gy, gg, in_shape=tuple(x.shape), **p), apply(conv, x, gg, **p)


@op("convolution_bias", backward_name="ConvolutionBackward0")
def conv_bias(x, w, b, *, stride, padding, dilation, groups):
    """A convolution plus its per-channel bias: one op per layer (the input/weight rules are the bias-free
    op's)."""
    y = _conv_impl(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    cs = (-1,) + (1,) * (x.ndim - 2)
    if groups != 1 or registry.eager_kernel():
        return y + b.reshape(cs)
    # inside a whole program on CPU the bias is added channels-last, as the convolution's result is laid
    # out there: added NCHW after a product of patches, XLA laid the sum out NCHW and transposed it for
    # the batch norm after it (the CNN step 0.94x with this)
    return jax.lax.platform_dependent(y, b, cpu=lambda y, b: from_channels_last(to_channels_last(y) + b),
                                      default=lambda y, b: y + b.reshape(cs))


conv_bias.defvjp(_conv_vjp_x, _conv_vjp_w, lambda g, out, x, w, b, **p: g.sum((0,) + tuple(range(2, g.dim()))))


# ---------------------------------------------------------------- softmax family
@op("softmax")
def _softmax(x, *, dim):
    return jax.nn.softmax(x, axis=dim)


_softmax.defvjp(lambda g, out, x, *, dim: (out * (g - (g * out).sum(dim, keepdim=True)),))


@op("log_softmax")
def _log_softmax(x, *, dim):
    return jax.nn.log_softmax(x, axis=dim)


_log_softmax.defvjp(lambda g, out, x, *, dim: (g - out.exp() * g.sum(dim, keepdim=True),))


def softmax_op(x, dim: int, log: bool = False):
    return apply(_log_softmax if log else _softmax, x, dim=dim)


# ---------------------------------------------------------------- embedding / one_hot
@op("embedding")
def _embedding(w, idx, *, num, padding_idx, scale_grad_by_freq=False):
    # an eager op's indices were checked in bounds (``F.embedding`` raises IndexError as PyTorch does), and
    # a clamped gather compiles in about a third of the time of an out-of-range-filling one (~40 vs ~130 ms
    # on CPU: an eager RNN pays it for each new sequence length); whole programs keep the NaN fill
    out = jnp.take(w, idx, axis=0, mode="clip" if registry.eager_kernel() else "fill")
    # the same values, but JAX's own derivative of them (``lower`` + ``jax.grad``, ``dj.func``) is
    # PyTorch's as the VJP below computes it: none through the padding row, and each row's divided by its
    # count (``sg(out) + (out - sg(out)) * s`` is ``out`` exactly, its derivative ``s``)
    if scale_grad_by_freq:
        s = _per_row(1 / _lookup_counts(idx, num, out.dtype)[idx], out.ndim - idx.ndim + 1)
        out = jax.lax.stop_gradient(out) + (out - jax.lax.stop_gradient(out)) * s
    if padding_idx is not None:
        out = jnp.where(_per_row(idx == padding_idx, out.ndim - idx.ndim + 1), jax.lax.stop_gradient(out), out)
    return out


@op("embedding_dense_backward")
def _embedding_backward(g, idx, *, num, padding_idx, scale_grad_by_freq=False):
    r = jnp.zeros((num,) + g.shape[idx.ndim:], g.dtype).at[idx].add(g)
    if scale_grad_by_freq:   # each row's summed gradient divided by how often the batch looked it up
        r = r / _per_row(_lookup_counts(idx, num, g.dtype), r.ndim)
    return r if padding_idx is None else r.at[padding_idx].set(0)


def _lookup_counts(idx, num, dtype):
    """How many times each of the ``num`` rows occurs in ``idx``, at least 1 (an unused row's gradient is
    0 either way)."""
    return jnp.maximum(jnp.zeros((num,), dtype).at[idx].add(1), 1)


def _per_row(v, ndim):
    return v.reshape(v.shape + (1,) * (ndim - 1))


@_embedding.defvjp
def _embedding_vjp(g, out, w, idx, **p):
    return apply(_embedding_backward, g, idx, **p), None


@_embedding_backward.defvjp
def _embedding_backward_vjp(gg, out, g, idx, *, num, padding_idx, scale_grad_by_freq=False):
    if scale_grad_by_freq:   # the transpose of dividing row j by its count: gg's row j divided by it too
        counts = apply(_embedding_backward, gg.new_ones(idx.shape), idx, num=num, padding_idx=None)
        gg = gg / counts.clamp(min=1.0).reshape((num,) + (1,) * (gg.dim() - 1))
    r = apply(_embedding, gg, idx, num=num, padding_idx=padding_idx)
    if padding_idx is not None:
        r = r * (idx != padding_idx).unsqueeze(-1)
    return r, None


def embedding_op(weight, idx, padding_idx, scale_grad_by_freq: bool = False):
    if scale_grad_by_freq:
        return apply(_embedding, weight, idx, num=int(weight.shape[0]), padding_idx=padding_idx,
                     scale_grad_by_freq=True)
    return apply(_embedding, weight, idx, num=int(weight.shape[0]), padding_idx=padding_idx)


@op("one_hot")
def one_hot_op(idx, *, num_classes):
    return jax.nn.one_hot(idx, num_classes, dtype=jnp.int64)


# ---------------------------------------------------------------- negative log-likelihood
def _nll_weights(target, ignore_index):
    valid = target != ignore_index
    return valid, jnp.where(valid, target, 0)


@op("nll_loss_index")
def nll_index(logp, target, *, ignore_index, reduction):
    """NLL of class indices ``target`` (N,) under log-probs ``logp`` (N, C): linear in ``logp``."""
    valid, t = _nll_weights(target, ignore_index)
    w = valid.astype(logp.dtype)
    loss = -jnp.take_along_axis(logp, t[:, None], 1)[:, 0] * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


@op("nll_loss_index_backward")
def nll_index_backward(g, target, *, C, ignore_index, reduction):
    """The transpose of ``nll_loss_index`` applied to ``g`` (the cotangent of its output)."""
    valid, t = _nll_weights(target, ignore_index)
    w = valid.astype(g.dtype)
    # (every target ignored: PyTorch's mean is nan, its gradient 0 -- not the 0/0 of -w / w.sum())
    scale = jnp.where(valid, -g / w.sum(), 0) if reduction == "mean" else -w * g
    return jax.nn.one_hot(t, C, dtype=g.dtype) * scale[:, None]


nll_index.defvjp(lambda g, out, logp, target, **p: (
    apply(nll_index_backward, g, target, C=logp.shape[1], **p), None))
nll_index_backward.defvjp(lambda gg, out, g, target, *, C, **p: (apply(nll_index, gg, target, **p), None))


# ---------------------------------------------------------------- layout
def whole_program() -> bool:
    """True while dynajax records a whole program (``compile``, ``lower``): its ops then become one
    XLA executable, inside which XLA:CPU keeps convolution activations NHWC whatever the API says."""
    return bool(registry._hooks)


def to_channels_last(x, axis: int = 1):
    """``x`` with its channel dim ``axis`` moved last. Inside one executable, ops between convolutions
    that compute channels-last (and move the dim back at the end) leave only transposes that cancel
    against the convolutions' own, so XLA keeps their arrays in the convolutions' NHWC layout."""
    return jnp.moveaxis(x, axis, -1)


def from_channels_last(x, axis: int = 1):
    """Inverse of :func:`to_channels_last`."""
    return jnp.moveaxis(x, -1, axis)


# ---------------------------------------------------------------- batch normalization (training)
def _bn_view(x, channels_last: bool):
    """``x`` (N, C, ...) as batch norm computes on it: ``(view, reduced dims, the shape a (C,) vector
    broadcasts as, the map from the view back to x's layout)``. Channels-last is for whole programs;
    eagerly (one executable per op, NCHW buffers at its boundary) the transposes would cost more."""
    if channels_last:
        return to_channels_last(x), tuple(range(x.ndim - 1)), (-1,), from_channels_last
    return x, (0,) + tuple(range(2, x.ndim)), (-1,) + (1,) * (x.ndim - 2), lambda a: a


def _bn_impl(x, w, b, *, eps, channels_last=False):
    """Batch norm of (N, C, ...) ``x`` over its batch statistics, scaled by ``w`` and shifted by ``b``:
    ``(y, mean, var)`` with the (C,) batch mean and biased variance."""
    x, dims, cs, back = _bn_view(x, channels_last)
    mean = x.mean(dims)
    xc = x - mean.reshape(cs)
    var = (xc * xc).mean(dims)
    return back(xc * jax.lax.rsqrt(var + eps).reshape(cs) * w.reshape(cs) + b.reshape(cs)), mean, var


def _bn_backward_impl(gy, gmean, gvar, x, mean, var, w, b, *, eps, channels_last=False):
    """Cotangents of ``x, w, b`` of :func:`_bn_impl`, the closed form: with ``xhat`` the normalized
    input and ``gh = gy * w``, ``dx = rsqrt(var + eps) * (gh - mean(gh) - xhat * mean(gh * xhat))``,
    plus what the mean and variance outputs' cotangents add."""
    x, dims, cs, back = _bn_view(x, channels_last)
    gy = _bn_view(gy, channels_last)[0]
    n = x.size // mean.shape[0]
    invstd = jax.lax.rsqrt(var + eps).reshape(cs)
    xc = x - mean.reshape(cs)
    xhat = xc * invstd
    gh = gy * w.reshape(cs)
    dx = invstd * (gh - gh.mean(dims).reshape(cs) - xhat * (gh * xhat).mean(dims).reshape(cs))
    dx = dx + (gmean / n).reshape(cs) + xc * (gvar * (2.0 / n)).reshape(cs)
    return back(dx), (gy * xhat).sum(dims), gy.sum(dims)


batch_norm_train = op("batch_norm", nout=3, backward_name="NativeBatchNormBackward0")(_bn_impl)
# one op for the whole backward; its inputs are all differentiable and its rule is jax.vjp of it
_bn_backward = vjp_chain("batch_norm_backward", _bn_backward_impl, 3, 8, 1)


def _bn_vjp(g, out, x, w, b, **p):
    return tuple(apply(_bn_backward, *g, x, out[1], out[2], w, b, **p))


# the batch statistics only, as PyTorch saves them: the output may change in place (a ReLU(inplace=True) after
# it, ResNet's pattern); the rule reads the saved arrays, which no in-place write reaches
batch_norm_train.defvjp(_bn_vjp, saves_out=(1, 2))


@op("batch_norm_running_stats", nout=2)
def running_stats(rm, rv, mean, var, keep, momentum, unbias):
    """BatchNorm's running-stat update, ``(rm, rv) * keep + (mean, var * unbias) * momentum``, as one op
    (no VJP; ``keep = 1 - momentum``): the arithmetic of the op-by-op update, in its order."""
    return rm * keep + mean * momentum, rv * keep + (var * unbias) * momentum


# ---------------------------------------------------------------- piecewise-linear ops
def linearized(name: str, f, vjp_impl=None, jvp_impl=None):
    """Register ``f(x, **params)`` (piecewise linear in ``x``) as op ``name`` plus its
    VJP and JVP ops; each one's rule is another of the three, so every order differentiates.
    ``vjp_impl(g, x, **p)`` / ``jvp_impl(t, x, **p)`` replace JAX's autodiff of ``f`` where
    a cheaper formula exists (they return None to fall back to it)."""
    fwd = op(name)(f)

    @op(name + "_backward")
    def vjp(g, x, **p):
        r = vjp_impl(g, x, **p) if vjp_impl is not None else None
        return jax.vjp(functools.partial(f, **p), x)[1](g)[0] if r is None else r

    @op(name + "_jvp")
    def jvp(t, x, **p):
        r = jvp_impl(t, x, **p) if jvp_impl is not None else None
        return jax.jvp(functools.partial(f, **p), (x,), (t,))[1] if r is None else r

    fwd.defvjp(lambda g, out, x, **p: (apply(vjp, g, x, **p),))
    vjp.defvjp(lambda g, out, gy, x, **p: (apply(jvp, g, x, **p), None))
    jvp.defvjp(lambda g, out, t, x, **p: (apply(vjp, g, x, **p), None))
    return fwd


def pool_out_len(L: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """Output length of a pooling window, PyTorch's formula (incl. ``ceil_mode``)."""
    num = L + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    return out


def _pool_pads(x, kernel, stride, padding, dilation, ceil_mode):
    """Per-dim (lo, hi) padding (hi grows for ceil_mode) and the output sizes of a max pool."""
    nd = len(kernel)
    pads, outs = [(0, 0)] * (x.ndim - nd), []
    for i in range(nd):
        L = x.shape[x.ndim - nd + i]
        out = pool_out_len(L, kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        hi = (out - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - L - padding[i]
        pads.append((padding[i], max(hi, 0)))
        outs.append(out)
    return pads, outs


def _window_slices(x, kernel, stride, dilation, pads, outs):
    """The padded input sliced at each kernel offset: one (..., *outs) array per offset."""
    init = -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    xp = jnp.pad(x, pads, constant_values=np.array(init, x.dtype))
    for offs in np.ndindex(*kernel):
        yield offs, xp[(Ellipsis,) + tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                                           for o, d, n, s in zip(offs, dilation, outs, stride))]


def _max_pool_impl(x, *, kernel, stride, padding, dilation, ceil_mode):
    p = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    if _Tiling.of(x, **p) is not None:   # JAX's own autodiff (compile's backward) takes the fast VJP too
        return _tiled_max_pool(x, tuple(p.items()))
    return _max_pool_window(x, **p)


def _max_pool_window(x, *, kernel, stride, padding, dilation, ceil_mode):
    nd = len(kernel)
    pads, outs = _pool_pads(x, kernel, stride, padding, dilation, ceil_mode)
    lead = (1,) * (x.ndim - nd)
    init = -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    if any(d != 1 for d in dilation):  # JAX has no VJP for dilated reduce_window max: max over strided slices
        r = None
        for _, v in _window_slices(x, kernel, stride, dilation, pads, outs):
            r = v if r is None else jnp.maximum(r, v)
        return r
    return jax.lax.reduce_window(x, np.array(init, x.dtype), jax.lax.max, lead + kernel, lead + stride, pads,
                                 window_dilation=lead + dilation)


class _Tiling:
    """A max pool whose windows tile the input (stride == kernel, no padding or dilation; a floor-mode
    remainder is cropped), computed channels-last: ``x`` (..., C, *spatial) is viewed as
    (..., o0, k0, o1, k1, ..., C), where each window entry is a plain slice. The maximum, the first
    maximum's offset and the gradient's scatter are then elementwise over those slices, which XLA
    fuses in the convolutions' layout (no reduce_window, no select_and_scatter, no argmax)."""

    def __init__(self, x, kernel, outs):
        self.nd, self.kernel, self.outs = len(kernel), tuple(kernel), tuple(outs)
        self.c = x.ndim - self.nd - 1          # the channel dim (-1: none, all dims pooled)
        self.sp = x.shape[x.ndim - self.nd:]

    @classmethod
    def of(cls, x, kernel, stride, padding, dilation, ceil_mode):
        """The tiling of this pool, or None where its windows do not tile the input."""
        if tuple(stride) != tuple(kernel) or any(padding) or any(d != 1 for d in dilation):
            return None
        pads, outs = _pool_pads(x, kernel, stride, padding, dilation, ceil_mode)
        return None if any(hi for _, hi in pads) else cls(x, kernel, outs)

    def to_cl(self, a):
        return to_channels_last(a, self.c) if self.c >= 0 else a

    def from_cl(self, a):
        return from_channels_last(a, self.c) if self.c >= 0 else a

    def _b(self):
        """Index of the first spatial dim in the channels-last view."""
        return max(self.c, 0)

    def entries(self, a, barrier: bool = False):
        """The window entries of ``a`` (x's shape), channels-last, in row-major offset order (the order
        PyTorch scans a window in): entry ``i`` is (..., *outs, C). ``barrier`` reads the channels-last
        view through an optimization barrier."""
        a, b = self.to_cl(a), self._b()
        if barrier:
            a = jax.lax.optimization_barrier(a)
        a = a[(slice(None),) * b + tuple(slice(0, o * k) for o, k in zip(self.outs, self.kernel))]
        split = a.shape[:b] + tuple(d for o, k in zip(self.outs, self.kernel) for d in (o, k)) \
            + a.shape[b + self.nd:]
        a = a.reshape(split)
        return [a[(slice(None),) * b + tuple(q for o in offs for q in (slice(None), o))]
                for offs in np.ndindex(*self.kernel)]

    def max_first(self, x):
        """Each window's maximum and the offset (int8 where it fits) of its first maximum, channels-last;
        a NaN counts as a maximum, as in PyTorch. ``x`` is read through an optimization barrier, so XLA
        materialises it (channels-last) once instead of recomputing its producers (a BatchNorm, a ReLU)
        in every consumer of the pool, of its offsets and of its gradient, as it does with these
        elementwise slices."""
        es = self.entries(x, barrier=True)
        m = functools.reduce(jnp.maximum, es)
        dt = jnp.int8 if len(es) <= 127 else jnp.int32
        first = jnp.full(m.shape, len(es) - 1, dt)      # no earlier entry hit: the last one is the max
        for i in range(len(es) - 2, -1, -1):
            hit = es[i] == m
            if jnp.issubdtype(x.dtype, jnp.floating):
                hit = hit | jnp.isnan(es[i])
            first = jnp.where(hit, jnp.asarray(i, dt), first)
        return m, first

    def scatter(self, first, g):
        """x-shaped array with each window's ``g`` (channels-last) at its ``first`` offset, zeros
        elsewhere (and in a cropped remainder)."""
        b, nd = self._b(), self.nd
        spread = tuple(b + 2 * i + 1 for i in range(nd))     # the within-window dims of the split view
        rank = b + 2 * nd + (1 if self.c >= 0 else 0)
        pos = jnp.zeros((), jnp.int32)                       # each position's offset within its window
        for d, k in zip(spread, self.kernel):
            pos = pos * k + jax.lax.broadcasted_iota(jnp.int32, tuple(k if j == d else 1 for j in range(rank)), d)
        dx = jnp.where(pos == jnp.expand_dims(first, spread).astype(jnp.int32), jnp.expand_dims(g, spread),
                       jnp.zeros((), g.dtype))
        full = tuple(o * k for o, k in zip(self.outs, self.kernel))
        dx = dx.reshape(dx.shape[:b] + full + dx.shape[b + 2 * nd:])
        pads = [(0, 0)] * dx.ndim
        pads[b:b + nd] = [(0, L - f) for L, f in zip(self.sp, full)]
        return self.from_cl(jnp.pad(dx, pads))


def _max_pool_vjp(g, x, **p):
    t = _Tiling.of(x, **p)
    if t is None:
        return None
    return t.scatter(t.max_first(x)[1], t.to_cl(g))


def _max_pool_jvp(tan, x, **p):
    t = _Tiling.of(x, **p)
    if t is None:
        return None
    first = t.max_first(x)[1]
    es = t.entries(tan)
    r = es[0]
    for i in range(1, len(es)):
        r = jnp.where(first == i, es[i], r)
    return t.from_cl(r)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _tiled_max_pool(x, p):
    t = _Tiling.of(x, **dict(p))
    return t.from_cl(t.max_first(x)[0])


_tiled_max_pool.defvjp(lambda x, p: (_tiled_max_pool(x, p), x),
                       lambda p, x, g: (_max_pool_vjp(g, x, **dict(p)),))
max_pool = linearized("max_pool", _max_pool_impl, _max_pool_vjp, _max_pool_jvp)


@op("max_pool_indices")
def max_pool_indices(x, *, kernel, stride, padding, dilation, ceil_mode):
    """Flat index (within each plane) of every window's first maximum, as PyTorch's return_indices."""
    nd = len(kernel)
    pads, outs = _pool_pads(x, kernel, stride, padding, dilation, ceil_mode)
    offsets, vals = zip(*_window_slices(x, kernel, stride, dilation, pads, outs))
    best = jnp.argmax(jnp.stack(vals, 0), 0)
    offs = jnp.asarray(np.array(offsets), jnp.int64)[best]  # (..., *outs, nd)
    flat = jnp.zeros(best.shape, jnp.int64)
    for i in range(nd):
        grid = jnp.arange(outs[i], dtype=jnp.int64).reshape((-1,) + (1,) * (nd - 1 - i)) * stride[i]
        pos = grid - padding[i] + offs[..., i] * dilation[i]
        flat = flat * x.shape[x.ndim - nd + i] + pos
    return flat


def _unpool_into(x, idx, plane, add: bool):
    """``x`` written (``add``: added) at the flat positions ``idx`` of zero planes of shape ``plane``."""
    lead = x.shape[:x.ndim - len(plane)]
    flat = jnp.zeros(lead + (int(np.prod(plane)),), x.dtype)
    xs, ids = x.reshape(lead + (-1,)), idx.reshape(lead + (-1,))
    flat = jax.vmap(lambda f, i, v: f.at[i].add(v) if add else f.at[i].set(v))(
        flat.reshape(-1, flat.shape[-1]), ids.reshape(-1, ids.shape[-1]), xs.reshape(-1, xs.shape[-1]))
    return flat.reshape(lead + tuple(plane))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _unpool_set(x, idx, plane):
    return _unpool_into(x, idx, plane, False)


@_unpool_set.defjvp
def _unpool_set_jvp(plane, primals, tangents):
    # the tangent is scattered with add, so JAX's transpose (the VJP) is a gather: every element sharing a
    # position gets that position's gradient, as the rule and PyTorch give (a set's own transpose would give
    # it only to the element whose write won)
    x, idx = primals
    return _unpool_into(x, idx, plane, False), _unpool_into(tangents[0], idx, plane, True)


@op("max_unpool")
def _max_unpool(x, idx, *, plane):
    return _unpool_set(x, idx, tuple(plane))


@op("max_unpool_backward")
def _max_unpool_backward(g, idx, *, plane):
    lead = idx.shape[:idx.ndim - len(plane)]
    gf = g.reshape(lead + (-1,))
    return jnp.take_along_axis(gf, idx.reshape(lead + (-1,)), -1).reshape(idx.shape)


_max_unpool.defvjp(lambda g, out, x, idx, *, plane: (apply(_max_unpool_backward, g, idx, plane=plane), None))
_max_unpool_backward.defvjp(lambda g, out, gy, idx, *, plane: (apply(_max_unpool, g, idx, plane=plane), None))


def max_unpool_op(x, idx, out_plane):
    return apply(_max_unpool, x, idx, plane=tuple(out_plane))


def _pad_impl(x, *, pads, mode, value):
    lead = [(0, 0)] * (x.ndim - len(pads))
    if mode == "constant":
        return jax.lax.pad(x, jnp.asarray(value, x.dtype), [(lo, hi, 0) for lo, hi in lead + list(pads)])
    return jnp.pad(x, lead + list(pads), mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


pad_op = linearized("pad", _pad_impl)


def _resample_matrix(spec) -> np.ndarray:
    """The (out, in) matrix of one spatial dim: avg / adaptive pooling or interpolation."""
    kind, L = spec[0], spec[1]
    if kind == "avg":
        _, _, k, s, p, ceil_mode, include_pad = spec
        n = pool_out_len(L, k, s, p, 1, ceil_mode)
        m = np.zeros((n, L))
        for i in range(n):
            start = i * s - p
            end = min(start + k, L + p)
            a, b = max(start, 0), min(end, L)
            m[i, a:b] = 1.0 / ((end - start) if include_pad else (b - a))
        return m
    if kind == "sum":
        _, _, k, s, p, ceil_mode = spec
        n = pool_out_len(L, k, s, p, 1, ceil_mode)
        m = np.zeros((n, L))
        for i in range(n):
            m[i, max(i * s - p, 0):min(i * s - p + k, L)] = 1.0
        return m
    n = spec[2]
    m = np.zeros((n, L))
    if kind == "adaptive":
        for i in range(n):
            a, b = (i * L) // n, -(-((i + 1) * L) // n)
            m[i, a:b] = 1.0 / (b - a)
        return m
    scale = spec[3]
    if kind in ("nearest", "nearest-exact"):
        off = 0.5 if kind == "nearest-exact" else 0.0
        for i in range(n):
            m[i, min(int(math.floor((i + off) * scale)), L - 1)] = 1.0
        return m
    align = spec[4]
    if kind in ("cubic", "linear_aa", "cubic_aa"):
        return _filter_matrix(kind, L, n, scale, align)
    for i in range(n):
        if align:
            src = i * (L - 1) / (n - 1) if n > 1 else 0.0
        else:
            src = max((i + 0.5) * scale - 0.5, 0.0)
        i0 = min(int(math.floor(src)), L - 1)
        i1 = min(i0 + 1, L - 1)
        lam = src - i0
        m[i, i0] += 1.0 - lam
        m[i, i1] += lam
    return m


def _cubic(x: float, a: float) -> float:
    """The cubic convolution kernel (Keys) with parameter ``a`` at offset ``x``."""
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _filter_matrix(kind: str, L: int, n: int, scale: float, align: bool) -> np.ndarray:
    """The (out, in) matrix of bicubic interpolation (``cubic``: PyTorch's a = -0.75, the four taps around
    the source position, indices clamped to the edge) or of antialiased bilinear/bicubic resizing
    (``*_aa``: PyTorch's separable filter, widened by the scale when downsampling, a = -0.5, weights
    normalized to sum 1 over the taps inside the input). ``scale``: input size per output size (PyTorch's
    scale where no ``align``)."""
    if align:
        scale = (L - 1) / (n - 1) if n > 1 else 0.0
    m = np.zeros((n, L))
    if kind == "cubic":
        for i in range(n):
            src = i * scale if align else (i + 0.5) * scale - 0.5
            i0 = math.floor(src)
            t = src - i0
            for j, w in zip(range(i0 - 1, i0 + 3), (_cubic(t + 1, -0.75), _cubic(t, -0.75), _cubic(1 - t, -0.75),
                                                     _cubic(2 - t, -0.75))):
                m[i, min(max(j, 0), L - 1)] += w
        return m
    size = 2 if kind == "linear_aa" else 4
    filt = (lambda x: max(0.0, 1.0 - abs(x))) if kind == "linear_aa" else (lambda x: _cubic(x, -0.5))
    support = size / 2 * scale if scale >= 1.0 else size / 2
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    for i in range(n):
        center = scale * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), L)
        w = np.array([filt((j - center + 0.5) * inv) for j in range(lo, hi)])
        m[i, lo:hi] = w / w.sum() if w.sum() != 0 else w
    return m


@functools.lru_cache(maxsize=256)
def _resample_taps(spec):
    """The nonzero entries of ``_resample_matrix(spec)`` per output: (indices, weights), each (out, taps),
    rows with fewer taps padded with their own first index and weight 0, and the mask of real taps."""
    m = _resample_matrix(spec)
    rows = [np.flatnonzero(r) for r in m]
    t = max(1, max(len(r) for r in rows))
    idx, w, real = np.zeros((m.shape[0], t), np.int32), np.zeros((m.shape[0], t)), np.zeros((m.shape[0], t), bool)
    for i, r in enumerate(rows):
        idx[i, :] = r[0] if len(r) else 0
        idx[i, :len(r)], w[i, :len(r)], real[i, :len(r)] = r, m[i, r], True
    return idx, w, real


def _resample_impl(x, *, specs):
    """Each spatial dim in turn: every output a weighted sum of only the inputs its window or stencil reads
    (a dense matrix product would also multiply the zero weights, so one NaN or inf input would reach
    every output of its row, where PyTorch's reaches only the windows that hold it)."""
    nd = len(specs)
    for i, spec in enumerate(specs):
        axis = x.ndim - nd + i
        idx, w, real = _resample_taps(spec)
        g = jnp.take(jnp.moveaxis(x, axis, -1), jnp.asarray(idx), axis=-1)      # (..., out, taps)
        terms = jnp.where(real, g * jnp.asarray(w, x.dtype), jnp.zeros((), x.dtype))
        x = jnp.moveaxis(terms.sum(-1), -1, axis)
    return x


resample = linearized("resample", _resample_impl)


def _adaptive_max_impl(x, *, out_sizes):
    nd = len(out_sizes)
    for i, n in enumerate(out_sizes):
        axis = x.ndim - nd + i
        L = x.shape[axis]
        cells = [jnp.max(jax.lax.slice_in_dim(x, (j * L) // n, -(-((j + 1) * L) // n), axis=axis), axis=axis)
                 for j in range(n)]
        x = jnp.stack(cells, axis)
    return x


adaptive_max_pool = linearized("adaptive_max_pool", _adaptive_max_impl)


@op("adaptive_max_pool_indices")
def adaptive_max_pool_indices(x, *, out_sizes):
    """Flat index (within each plane) of every adaptive window's first maximum, as PyTorch's
    ``return_indices`` (a NaN counts as the maximum)."""
    nd = len(out_sizes)
    sp = x.shape[x.ndim - nd:]
    bounds = [[((j * L) // n, -(-((j + 1) * L) // n)) for j in range(n)] for L, n in zip(sp, out_sizes)]
    cells = []
    for cell in np.ndindex(*out_sizes):
        win = [bounds[i][j] for i, j in enumerate(cell)]
        w = x[(Ellipsis,) + tuple(slice(a, b) for a, b in win)]
        w = w.reshape(w.shape[:w.ndim - nd] + (-1,))
        if jnp.issubdtype(x.dtype, jnp.floating):   # the first NaN, else the first maximum
            w = jnp.where(jnp.isnan(w), jnp.inf, w)
        local = jnp.argmax(w, -1).astype(jnp.int64)
        flat = jnp.zeros(local.shape, jnp.int64)
        for i, (a, b) in enumerate(win):   # the window's row-major position back to the plane's
            inner = math.prod(bb - aa for aa, bb in win[i + 1:])
            flat = flat * sp[i] + a + (local // inner) % (b - a)
        cells.append(flat)
    return jnp.stack(cells, -1).reshape(x.shape[:x.ndim - nd] + tuple(out_sizes))


def _unfold_impl(x, *, kernel, dilation, padding, stride):
    p = jax.lax.conv_general_dilated_patches(x, kernel, stride, [(q, q) for q in padding], rhs_dilation=dilation,
                                             dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                             precision=jax.lax.Precision.HIGHEST)
    return p.reshape(p.shape[0], p.shape[1], math.prod(p.shape[2:]))   # (not -1: a batch of 0 has no size to infer)


unfold_op = linearized("im2col", _unfold_impl)


def _fold_impl(x, *, in_shape, kernel, dilation, padding, stride):
    f = functools.partial(_unfold_impl, kernel=kernel, dilation=dilation, padding=padding, stride=stride)
    return jax.vjp(f, jnp.zeros(in_shape, x.dtype))[1](x)[0]


fold_op = linearized("col2im", _fold_impl)
