"""``torch.nn.modules.linear``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import Linear as Linear  # noqa: F401
from .layers import Bilinear as Bilinear  # noqa: F401
from .container import Identity as Identity  # noqa: F401
from .transformer import NonDynamicallyQuantizableLinear as NonDynamicallyQuantizableLinear  # noqa: F401

__all__ = ['Linear', 'Bilinear', 'Identity', 'NonDynamicallyQuantizableLinear']
