"""``dynajax.signal``: the functions of ``torch.signal`` (its ``windows`` namespace)."""
from . import windows as windows  # noqa: F401
