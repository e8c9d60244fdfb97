"""``torch.nn.modules.instancenorm``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import _InstanceNorm as _InstanceNorm  # noqa: F401
from .layers import InstanceNorm1d as InstanceNorm1d  # noqa: F401
from .layers import InstanceNorm2d as InstanceNorm2d  # noqa: F401
from .layers import InstanceNorm3d as InstanceNorm3d  # noqa: F401

__all__ = ['InstanceNorm1d', 'InstanceNorm2d', 'InstanceNorm3d']
