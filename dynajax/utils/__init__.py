"""``dynajax.utils``: ``data`` loading utilities, as ``torch.utils``."""
from . import data as data
