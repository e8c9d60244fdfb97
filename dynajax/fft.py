"""``dynajax.fft``: the discrete Fourier transforms of ``torch.fft`` (``ops/fft.py``).

>>> dynajax.fft.fft(dynajax.tensor([1.0, 0.0, 0.0, 0.0]))
tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
"""
from .ops.fft import *  # noqa: F401,F403
from .ops.fft import __all__ as __all__  # noqa: F401
