"""``torch.nn.modules.pooling``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import _MaxPoolNd as _MaxPoolNd  # noqa: F401
from .layers import MaxPool1d as MaxPool1d  # noqa: F401
from .layers import MaxPool2d as MaxPool2d  # noqa: F401
from .layers import MaxPool3d as MaxPool3d  # noqa: F401
from .layers import _MaxUnpoolNd as _MaxUnpoolNd  # noqa: F401
from .layers import MaxUnpool1d as MaxUnpool1d  # noqa: F401
from .layers import MaxUnpool2d as MaxUnpool2d  # noqa: F401
from .layers import AvgPool1d as AvgPool1d  # noqa: F401
from .layers import AvgPool2d as AvgPool2d  # noqa: F401
from .layers import AvgPool3d as AvgPool3d  # noqa: F401
from .layers import AdaptiveAvgPool1d as AdaptiveAvgPool1d  # noqa: F401
from .layers import AdaptiveAvgPool2d as AdaptiveAvgPool2d  # noqa: F401
from .layers import AdaptiveAvgPool3d as AdaptiveAvgPool3d  # noqa: F401
from .layers import AdaptiveMaxPool1d as AdaptiveMaxPool1d  # noqa: F401
from .layers import AdaptiveMaxPool2d as AdaptiveMaxPool2d  # noqa: F401
from .layers import AdaptiveMaxPool3d as AdaptiveMaxPool3d  # noqa: F401
from .layers import LPPool1d as LPPool1d  # noqa: F401
from .layers import LPPool2d as LPPool2d  # noqa: F401

__all__ = ['MaxPool1d', 'MaxPool2d', 'MaxPool3d', 'MaxUnpool1d', 'MaxUnpool2d', 'AvgPool1d', 'AvgPool2d', 'AvgPool3d', 'AdaptiveAvgPool1d', 'AdaptiveAvgPool2d', 'AdaptiveAvgPool3d', 'AdaptiveMaxPool1d', 'AdaptiveMaxPool2d', 'AdaptiveMaxPool3d', 'LPPool1d', 'LPPool2d']
