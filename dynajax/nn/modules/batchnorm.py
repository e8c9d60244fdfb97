"""``torch.nn.modules.batchnorm``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import _BatchNorm as _BatchNorm  # noqa: F401
from .layers import BatchNorm1d as BatchNorm1d  # noqa: F401
from .layers import BatchNorm2d as BatchNorm2d  # noqa: F401
from .layers import BatchNorm3d as BatchNorm3d  # noqa: F401

__all__ = ['BatchNorm1d', 'BatchNorm2d', 'BatchNorm3d']
