"""The nuclear norm (the sum of singular values over two dims), for ``norm(p='nuc')``.

Its gradient is ``U @ Vh`` of the reduced SVD; that is an op too, whose own gradient is ``jax.vjp`` of its
impl, so a double backward is exact where the singular values are distinct (as JAX's SVD derivative is)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._tensor import Tensor
from .registry import apply, op
from .shape import movedim, reshape


@op("nuclear_norm", backward_name="LinalgMatrixNormBackward0")
def _nuclear(x):
    return jnp.sum(jnp.linalg.svd(x, compute_uv=False), axis=-1)


def _polar(x):
    u, _, vh = jnp.linalg.svd(x, full_matrices=False)
    return u @ vh


_nuclear_grad = op("nuclear_norm_grad")(_polar)


@op("nuclear_norm_grad_backward")
def _nuclear_grad_backward(g, x):
    return jax.vjp(_polar, x)[1](g)[0]


_nuclear.defvjp(lambda g, out, x: (reshape(g, tuple(g._v.shape) + (1, 1)) * apply(_nuclear_grad, x),))
_nuclear_grad.defvjp(lambda g, out, x: (apply(_nuclear_grad_backward, g, x),))


def nuclear_norm(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The sum of the singular values of the matrices spanning ``dim`` (two dims; None: a 2-D input's)."""
    name = "linalg.matrix_norm"
    if dtype is not None:
        d = _dtype.to_np(dtype)
        if _dtype.promote_types(x._v.dtype, d) != d:
            raise RuntimeError(f"{name}: the dtype of the input ({x.dtype.legacy_name}) should be convertible "
                               f"without narrowing to the specified dtype ({_dtype.from_np(d).legacy_name})")
        x = x.to(dtype)
    nd = x._v.ndim
    dims = tuple(range(nd)) if dim is None else (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    if len(dims) != 2:
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got {' '.join(map(str, dims))}")
    if not _dtype.is_float(x._v.dtype):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got {x.dtype.legacy_name}")
    d0, d1 = (d % nd if nd else d for d in dims)
    if d0 == d1:
        raise RuntimeError(f"{name}: dims must be different. Got ({dims[0]}, {dims[1]})")
    r = apply(_nuclear, movedim(x, (d0, d1), (-2, -1)))
    if keepdim:
        shape = list(r._v.shape)
        for d in sorted((d0, d1)):
            shape.insert(d, 1)
        r = reshape(r, tuple(shape))
    return r
