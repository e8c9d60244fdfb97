"""``torch.nn.modules.upsampling``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import Upsample as Upsample  # noqa: F401

__all__ = ['Upsample']
