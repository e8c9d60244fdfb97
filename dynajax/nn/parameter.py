"""``Parameter``: a leaf Tensor that a Module registers as trainable."""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor, _init


def _value_of(data):
    """The jax array behind a Tensor, numpy array, torch tensor or nested list."""
    if isinstance(data, Tensor):
        if data._base is not None:
            data._sync()
        return data._value
    import jax.numpy as jnp
    if hasattr(data, "detach") and hasattr(data, "numpy"):  # a torch tensor
        data = data.detach().cpu()
        if str(data.dtype) == "torch.bfloat16":
            import ml_dtypes
            return jnp.asarray(data.float().numpy().astype(ml_dtypes.bfloat16))
        return jnp.asarray(data.numpy())
    from ..ops.creation import tensor
    return tensor(data)._value if not isinstance(data, np.ndarray) else jnp.asarray(data)


class Parameter(Tensor):
    """A Tensor that is a module parameter: ``requires_grad=True`` by default.

    >>> w = nn.Parameter(dynajax.zeros(3))
    >>> w.requires_grad
    True
    """

    def __new__(cls, data=None, requires_grad: bool = True):
        from ..ops.creation import empty
        self = object.__new__(cls)
        _init(self, _value_of(empty(0) if data is None else data))
        if requires_grad:
            self.requires_grad_(True)
        return self

    def __init__(self, data=None, requires_grad: bool = True) -> None:
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (np.asarray(self.detach()._value), self._rg))


class Buffer(Tensor):
    """Marks a tensor as a module buffer when assigned as an attribute (``persistent`` kept)."""

    def __new__(cls, data=None, *, persistent: bool = True):
        from ..ops.creation import empty
        self = object.__new__(cls)
        _init(self, _value_of(empty(0) if data is None else data))
        self.persistent = persistent
        return self

    def __init__(self, data=None, *, persistent: bool = True) -> None:
        pass


def _rebuild_parameter(array, requires_grad):
    return Parameter(array, requires_grad)


def is_parameter(x) -> bool:
    """Whether ``x`` is an ``nn.Parameter``."""
    return isinstance(x, Parameter)
