"""``torch.nn.modules.conv``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import _ConvNd as _ConvNd  # noqa: F401
from .layers import Conv1d as Conv1d  # noqa: F401
from .layers import Conv2d as Conv2d  # noqa: F401
from .layers import Conv3d as Conv3d  # noqa: F401
from .layers import _ConvTransposeNd as _ConvTransposeNd  # noqa: F401
from .layers import ConvTranspose1d as ConvTranspose1d  # noqa: F401
from .layers import ConvTranspose2d as ConvTranspose2d  # noqa: F401
from .layers import ConvTranspose3d as ConvTranspose3d  # noqa: F401

__all__ = ['Conv1d', 'Conv2d', 'Conv3d', 'ConvTranspose1d', 'ConvTranspose2d', 'ConvTranspose3d']
