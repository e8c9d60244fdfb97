"""``torch.nn.modules.sparse``: PyTorch's file layout, re-exporting dynajax's layers."""
from .layers import Embedding as Embedding  # noqa: F401
from .layers import EmbeddingBag as EmbeddingBag  # noqa: F401

__all__ = ['Embedding', 'EmbeddingBag']
