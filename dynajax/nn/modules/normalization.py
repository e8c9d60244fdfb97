"""``torch.nn.modules.normalization``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import LayerNorm as LayerNorm  # noqa: F401
from .layers import GroupNorm as GroupNorm  # noqa: F401
from .layers import LocalResponseNorm as LocalResponseNorm  # noqa: F401
from .layers import RMSNorm as RMSNorm  # noqa: F401

__all__ = ['LayerNorm', 'GroupNorm', 'LocalResponseNorm', 'RMSNorm']
