"""``torch.nn.modules.pixelshuffle``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import PixelShuffle as PixelShuffle  # noqa: F401
from .layers import PixelUnshuffle as PixelUnshuffle  # noqa: F401

__all__ = ['PixelShuffle', 'PixelUnshuffle']
