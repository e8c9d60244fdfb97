"""``torch.nn.modules.distance``: PyTorch's file layout, re-exporting dynajax's layers."""
from .loss import CosineSimilarity as CosineSimilarity  # noqa: F401
from .loss import PairwiseDistance as PairwiseDistance  # noqa: F401

__all__ = ['CosineSimilarity', 'PairwiseDistance']
