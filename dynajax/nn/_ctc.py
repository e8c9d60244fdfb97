"""``ctc_loss``: the connectionist temporal classification loss, as ``torch.nn.functional.ctc_loss``.

The loss of each sequence is the negative log of the summed probability of every alignment of its target
(with blanks between and around the labels) to its input steps: a log-space forward (alpha) recursion over
time, one ``lax.scan``. It is one registered op whose gradient is ``jax.vjp`` of its impl (an op of its own), so
the gradient is the loss's true derivative w.r.t. ``log_probs``. (PyTorch's own backward returns
``exp(log_probs) - posterior``, the derivative w.r.t. the logits under a ``log_softmax``: through a
``log_softmax`` the two give the same gradient, which is how the loss is used.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor, _make
from ..ops.index import _host
from ..ops.registry import apply, op

# a finite stand-in for log(0): sums with it stay finite (no inf - inf in the gradient); a loss at or past
# _IMPOSSIBLE means no alignment exists (PyTorch's inf)
_NEG = -1e30
_IMPOSSIBLE = 1e29


def _ctc_impl(log_probs, targets, input_lengths, target_lengths, *, blank):
    """Per-sequence negative log likelihoods ``(N,)`` of ``log_probs`` ``(T, N, C)``, padded ``targets``
    ``(N, S)``; inf where no alignment fits in the input's length."""
    t_max, n, _ = log_probs.shape
    s = targets.shape[1]
    ext = jnp.full((n, 2 * s + 1), blank, targets.dtype).at[:, 1::2].set(targets)    # blank, l1, blank, ...
    pos = jnp.arange(2 * s + 1)
    # a label may be reached from two back (skipping a blank) unless it is a blank or repeats that label
    skip = (ext != blank) & (pos >= 2) & (ext != jnp.roll(ext, 2, axis=1))
    valid = pos[None, :] < 2 * target_lengths[:, None] + 1
    neg = jnp.asarray(_NEG, log_probs.dtype)

    def emit(lp_t):   # (N, C) -> the log probability of each extended label (N, 2S+1)
        return jnp.take_along_axis(lp_t, ext, axis=1)

    first = emit(log_probs[0])
    alpha0 = jnp.where((pos[None, :] < 2) & valid, first, neg)

    def step(alpha, xs):
        lp_t, t = xs
        prev1 = jnp.concatenate([jnp.full((n, 1), neg), alpha[:, :-1]], axis=1)
        prev2 = jnp.where(skip, jnp.concatenate([jnp.full((n, 2), neg), alpha[:, :-2]], axis=1), neg)
        nxt = jax.nn.logsumexp(jnp.stack([alpha, prev1, prev2]), axis=0) + emit(lp_t)
        nxt = jnp.where(valid, jnp.maximum(nxt, neg), neg)
        # past its own length a sequence keeps its alphas
        return jnp.where((t < input_lengths)[:, None], nxt, alpha), None

    alpha, _ = jax.lax.scan(step, alpha0, (log_probs[1:], jnp.arange(1, t_max)))
    last = 2 * target_lengths
    end = jnp.take_along_axis(alpha, last[:, None], 1)[:, 0]
    before = jnp.where(target_lengths > 0, jnp.take_along_axis(alpha, jnp.maximum(last - 1, 0)[:, None], 1)[:, 0], neg)
    nll = -jnp.logaddexp(end, before)
    nll = jnp.where(input_lengths == 0, jnp.where(target_lengths == 0, 0.0, -neg), nll)
    return jnp.where(nll >= _IMPOSSIBLE, jnp.inf, nll).astype(log_probs.dtype)


_ctc = op("ctc_loss")(_ctc_impl)


@op("ctc_loss_backward")
def _ctc_backward(g, log_probs, targets, input_lengths, target_lengths, *, blank):
    """The gradient w.r.t. ``log_probs``: ``jax.vjp`` of the impl (no rule of its own: PyTorch has no double
    backward of the CTC loss either)."""
    return jax.vjp(lambda lp: _ctc_impl(lp, targets, input_lengths, target_lengths, blank=blank), log_probs)[1](g)[0]


_ctc.defvjp(lambda g, out, lp, tg, il, tl, *, blank: (apply(_ctc_backward, g, lp, tg, il, tl, blank=blank),
                                                      None, None, None))


def _lengths(name: str, v, n: int) -> np.ndarray:
    a = np.asarray(_host(v) if isinstance(v, Tensor) else v, np.int64).reshape(-1)
    if a.shape[0] != n:
        raise RuntimeError(f"{name} must be of size batch_size")
    return a


@_dtype.x64.wrap
def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """The CTC loss of ``log_probs`` ``(T, N, C)`` (or ``(T, C)``, log-softmax outputs) against ``targets``
    (``(N, S)`` padded, or the targets of all sequences concatenated, 1-D); ``input_lengths`` and
    ``target_lengths`` per sequence (tensors or lists, read on the host). ``"mean"`` divides each loss by its
    target length before averaging; ``zero_infinity`` gives impossible alignments a loss (and gradient) of 0."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.dim() == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.dim() != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs to be 2-D or 3-D, but got {log_probs.dim()}-D")
    if not lp.is_floating_point():
        raise RuntimeError(f"\"ctc_loss_cpu\" not implemented for '{lp.dtype.legacy_name}'")
    t_max, n, c = lp.shape
    if not 0 <= blank < c:
        raise RuntimeError("blank must be in label range")
    il = _lengths("input_lengths", input_lengths, n)
    tl = _lengths("target_lengths", target_lengths, n)
    if (il > t_max).any() or (il < 0).any():
        bad = int(il[(il > t_max) | (il < 0)][0])
        raise RuntimeError(f"Expected input_lengths to have value at most {t_max}, but got value {bad} (while "
                           "checking arguments for ctc_loss_cpu)")
    tv = _host(targets).astype(np.int64)
    if unbatched and tv.ndim == 1:
        tv = tv.reshape(1, -1)
    if tv.ndim == 2:      # padded: one row per sequence
        if tv.shape[0] != n:
            raise RuntimeError("targets must be of size batch_size in the first dimension")
        if (tl > tv.shape[1]).any():
            raise RuntimeError(f"Expected tensor to have size at least {int(tl.max())} at dimension 1, but got size "
                               f"{tv.shape[1]} for argument #2 'targets' (while checking arguments for ctc_loss_cpu)")
        padded = tv
    else:                 # concatenated: cut by the target lengths
        if tl.sum() > tv.shape[0]:
            raise RuntimeError("Expected the concatenated targets to hold sum(target_lengths) labels")
        padded = np.zeros((n, max(int(tl.max()) if n else 0, 1)), np.int64)
        ends = np.cumsum(tl)
        for b in range(n):
            padded[b, :tl[b]] = tv[ends[b] - tl[b]:ends[b]]
    if padded.shape[1] == 0:
        padded = np.zeros((n, 1), np.int64)
    loss = apply(_ctc, lp, _make(jnp.asarray(padded)), _make(jnp.asarray(il)), _make(jnp.asarray(tl)),
                 blank=int(blank))
    if zero_infinity:
        loss = loss.masked_fill(loss.isinf(), 0.0)
    if reduction == "mean":
        tlt = _make(jnp.asarray(np.maximum(tl, 1), _dtype.to_np(lp.dtype)))
        return (loss / tlt).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.reshape(()) if unbatched else loss
