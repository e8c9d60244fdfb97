"""dtype and device conversion: ``to``, ``float()``/``double()``/..., ``type``, ``clone``; to and from JAX and
DLPack without a copy (``jax()``, ``from_jax``, ``from_dlpack``, ``__dlpack__``; tensors as pytrees)."""
from __future__ import annotations

import builtins

import jax as _jax
import numpy as np
from jax import dlpack as _dlpack, tree_util as _tree_util

from .. import _dtype
from .dispatch import Sym
from .._device import device as Device, put
from .._tensor import Tensor, _make, method
from .registry import apply, op

__all__ = ["clone"]


@op("to_dtype", backward_name="ToCopyBackward0")
def _to_dtype(x, *, dtype):
    return x.astype(dtype)


_to_dtype.defvjp(lambda g, out, x, **_: (g,))


@op("clone")
def _clone(x):
    return x + 0 if x.dtype != np.bool_ else x


_clone.defvjp(lambda g, out, x: (g,))


@method()
def clone(self: Tensor, *, memory_format=None) -> Tensor:
    """A copy that is part of the graph (gradients flow back to ``self``)."""
    return apply(_clone, self)


def cast(x: Tensor, np_dtype) -> Tensor:
    """``x`` converted to ``np_dtype``; ``x`` itself when it already has it."""
    if x._v.dtype == np_dtype:
        return x
    return apply(_to_dtype, x, dtype=np.dtype(np_dtype))


def _parse_to(args, kwargs):
    dtype = kwargs.pop("dtype", None)
    dev = kwargs.pop("device", None)
    for a in args:
        if isinstance(a, Tensor):
            dtype, dev = a.dtype, a.device
        elif isinstance(a, (str, Device)) and not (isinstance(a, str) and a.removeprefix("torch.") in _dtype._BY_NAME
                                                   and ":" not in a and a not in ("cpu", "cuda", "tpu", "mps")):
            dev = a
        elif isinstance(a, int) and not isinstance(a, bool):
            dev = Device(a)
        else:
            dtype = a
    return dtype, dev


@method()
def to(self: Tensor, *args, non_blocking: bool = False, copy: bool = False, memory_format=None,
       **kwargs) -> Tensor:
    """Convert dtype and/or device: ``x.to(dynajax.float64)``, ``x.to("cuda")``, ``x.to(other)``; PyTorch's
    positional forms ``to(device, dtype, non_blocking, copy)``, ``to(dtype, non_blocking, copy)`` and
    ``to(tensor, non_blocking, copy)`` too."""
    n = len(args)
    while n and isinstance(args[n - 1], bool):   # the trailing flags: non_blocking, then copy
        n -= 1
    flags, args = args[n:], args[:n]
    if flags:
        if len(flags) > 2 or not args or len(args) > 2:
            raise TypeError(f"to() takes from 0 to 4 positional arguments but {len(args) + len(flags)} were given")
        if len(flags) == 2:
            if "copy" in kwargs or copy:
                raise TypeError("to() got multiple values for argument 'copy'")
            copy = flags[1]
    dtype, dev = _parse_to(args, kwargs)
    if flags and dtype is None:   # (a device alone takes no flags: they follow a dtype or a tensor)
        raise TypeError("to() received an invalid combination of arguments: a device may be followed by a dtype, "
                        "then non_blocking and copy")
    r = self
    if dtype is not None:
        r = cast(r, _dtype.to_np(dtype))
    if dev is not None:
        d = Device(dev)
        if d != self.device:
            v = r._value
            if isinstance(v, Sym):   # computed by a step being recorded, on its device: read it there (a graph
                v = v.__jax_array__()   # break, as ``.item()``) and move it, as eager would
            moved = put(v, d)
            r = _make(moved, r._rg, r.grad_fn, r._out_idx) if r is not self else _make(moved, self._rg)
    if copy and r is self:
        r = clone(self)
    return r


def _converter(name: str, d: _dtype.dtype):
    def convert(self: Tensor, memory_format=None) -> Tensor:
        return cast(self, d.np)
    convert.__name__ = name
    convert.__doc__ = f"``self.to({d!r})``"
    method(name)(convert)


for _n, _d in (("float", _dtype.float32), ("double", _dtype.float64), ("half", _dtype.float16),
               ("bfloat16", _dtype.bfloat16), ("long", _dtype.int64), ("int", _dtype.int32),
               ("short", _dtype.int16), ("char", _dtype.int8), ("byte", _dtype.uint8), ("bool", _dtype.bool_),
               ("cfloat", _dtype.complex64), ("cdouble", _dtype.complex128)):
    _converter(_n, _d)

_LEGACY = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
           "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
           "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


@method()
def type(self: Tensor, dtype=None, non_blocking: bool = False):
    """With no argument the legacy type name (``'torch.FloatTensor'``); else ``to(dtype)``, ``dtype`` a dtype,
    a legacy type's name (``'torch.LongTensor'``) or a legacy type (``torch.LongTensor``: its ``dtype``)."""
    if dtype is None:
        return "torch." + _LEGACY.get(self.dtype.name, "Tensor")
    if isinstance(getattr(dtype, "dtype", None), _dtype.dtype) and not isinstance(dtype, Tensor):
        dtype = dtype.dtype   # (a legacy tensor type: ops/ sit below _tensortype, so it is known by its dtype)
    if isinstance(dtype, str):
        inv = {v: k for k, v in _LEGACY.items()}
        name = dtype.split(".")[-1]
        dtype = inv.get(name, name)
    return cast(self, _dtype.to_np(dtype))


@method()
def type_as(self: Tensor, other: Tensor) -> Tensor:
    return cast(self, other._v.dtype)


@method()
def cpu(self: Tensor) -> Tensor:
    return to(self, "cpu")


@method()
def cuda(self: Tensor, device=None, non_blocking: bool = False) -> Tensor:
    return to(self, Device("cuda", device if isinstance(device, int) else None))



# ---------------------------------------------------------------- JAX and DLPack, zero-copy (docs/jax.md)
def _current_array(t: Tensor):
    """The array ``t`` holds now (a view's refreshed from its base; a compiled step's recorded value computed)."""
    if t._base is not None:
        t._sync()
    v = t._value
    return v.__jax_array__() if builtins.type(v) is Sym else v


@method("jax")
def to_jax(self: Tensor):
    """``t.jax()``: the ``jax.Array`` this tensor holds, without a copy and outside the graph (as ``detach()``).
    JAX arrays are immutable: a later in-place op on the tensor binds a new array and leaves this one as it was."""
    return _current_array(self)


def from_jax(array, requires_grad: bool = False) -> Tensor:
    """A tensor holding the ``jax.Array`` ``array`` itself (no copy; its dtype and device kept), where
    :func:`dynajax.tensor` copies. A compiled step that updates the tensor in place may donate (free) its
    buffer, and ``array`` with it: pass ``jnp.copy(array)`` to keep using ``array``."""
    if not isinstance(array, _jax.Array) or isinstance(array, _jax.core.Tracer):
        raise TypeError(f"from_jax() expects a jax.Array, got {builtins.type(array).__name__} (dynajax.tensor "
                        "copies other data)")
    t = _make(array)
    return t.requires_grad_() if requires_grad else t


@_dtype.x64.wrap
def from_dlpack(ext) -> Tensor:
    """A tensor sharing the memory of ``ext``, any object with ``__dlpack__`` (a torch tensor, a numpy array,
    a JAX array), as ``torch.from_dlpack``: zero-copy where JAX can use the buffer as it is (on CPU, an
    aligned one), its dtype kept (float64 and int64 included)."""
    if not hasattr(ext, "__dlpack__"):
        raise TypeError(f"from_dlpack() expects an object with __dlpack__ (a tensor or an array), got "
                        f"{builtins.type(ext).__name__}")
    return _make(_dlpack.from_dlpack(ext))


@method()
def __dlpack__(self: Tensor, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The DLPack capsule of this tensor's array (``torch.from_dlpack(t)``, ``np.from_dlpack(t)``): the same
    memory. JAX assumes that memory never changes; a consumer that writes into it changes this tensor too."""
    if self._rg:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
    return _current_array(self).__dlpack__(**kwargs)


@method()
def __dlpack_device__(self: Tensor):
    return _current_array(self).__dlpack_device__()


def _flatten(t: Tensor):
    return (_current_array(t),), None


def _unflatten(_, children) -> Tensor:
    return _make(children[0])


# A tensor is a pytree node whose one leaf is its array: ``jax.jit(f)(t)``, ``jax.grad(lowered.fn)(t)``,
# ``jax.vmap(f)(t)`` and ``jnp.sin(t)`` take tensors; inside, ``f`` sees a tensor (without grad) holding
# JAX's tracer, and the tensors it returns come back as tensors.
_tree_util.register_pytree_node(Tensor, _flatten, _unflatten)
__all__ += ["from_jax", "from_dlpack"]
