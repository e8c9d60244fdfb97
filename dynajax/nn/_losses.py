"""Loss functions of ``nn.functional`` (re-exported there): regression, classification,
ranking and likelihood losses with PyTorch's ``reduction`` semantics."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from .. import _dtype
from ..ops.autocast import cast_inputs
from ..ops.dispatch import aval_of, index_checks, is_recorded
from .._tensor import Tensor
from ..autograd import grad_mode
from ..ops import elementwise as _ew
from ..ops.index import _raise, check_bounds
from ..ops.registry import apply, op
from ._ops import nll_index
from ._activations import (_no_grad_clamp_min, _size_repr, log_softmax, logsigmoid, one_hot, pairwise_distance,
                           softplus)

__all__ = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "margin_ranking_loss", "triplet_margin_loss", "cosine_embedding_loss", "gaussian_nll_loss", "poisson_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "hinge_embedding_loss", "multi_margin_loss"]


# ---------------------------------------------------------------- losses
def _reduction(size_average, reduce, reduction: str) -> str:
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_dtype(input: Tensor, other: Tensor) -> None:
    if other.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {other.dtype.legacy_name} but expected {input.dtype.legacy_name}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    _check_reduction(reduction)
    return loss


def _weighted(loss: Tensor, input: Tensor, weight, reduction: str, mean_by_weight: bool = True) -> Tensor:
    """Elementwise ``loss`` times ``weight`` (input's size), reduced; a weighted mean divides by the weights'
    sum (PyTorch's mse and l1 losses) or by the count (``mean_by_weight=False``: its huber loss)."""
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


@cast_inputs("fp32")
def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
             weight=None) -> Tensor:
    """Mean squared error (``reduction``: 'mean', 'sum' or 'none'); ``weight`` scales each element."""
    d = input - target
    return _weighted(d * d, input, weight, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
            weight=None) -> Tensor:
    """Mean absolute error; ``weight`` scales each element."""
    return _weighted((input - target).abs(), input, weight, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """Quadratic below ``beta``, linear above (divided by ``beta``)."""
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    if beta != 0.0:
        d = _ew.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(d, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight=None) -> Tensor:
    """Quadratic below ``delta``, linear (times ``delta``) above; ``weight`` scales each element."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    d = (input - target).abs()
    return _weighted(_ew.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), input, weight, reduction,
                     mean_by_weight=False)


def _class_last(x: Tensor) -> Tensor:
    return x.movedim(1, -1) if x.dim() > 1 else x


def _check_target(input: Tensor, target: Tensor) -> None:
    """PyTorch's errors for a class-index ``target`` whose shape does not fit ``input`` ((C,) or (N, C, ...))."""
    if input.dim() == 0:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    if input.dim() > 1 and input.shape[0] != (target.shape[0] if target.dim() else 1):
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0] if target.dim() else 1}).")
    if input.dim() > 2:
        want = [input.shape[0], *input.shape[2:]]
        if list(target.shape) != want:
            raise RuntimeError(f"Expected target size {want}, got {list(target.shape)}")
    elif target.dim() > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    elif input.dim() == 1 and target.dim() == 1 and target.shape[0] != 1:
        raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")


_SMALL_TARGETS = 4096   # up to this many targets the bounds are read without numpy


def _check_classes(target: Tensor, C: int, ignore_index: int) -> None:
    """PyTorch's IndexError for an int64 class target outside ``[0, C)`` that is not ``ignore_index``.

    One pass, a negative class reading as a huge unsigned one. A batch's targets are read through the
    array's buffer as unsigned 64-bit ints by Python's ``max``: numpy's asarray, compare and ``any`` cost
    ~5 us hot but ~130 us right after a compiled step's executable has evicted the caches (measured), the
    buffer and ``max`` ~3 and ~45 us."""
    v = target._value if target._base is None else target.detach()._value
    if math.prod(aval_of(v)[0]) <= _SMALL_TARGETS:
        try:
            in_bounds = max(memoryview(v).cast("B").cast("Q"), default=0) < C
        except (TypeError, ValueError, BufferError, RuntimeError):   # no host buffer (an accelerator's array)
            in_bounds = None
        if in_bounds:
            return
    t = np.asarray(v)
    if not (t.view(np.uint64) >= C).any():
        return
    bad = (t != ignore_index) & ((t < 0) | (t >= C))
    if bad.any():
        raise IndexError(f"Target {int(t[bad].reshape(-1)[0])} is out of bounds.")


def _nll(logp: Tensor, target: Tensor, weight, ignore_index: int, reduction: str) -> Tensor:
    """Negative log-likelihood of integer ``target`` under log-probs ``logp`` (class dim 1)."""
    _check_target(logp, target)
    if target.dtype != _dtype.int64:
        if target.dtype != _dtype.uint8 or logp.dim() > 2:   # PyTorch takes bytes for (N, C) only
            raise RuntimeError(f"expected scalar type Long but found {target.dtype.legacy_name}")
        target = target.long()
    _check_reduction(reduction)
    if logp.dim() == 1 and target.dim() == 1:
        target = target.reshape(())
    C = logp.shape[1] if logp.dim() > 1 else logp.shape[0]
    if index_checks() is not None:   # compile: a value known here read now, any other on the device (``compile.checks``)
        check_bounds([target], [C], _raise(IndexError, "Target {i} is out of bounds."), negative=False,
                     ignore=int(ignore_index), name="nll_loss")
    elif not is_recorded(target):   # compile: no graph break
        _check_classes(target, C, ignore_index)
    if logp.dim() == 2 and weight is None:   # the common case as one op (and one VJP op)
        return apply(nll_index, logp, target, ignore_index=int(ignore_index), reduction=reduction)
    if weight is not None and weight.dtype != logp.dtype:
        raise RuntimeError(f"expected scalar type {logp.dtype.legacy_name} but found {weight.dtype.legacy_name}")
    valid = target != ignore_index
    oh = one_hot(_ew.where(valid, target, 0), C).to(logp.dtype)
    w = valid.to(logp.dtype)
    if weight is not None:
        w = w * (oh * weight).sum(-1)
    loss = _ew.where(valid, -(_class_last(logp) * oh).sum(-1) * w, 0.0)   # 0 also where an ignored logp is -inf
    return _mean_over(loss, w.sum()) if reduction == "mean" else _reduce(loss, reduction)


def _mean_over(loss: Tensor, denom: Tensor) -> Tensor:
    """``loss.sum() / denom``; for ``denom`` 0 (every target ignored) PyTorch's nan, with a zero gradient
    rather than the nan of 0 times ``1 / 0``."""
    empty = denom == 0
    return _ew.where(empty, float("nan"), loss.sum() / _ew.where(empty, 1.0, denom))


@cast_inputs("fp32")
def nll_loss(input: Tensor, target: Tensor, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices ``target`` under log-probabilities ``input``."""
    return _nll(input, target, weight, ignore_index, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def cross_entropy(input: Tensor, target: Tensor, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """``nll_loss(log_softmax(input, 1), target)``; ``target`` holds class indices or class probabilities."""
    reduction = _reduction(size_average, reduce, reduction)
    if label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    cdim = 0 if input.dim() == 1 else 1
    C = input.shape[cdim]
    logp = log_softmax(input, cdim)
    wshape = [1] * input.dim()
    wshape[cdim] = C
    if target.is_floating_point():
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"Expected target size {list(input.shape)}, got {list(target.shape)}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / C
        lp = logp if weight is None else logp * weight.reshape(wshape)
        loss = -(lp * target).sum(cdim)
        if reduction == "mean":
            return loss.sum() / (input.numel() / C) if input.numel() else loss.sum() * float("nan")
        return _reduce(loss, reduction)
    nll = _nll(logp, target, weight, ignore_index, reduction)
    if label_smoothing <= 0:
        return nll
    lp = logp if weight is None else logp * weight.reshape(wshape)
    valid = target.reshape(()) != ignore_index if input.dim() == 1 else target != ignore_index
    smooth = _ew.where(valid, -lp.sum(cdim), 0.0)
    if reduction == "mean":
        denom = valid.to(input.dtype)
        if weight is not None:
            denom = denom * (one_hot(_ew.where(valid, target, 0), C).to(input.dtype) * weight).sum(-1)
        ret = _mean_over(smooth, denom.sum())
    else:
        ret = _reduce(smooth, reduction)
    return nll * (1 - label_smoothing) + ret * (label_smoothing / C)


def _check_same_size(input: Tensor, target: Tensor) -> None:
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({_size_repr(target.shape)}) that is different to the input size "
                         f"({_size_repr(input.shape)}) is deprecated. Please ensure they have the same size.")


@op("binary_cross_entropy")
def _bce(x, y):
    return -(y * jnp.maximum(jnp.log(x), -100.0) + (1 - y) * jnp.maximum(jnp.log(1 - x), -100.0))


# PyTorch's gradients, finite where a probability is exactly 0 or 1 (a saturated sigmoid's)
_bce.defvjp(lambda g, out, x, y: g * (x - y) / (x * (1 - x)).clamp(min=1e-12),
            lambda g, out, x, y: g * ((1 - x).log() - x.log()))


@cast_inputs("fp32")
def binary_cross_entropy(input: Tensor, target: Tensor, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """``-(y log x + (1 - y) log(1 - x))`` with logs clamped at -100, as PyTorch."""
    _check_same_size(input, target)
    _check_dtype(input, target)
    loss = apply(_bce, input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """``binary_cross_entropy(sigmoid(input), target)`` computed stably; ``pos_weight`` scales positives."""
    _check_same_size(input, target)
    log_sig_neg = (-input.abs()).exp().log1p() + (-input).relu()  # -log(sigmoid(x))
    if pos_weight is not None:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * log_sig_neg
    else:
        loss = (1 - target) * input + log_sig_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """KL(target || exp(input)) pointwise; ``reduction='batchmean'`` divides the sum by the batch size."""
    if log_target:
        loss = target.exp() * (target - input)
    else:   # xlogy(target, target): 0 at 0, nan below
        loss = target * _ew.where(target == 0, 1.0, target).log() - target * input
    reduction = _reduction(size_average, reduce, reduction)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.dim() else 1)
    return _reduce(loss, reduction)


@cast_inputs("fp32")
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``."""
    if not input1.dim() == input2.dim() == target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {_size_repr(input1.shape)}, input2: {_size_repr(input2.shape)}, "
                           f"target: {_size_repr(target.shape)} ")
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0.0), _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with the p-norm distance."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if isinstance(margin, (int, float)) and margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.dim() == positive.dim() == negative.dim():
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.dim()}D, positive {positive.dim()}D, and "
                           f"negative {negative.dim()}D inputs")
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = _ew.minimum(d_an, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_ap - d_an).clamp(min=0.0), reduction)


@cast_inputs("fp32")
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                          reduction: str = "mean") -> Tensor:
    """``1 - cos`` for target 1, ``max(0, cos - margin)`` for target -1."""
    eps = 1e-12
    prod = (input1 * input2).sum(-1)
    denom = (((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps)).sqrt()
    cos = prod / denom
    loss = _ew.where(target == 1, 1 - cos, 0.0) + _ew.where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """``0.5 * (log(var) + (input - target)^2 / var)`` (+ constant when ``full``)."""
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = input.new_full(tuple(input.shape), float(var))
    elif not is_recorded(var) and bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):   # one variance per row (homoscedastic)
            var = var.unsqueeze(-1)
        elif var.dim() != input.dim() or sum(v for i, v in zip(input.shape, var.shape) if i != v) != 1:
            raise ValueError("var is of incorrect size")
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    var = _no_grad_clamp_min(var, eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@cast_inputs("fp32")
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """Poisson negative log-likelihood (``input`` is the log-rate when ``log_input``)."""
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = _ew.where(target > 1, target, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + _ew.where(target > 1, stirling, 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``log(1 + exp(-target * input))``."""
    return _reduce(softplus(-target * input), _reduction(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean") -> Tensor:
    """Per-class binary logistic loss, averaged over classes."""
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.sum(-1) / input.shape[-1], _reduction(size_average, reduce, reduction))


@cast_inputs("fp32")
def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """``input`` for target 1, ``max(0, margin - input)`` for target -1."""
    loss = _ew.where(target != 1, (margin - input).clamp(min=0.0), 0.0) + _ew.where(target != -1, input, 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None, size_average=None,
                      reduce=None, reduction: str = "mean") -> Tensor:
    """The multi-class hinge loss: per sample, the mean over the other classes ``i`` of
    ``max(0, margin - x[y] + x[i]) ** p``, scaled by ``weight[y]`` (``p``: 1 or 2)."""
    reduction = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    _check_reduction(reduction)
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    if input.dim() > 2 or input.numel() == 0 and input.dim() != 2:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    if not input.is_floating_point():
        raise NotImplementedError(f"\"multi_margin_loss_cpu_kernel\" not implemented for '{input.dtype.legacy_name}'")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    n, c = x.shape
    if target.dtype != _dtype.int64:
        raise RuntimeError(f"expected scalar type Long but found {target.dtype.legacy_name}")
    if target.numel() != n or target.dim() > 1:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{n}], but got {list(target.shape)}. Input "
                           f"has shape {list(input.shape)}.")
    if weight is not None and (weight.dim() != 1 or weight.shape[0] != c):
        raise RuntimeError(f"inconsistent weight size, expected {c} but got {list(weight.shape)}")
    if weight is not None and weight.requires_grad and grad_mode.state.enabled:
        raise RuntimeError("The function 'multi_margin_loss' is not differentiable with respect to argument 'weight'. "
                           "This input cannot have requires_grad True.")
    y = target.reshape(n, 1)
    check_bounds([y], [c], _raise(RuntimeError, "target out of range"), negative=False)
    picked = x.gather(1, y)                                              # (n, 1)
    hinge = (margin - picked + x).clamp(min=0.0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight.gather(0, target.reshape(n)).reshape(n, 1)
    # the target's own class takes no part: its term would be max(0, margin) ** p
    others = _ew.where(one_hot(target.reshape(n), c) == 1, 0.0, hinge)
    loss = others.sum(1) / c
    if input.dim() < 2 and reduction == "none":
        loss = loss.reshape(())
    return _reduce(loss, reduction)
