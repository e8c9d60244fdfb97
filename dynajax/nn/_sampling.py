"""Spatial sampling: ``grid_sample`` (bilinear or nearest, on 4-D inputs) and ``affine_grid`` (2-D and 3-D),
as ``torch.nn.functional``'s. Composed of recorded ops: the grid's coordinates are mapped to pixels
(un-normalised, clamped or reflected by ``padding_mode``), the corner pixels gathered from the flattened
input and mixed with weights computed from the grid, so the input's and the grid's gradients both follow
(the grid's is 0 for ``nearest``, and at a clamped bound, as PyTorch's)."""
from __future__ import annotations

import warnings

from .. import _dtype
from .._tensor import Tensor
from ..ops.creation import linspace, ones
from ..ops.elementwise import clamp_open, floor, round, where
from ..ops.join import stack

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                  "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                  "grid_sample for details.")


def _align(align_corners) -> bool:
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=3)
        return False
    return bool(align_corners)


# ---------------------------------------------------------------- grid_sample
def _reflect(x: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """``x`` folded back into ``[twice_low / 2, twice_high / 2]`` by reflections at its ends."""
    if twice_low == twice_high:
        return x * 0.0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = (x - low).abs()
    extra = x.fmod(span)
    flips = floor(x / span)
    return where(flips.fmod(2) == 0, extra + low, span - extra + low)


def _to_pixels(coord: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """A normalised coordinate in ``[-1, 1]`` as a pixel position along a dim of ``size`` pixels."""
    x = (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        x = clamp_open(x, 0, size - 1)   # (gradient 0 at the bounds, as PyTorch's clip)
    return x


def _pick(flat: Tensor, ix: Tensor, iy: Tensor, w: int, h: int) -> tuple:
    """Pixels of ``flat`` ``(N, C, H*W)`` at integer-valued positions ``ix, iy`` ``(N, L)``, and whether each
    position lies inside (outside ones read pixel 0 and must be masked)."""
    inside = (ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)
    pos = where(inside, iy * w + ix, 0).to(_dtype.int64)
    n, c, _ = flat.shape
    vals = flat.gather(2, pos.reshape(n, 1, -1).expand(n, c, pos.shape[1]))
    return vals, inside.reshape(n, 1, -1)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners=None) -> Tensor:
    """Sample ``input`` ``(N, C, H, W)`` at the normalised ``(x, y)`` positions of ``grid``
    ``(N, Hout, Wout, 2)`` (-1 and 1: the outer edges of the corner pixels, their centres with
    ``align_corners``); positions outside read ``padding_mode``'s values."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    align_corners = _align(align_corners)
    if input.dim() != grid.dim() or input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.dim() - 2} in last dimension, but "
                           f"got grid with sizes {list(grid.shape)}")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype.legacy_name} but found {grid.dtype.legacy_name}")
    if input.dim() != 4 or mode == "bicubic":
        raise NotImplementedError("dynajax's grid_sample takes 4-D inputs with mode 'bilinear' or 'nearest'")
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    flat = input.reshape(n, c, h * w)
    ix = _to_pixels(grid[..., 0].reshape(n, -1), w, padding_mode, align_corners)
    iy = _to_pixels(grid[..., 1].reshape(n, -1), h, padding_mode, align_corners)
    if mode == "nearest":   # (round half to even, as PyTorch's nearbyint)
        vals, inside = _pick(flat, round(ix).detach(), round(iy).detach(), w, h)
        out = where(inside, vals, 0.0)
    else:
        x0, y0 = floor(ix).detach(), floor(iy).detach()
        out = None
        for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
            cx, cy = x0 + dx, y0 + dy
            # the weight of a corner: the area of the rectangle between the point and the opposite corner
            wgt = ((ix - x0) if dx else (x0 + 1 - ix)) * ((iy - y0) if dy else (y0 + 1 - iy))
            vals, inside = _pick(flat, cx, cy, w, h)
            term = where(inside, vals * wgt.reshape(n, 1, -1), 0.0)
            out = term if out is None else out + term
    return out.reshape(n, c, ho, wo)


# ---------------------------------------------------------------- affine_grid
def _base(size: int, align_corners: bool, like: Tensor) -> Tensor:
    """The normalised centres of ``size`` pixels along a dim."""
    if size == 1:
        return linspace(0.0, 0.0, 1, dtype=like.dtype)
    r = linspace(-1.0, 1.0, size, dtype=like.dtype)
    return r if align_corners else r * ((size - 1) / size)


def affine_grid(theta: Tensor, size, align_corners=None) -> Tensor:
    """The sampling grid ``(N, H, W, 2)`` (``(N, D, H, W, 3)``) of the affine maps ``theta`` ``(N, 2, 3)``
    (``(N, 3, 4)``) applied to the output's normalised pixel centres, for :func:`grid_sample`."""
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got torch.{theta.dtype.name}")
    align_corners = _align(align_corners)
    size = tuple(size)
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    k = len(size) - 2
    if theta.dim() != 3 or tuple(theta.shape[1:]) != (k, k + 1):
        raise ValueError(f"Expected a batch of {k}D affine matrices of shape Nx{k}x{k + 1} for size {size}. Got "
                         f"torch.Size({list(theta.shape)}).")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if theta.shape[0] != size[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{theta.shape[0]}, "
                           f"{k + 1}] but got: [{size[0]}, {k + 1}].")
    spatial = size[2:]                                          # (H, W) or (D, H, W)
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation of "
                      "affine_grid for details.", stacklevel=2)
    axes = [_base(s, align_corners, theta) for s in spatial]   # coordinates along each dim
    npts = 1
    for s in spatial:
        npts *= s
    # the points' homogeneous coordinates (x, y[, z], 1): x runs along the last dim
    cols = []
    for j in range(k):   # column j: the coordinate along spatial dim k - 1 - j
        d = k - 1 - j
        shape = [1] * k
        shape[d] = spatial[d]
        cols.append(axes[d].reshape(*shape).expand(*spatial).reshape(npts))
    cols.append(ones(npts, dtype=theta.dtype))
    base = stack(cols, 1)                                       # (npts, k + 1)
    grid = base.matmul(theta.transpose(1, 2))                   # (N, npts, k)
    return grid.reshape(size[0], *spatial, k)
