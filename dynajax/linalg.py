"""``dynajax.linalg``: ``torch.linalg``'s products, norms, factorizations and solvers.

>>> dynajax.linalg.vector_norm(dynajax.tensor([3.0, 4.0]))
tensor(5.)
"""
from .ops.decomp import LinAlgError as LinAlgError  # noqa: F401
from .ops.decomp import cholesky_ex as cholesky_ex  # noqa: F401
from .ops.decomp import cond as cond  # noqa: F401
from .ops.decomp import det as det  # noqa: F401
from .ops.decomp import eigh as eigh  # noqa: F401
from .ops.decomp import eigvalsh as eigvalsh  # noqa: F401
from .ops.decomp import householder_product as householder_product  # noqa: F401
from .ops.decomp import inv as inv  # noqa: F401
from .ops.decomp import inv_ex as inv_ex  # noqa: F401
from .ops.decomp import linalg_cholesky as cholesky  # noqa: F401
from .ops.decomp import linalg_cross as cross  # noqa: F401
from .ops.decomp import linalg_diagonal as diagonal  # noqa: F401
from .ops.decomp import linalg_lu as lu  # noqa: F401
from .ops.decomp import linalg_lu_solve as lu_solve  # noqa: F401
from .ops.decomp import linalg_norm as norm  # noqa: F401
from .ops.decomp import linalg_qr as qr  # noqa: F401
from .ops.decomp import linalg_slogdet as slogdet  # noqa: F401
from .ops.decomp import linalg_svd as svd  # noqa: F401
from .ops.decomp import lstsq as lstsq  # noqa: F401
from .ops.decomp import lu_factor as lu_factor  # noqa: F401
from .ops.decomp import lu_factor_ex as lu_factor_ex  # noqa: F401
from .ops.decomp import matrix_exp as matrix_exp  # noqa: F401
from .ops.decomp import matrix_norm as matrix_norm  # noqa: F401
from .ops.decomp import matrix_power as matrix_power  # noqa: F401
from .ops.decomp import matrix_rank as matrix_rank  # noqa: F401
from .ops.decomp import pinv as pinv  # noqa: F401
from .ops.decomp import solve as solve  # noqa: F401
from .ops.decomp import solve_ex as solve_ex  # noqa: F401
from .ops.decomp import solve_triangular as solve_triangular  # noqa: F401
from .ops.decomp import svdvals as svdvals  # noqa: F401
from .ops.decomp import tensorinv as tensorinv  # noqa: F401
from .ops.decomp import tensorsolve as tensorsolve  # noqa: F401
from .ops.decomp import vander as vander  # noqa: F401
from .ops.decomp import vecdot as vecdot  # noqa: F401
from .ops.linalg import matmul as matmul  # noqa: F401
from .ops.linalg import multi_dot as multi_dot  # noqa: F401
from .ops.reduce import vector_norm as vector_norm  # noqa: F401

__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eigh", "eigvalsh",
           "householder_product", "inv", "inv_ex", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve",
           "matmul", "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "slogdet", "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve",
           "vander", "vecdot", "vector_norm"]
