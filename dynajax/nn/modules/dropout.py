"""``torch.nn.modules.dropout``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import _DropoutNd as _DropoutNd  # noqa: F401
from .layers import Dropout as Dropout  # noqa: F401
from .layers import Dropout1d as Dropout1d  # noqa: F401
from .layers import Dropout2d as Dropout2d  # noqa: F401
from .layers import Dropout3d as Dropout3d  # noqa: F401
from .layers import AlphaDropout as AlphaDropout  # noqa: F401
from .layers import FeatureAlphaDropout as FeatureAlphaDropout  # noqa: F401

__all__ = ['Dropout', 'Dropout1d', 'Dropout2d', 'Dropout3d', 'AlphaDropout', 'FeatureAlphaDropout']
