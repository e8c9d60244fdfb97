"""``dynajax.linalg``: the norms and products of ``torch.linalg``.

>>> dynajax.linalg.vector_norm(dynajax.tensor([3.0, 4.0]))
tensor(5.)
"""
from .ops.linalg import linalg_norm as norm  # noqa: F401
from .ops.linalg import matmul as matmul  # noqa: F401
from .ops.linalg import matrix_norm as matrix_norm  # noqa: F401
from .ops.linalg import multi_dot as multi_dot  # noqa: F401
from .ops.reduce import vector_norm as vector_norm  # noqa: F401

__all__ = ["norm", "matmul", "matrix_norm", "multi_dot", "vector_norm"]
