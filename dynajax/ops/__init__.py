"""The op registry and every op module (importing this registers all ops)."""
from . import convert, creation, elementwise, index, join, linalg, reduce, registry, shape, sort, views  # noqa: F401,E501
