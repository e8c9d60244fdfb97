"""``Tensor``: a jax.Array with PyTorch's autograd attributes.

A JAX array is immutable, so in-place ops compute a new array and rebind it
inside the same Tensor, bumping a version counter shared with its views.
Math methods are attached by the op modules (one definition serves both
``dynajax.exp(x)`` and ``x.exp()``).
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

from . import _deferred, _device, _dtype, _epoch
from ._format import tensor_repr
from ._rows import Rows as _Rows
from .ops.dispatch import current, value_aval
from .autograd import grad_mode
from .ops import registry


class Tensor:
    """A multi-dimensional array with gradient tracking, like ``torch.Tensor``.

    >>> x = dynajax.tensor([1.0, 2.0], requires_grad=True)
    >>> (x * x).sum().backward(); x.grad
    tensor([2., 4.])
    """

    # Hot attributes are slots set by ``_init``; rarely set ones live in the instance dict only
    # when set, falling back to the class defaults below (fewer stores per op).
    __slots__ = ("_v", "_rg", "grad_fn", "_out_idx", "_vc", "_base", "__weakref__", "__dict__")
    __array_priority__ = 1000
    _grad = None            # ``.grad``, read through a C getter (``grad`` below); dynajax writes it directly
    _view = None            # view chain from the base (views only)
    _view_ver = 0           # base version the view was computed at
    _hooks = None           # leaf gradient hooks
    _post_hooks = None      # leaf hooks run after a backward accumulated into .grad
    _retains_grad = False

    def __new__(cls, data=None, *args, **kwargs):
        if cls is Tensor and data is None:
            return _make(_empty_value())
        if cls is Tensor:
            tensor = upcalls.tensor
            return tensor(data).float() if not kwargs and not args else tensor(data, *args, **kwargs)
        return object.__new__(cls)

    # ---------------------------------------------------------------- the value
    # ``_v`` holds the tensor's JAX array, or a ``Rows`` (a bucketed eager op's padded result: ``_rows``) whose
    # shape, dtype and device answer for it; ``_value`` is always the array, sliced from a ``Rows`` once.
    @property
    def _value(self):
        v = self._v
        if type(v) is _Rows:
            v = self._v = v.exact()
        return v

    @_value.setter
    def _value(self, v):
        self._v = v

    # ---------------------------------------------------------------- basics
    @property
    def shape(self) -> "Size":
        return Size(self._v.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._v.shape)
        return self._v.shape[_wrap_dim(dim, self._v.ndim)]

    def dim(self) -> int:
        return self._v.ndim

    ndimension = dim

    @property
    def ndim(self) -> int:
        return self._v.ndim

    def numel(self) -> int:
        return int(self._v.size)

    nelement = numel

    def element_size(self) -> int:
        return self._v.dtype.itemsize

    @property
    def dtype(self) -> _dtype.dtype:
        return _dtype.from_np(self._v.dtype)

    @property
    def device(self):
        return _device.device_of(self._v)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    is_xpu = is_mps = is_sparse = is_quantized = is_meta = property(lambda self: False)   # none exist in dynajax

    def is_floating_point(self) -> bool:
        return _dtype.from_np(self._v.dtype).is_floating_point

    def is_complex(self) -> bool:
        return self._v.dtype.kind == "c"

    def is_contiguous(self, memory_format=None) -> bool:
        """Whether PyTorch would lay this tensor out contiguously (a view's strides: ``views.layout``)."""
        if self._base is None:
            return True
        return upcalls.is_contiguous(self)

    def contiguous(self, memory_format=None) -> "Tensor":
        """This tensor, or where it is a view PyTorch would not lay out contiguously (``t()``, a column) a copy:
        a write to the result reaches this tensor exactly where it would in PyTorch."""
        return self if self.is_contiguous() else self.clone()

    def data_ptr(self) -> int:
        return id(self._base if self._base is not None else self)

    # ---------------------------------------------------------------- autograd attributes
    def _set_grad(self, g) -> None:
        """``t.grad = g`` as PyTorch checks it: a Tensor (or None) of this tensor's shape and dtype."""
        if g is not None:
            if not isinstance(g, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(g).__name__}")
            if g is self:
                raise RuntimeError("can't assign Variable as its own grad")
            (gs, gd), (s, d) = value_aval(g._value), value_aval(self._value)
            if gd != d:
                name = _dtype.C_NAMES.get(gd.name, gd.name)
                raise RuntimeError(f"attempting to assign a gradient with dtype '{name}' to a tensor with grad_dtype "
                                   f"'{self.dtype.legacy_name}'. The gradient must match the tensor's dtype.")
            if tuple(gs) != tuple(s):
                raise RuntimeError(f"attempting to assign a gradient of size '{list(gs)}' to a tensor of size "
                                   f"'{list(s)}'. Please ensure that the gradient and the tensor are the same size")
        cap = current()   # (a compiled step that raises gives .grad back: ``Capture.note_grad``)
        if cap is not None:
            cap.note_grad(self)
        self._grad = g

    def _del_grad(self) -> None:
        cap = current()
        if cap is not None:
            cap.note_grad(self)
        self._grad = None

    grad = property(operator.attrgetter("_grad"), _set_grad, _del_grad,
                    doc="The gradient accumulated by ``backward()`` (None until one reaches this tensor).")

    @property
    def requires_grad(self) -> bool:
        if self._base is not None:
            self._sync()
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Set whether autograd records ops on this leaf tensor (in place)."""
        if self.grad_fn is not None:
            if requires_grad:
                return self
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want "
                               "to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        if requires_grad and not _is_diff_dtype(self._v.dtype):
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients "
                               f"(got dtype {self.dtype!r})")
        if self._rg != bool(requires_grad):
            _epoch.bump()   # (a layer frozen or unfrozen: a replayed step's graph would be the old one)
        self._rg = bool(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        if self._base is not None:
            self._sync()
        return self.grad_fn is None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def _version(self) -> int:
        return self._vc[0]

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor after backward."""
        if self.grad_fn is None:
            if not self._rg:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        if self._retains_grad:
            return
        self._retains_grad = True
        ref = self
        own_value = upcalls.own_value

        def _keep(g):   # (the tape runs it last, after the other hooks: PyTorch's order)
            if ref.grad is None:   # differentiable under create_graph, as PyTorch's clone of it is
                ref._grad = g if grad_mode.state.enabled else own_value(g)
            else:
                ref._grad = ref._grad + g
        _keep._retain = True
        _node_hooks(self).append(_keep)

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; it may return a new grad.

        Returns a handle whose ``remove()`` unregisters the hook.
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        leaf = self.grad_fn is None
        hooks = _leaf_hooks(self) if leaf else _node_hooks(self)
        hooks.append(hook)
        if leaf:   # a leaf (a parameter) keeps its hooks across steps: a replayed step must record them again
            _epoch.bump()
        return _HookHandle(hooks, hook, leaf)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after a backward has accumulated into this leaf's ``.grad`` (an optimizer step
        fused into the backward, say). Returns a handle whose ``remove()`` unregisters it."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(hook)
        _epoch.bump()
        return _HookHandle(self._post_hooks, hook, True)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into each leaf's ``.grad`` (see ``dynajax.autograd.backward``)."""
        upcalls.backward(self, gradient, retain_graph, create_graph, inputs)

    def detach(self) -> "Tensor":
        """A tensor sharing this one's value (and later in-place writes), outside the graph."""
        return upcalls.detached_view(self)

    def detach_(self) -> "Tensor":
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn, self._rg = None, False
        return self

    @property
    def data(self) -> "Tensor":
        return upcalls.detached_view(self, data=True)

    @data.setter
    def data(self, other: "Tensor") -> None:
        other = other if isinstance(other, Tensor) else Tensor(other)
        if self._rg and not _is_diff_dtype(other._v.dtype):
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        self._value = other._value
        self._vc[1] += 1
        _epoch.bump()   # (dtype or device may have changed under a replayed step: ``compile.replay``)

    # ---------------------------------------------------------------- conversions
    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self._v.size != 1:
            raise RuntimeError(f"a Tensor with {self._v.size} elements cannot be converted to Scalar")
        if _deferred.PENDING:   # a host read: an earlier compiled step's failed index check is raised here
            _deferred.surface()
        if self._base is not None:
            self._sync()
        return np.asarray(self._value).reshape(()).item()

    def tolist(self):
        if _deferred.PENDING:
            _deferred.surface()
        if self._base is not None:
            self._sync()
        return np.asarray(self._value).tolist()

    def numpy(self, force: bool = False) -> np.ndarray:
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if _deferred.PENDING:
            _deferred.surface()
        if self._base is not None:
            self._sync()
        return np.asarray(self._value)

    def __array__(self, dtype=None, copy=None):
        if _deferred.PENDING:
            _deferred.surface()
        a = np.asarray(self.detach()._value)
        return a.astype(dtype) if dtype is not None else a

    def __jax_array__(self):
        return self.detach()._value

    def __bool__(self) -> bool:
        if self._v.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def _python_number(self):
        """The one element, for ``float()``/``int()``/``complex()``: PyTorch raises ValueError there (where
        ``item()`` raises RuntimeError) for a tensor of another size."""
        if self._v.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

    def __float__(self) -> float:
        return float(self._python_number())

    def __int__(self) -> int:
        return int(self._python_number())

    def __complex__(self) -> complex:
        return complex(self._python_number())

    def __contains__(self, element) -> bool:
        """``element in t``: whether any element of ``t`` equals ``element`` (a number or a tensor, which
        broadcasts), as PyTorch's; not Python's default, which iterates the rows (and fails past 1-D)."""
        if not isinstance(element, (Tensor, numbers.Number)):
            raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                               f"{type(element)}.")
        return bool((self == element).any())

    def __index__(self) -> int:
        if self._v.size != 1 or not _dtype.is_integral(self._v.dtype, include_bool=True):
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self) -> int:
        if self._v.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._v.shape[0]

    def __iter__(self):
        if self._v.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    __hash__ = object.__hash__   # by identity, as PyTorch's (C-level: optimizer state and hook tables key on tensors)

    def __repr__(self) -> str:
        if _deferred.PENDING:
            _deferred.surface()
        if self._base is not None:
            self._sync()
        return tensor_repr(self)

    def __str__(self) -> str:
        return self.__repr__()  # so subclasses' repr (Parameter) is used by print too

    def __format__(self, spec: str) -> str:
        if self._v.ndim == 0:
            return format(self.item(), spec)
        if spec:   # (as object.__format__ in PyTorch's: a spec applies to 0-d tensors only)
            raise TypeError("unsupported format string passed to Tensor.__format__")
        return repr(self)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (np.asarray(self.detach()._value), self._rg))

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol at the moment.")
        new = type(self).__new__(type(self)) if type(self) is not Tensor else object.__new__(Tensor)
        _init(new, self._value, self._rg)
        if self.grad is not None:
            new._grad = _make(self.grad._value)
        import copy
        for k, v in self.__dict__.items():  # user attributes; autograd/view state is not copied
            if k not in _INTERNAL:
                setattr(new, k, copy.deepcopy(v, memo))
        memo[id(self)] = new
        return new

    # ---------------------------------------------------------------- views / in place
    def _sync(self) -> None:
        """Recompute a view whose base was written in place since it was made."""
        vc = self._vc
        if self._view_ver != vc[0] + vc[1]:
            upcalls.refresh(self)

    def _assign(self, result: "Tensor") -> "Tensor":
        return upcalls.assign(self, result)


_INTERNAL = frozenset({"_grad", "_view", "_view_ver", "_hooks", "_post_hooks", "_retains_grad"})


class Size(tuple):
    """A tensor shape: a tuple of ints with ``numel()``, printed like PyTorch's."""

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"dynajax.Size([{', '.join(str(s) for s in self)}])"

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return Size(r) if isinstance(i, slice) else r

    # as torch.Size: concatenating with a tuple (either side) and repeating give a Size
    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __mul__(self, n):
        r = tuple.__mul__(self, n)
        return r if r is NotImplemented else Size(r)

    __rmul__ = __mul__


class _HookHandle:
    def __init__(self, hooks: list, hook, leaf: bool = False) -> None:
        self._hooks, self._hook, self._leaf = hooks, hook, leaf

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
            if self._leaf:   # a replayed compiled step would go on running the hook it recorded
                _epoch.bump()


def _node_hooks(t: Tensor) -> list:
    node = t.grad_fn
    if node.pre_hooks is None:
        node.pre_hooks = {}
    return node.pre_hooks.setdefault(t._out_idx, [])


def _leaf_hooks(t: Tensor) -> list:
    if t._hooks is None:
        t._hooks = []
    return t._hooks


def _is_diff_dtype(np_dtype) -> bool:
    return _dtype.is_float(np_dtype)


def _wrap_dim(dim: int, ndim: int) -> int:
    """Normalise a possibly negative dim, raising PyTorch's IndexError when out of range."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _init(t: Tensor, value, requires_grad=False, grad_fn=None, idx=0, vc=None) -> Tensor:
    t._v = value
    t._rg = requires_grad
    t.grad_fn = grad_fn
    t._out_idx = idx
    t._vc = [0, 0] if vc is None else vc
    t._base = None
    return t


def _make(value, requires_grad=False, grad_fn=None, idx=0, vc=None) -> Tensor:
    return _init(object.__new__(Tensor), value, requires_grad, grad_fn, idx, vc)


Tensor._make = staticmethod(_make)


def _empty_value():
    import jax.numpy as jnp
    return jnp.zeros((0,), _dtype.get_default_dtype().np)


@_dtype.x64.wrap
def _rebuild(array, requires_grad):
    import jax.numpy as jnp
    return _make(jnp.asarray(array), requires_grad)


class _Upcalls:
    """The functions of higher floors that Tensor's methods call: ``tensor`` (ops.creation), the views'
    ``assign``/``refresh``/``detached_view``/``is_contiguous`` (ops.views), the engine's ``backward`` and
    ``own_value`` (autograd.engine). Each registers its own with :func:`upcall` when it loads, so this module
    imports nothing above it (and a call costs one attribute read, not an import statement)."""

    __slots__ = ("tensor", "assign", "refresh", "detached_view", "is_contiguous", "backward", "own_value")


upcalls = _Upcalls()


def upcall(fn):
    """Register ``fn`` as the upcall of its name (a decorator, used by the floors above); it runs, and the
    decorated name is bound, with JAX's 64-bit types on (``_dtype.x64``)."""
    fn = _dtype.x64.wrap(fn)
    setattr(upcalls, fn.__name__, fn)
    return fn


def method(*names):
    """Attach the decorated function to Tensor under ``names`` (the first name by default), running with
    JAX's 64-bit types on (``_dtype.x64``: methods that make arrays without an op, ``new_tensor``,
    ``uniform_``, need them; for the others, one op each, it costs ~0.1 us)."""
    def attach(fn):
        fn = _dtype.x64.wrap(fn)
        for n in names or (fn.__name__,):
            setattr(Tensor, n, fn)
        return fn
    return attach


registry._Tensor = Tensor
