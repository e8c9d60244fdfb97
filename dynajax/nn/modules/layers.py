"""Parametrised layers with PyTorch's default initialization: ``Linear``, ``Bilinear``,
``Embedding``, convolutions, pooling, normalization and dropout."""
from __future__ import annotations

import math

from ... import _dtype
from ...ops.creation import empty, ones, tensor, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _factory(device, dtype) -> dict:
    return {"device": device, "dtype": dtype}


def _uniform_fan_in(w: Parameter, b: Parameter | None, fan_in: int) -> None:
    """PyTorch's default init of linear/conv layers: kaiming_uniform(a=sqrt(5)) weight, U(+-1/sqrt(fan_in)) bias."""
    init.kaiming_uniform_(w, a=math.sqrt(5))
    if b is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(b, -bound, bound)


class Linear(Module):
    """``y = x @ W.T + b`` with W of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, **_factory(device, dtype)))
        self.bias = Parameter(empty(out_features, **_factory(device, dtype))) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_fan_in(self.weight, self.bias, self.in_features)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y_k = x1 @ W_k @ x2 + b_k``."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, **_factory(device, dtype)))
        self.bias = Parameter(empty(out_features, **_factory(device, dtype))) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim`` (N(0, 1) init)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = padding_idx % num_embeddings
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, **_factory(device, dtype)),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            import numpy as np
            row = np.ones(self.weight.shape, bool)
            row[self.padding_idx] = False
            init._fill(self.weight, self.weight.detach() * tensor(row))

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None, **kwargs) -> "Embedding":
        """An Embedding holding ``embeddings`` (frozen by default)."""
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)


# ---------------------------------------------------------------- convolution
class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, output_padding=0) -> None:
        super().__init__()
        nd = self._nd
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], "
                             f"but got padding_mode='{padding_mode}'")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _tuple(stride, nd)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _tuple(kernel_size, nd), _tuple(stride, nd)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, nd)
        self.dilation, self.groups = _tuple(dilation, nd), groups
        self.output_padding, self.transposed = _tuple(output_padding, nd), self._transposed
        self.padding_mode = padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(empty(*shape, **_factory(device, dtype)))
        self.bias = Parameter(empty(out_channels, **_factory(device, dtype))) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        fan_in = init._calculate_fan_in_and_fan_out(self.weight)[0]
        _uniform_fan_in(self.weight, self.bias, fan_in)

    def _padded(self, input):
        """Input padded explicitly for non-zero padding modes (the conv then uses padding 0)."""
        if self.padding_mode == "zeros":
            return input, self.padding
        if self.padding == "valid":
            return input, 0
        if self.padding == "same":   # the total d * (k - 1) split as the zero-padded 'same' splits it
            sides = [(t // 2, t - t // 2) for t in (d * (k - 1) for d, k in zip(self.dilation, self.kernel_size))]
        else:
            sides = [(p, p) for p in self.padding]
        pads = []
        for lo, hi in reversed(sides):
            pads += [lo, hi]
        return F.pad(input, pads, mode=self.padding_mode), 0

    def forward(self, input):
        x, padding = self._padded(input)
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[self._nd]
        return fn(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution layer over (N, C, L)."""
    _nd = 1


class Conv2d(_ConvNd):
    """2-D convolution layer over (N, C, H, W): stride, padding (int, pair, 'same', 'valid'), dilation, groups."""
    _nd = 2


class Conv3d(_ConvNd):
    """3-D convolution layer over (N, C, D, H, W)."""
    _nd = 3


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        out = [int(v) for v in output_size]
        if len(out) == self._nd + 2:
            out = out[2:]
        if len(out) != self._nd:
            raise ValueError(f"ConvTranspose{self._nd}D: for {self._nd + 2}D input, output_size must have "
                             f"{self._nd} or {self._nd + 2} elements (got {len(output_size)})")
        spatial = list(input.shape[input.dim() - self._nd:])
        lo = [(L - 1) * s - 2 * p + d * (k - 1) + 1
              for L, s, p, d, k in zip(spatial, self.stride, self.padding, self.dilation, self.kernel_size)]
        hi = [m + s - 1 for m, s in zip(lo, self.stride)]
        if any(not a <= o <= b for a, o, b in zip(lo, out, hi)):
            raise ValueError(f"requested an output size of {out}, but valid sizes range from {lo} to {hi} (for an "
                             f"input of {spatial})")
        return tuple(o - a for o, a in zip(out, lo))

    def forward(self, input, output_size=None):
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[self._nd]
        return fn(input, self.weight, self.bias, self.stride, self.padding, self._output_padding(input, output_size),
                  self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution layer."""
    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution layer; weight shape (in, out/groups, kH, kW)."""
    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution layer; weight shape (in, out/groups, kD, kH, kW)."""
    _nd = 3


# ---------------------------------------------------------------- pooling / resampling
class _MaxPoolNd(Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[self._nd]
        return fn(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                  self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over windows of the last dim."""
    _nd = 1


class MaxPool2d(_MaxPoolNd):
    """Max over windows of the last two dims."""
    _nd = 2


class MaxPool3d(_MaxPoolNd):
    """Max over windows of the last three dims."""
    _nd = 3


class _MaxUnpoolNd(Module):
    _nd = 2

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        nd = self._nd
        self.kernel_size = _tuple(kernel_size, nd)
        self.stride = _tuple(stride if stride is not None else kernel_size, nd)
        self.padding = _tuple(padding, nd)

    def forward(self, input, indices, output_size=None):
        fn = F.max_unpool1d if self._nd == 1 else F.max_unpool2d
        return fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Inverse of MaxPool1d given its indices (non-maxima become 0)."""
    _nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Inverse of MaxPool2d given its indices (non-maxima become 0)."""
    _nd = 2


class AvgPool1d(Module):
    """Mean over windows of the last dim."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> None:
        super().__init__()
        self.kernel_size, self.stride = _tuple(kernel_size, 1), _tuple(stride if stride is not None
                                                                       else kernel_size, 1)
        self.padding, self.ceil_mode, self.count_include_pad = _tuple(padding, 1), ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Mean over windows of the last two dims."""
    _fn = staticmethod(F.avg_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return self._fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                        self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool3d(AvgPool2d):
    """Mean over windows of the last three dims."""
    _fn = staticmethod(F.avg_pool3d)


class AdaptiveAvgPool1d(Module):
    """Average-pool the last dim to ``output_size`` bins."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    """Average-pool the last two dims to ``output_size``."""

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    """Average-pool the last three dims to ``output_size``."""

    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool1d(AdaptiveAvgPool1d):
    """Max-pool the last dim to ``output_size`` bins."""

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    """Max-pool the last two dims to ``output_size``."""

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool3d(AdaptiveMaxPool1d):
    """Max-pool the last three dims to ``output_size``."""

    def forward(self, input):
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


class Upsample(Module):
    """Resize spatial dims (see ``functional.interpolate``)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None) -> None:
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={float(self.scale_factor)!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class PixelShuffle(Module):
    """(N, C*r*r, H, W) -> (N, C, H*r, W*r)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(PixelShuffle):
    """(N, C, H*r, W*r) -> (N, C*r*r, H, W)."""

    def __init__(self, downscale_factor: int) -> None:
        Module.__init__(self)
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Unfold(Module):
    """Extract sliding patches as columns (im2col)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Unfold):
    """Sum columns back into an image (col2im)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, " + super().extra_repr()


# ---------------------------------------------------------------- normalization
class _BatchNorm(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        f = _factory(device, dtype)
        self.weight = Parameter(ones(num_features, **f)) if affine else None
        self.bias = Parameter(zeros(num_features, **f)) if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, **f))
            self.register_buffer("running_var", ones(num_features, **f))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=_dtype.int64))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def _check_input_dim(self, input) -> None:
        pass

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            from ...autograd import grad_mode
            with grad_mode.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                            self.running_var if not self.training or self.track_running_stats else None,
                            self.weight, self.bias, use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


def _dim_checker(allowed: tuple, name: str):
    def check(self, input) -> None:
        if input.dim() not in allowed:
            raise ValueError(f"expected {name} input (got {input.dim()}D input)")
    return check


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L)."""
    _check_input_dim = _dim_checker((2, 3), "2D or 3D")


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W)."""
    _check_input_dim = _dim_checker((4,), "4D")


class BatchNorm3d(_BatchNorm):
    """Batch normalization over (N, C, D, H, W)."""
    _check_input_dim = _dim_checker((5,), "5D")


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims, with learned scale and shift."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        f = _factory(device, dtype)
        self.weight = Parameter(ones(*self.normalized_shape, **f)) if elementwise_affine else None
        self.bias = Parameter(zeros(*self.normalized_shape, **f)) if elementwise_affine and bias else None

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """Root-mean-square normalization over the trailing ``normalized_shape`` dims, with a learned scale."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = Parameter(ones(*self.normalized_shape, **_factory(device, dtype))) if elementwise_affine else None

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of a table of ``num_embeddings`` vectors (N(0, 1) init)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx=None, device=None, dtype=None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx = padding_idx % num_embeddings
        self.padding_idx, self.mode, self.sparse, self.include_last_offset = padding_idx, mode, sparse, \
            include_last_offset
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, **_factory(device, dtype)))
            self.reset_parameters()
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            init.zeros_(self.weight[self.padding_idx])

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class GroupNorm(Module):
    """Normalize groups of channels per sample, with per-channel scale and shift."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        f = _factory(device, dtype)
        self.weight = Parameter(ones(num_channels, **f)) if affine else None
        self.bias = Parameter(zeros(num_channels, **f)) if affine and bias else None

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(_BatchNorm):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        self._check_input_dim(input)
        unbatched = input.dim() == self._unbatched_ndim
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[1] != self.num_features:
            msg = f"expected input's size at dim=1 to match num_features ({self.num_features}), but got: {x.shape[1]}."
            if self.affine:   # PyTorch only warns without per-channel parameters, which need the match
                raise ValueError(msg)
            import warnings
            warnings.warn(msg + " The input is normalized without them.", stacklevel=2)
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum or 0.0, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Normalize each (sample, channel) of (N, C, L) over L."""
    _unbatched_ndim = 2
    _check_input_dim = _dim_checker((2, 3), "2D or 3D")


class InstanceNorm2d(_InstanceNorm):
    """Normalize each (sample, channel) of (N, C, H, W) over H, W."""
    _unbatched_ndim = 3
    _check_input_dim = _dim_checker((3, 4), "3D or 4D")


class InstanceNorm3d(_InstanceNorm):
    """Normalize each (sample, channel) of (N, C, D, H, W) over D, H, W."""
    _unbatched_ndim = 4
    _check_input_dim = _dim_checker((4, 5), "4D or 5D")


# ---------------------------------------------------------------- dropout
class _DropoutNd(Module):
    _fn = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return self._fn(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero elements with probability ``p`` in training, scaling the rest by ``1/(1-p)``."""


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L)."""
    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W)."""
    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W)."""
    _fn = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    """Alpha dropout for SELU networks (keeps zero mean and unit variance); the identity in eval mode."""
    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels; the identity in eval mode."""
    _fn = staticmethod(F.feature_alpha_dropout)


class LocalResponseNorm(Module):
    """Normalize each value by the mean square of its ``size`` neighbouring channels."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LPPool1d(Module):
    """Power-average pooling over the last dim."""
    _fn = staticmethod(F.lp_pool1d)

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        return self._fn(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool2d(LPPool1d):
    """Power-average pooling over the last two dims."""
    _fn = staticmethod(F.lp_pool2d)
