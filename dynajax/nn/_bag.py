"""``embedding_bag``: sums, means or maxima of bags of embedding rows, as
``torch.nn.functional.embedding_bag``. Each index's row is looked up (``embedding``) and added, or reduced
by max, into its bag's row (``index_add`` / ``scatter_reduce``), so the weight's gradient follows from those
ops. An index that takes no part (``padding_idx``, past ``include_last_offset``'s end) goes to a spare row
that is dropped."""
from __future__ import annotations

from .. import _dtype
from .._tensor import Tensor
from ..ops.creation import arange, ones, zeros
from ..ops.elementwise import where
from ..ops.index import _host, _raise, check_bounds
from ..ops.sort import searchsorted
from ..ops.registry import apply
from ..autograd import grad_mode
from . import _ops


def _bags(input: Tensor, offsets, include_last_offset: bool):
    """``(flat indices, bag of each, number of bags)``, after PyTorch's checks of the input and offsets."""
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences. However, found offsets of type <class 'torch.Tensor'>")
        b, n = input.shape
        return input.reshape(-1), arange(b * n) // max(n, 1), b
    if input.dim() != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.dim() != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    off = _host(offsets)
    n = input.shape[0]
    if off.size and off[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {int(off[0])}")
    if off.size and off[-1] > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
                           f"{int(off[-1])}")
    bags = off.size - 1 if include_last_offset else off.size
    seg = searchsorted(offsets, arange(n, dtype=offsets.dtype), right=True) - 1
    return input, seg, max(bags, 0)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm=None, norm_type=2,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx=None) -> Tensor:
    """One row per bag: the ``mode`` ("sum", "mean", "max") of the embedding rows its indices select (an
    empty bag gives zeros). Bags are the rows of a 2-D ``input``, or the runs of a 1-D one starting at
    ``offsets``. ``per_sample_weights`` (``"sum"`` only) scales each index's row; ``padding_idx`` rows take no
    part in their bag."""
    if input.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got torch.{input.dtype.legacy_name}Tensor instead (while checking "
                           "arguments for embedding_bag)")
    if weight.dim() != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.dim()}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      "on GitHub.")
        if per_sample_weights.dtype != weight.dtype:
            raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as tensor for argument "
                               f"#1 'per_sample_weights'; but type torch.{weight.dtype.legacy_name}Tensor does not "
                               f"equal torch.{per_sample_weights.dtype.legacy_name}Tensor (while checking arguments "
                               "for embedding_bag)")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not None, "
                             f"then it must have the same shape as the input ({list(input.shape)})")
    num, dim = weight.shape
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise AssertionError("padding_idx must be within num_embeddings")
        padding_idx %= num
    flat, seg, nbags = _bags(input, offsets, include_last_offset)
    check_bounds([flat], [num], _raise(IndexError, "index out of range in self"), negative=False)
    if max_norm is not None:
        _embedding_renorm_(weight, flat, float(max_norm), float(norm_type))
    rows = _ops.embedding_op(weight, flat, None, bool(scale_grad_by_freq))     # (n, dim)
    out_of_bag = seg >= nbags
    if padding_idx is not None:
        out_of_bag = out_of_bag | (flat == padding_idx)
    seg = where(out_of_bag, nbags, seg)                                        # the spare row, dropped below
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if mode == "max":
        idx = seg.reshape(-1, 1).expand(rows.shape[0], dim)
        return zeros(nbags + 1, dim, dtype=weight.dtype).scatter_reduce(0, idx, rows, "amax",
                                                                        include_self=False)[:nbags]
    sums = zeros(nbags + 1, dim, dtype=rows.dtype).index_add(0, seg, rows)[:nbags]
    if mode == "sum":
        return sums
    counts = zeros(nbags + 1, dtype=rows.dtype).index_add(0, seg, ones(seg.shape[0], dtype=rows.dtype))[:nbags]
    return sums / counts.clamp(min=1).reshape(-1, 1)


def _embedding_renorm_(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale the rows of ``weight`` that ``input`` selects down to norm ``max_norm`` where it is
    exceeded, in place. The row norms are computed over every row and the unselected ones multiplied by
    1, so the shapes do not depend on the index values (one executable under ``dynajax.compile``); the
    factor ``max_norm / (norm + 1e-7)`` is computed in float64 as PyTorch's renorm does."""
    if weight.dim() != 2:
        raise RuntimeError(f"Expected 2-dimensional tensor, but got {weight.dim()}-dimensional tensor for argument "
                           "#1 'self' (while checking arguments for embedding_renorm_)")
    with grad_mode.no_grad():
        w = weight.detach()
        counts = apply(_ops._embedding_backward, w.new_ones(tuple(input.shape)), input, num=int(w.shape[0]),
                       padding_idx=None)
        norms = w.norm(norm_type, dim=1).to(_dtype.float64)
        shrink = (counts > 0) & (norms > max_norm)
        scale = where(shrink, max_norm / (norms + 1e-7), 1.0).to(w.dtype)
        weight.mul_(scale.unsqueeze(1))
