"""``torch.nn.modules.fold``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import Fold as Fold  # noqa: F401
from .layers import Unfold as Unfold  # noqa: F401

__all__ = ['Fold', 'Unfold']
