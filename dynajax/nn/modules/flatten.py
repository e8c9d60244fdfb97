"""``torch.nn.modules.flatten``: PyTorch's file layout, re-exporting dynajax's layers."""
from .container import Flatten as Flatten  # noqa: F401
from .container import Unflatten as Unflatten  # noqa: F401

__all__ = ['Flatten', 'Unflatten']
