"""``dynajax.utils``: ``data`` loading utilities, as ``torch.utils``."""
from . import checkpoint as checkpoint
from . import data as data
