"""``dynajax.nn.functional``: PyTorch's stateless layer functions (activations, losses,
convolution, pooling, normalization, dropout, attention ...), as ``torch.nn.functional``."""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import _dtype, random
from ..ops.autocast import cast_inputs
from ..ops.dispatch import value_aval
from .._tensor import Tensor, _make, _wrap_dim, method
from ..autograd import grad_mode
from ..ops import elementwise as _ew
from ..ops.index import _raise, check_bounds
from ..ops.registry import apply
from ..ops.views import inplace, write
from . import _ops
from ._activations import (_no_grad_clamp_min, _size_repr, _softmax_along, _softmax_dim, _vnorm, log_softmax,
                           logsigmoid, one_hot, pairwise_distance, softplus)

__all__ = [
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
    "pad", "interpolate", "upsample", "pixel_shuffle", "one_hot", "embedding",
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "selu_", "celu", "celu_",
    "rrelu", "rrelu_", "gelu", "silu", "mish", "softplus", "hardtanh_", "threshold_",
    "softsign", "tanh", "sigmoid", "hardtanh", "hardsigmoid", "hardswish", "logsigmoid", "tanhshrink",
    "threshold", "glu", "prelu", "softmax", "log_softmax", "softmin",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "lp_pool1d",
    "lp_pool2d", "local_response_norm", "layer_norm", "batch_norm", "group_norm", "instance_norm",
    "normalize", "cosine_similarity", "pairwise_distance", "scaled_dot_product_attention",
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "margin_ranking_loss",
    "triplet_margin_loss", "cosine_embedding_loss", "gaussian_nll_loss", "poisson_nll_loss", "soft_margin_loss",
    "multilabel_soft_margin_loss", "hinge_embedding_loss", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "unfold", "fold", "pixel_unshuffle", "max_unpool1d", "max_unpool2d", "gumbel_softmax", "softshrink", "hardshrink",
    "rms_norm", "embedding_bag", "pdist", "grid_sample", "affine_grid", "ctc_loss", "multi_margin_loss",
]


def _tuple(v, n: int, name: str = "") -> tuple:
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return tuple(int(v[0]) for _ in range(n))
        if len(v) != n:
            raise ValueError(f"{name} must have {n} elements, got {tuple(v)}")
        return tuple(int(a) for a in v)
    return (int(v),) * n


# ---------------------------------------------------------------- linear / conv
@cast_inputs("low")
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``."""
    (xs, xd), (ws, wd) = value_aval(input._v), value_aval(weight._v)
    if not xs or not ws:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are {len(xs)}D and "
                           f"{len(ws)}D")
    if xd != wd:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_c_name(input.dtype)} != "
                           f"{_c_name(weight.dtype)}")
    if xs[-1] != ws[-1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_ops_shape2(input)} and "
                           f"{weight.shape[-1]}x{weight.shape[0]})")
    return _ops.linear(input, weight, bias)


def _c_name(d) -> str:
    """The C type name PyTorch prints for a dtype in matmul errors ("float", "double", ...)."""
    return _dtype.C_NAMES.get(d.name, d.name)


def _ops_shape2(x: Tensor) -> str:
    n = x.numel() // max(x.shape[-1], 1) if x.dim() > 1 else 1
    return f"{n}x{x.shape[-1]}"


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y_k = x1 @ W_k @ x2 + b_k`` for ``weight`` of shape (out, in1, in2)."""
    o, n1, n2 = weight.shape
    t = _ops.linear(input1, weight.permute(0, 2, 1).reshape(o * n2, n1))  # (..., o*n2)
    t = t.reshape(*input1.shape[:-1], o, n2)
    out = (t * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


def _check_conv_weight(weight, groups, nd: int, group_dim: int) -> None:
    """PyTorch's checks of a convolution's weight: its rank and a channel dim (``group_dim``: 0, the output
    channels of a convolution, or the input channels of a transposed one) that the groups divide."""
    if weight.dim() != nd + 2:
        raise RuntimeError(f"Expected {nd + 2}-dimensional weight for a {nd}-D convolution, but got weight of "
                           f"size {list(weight.shape)}")
    if groups < 1:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[group_dim] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
                           f"{group_dim}, but got weight of size {list(weight.shape)} instead")


def _check_conv_bias(input, weight, bias, channels: int, transposed: bool = False) -> None:
    """PyTorch's checks of a convolution's bias: the input's dtype, one value per output channel."""
    if bias is None:
        return
    if bias.dtype != input.dtype:
        raise RuntimeError(f"Input type ({_c_name(input.dtype)}) and bias type ({_c_name(bias.dtype)}) should be "
                           "the same")
    if bias.dim() != 1 or bias.shape[0] != channels:
        raise RuntimeError(f"Given {'transposed=1, ' * transposed}weight of size {list(weight.shape)}, expected "
                           f"bias to be 1-dimensional with {channels} elements, but got bias of size "
                           f"{list(bias.shape)} instead")


def _check_conv_args(input, stride, pads, dilation, kernel=None) -> None:
    """PyTorch's checks of a convolution's geometry, which XLA would otherwise accept (a kernel larger than
    the padded input gives an empty result there; a zero stride divides by zero). ``pads``: (lo, hi) per
    spatial dim; ``kernel``: the kernel's spatial size when it is to be checked against the input's."""
    if any(s < 1 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise RuntimeError("negative padding is not supported")
    if any(d < 1 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if kernel is None:
        return
    padded = [n + lo + hi for n, (lo, hi) in zip(input.shape[2:], pads)]
    eff = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if any(e > n for e, n in zip(eff, padded)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel "
                           f"size: ({' x '.join(map(str, eff))}). Kernel size can't be greater than actual input "
                           "size")


@cast_inputs("low")
def _conv_nd(input, weight, bias, stride, padding, dilation, groups, nd: int, name: str):
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    if input.dim() != nd + 2:
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got "
                           f"input of size: {list(input.shape)}")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype.legacy_name} but found {weight.dtype.legacy_name}")
    _check_conv_weight(weight, groups, nd, 0)
    _check_conv_bias(input, weight, bias, weight.shape[0])
    c_in = input.shape[1]
    if c_in != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[1] * groups} channels, but got {c_in} "
                           "channels instead")
    stride, dilation = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    k = weight.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            tot = [d * (kk - 1) for d, kk in zip(dilation, k)]
            pads = tuple((t // 2, t - t // 2) for t in tot)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        pads = tuple((p, p) for p in _tuple(padding, nd, "padding"))
    _check_conv_args(input, stride, pads, dilation, k)
    p = dict(stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    out = apply(_ops.conv, input, weight, **p) if bias is None else apply(_ops.conv_bias, input, weight, bias, **p)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """1-D convolution over (N, C, L) input."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """2-D convolution over (N, C, H, W) input; ``padding`` may be an int, a pair, 'same' or 'valid'."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """3-D convolution over (N, C, D, H, W) input."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


@cast_inputs("low")
def _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation, nd):
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    if input.dim() != nd + 2:
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to conv_transpose{nd}d, "
                           f"but got input of size: {list(input.shape)}")
    stride, padding = _tuple(stride, nd, "stride"), _tuple(padding, nd, "padding")
    output_padding, dilation = _tuple(output_padding, nd, "output_padding"), _tuple(dilation, nd, "dilation")
    _check_conv_weight(weight, groups, nd, 0)
    _check_conv_bias(input, weight, bias, weight.shape[1] * groups, transposed=True)
    _check_conv_args(input, stride, tuple((p, p) for p in padding), dilation)
    for op_, s_, d_ in zip(output_padding, stride, dilation):
        if op_ < 0 or op_ >= max(s_, d_):
            raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got "
                               f"output_padding={list(output_padding)}, stride={list(stride)} and "
                               f"dilation={list(dilation)}")
    if input.shape[1] != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[0]} channels, but got {input.shape[1]} "
                           "channels instead")
    k = weight.shape[2:]
    out_sp = tuple((L - 1) * s - 2 * p + d * (kk - 1) + op + 1
                   for L, s, p, d, kk, op in zip(input.shape[2:], stride, padding, dilation, k, output_padding))
    if any(n < 1 for n in out_sp):
        raise RuntimeError(f"Given input size per channel: {list(input.shape[2:])}, kernel size "
                           f"{list(k)}, stride {list(stride)}, padding {list(padding)} and dilation "
                           f"{list(dilation)}, the calculated output size {list(out_sp)} is too small")
    # the result is the input gradient of a convolution of an ``out_sp`` input padded (p, p - output_padding).
    # Below the stride, (p, p) gives the same (the convolution's floor division drops the extra positions), so
    # only an output padding of a stride or more (allowed below the dilation) takes the narrower right padding;
    # where that would be negative, the positions past it are ones no input reaches: zeros appended
    pads, extra = [], []
    for p, op_, s_ in zip(padding, output_padding, stride):
        right = p if op_ < s_ else p - op_
        pads.append((p, max(right, 0)))
        extra.append(max(-right, 0))
    in_shape = (input.shape[0], weight.shape[1] * groups) + tuple(n - e for n, e in zip(out_sp, extra))
    out = apply(_ops.conv_input_grad, input, weight, in_shape=in_shape, stride=stride,
                padding=tuple(pads), dilation=dilation, groups=int(groups))
    if any(extra):
        out = pad(out, tuple(x for e in reversed(extra) for x in (0, e)))
    if bias is not None:
        out = out + bias.reshape(-1, *([1] * nd))
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """Transposed 1-D convolution (the gradient of conv1d w.r.t. its input)."""
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation, 1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """Transposed 2-D convolution; ``weight`` has shape (in, out/groups, kH, kW)."""
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation, 2)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """Transposed 3-D convolution; ``weight`` has shape (in, out/groups, kD, kH, kW)."""
    return _conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation, 3)


# ---------------------------------------------------------------- pooling / resampling
def _check_pool(input, k, s, p, d, ceil_mode, nd: int) -> None:
    """PyTorch's checks of a pooling window: positive sizes, padding at most half the kernel (PyTorch's
    bound, the dilation aside) and at least one output per dim (XLA would return an empty result or divide
    by zero)."""
    if input.dim() not in (nd + 1, nd + 2) or (0 in input.shape[-nd - 1:] and nd < 3):
        raise RuntimeError(f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim batch size "
                           f"for input, but got: {list(input.shape)}")
    if 0 in input.shape[-nd - 1:]:
        raise RuntimeError(f"Expected input's non-batch dimensions to have positive length, but input has a shape "
                           f"of {list(input.shape)} and non-batch dimension {input.shape[-nd - 1:].index(0)} has "
                           "length zero!")
    if min(k) < 1 or min(s) < 1 or min(d) < 1:
        raise RuntimeError(f"kernel_size, stride and dilation should be greater than zero, but got kernel_size={k}, "
                           f"stride={s} and dilation={d}")
    for pp, kk, dd in zip(p, k, d):
        if pp < 0 or pp > kk // 2:
            raise RuntimeError(f"pad should be at most half of kernel size, but got pad={pp}, kernel_size={kk} "
                               f"and dilation={dd}")
    sizes = input.shape[input.dim() - nd:]
    outs = [_ops.pool_out_len(n, kk, ss, pp, dd, bool(ceil_mode)) for n, kk, ss, pp, dd in zip(sizes, k, s, p, d)]
    if min(outs) < 1:
        raise RuntimeError(f"Given input size: {list(sizes)}. Calculated output size: {outs}. Output size is too "
                           "small")


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd):
    k = _tuple(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else _tuple(stride, nd, "stride")
    p, d = _tuple(padding, nd, "padding"), _tuple(dilation, nd, "dilation")
    _check_pool(input, k, s, p, d, ceil_mode, nd)
    params = dict(kernel=k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil_mode))
    out = apply(_ops.max_pool, input, **params)
    return (out, apply(_ops.max_pool_indices, input, **params)) if return_indices else out


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nd):
    k = _tuple(kernel_size, nd)
    s = k if stride is None else _tuple(stride, nd)
    p = _tuple(padding, nd)
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({list(input.shape)}) "
                           f"but got indices tensor with shape: {list(indices.shape)}")
    L = input.shape[-nd:]
    default = tuple((L[i] - 1) * s[i] - 2 * p[i] + k[i] for i in range(nd))
    if output_size is None:
        plane = default
    else:
        plane = tuple(int(v) for v in output_size)
        if len(plane) == nd + 2:
            plane = plane[2:]
        if len(plane) != nd:
            raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has "
                             f"a length of '{len(plane)}'")
        for i in range(nd):
            if not default[i] - s[i] < plane[i] < default[i] + s[i]:
                raise ValueError(f'invalid output_size "{tuple(output_size)}" (dim {i} must be between '
                                 f'{default[i] - s[i]} and {default[i] + s[i]})')
    return _ops.max_unpool_op(input, indices, plane)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Place values back at the positions ``max_pool1d(..., return_indices=True)`` took them from."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Place values back at the positions ``max_pool2d(..., return_indices=True)`` took them from."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """Place values back at the positions ``max_pool3d(..., return_indices=True)`` took them from."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last dim."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last two dims (stride defaults to kernel_size)."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last three dims."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3)


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nd):
    k = _tuple(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else _tuple(stride, nd, "stride")
    p = _tuple(padding, nd, "padding")
    _check_pool(input, k, s, p, (1,) * nd, ceil_mode, nd)
    L = input.shape[-nd:]
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    if divisor_override:
        specs = tuple(("sum", L[i], k[i], s[i], p[i], bool(ceil_mode)) for i in range(nd))
        return apply(_ops.resample, input, specs=specs) / divisor_override
    specs = tuple(("avg", L[i], k[i], s[i], p[i], bool(ceil_mode), bool(count_include_pad)) for i in range(nd))
    return apply(_ops.resample, input, specs=specs)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:
    """Mean over sliding windows of the last dim."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None) -> Tensor:
    """Mean over sliding windows of the last two dims."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None) -> Tensor:
    """Mean over sliding windows of the last three dims."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nd):
    """``(sum of x ** p over each window) ** (1/p)``: PyTorch's formula, through an average pool (a
    negative window sum of an odd power is zeroed, as its ReLU zeroes it)."""
    k = _tuple(kernel_size, nd, "kernel_size")
    fn = avg_pool1d if nd == 1 else avg_pool2d
    out = fn(input.pow(norm_type), k, stride, 0, ceil_mode)
    return (out.sign() * relu(out.abs())).mul(math.prod(k)).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    """Power-average pooling over the last dim."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    """Power-average pooling over the last two dims."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """Divide each value by ``(k + alpha * mean of the squares of its ``size`` neighbouring channels) ** beta``
    (the window centred on the channel, zero beyond the ends)."""
    if input.dim() < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.dim()} dimensions)")
    if input.numel() == 0:
        return input
    sq = (input * input).reshape(input.shape[0], 1, input.shape[1], -1)   # channels as a pooled dim
    sq = pad(sq, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(sq, (size, 1), stride=1).reshape(input.shape)
    return input / (div * alpha + k).pow(beta)


def _adaptive_sizes(input, output_size, nd: int, kind: str) -> tuple:
    """The output sizes of ``adaptive_{kind}_pool{nd}d`` (None keeps an input dim), after PyTorch's checks of
    the input's rank and of ``output_size``'s length and signs."""
    name = f"adaptive_{kind}_pool{nd}d"
    out = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    if nd > 1 and isinstance(output_size, (tuple, list)) and input.dim() <= len(out):
        raise ValueError(f"Input dimension should be at least {len(out) + 1}")   # (PyTorch's Python check)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(input.shape)}")
    if len(out) != nd:
        raise RuntimeError(f"{name}() argument 'output_size' should contain one int (got {len(out)})" if nd == 1
                           else f"{name}: output_size must be {nd}" if kind == "avg"
                           else f"{name}(): internal error: output_size.size() must be {nd}")
    L = input.shape[-nd:]
    sizes = tuple(L[i] if out[i] is None else int(out[i]) for i in range(nd))
    if min(sizes) < 0:
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0 but received "
                           f"{{{', '.join(map(str, sizes))}}}" if kind == "avg" else
                           f"Trying to create tensor with negative dimension {min(sizes)}: "
                           f"{list(input.shape[:-nd]) + list(sizes)}")
    return sizes


def _no_bins(input, sizes) -> Tensor:
    """An adaptive pool's empty result (some output size 0): the input's batch dims and ``sizes``, still a
    function of ``input`` (zero gradient), as PyTorch returns it."""
    return input.narrow(-1, 0, 0).reshape(tuple(input.shape[:-len(sizes)]) + tuple(sizes))


def _adaptive_avg(input, output_size, nd):
    sizes = _adaptive_sizes(input, output_size, nd, "avg")
    if 0 in sizes:
        return _no_bins(input, sizes)
    specs = tuple(("adaptive", n, m) for n, m in zip(input.shape[-nd:], sizes))
    return apply(_ops.resample, input, specs=specs)


def adaptive_avg_pool1d(input, output_size) -> Tensor:
    """Average-pool the last dim to ``output_size`` bins."""
    return _adaptive_avg(input, output_size, 1)


def adaptive_avg_pool2d(input, output_size) -> Tensor:
    """Average-pool the last two dims to ``output_size`` (an int, pair, or None to keep a dim)."""
    return _adaptive_avg(input, output_size, 2)


def adaptive_avg_pool3d(input, output_size) -> Tensor:
    """Average-pool the last three dims to ``output_size``."""
    return _adaptive_avg(input, output_size, 3)


def _adaptive_max(input, output_size, nd, return_indices=False):
    sizes = _adaptive_sizes(input, output_size, nd, "max")
    if 0 in sizes:
        from ..ops.creation import zeros
        out = _no_bins(input, sizes)
        return (out, zeros(out.shape, dtype=_dtype.int64)) if return_indices else out
    out = apply(_ops.adaptive_max_pool, input, out_sizes=sizes)
    return (out, apply(_ops.adaptive_max_pool_indices, input, out_sizes=sizes)) if return_indices else out


def adaptive_max_pool1d(input, output_size, return_indices: bool = False) -> Tensor:
    """Max-pool the last dim to ``output_size`` bins (``return_indices``: also each maximum's position)."""
    return _adaptive_max(input, output_size, 1, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False) -> Tensor:
    """Max-pool the last two dims to ``output_size`` (``return_indices``: also each maximum's flat position
    in its plane, as ``max_unpool2d`` takes it)."""
    return _adaptive_max(input, output_size, 2, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False) -> Tensor:
    """Max-pool the last three dims to ``output_size``."""
    return _adaptive_max(input, output_size, 3, return_indices)


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """Resize the spatial dims: modes nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area;
    ``antialias`` (bilinear, bicubic) filters a downsampled input as PyTorch does."""
    nd = input.dim() - 2
    if nd < 1 or nd > 3:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.dim()}D) "
                                  f"for the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                                  f"nearest-exact (got {mode})")
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    L = input.shape[2:]
    for name, v in (("size", size), ("scale_factor", scale_factor)):
        if isinstance(v, (tuple, list)) and len(v) != nd:
            raise ValueError(f"Input and {name} must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(L)} and {name} of {tuple(v)}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and {name} in (o1, o2, ...,oK) "
                             "format.")
    if size is not None:
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * nd
        scales = tuple(L[i] / out[i] for i in range(nd))
    else:
        sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * nd
        out = tuple(int(math.floor(L[i] * sf[i])) for i in range(nd))
        scales = tuple((L[i] / out[i]) if recompute_scale_factor else 1.0 / sf[i] for i in range(nd))
    if mode == "area":
        return adaptive_avg_pool2d(input, out) if nd == 2 else _adaptive_avg(input, out, nd)
    linear_modes = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError("Anti-alias option is restricted to bilinear and bicubic modes and requires a 4-D tensor "
                         "as input")
    if mode in linear_modes:
        if linear_modes[mode] != nd:
            raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs "
                                      f"{linear_modes[mode] + 2}D input")
        kind = ("cubic" if mode == "bicubic" else "linear") + ("_aa" if antialias else "")
        specs = tuple((kind, L[i], int(out[i]), float(scales[i]), bool(align_corners)) for i in range(nd))
    elif mode in ("nearest", "nearest-exact"):
        specs = tuple((mode, L[i], int(out[i]), float(scales[i])) for i in range(nd))
    else:
        raise NotImplementedError(f"dynajax: interpolate mode '{mode}' is not supported")
    return apply(_ops.resample, input, specs=specs)


def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None) -> Tensor:
    """Deprecated alias of :func:`interpolate`."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:
    """Pad the last ``len(pad)//2`` dims; ``pad`` lists (left, right) pairs from the last dim backwards."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    n = len(pad) // 2
    if n > input.dim():
        raise RuntimeError("Padding length should be less than or equal to two times the input dimension but "
                           f"got padding length {len(pad)} and input of dimension {input.dim()}")
    pairs = tuple((int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(n))[::-1]
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    first = input.dim() - n    # the first padded dim
    for i, (lo, hi) in enumerate(pairs):
        if input.shape[first + i] + lo + hi < 0:
            raise RuntimeError(f"The input size {input.shape[first + i]}, plus negative padding {lo} and {hi} "
                               f"resulted in a negative output size, which is invalid. Check dimension "
                               f"{first + i} of your input.")
    if mode == "constant":
        return apply(_ops.pad_op, input, pads=pairs, mode=mode, value=float(value or 0.0))
    if input.dim() not in (n + 1, n + 2) or n > 3:
        raise NotImplementedError(f"Padding size {len(pad)} is not supported for {input.dim()}D input tensor. "
                                  f"{mode} padding of the last {n} dim(s) takes {n + 1}D or {n + 2}D input")
    if mode == "circular":
        for i, (lo, hi) in enumerate(pairs):
            if lo > input.shape[first + i] or hi > input.shape[first + i]:
                raise RuntimeError("Padding value causes wrapping around more than once.")
    if mode == "reflect":
        for i, (lo, hi) in enumerate(pairs):
            dim = first + i
            if lo >= input.shape[dim] or hi >= input.shape[dim]:
                raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input "
                                   f"dimension, but got: padding ({lo}, {hi}) at dimension {dim} of input "
                                   f"{list(input.shape)}")
    if not any(lo < 0 or hi < 0 for lo, hi in pairs):
        return apply(_ops.pad_op, input, pads=pairs, mode=mode, value=0.0)
    # negative padding crops: a circular pad wraps around the cropped dim, so it crops first; a reflect or
    # replicate pad reads the uncropped input, so it pads first (PyTorch's results, both)
    grow = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pairs)

    def crop(x):
        return x[(Ellipsis,) + tuple(slice(-min(lo, 0), x.shape[first + i] + min(hi, 0))
                                     for i, (lo, hi) in enumerate(pairs))]

    if mode == "circular":
        return apply(_ops.pad_op, crop(input), pads=grow, mode=mode, value=0.0)
    return crop(apply(_ops.pad_op, input, pads=grow, mode=mode, value=0.0))


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(N, C*r*r, H, W) -> (N, C, H*r, W*r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(N, C, H*r, W*r) -> (N, C*r*r, H, W), the inverse of :func:`pixel_shuffle`."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def _unfold_params(kernel_size, dilation, padding, stride) -> dict:
    return dict(kernel=_tuple(kernel_size, 2), dilation=_tuple(dilation, 2), padding=_tuple(padding, 2),
                stride=_tuple(stride, 2))


def _unfold_blocks(spatial, p: dict) -> tuple:
    """How many sliding blocks fit along each spatial dim (``spatial``: the image's size), checked as PyTorch
    checks them (at least one each; positive kernel, stride and dilation, no negative padding)."""
    if min(p["kernel"] + p["stride"] + p["dilation"]) < 1 or min(p["padding"]) < 0:
        raise RuntimeError(f"kernel_size, stride and dilation should be greater than zero and padding non-negative, "
                           f"but got kernel_size={p['kernel']}, stride={p['stride']}, dilation={p['dilation']} and "
                           f"padding={p['padding']}")
    blocks = tuple((n + 2 * pd - d * (k - 1) - 1) // s + 1 for n, k, d, pd, s in
                   zip(spatial, p["kernel"], p["dilation"], p["padding"], p["stride"]))
    if min(blocks) < 1:
        raise RuntimeError(f"Given input with spatial size {tuple(spatial)}, kernel_size={p['kernel']}, dilation="
                           f"{p['dilation']}, padding={p['padding']}, calculated shape of the array of sliding "
                           f"blocks as {blocks}, but its components must be at least one.")
    return blocks


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding (N, C, H, W) patches as columns: (N, C*kH*kW, L) (im2col)."""
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.dim() != 4:
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.dim()}D)")
    p = _unfold_params(kernel_size, dilation, padding, stride)
    _unfold_blocks(x.shape[2:], p)
    out = apply(_ops.unfold_op, x, **p)
    return out.squeeze(0) if unbatched else out


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sum columns (N, C*kH*kW, L) back into an (N, C, H, W) image (col2im), the adjoint of :func:`unfold`."""
    unbatched = input.dim() == 2
    x = input.unsqueeze(0) if unbatched else input
    p = _unfold_params(kernel_size, dilation, padding, stride)
    k = p["kernel"][0] * p["kernel"][1]
    if x.shape[1] % k:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={x.shape[1]} and kernel_size={p['kernel']}")
    in_shape = (x.shape[0], x.shape[1] // k) + _tuple(output_size, 2, "output_size")
    blocks = _unfold_blocks(in_shape[2:], p)
    if x.dim() != 3 or x.shape[2] != blocks[0] * blocks[1]:
        raise RuntimeError(f"Given output_size={in_shape[2:]}, kernel_size={p['kernel']}, dilation={p['dilation']}, "
                           f"padding={p['padding']}, stride={p['stride']}, expected size of input's dimension 2 to "
                           f"match the calculated number of sliding blocks {blocks[0]} * {blocks[1]} = "
                           f"{blocks[0] * blocks[1]}, but got input.size(2)={x.shape[-1]}.")
    out = apply(_ops.fold_op, x, in_shape=in_shape, **p)
    return out.squeeze(0) if unbatched else out


def embedding(input: Tensor, weight: Tensor, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False) -> Tensor:
    """Rows of ``weight`` selected by the integer ``input``. With ``max_norm``, each row that ``input``
    selects and whose ``norm_type`` norm exceeds ``max_norm`` is first scaled in place (without grad) to
    norm ``max_norm``, as PyTorch does."""
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx %= weight.shape[0]
    if input.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got torch.{input.dtype.legacy_name}Tensor instead (while checking "
                           "arguments for embedding)")
    if max_norm is None and weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    check_bounds([input], [weight.shape[0]], _raise(IndexError, "index out of range in self"), negative=False)
    if max_norm is not None:
        _embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    return _ops.embedding_op(weight, input, padding_idx, bool(scale_grad_by_freq))


# ---------------------------------------------------------------- activations
tanh = _ew.tanh
sigmoid = _ew.sigmoid


_write_inplace = inplace   # (the functions below take an argument named ``inplace``)


def _act(input: Tensor, inplace: bool, fn) -> Tensor:
    """``fn(input)``; with ``inplace``, written into ``input`` by ``views.inplace`` (a leaf that requires grad
    raises, the version bumps, autograd follows) and ``input`` returned, as PyTorch's ``inplace=True``."""
    return _write_inplace(input, fn) if inplace else fn(input)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``."""
    return _act(input, inplace, _ew.relu)


def relu_(input: Tensor) -> Tensor:
    """In-place ReLU."""
    return input.relu_()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x if x > 0 else negative_slope * x``."""
    return _act(input, inplace, lambda a: _ew.leaky_relu(a, negative_slope))


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """In-place :func:`leaky_relu`."""
    return leaky_relu(input, negative_slope, True)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """Clamp to ``[min_val, max_val]``."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _act(input, inplace, lambda a: _ew.clamp_open(a, min_val, max_val))


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """In-place :func:`hardtanh`."""
    return hardtanh(input, min_val, max_val, True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def _elu(a: Tensor, alpha: float) -> Tensor:
    return _ew.where(a > 0, a, (a.clamp(max=0.0)).expm1() * alpha)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x if x > 0 else alpha * (exp(x) - 1)``."""
    return _act(input, inplace, lambda a: _elu(a, alpha))


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """In-place :func:`elu`."""
    return elu(input, alpha, True)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """Scaled ELU with PyTorch's constants."""
    a, s = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return _act(input, inplace, lambda x: _elu(x, a) * s)


def selu_(input: Tensor) -> Tensor:
    """In-place :func:`selu`."""
    return selu(input, True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return _act(input, inplace, lambda a: _ew.where(a > 0, a, (a.clamp(max=0.0) / alpha).expm1() * alpha))


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """In-place :func:`celu`."""
    return celu(input, alpha, True)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Randomized leaky ReLU: in training each ``x <= 0`` is scaled by a slope drawn from
    ``U(lower, upper)``; in eval by ``(lower + upper) / 2``."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = _make(random.sample("uniform", tuple(input.shape), input._v.dtype, lower, upper))
    return _act(input, inplace, lambda a: _ew.where(a > 0, a, a * slope))


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False) -> Tensor:
    """In-place :func:`rrelu`."""
    return rrelu(input, lower, upper, training, True)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit; ``approximate='tanh'`` uses the tanh formula."""
    if not input.dtype.is_floating_point:   # (the formulas below would promote an integer input to float)
        raise NotImplementedError(f'"GeluKernelImpl" not implemented for \'{input.dtype.legacy_name}\'')
    if approximate == "tanh":
        return 0.5 * input * (1.0 + (math.sqrt(2.0 / math.pi) * (input + 0.044715 * input * input * input)).tanh())
    if approximate != "none":
        raise RuntimeError("approximate argument must be either none or tanh.")
    return 0.5 * input * (1.0 + (input * (1.0 / math.sqrt(2.0))).erf())


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``."""
    return _act(input, inplace, lambda a: a * a.sigmoid())


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _act(input, inplace, lambda a: a * softplus(a).tanh())


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return input / (1 + input.abs())


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``."""
    return _act(input, inplace, lambda a: _ew.clamp_open(a + 3.0, 0.0, 6.0) / 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    # PyTorch's gradient: 0 up to -3 (included), (2x + 3) / 6 below 3, 1 from 3 on
    return _act(input, inplace, lambda a: _ew.where(a <= -3.0, a * 0.0, _ew.where(a < 3.0, a * (a + 3.0) / 6.0, a)))


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x if x > threshold else value``."""
    return _act(input, inplace, lambda a: _ew.where(a > threshold, a, value))


_threshold = threshold   # (for threshold_, whose argument shadows the name)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    """In-place :func:`threshold`."""
    return _threshold(input, threshold, value, True)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` for the two halves of ``input`` along ``dim``."""
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """Leaky ReLU with a learned slope per channel (dim 1)."""
    if weight.dim() > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.dim()}")
    if weight.numel() != 1:
        if input.dim() == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        c = input.shape[1] if input.dim() > 1 else 1
        if c != weight.numel():
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight.numel()} and channel size = {c}.")
    w = weight.reshape(-1, *([1] * (input.dim() - 2))) if input.dim() > 1 and weight.numel() > 1 else weight
    return _ew.where(input > 0, input, input * w)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return _ew.where(input > lambd, input - lambd, _ew.where(input < -lambd, input + lambd, 0.0))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``x`` where ``|x| > lambd``, else 0."""
    return _ew.where(input.abs() > lambd, input, 0.0)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """Softmax of ``(logits + Gumbel noise) / tau``; ``hard`` returns one-hot samples with soft gradients."""
    u = random.sample("uniform", tuple(logits.shape), logits._v.dtype, 0.0, 1.0)
    exp_draws = -_make(1.0 - u).log()  # Exp(1), as PyTorch's exponential_()
    gumbels = -exp_draws.log()
    y = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y
    d = _wrap(dim, y.dim())
    idx = y.argmax(d)
    hard_y = one_hot(idx, y.shape[d]).to(y.dtype).movedim(-1, d)
    return hard_y - y.detach() + y


def softmax(input: Tensor, dim=None, _stacklevel=3, dtype=None) -> Tensor:
    """``exp(x) / exp(x).sum(dim)``, computed stably."""
    if dtype is not None:
        input = input.to(dtype)
    dim = _softmax_dim(input.dim()) if dim is None else dim
    return _softmax_along(input, dim, False)


@method("softmax")
def _softmax_method(self: Tensor, dim, dtype=None) -> Tensor:
    """``Tensor.softmax(dim)``: :func:`softmax` along ``dim``."""
    return softmax(self, dim, dtype=dtype)


@method("log_softmax")
def _log_softmax_method(self: Tensor, dim, dtype=None) -> Tensor:
    """``Tensor.log_softmax(dim)``: :func:`log_softmax` along ``dim``."""
    return log_softmax(self, dim, dtype=dtype)


def softmin(input: Tensor, dim=None, _stacklevel=3, dtype=None) -> Tensor:
    """``softmax(-x)``."""
    return softmax(-input, dim, dtype=dtype)


def _wrap(dim: int, ndim: int) -> int:
    return _wrap_dim(dim, ndim) if ndim else 0


# ---------------------------------------------------------------- dropout
def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _dropout_mask(input: Tensor, p: float, shape) -> Tensor:
    keep = random.sample("bernoulli", tuple(shape), input._v.dtype, 1.0 - p)
    return _make(keep) * (1.0 / (1.0 - p)) if p < 1.0 else _make(keep)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` (training only)."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    mask = _dropout_mask(input, p, input.shape)
    return _act(input, inplace, lambda a: a * mask)


def _channel_dropout(input, p, training, inplace, batched_ndim):
    _check_p(p)
    if not training or p == 0.0:
        return input
    lead = 2 if input.dim() == batched_ndim else 1
    shape = tuple(input.shape[:lead]) + (1,) * (input.dim() - lead)
    mask = _dropout_mask(input, p, shape)
    return _act(input, inplace, lambda a: a * mask)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, L) input."""
    return _channel_dropout(input, p, training, inplace, 3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, H, W) input. As PyTorch 2.13, any input is taken as (N, C, ...) with
    dims 0 and 1 masked together (a 3-D one as (N, C, L), a 2-D one as (N, C): single elements), warning
    where it is not 4-D."""
    _check_p(p)
    nd = input.dim()
    if nd not in (3, 4):
        warnings.warn(f"dropout2d: Received a {nd}-D input to dropout2d, which is deprecated and will result in an "
                      "error in a future release. To retain the behavior and silence this warning, please use "
                      "dropout instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 "
                      "spatial dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D "
                      "inputs).", stacklevel=2)
    if nd == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. "
                      "This behavior will change in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please "
                      "switch to using dropout1d instead.", stacklevel=2)
    if nd < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return _channel_dropout(input, p, training, inplace, nd)   # (its batched rank: dims 0 and 1 always masked)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, D, H, W) input."""
    return _channel_dropout(input, p, training, inplace, 5)


_SELU_ALPHA_SCALED = 1.7580993408473766   # SELU's scale * alpha: the value a dropped unit saturates to


def _alpha_dropout(input, p, training, inplace, feature: bool):
    """Dropout that keeps a SELU network's mean and variance: dropped units take SELU's saturation value,
    then an affine map restores zero mean and unit variance (PyTorch's ``a`` and ``b``)."""
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return _act(input, inplace, lambda x: x * 0.0)
    shape = tuple(input.shape[:2]) + (1,) * (input.dim() - 2) if feature else tuple(input.shape)
    keep = _make(random.sample("bernoulli", shape, input._v.dtype, 1.0 - p))
    a = 1.0 / math.sqrt((_SELU_ALPHA_SCALED ** 2 * p + 1) * (1 - p))
    b = (keep - 1) * (_SELU_ALPHA_SCALED * a) + _SELU_ALPHA_SCALED * a * p
    noise = keep * a
    return _act(input, inplace, lambda x: x * noise + b)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout of single elements (for SELU networks); the identity in eval mode."""
    return _alpha_dropout(input, p, training, inplace, False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels; the identity in eval mode."""
    return _alpha_dropout(input, p, training, inplace, True)


# ---------------------------------------------------------------- normalization
def _normalize_over(x: Tensor, dims, eps: float):
    mean = x.mean(dims, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dims, keepdim=True)
    return xc * (var + eps).rsqrt(), mean, var


def _check_layer_norm(input: Tensor, ns: tuple, weight, bias) -> None:
    """PyTorch's checks of a layer norm's ``normalized_shape`` (``ns``) against its input, weight and bias."""
    if not ns:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    if tuple(input.shape[input.dim() - len(ns):]) != ns:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape [*, "
                           f"{', '.join(str(s) for s in ns)}], but got input of size{list(input.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != ns:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(t.shape)} and normalized_shape = {list(ns)}")
        if t is not None and t.dtype != input.dtype and not (
                t.dtype == _dtype.float32 and input.dtype in (_dtype.float16, _dtype.bfloat16)):
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def layer_norm(input: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims, then scale and shift."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    _check_layer_norm(input, ns, weight, bias)
    # half and bfloat16 inputs are normalized in float32 and the result given back in the input's dtype, as
    # PyTorch computes them (float32 weights and bias with such an input included)
    low = input.dtype in (_dtype.float16, _dtype.bfloat16)
    x = input.to(_dtype.float32) if low else input
    y, _, _ = _normalize_over(x, tuple(range(input.dim() - len(ns), input.dim())), eps)
    if weight is not None:
        y = y * weight
    y = y if bias is None else y + bias
    return y.to(input.dtype) if low else y


def _channel_shape(x: Tensor) -> tuple:
    return (-1,) + (1,) * (x.dim() - 2)


def batch_norm(input: Tensor, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel (dim 1) by batch statistics (training, updating the running ones) or running ones."""
    cs = _channel_shape(input)
    if input.dim() < 2:
        raise ValueError(f"Expected 2D or more input to batch_norm (got {input.dim()}D input)")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != input.shape[1]:
            raise RuntimeError(f"{name} should contain {input.shape[1]} elements not {t.numel()}")
    if not training:
        y = (input - running_mean.reshape(cs)) * (running_var.reshape(cs) + eps).rsqrt()
        if weight is not None:
            y = y * weight.reshape(cs)
        return y if bias is None else y + bias.reshape(cs)
    n = input.numel() // input.shape[1]
    if n <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                         f"{_size_repr(input.shape)}")
    from ..compile.bucketing import sequence_mask
    mask = sequence_mask(input.shape[0])   # a batch padded by compile(dynamic=...): count only real rows
    if mask is not None:
        return _masked_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps, mask)
    from ..ops.creation import ones, zeros
    c = input.shape[1]
    w = ones(c, dtype=input.dtype) if weight is None else weight
    b = zeros(c, dtype=input.dtype) if bias is None else bias
    # one op (and one for its backward) instead of a dozen elementwise ops and reductions
    y, mean, var = apply(_ops.batch_norm_train, input, w, b, eps=float(eps),
                         channels_last=input.dim() > 2 and _ops.whole_program())
    if running_mean is not None and running_var is not None and running_mean.dtype == running_var.dtype == \
            mean.dtype and tuple(running_mean.shape) == tuple(running_var.shape) == (c,):
        with grad_mode.no_grad():
            rm, rv = apply(_ops.running_stats, running_mean, running_var, mean.detach(), var.detach(),
                           1 - momentum, momentum, n / (n - 1))
            write(running_mean, rm)
            write(running_var, rv)
    else:
        _update_running(running_mean, running_var, mean, var, n / (n - 1), momentum)
    return y


def _update_running(running_mean, running_var, mean, var, unbias, momentum) -> None:
    """``running = (1 - momentum) * running + momentum * statistic`` in place, outside the graph, for whichever
    of the two running statistics is given (``var`` times ``unbias``: the unbiased batch variance)."""
    with grad_mode.no_grad():
        if running_mean is not None:
            m = mean.detach()
            inplace(running_mean, lambda a: a * (1 - momentum) + m * momentum)
        if running_var is not None:
            v = var.detach() * unbias
            inplace(running_var, lambda a: a * (1 - momentum) + v * momentum)


def _masked_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps, mask) -> Tensor:
    """Training-mode batch norm whose statistics count only the rows ``mask`` marks real: a batch that
    ``dynajax.compile(dynamic=...)`` padded (the padded rows would otherwise shift the mean and shrink
    the variance). Padded rows are normalized with the real rows' statistics; the step's result for
    them is sliced off. The mask is an input of the executable, so every size of a bucket shares it."""
    cs = _channel_shape(input)
    m = mask.reshape((input.shape[0],) + (1,) * (input.dim() - 1)).to(input.dtype)
    dims = (0,) + tuple(range(2, input.dim()))
    cnt = m.sum() * (input.numel() // (input.shape[0] * input.shape[1]))   # real values per channel
    mean = (input * m).sum(dims) / cnt
    xc = input - mean.reshape(cs)
    var = ((xc * m) ** 2).sum(dims) / cnt
    y = xc * (var.reshape(cs) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(cs)
    if bias is not None:
        y = y + bias.reshape(cs)
    _update_running(running_mean, running_var, mean, var, cnt / (cnt - 1), momentum)
    return y


def instance_norm(input: Tensor, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each (sample, channel) over its spatial dims (``use_input_stats=False``: by the running
    statistics instead; with them, training updates the running statistics by the batch's mean of each
    instance's mean and unbiased variance, as PyTorch does)."""
    cs = _channel_shape(input)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        y = (input - running_mean.reshape(cs)) * (running_var.reshape(cs) + eps).rsqrt()
    else:
        dims = tuple(range(2, input.dim()))
        y, mean, var = _normalize_over(input, dims, eps)
        n = input.numel() // (input.shape[0] * input.shape[1])
        with grad_mode.no_grad():
            if running_mean is not None:
                m = mean.detach().reshape(input.shape[:2]).mean(0)
                inplace(running_mean, lambda a: a * (1 - momentum) + m * momentum)
            if running_var is not None:
                v = var.detach().reshape(input.shape[:2]).mean(0) * (n / max(n - 1, 1))
                inplace(running_var, lambda a: a * (1 - momentum) + v * momentum)
    if weight is not None:
        y = y * weight.reshape(cs)
    return y if bias is None else y + bias.reshape(cs)


def group_norm(input: Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize over groups of channels (and all spatial dims) per sample."""
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    n, c = input.shape[0], input.shape[1]
    for t in (weight, bias):
        if t is not None and (t.dim() != 1 or t.shape[0] != c):
            raise RuntimeError(f"Expected weight to be a vector of size equal to the number of channels in input, "
                               f"but got weight of shape {list(t.shape)} and input of shape {list(input.shape)}")
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input "
                           f"of shape {list(input.shape)} and num_groups={num_groups}")
    y, _, _ = _normalize_over(input.reshape(n, num_groups, -1), (2,), eps)
    y = y.reshape(input.shape)
    cs = _channel_shape(input)
    if weight is not None:
        y = y * weight.reshape(cs)
    return y if bias is None else y + bias.reshape(cs)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim``."""
    # (``vector_norm``, as PyTorch: it takes p = 0, the count of nonzeros, and its gradient at 0 is 0)
    return input / input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``."""
    n1 = _no_grad_clamp_min(_vnorm(x1, 2, dim, True), eps)
    n2 = _no_grad_clamp_min(_vnorm(x2, 2, dim, True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


# ---------------------------------------------------------------- attention
def _safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last dim, but 0 (not NaN) on a row whose every score is -inf (every key masked),
    as PyTorch's attention kernels give; such rows' gradient is 0 too (their softmax sees zeros)."""
    dead = (scores == -math.inf).all(-1, keepdim=True)
    return _ew.where(dead, 0.0, softmax(_ew.where(dead, 0.0, scores), -1))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` over the last two dims."""
    from ..ops.creation import ones
    if min(query.dim(), key.dim(), value.dim()) < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.dim()} key.dim: {key.dim()} and value.dim: {value.dim()} instead.")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{_c_name(query.dtype)} key.dtype: {_c_name(key.dtype)} and value.dtype: "
                           f"{_c_name(value.dtype)} instead.")
    if dropout_p > 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if attn_mask is not None and attn_mask.dtype not in (_dtype.bool_, query.dtype):
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {_c_name(attn_mask.dtype)} and  query.dtype: "
                           f"{_c_name(query.dtype)} instead.")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, -3)
        value = value.repeat_interleave(rep, -3)
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        causal = ones(L, S, dtype=_dtype.bool_).tril()   # (a recorded op inside a compiled step)
        scores = _ew.where(causal, scores, -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == _dtype.bool_:
            scores = _ew.where(attn_mask, scores, -math.inf)
        else:
            scores = scores + attn_mask
    attn = softmax(scores, -1) if attn_mask is None else _safe_softmax(scores)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return attn @ value


# losses live in _losses.py (imported last: they use the functions above)
from ._losses import _reduction as _reduction  # noqa: E402
from ._losses import mse_loss as mse_loss  # noqa: E402
from ._losses import l1_loss as l1_loss  # noqa: E402
from ._losses import smooth_l1_loss as smooth_l1_loss  # noqa: E402
from ._losses import huber_loss as huber_loss  # noqa: E402
from ._losses import cross_entropy as cross_entropy  # noqa: E402
from ._losses import nll_loss as nll_loss  # noqa: E402
from ._losses import binary_cross_entropy as binary_cross_entropy  # noqa: E402
from ._losses import binary_cross_entropy_with_logits as binary_cross_entropy_with_logits  # noqa: E402
from ._losses import kl_div as kl_div  # noqa: E402
from ._losses import margin_ranking_loss as margin_ranking_loss  # noqa: E402
from ._losses import triplet_margin_loss as triplet_margin_loss  # noqa: E402
from ._losses import cosine_embedding_loss as cosine_embedding_loss  # noqa: E402
from ._losses import gaussian_nll_loss as gaussian_nll_loss  # noqa: E402
from ._losses import poisson_nll_loss as poisson_nll_loss  # noqa: E402
from ._losses import soft_margin_loss as soft_margin_loss  # noqa: E402
from ._losses import multilabel_soft_margin_loss as multilabel_soft_margin_loss  # noqa: E402
from ._losses import hinge_embedding_loss as hinge_embedding_loss  # noqa: E402
from ._losses import multi_margin_loss as multi_margin_loss  # noqa: E402
from ._norms import rms_norm as rms_norm  # noqa: E402
from ._bag import _embedding_renorm_, embedding_bag as embedding_bag  # noqa: E402
from ..ops.distance import pdist as pdist  # noqa: E402
from ._sampling import affine_grid as affine_grid  # noqa: E402
from ._sampling import grid_sample as grid_sample  # noqa: E402
from ._ctc import ctc_loss as ctc_loss  # noqa: E402


# ---------------------------------------------------------------- more of torch.nn.functional, in its ops
def constant_pad_nd(input: Tensor, pad, value=0) -> Tensor:
    """``torch.constant_pad_nd``: ``pad(input, pad, "constant", value)``."""
    return globals()["pad"](input, pad, "constant", value)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """The channels (dim 1) regrouped: ``groups`` groups of ``C / groups`` become ``C / groups`` groups of
    ``groups``."""
    if input.dim() < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    n, c = input.shape[0], input.shape[1]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    rest = tuple(input.shape[2:])
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(n, c, *rest)


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """``interpolate(..., mode="bilinear", align_corners=True)`` (PyTorch's deprecated spelling)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin: float = 1.0,
                                      swap: bool = False, reduction: str = "mean") -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with any distance ``d`` (default: the pairwise 2-norm)."""
    from ._losses import _reduce
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: expected margin to be greater than 0, got {margin} "
                         f"instead")
    d = pairwise_distance if distance_function is None else distance_function
    d_ap, d_an = d(anchor, positive), d(anchor, negative)
    if swap:
        d_an = _ew.minimum(d_an, d(positive, negative))
    return _reduce((margin + d_ap - d_an).clamp(min=0.0), reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """The multi-label hinge loss: per sample, ``sum_{j, i} max(0, 1 - (x[y_j] - x[i])) / C`` over the
    target classes ``y_j`` (those before the first -1 of the target row) and the non-target classes ``i``."""
    from ._losses import _check_reduction, _reduce, _reduction
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if input.dim() > 2 or target.shape != input.shape:
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    y = target.reshape(x.shape)
    c = x.shape[1]
    valid = (y >= 0).long().cumprod(1).bool()                            # the targets before the first -1
    labels = _ew.where(valid, y, c)                                       # (c: no class)
    is_target = (labels.unsqueeze(2) == Tensor._make(np.arange(c))).any(1)   # (n, c)
    picked = x.gather(1, _ew.where(valid, y, 0))                          # x[y_j], (n, j)
    hinge = (1 - picked.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0.0)     # (n, j, i)
    keep = valid.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = _ew.where(keep, hinge, 0.0).sum((1, 2)) / c
    if input.dim() < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def native_layer_norm(input: Tensor, normalized_shape, weight, bias, eps: float) -> tuple:
    """``(layer_norm(...), mean, rstd)``, the statistics kept over the normalized dims (size 1 there)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    _check_layer_norm(input, normalized_shape, weight, bias)
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    mean = input.mean(dims, keepdim=True)
    rstd = (input.var(dims, unbiased=False, keepdim=True) + eps).rsqrt()
    out = (input - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def native_group_norm(input: Tensor, weight, bias, N: int, C: int, HxW: int, group: int, eps: float) -> tuple:
    """``(group_norm(...), mean, rstd)``, the statistics of shape ``(N, group)``."""
    x = input.reshape(N, group, -1)
    mean = x.mean(-1)
    rstd = (x.var(-1, unbiased=False) + eps).rsqrt()
    out = ((x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)).reshape(input.shape)
    shape = (1, C) + (1,) * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, mean, rstd


__all__ += ["channel_shuffle", "max_unpool3d", "multilabel_margin_loss", "triplet_margin_with_distance_loss",
            "upsample_bilinear", "upsample_nearest"]
