"""``dynajax.special``: the functions of ``torch.special``. Those that exist as ops elsewhere are the same
functions (``special.erf is dynajax.erf``); the rest are in ``ops/special.py``.

Not provided (JAX has no accurate kernel for them): ``airy_ai``, ``bessel_j0``/``j1``/``y0``/``y1``,
``modified_bessel_k0``/``k1``, ``scaled_modified_bessel_k0``/``k1`` and the orthogonal polynomials
(``chebyshev_polynomial_*``, ``hermite_polynomial_*``, ``laguerre_polynomial_l``, ``legendre_polynomial_p``).
This module imports ``nn.functional`` (for ``softmax``/``log_softmax``), so it sits on the library's top floor.
"""
from .nn.functional import log_softmax as log_softmax  # noqa: F401
from .nn.functional import softmax as softmax  # noqa: F401
from .ops.elementwise import digamma as digamma  # noqa: F401
from .ops.elementwise import digamma as psi  # noqa: F401
from .ops.elementwise import erf as erf  # noqa: F401
from .ops.elementwise import erfc as erfc  # noqa: F401
from .ops.elementwise import erfinv as erfinv  # noqa: F401
from .ops.elementwise import exp2 as exp2  # noqa: F401
from .ops.elementwise import expm1 as expm1  # noqa: F401
from .ops.elementwise import lgamma as gammaln  # noqa: F401
from .ops.elementwise import log1p as log1p  # noqa: F401
from .ops.elementwise import polygamma as polygamma  # noqa: F401
from .ops.elementwise import round as round  # noqa: F401
from .ops.elementwise import sigmoid as expit  # noqa: F401
from .ops.pointwise import logit as logit  # noqa: F401
from .ops.pointwise import sinc as sinc  # noqa: F401
from .ops.pointwise import xlogy as xlogy  # noqa: F401
from .ops.reduce import logsumexp as logsumexp  # noqa: F401
from .ops.special import entr, erfcx, gammainc, gammaincc, i0, i0e, i1, i1e, log_ndtr, modified_bessel_i0  # noqa: F401
from .ops.special import modified_bessel_i1, multigammaln, ndtr, ndtri, spherical_bessel_j0, xlog1py, zeta  # noqa: F401

__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc",
           "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp",
           "modified_bessel_i0", "modified_bessel_i1", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round",
           "sinc", "softmax", "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]
