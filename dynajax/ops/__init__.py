"""The op registry and every op module (importing this registers all ops)."""
from . import convert, creation, elementwise, reduce, registry, shape, views  # noqa: F401
