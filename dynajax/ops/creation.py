"""Tensor creation: ``tensor``, ``zeros``, ``ones``, ``full``, ``arange``, random draws, ``*_like``."""
from __future__ import annotations

import builtins
import collections
import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype, _sizes, random
from .._device import default_jax_device, host_made, host_put, names, put
from .._lru import lru_get
from .dispatch import Sym, current
from .._tensor import Tensor, _make, method, upcall
from . import registry
from .registry import apply, op

__all__ = ["tensor", "as_tensor", "from_numpy", "full", "zeros", "ones", "empty", "eye", "arange", "linspace",
           "logspace", "rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "zeros_like", "ones_like",
           "empty_like", "rand_like", "randn_like", "full_like", "randint_like"]


def _size(size, name: str, dtype=None, device=None) -> tuple:
    """The shape of a new tensor made by op ``name`` from ``(2, 3)`` or ``((2, 3),)``, checked by ``_sizes``:
    integers, none negative, and (given its numpy ``dtype``) a storage that can be made on ``device``."""
    shape = _sizes.new_shape(size, name)
    if dtype is not None:
        _sizes.check_new(shape, dtype, device)
    return shape


@_dtype.x64.wrap
def _finish(value, device, requires_grad) -> Tensor:
    if type(value) is Sym:   # recorded by dynajax.compile (a draw, a copy): made inside the executable, on its device
        if not _on_step_device(device):
            put(0, device)   # (a missing device: eager's error)
            raise RuntimeError(f"dynajax.compile: a tensor made on device {device} inside a compiled step from a "
                               "value the step computes or draws, which exists only on the device the step runs "
                               "on; make it on the default device, or outside the step and pass it in")
    else:
        value = put(value, device)
    t = _make(value)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_np(data) -> np.dtype:
    """PyTorch's dtype inference for Python data: bool, int64, default float, complex."""
    kinds = set()
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple, collections.deque)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            kinds.add(x._v.dtype.kind if x._v.dtype.kind != "V" else "f")
        elif isinstance(x, (bool, np.bool_)):
            kinds.add("b")
        elif isinstance(x, numbers.Integral):
            kinds.add("i")
        elif isinstance(x, numbers.Real):
            kinds.add("f")
        elif isinstance(x, numbers.Complex):
            kinds.add("c")
        else:
            raise TypeError(f"Could not infer dtype of {type(x).__name__}")
    if "c" in kinds:
        return _dtype.complex64.np if _dtype.get_default_dtype() is _dtype.float32 else _dtype.complex128.np
    if "f" in kinds:
        return _dtype.default_float_np()
    if not kinds:
        return _dtype.default_float_np()  # torch.tensor([]) is a float tensor
    if kinds == {"b"}:
        return np.dtype(np.bool_)
    return np.dtype(np.int64)


def _to_numpy(data):
    if isinstance(data, Tensor):
        return np.asarray(data.detach()._value)
    if isinstance(data, (list, tuple, collections.deque)):
        return [_to_numpy(x) for x in data]
    return data


@upcall
def tensor(data, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors).

    >>> dynajax.tensor([1, 2]).dtype, dynajax.tensor([1.0]).dtype
    (dynajax.int64, dynajax.float32)
    """
    if dtype is not None:
        np_dtype = _dtype.to_np(dtype)
    elif isinstance(data, Tensor):
        np_dtype = data._v.dtype
    elif isinstance(data, (np.ndarray, np.generic)) or hasattr(data, "__array_interface__"):
        np_dtype = np.asarray(data).dtype
        if np_dtype.kind not in "biufc" and np_dtype != _dtype.bfloat16.np:
            raise TypeError(f"can't convert np.ndarray of type {np_dtype}")
    elif hasattr(data, "dtype") and hasattr(data, "shape") and not isinstance(data, Tensor):
        np_dtype = np.dtype(data.dtype)  # jax arrays, torch tensors via __array__
    else:
        np_dtype = _infer_np(data)
    if isinstance(data, Tensor):
        if data._base is not None:
            data._sync()
        if type(data._value) is Sym:   # a value dynajax.compile records: a recorded copy (no graph break)
            t = data.detach().clone()
            t = t if t._v.dtype == np_dtype else t.to(_dtype.from_np(np_dtype))
            return _finish(t._value, device, requires_grad)
        value = jnp.asarray(data.detach()._value, np_dtype)
    elif hasattr(data, "__jax_array__") or type(data).__module__.startswith("jax"):
        value = jnp.asarray(data, np_dtype)
    else:
        # a copy, as torch.tensor makes: device_put may alias a host buffer (CPU, aligned), which the caller
        # (or a torch tensor whose .numpy() it is) can still write to
        host = np.array(_to_numpy(data), dtype=np_dtype, copy=True)
        if host.size <= DATA_KEPT and _recorded_here(device, False) and current() is not None:   # (not verify's)
            t = _finish(_kept_array(host), None, requires_grad)
            t._remake = functools.partial(_kept_array, host)   # where a speculative run finds it next call
            return t
        # a transfer (device_put's, _device.host_put), not jnp.asarray: that compiles a small kernel for every
        # new shape
        value = host_put(host)
    return _finish(value, device, requires_grad)


DATA_KEPT = 1 << 12   # elements of the largest data a step's tensor() keeps an array of (``_kept_array``)
_KEPT: collections.OrderedDict = collections.OrderedDict()   # (dtype, shape, bytes) -> array


def _kept_array(host: np.ndarray):
    """The array of small data ``host`` a step makes a tensor of (``tensor(0.0)``, ``tensor([w1, w2])``) while
    ``dynajax.compile`` records: the same array for the same data on every call, so a speculative run
    finds this call's input again (``compile.speculate``: by identity, through the tensor's ``_remake``) and no
    copy is made per call. It is never donated: the cache holds it (``compile._unshare``)."""
    key = (host.dtype.str, host.shape, host.tobytes())
    return lru_get(_KEPT, key, 256, lambda: jax.device_put(host))


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor) and (dtype is None or _dtype.to_np(dtype) == data._v.dtype) and device is None:
        return data
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor with the array's dtype and values (a copy: JAX arrays are immutable)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    return tensor(ndarray)


def _np_or_default(dtype) -> np.dtype:
    return _dtype.default_float_np() if dtype is None else _dtype.to_np(dtype)


@op("full")
def _full(*, shape, value, dtype):
    return jnp.full(shape, value, dtype)


def _recorded_here(device, requires_grad: bool) -> bool:
    """Whether a tensor made from Python values alone (a fill, a range, an identity) is a recorded op: under
    ``dynajax.compile``, with no ``device`` or the step's own (:func:`_on_step_device`). It is then made
    inside the executable instead of eagerly and passed in as a new input array each call, which costs an
    eager op there (``zeros(b, h, device=x.device)``, an RNN's first state: 110 us a call, 4 us recorded)
    and keeps every speculative run (``compile.speculate``) from finding the call's inputs again."""
    return registry.record_creation and not requires_grad and _on_step_device(device)


def _on_step_device(device) -> bool:
    """Whether ``device`` (None: unnamed) is where the step being recorded runs (``Capture.device``: on a GPU
    machine a step whose inputs are on the CPU runs there), so a tensor made on it can be made inside the
    executable. With no recording in progress on this thread (verify's dual one), JAX's default device."""
    if device is None:
        return True
    cap = current()
    return names(device, cap.device() if cap is not None else default_jax_device())


def _filled(shape: tuple, value, d: np.dtype, device, requires_grad: bool) -> Tensor:
    """A new tensor of ``shape`` filled with ``value``: the op ``full`` where :func:`_recorded_here`."""
    _sizes.check_new(shape, d, device)
    value = _dtype.checked_scalar(value, d)
    if _recorded_here(device, requires_grad):
        return apply(_full, shape=shape, value=value, dtype=d)
    return _finish(_full_array(shape, value, d), device, requires_grad)


@_dtype.x64.wrap
def _made(op_: registry.Op, device, requires_grad: bool, **params) -> Tensor:
    """``op_(**params)`` (an op of Python values only): recorded where :func:`_recorded_here`, else run."""
    if _recorded_here(device, requires_grad):
        return apply(op_, **params)
    return _finish(op_.impl(**params), device, requires_grad)


@_dtype.x64.wrap
def _full_array(shape: tuple, value, d: np.dtype, once: bool = False):
    """An eager array of ``shape`` filled with ``value``: made in numpy and copied in when
    ``_device.host_made`` says so (``jnp.full`` compiles a kernel for each new shape, ~30 ms), else by
    ``jnp.full``, which for a shape filled every step is faster than a host copy."""
    if host_made(("fill", shape, d), math.prod(shape), 1 << 22, once):
        with np.errstate(invalid="ignore", over="ignore"):   # casts as jnp.full's (inf to an int, ...)
            one = np.asarray(value).astype(d)
        return jax.device_put(np.broadcast_to(one, shape))
    return jnp.full(shape, value, d)


def state_zeros_like(input: Tensor) -> Tensor:
    """Zeros shaped like ``input``, made eagerly even under ``dynajax.compile``: for state created in a
    step that outlives it (optimizer moments). Made eagerly it is an input of the first call's graph
    as it is of every later call's, so the first and later calls share one executable."""
    v = input._value
    return _make(_full_array(tuple(v.shape), 0, v.dtype, once=True))


def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False, out=None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (dtype inferred from the value)."""
    d = _infer_np(fill_value) if dtype is None else _dtype.to_np(dtype)
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    return _filled(_size((tuple(size),) if isinstance(size, (tuple, list)) else (size,), "full"), fill_value, d,
                   device, requires_grad)


def _dims(dims: tuple, size, name: str) -> tuple:
    """The size of ``zeros(2, 3)`` / ``zeros((2, 3))`` / ``zeros(size=(2, 3))``, checked (``_size``)."""
    if size is None:
        return _size(dims, name)
    if dims:
        raise TypeError(f"{name}() received an invalid combination of arguments - got the size both "
                        f"positionally {dims} and as size={size}")
    return _size((size,), name)


def zeros(*dims, size=None, dtype=None, device=None, requires_grad: bool = False, out=None, layout=None) -> Tensor:
    return _filled(_dims(dims, size, "zeros"), 0, _np_or_default(dtype), device, requires_grad)


def ones(*dims, size=None, dtype=None, device=None, requires_grad: bool = False, out=None, layout=None) -> Tensor:
    return _filled(_dims(dims, size, "ones"), 1, _np_or_default(dtype), device, requires_grad)


def empty(*dims, size=None, dtype=None, device=None, requires_grad: bool = False, out=None, layout=None,
          memory_format=None, pin_memory=False) -> Tensor:
    """Like ``zeros`` (JAX has no uninitialised memory)."""
    return zeros(*_dims(dims, size, "empty"), dtype=dtype, device=device, requires_grad=requires_grad)


@op("eye")
def _eye(*, n, m, dtype):
    return jnp.eye(n, m, dtype=dtype)


def eye(n: int, m: int | None = None, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    (n, m), d = _sizes.parse((n, n if m is None else m), "eye", "n"), _np_or_default(dtype)
    for name, v in (("n", n), ("m", m)):
        if v < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {v}")
    _sizes.check_new((n, m), d, device)
    return _made(_eye, device, requires_grad, n=n, m=m, dtype=d)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 unless a bound is a float."""
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("step must be nonzero")
    if (vals[1] - vals[0]) / vals[2] < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    d = _infer_np(vals) if dtype is None else _dtype.to_np(dtype)
    if not all(math.isfinite(v) for v in vals[:2]):
        raise RuntimeError(f"unsupported range: {vals[0]:g} -> {vals[1]:g}")
    count = np.ceil((vals[1] - vals[0]) / vals[2])
    if count > _sizes.INT64_MAX:
        raise RuntimeError("invalid size, possible overflow?")
    n = builtins.max(int(count), 0)
    _sizes.check_new((n,), d, device)
    params = dict(start=vals[0], step=vals[2], n=n, dtype=d)
    if n > ARANGE_RECORDED:
        return _finish(_arange.impl(**params), device, requires_grad)
    return _made(_arange, device, requires_grad, **params)


ARANGE_RECORDED = 1 << 16   # longer ranges are made eagerly (a recorded one is a constant in the executable)


@op("arange")
def _arange(*, start, step, n, dtype):
    """``start + step * i`` for i < n, computed by numpy in float64 (int64 for integer dtypes) and cast to
    ``dtype``: a constant when compiled; put with device_put, as jnp.asarray compiles a kernel per shape."""
    wide = np.float64 if dtype.kind in "fc" or _dtype.is_float(dtype) else np.int64
    return jax.device_put((start + step * np.arange(n, dtype=wide)).astype(dtype))


@op("linspace")
def _linspace(*, start, end, steps, dtype, base=None):
    if base is None:
        return jnp.linspace(start, end, steps, dtype=dtype)
    return jnp.logspace(start, end, steps, base=base, dtype=dtype)


def _steps(steps, dtype, device, name: str) -> int:
    """``linspace``/``logspace``'s number of points, checked as a new tensor's size."""
    (n,) = _sizes.parse((steps,), name, "steps")
    if n < 0:
        raise RuntimeError("number of steps must be non-negative")
    _sizes.check_new((n,), dtype, device)
    return n


def _check_endpoints(start, end, name: str) -> None:
    """PyTorch's check that tensor endpoints of ``linspace``/``logspace`` are 0-d."""
    bad = [f"{what} with {v._v.ndim} dimension(s)" for what, v in (("start", start), ("end", end))
           if isinstance(v, Tensor) and v._v.ndim]
    if bad:
        raise RuntimeError(f"{name} only supports 0-dimensional start and end tensors, but got {' and '.join(bad)}.")


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_endpoints(start, end, "linspace")
    d = _np_or_default(dtype)
    return _made(_linspace, device, requires_grad, start=float(start), end=float(end),
                 steps=_steps(steps, d, device, "linspace"), dtype=d)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    _check_endpoints(start, end, "logspace")
    d = _np_or_default(dtype)
    return _made(_linspace, device, requires_grad, start=float(start), end=float(end),
                 steps=_steps(steps, d, device, "logspace"), dtype=d, base=float(base))


# ---------------------------------------------------------------- random
def _float_np_checked(dtype, fn: str) -> np.dtype:
    d = _np_or_default(dtype)
    if not _dtype.is_float(d):   # (NotImplementedError, a RuntimeError, as PyTorch's dtype dispatch raises)
        raise NotImplementedError(f"\"{fn}\" not implemented for '{_dtype.from_np(d).legacy_name}'")
    return d


def rand(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform samples on [0, 1) from the seeded stream (see ``manual_seed``)."""
    d = _float_np_checked(dtype, "check_uniform_bounds")
    return _finish(random.sample("uniform", _size(size, "rand", d, device), d, generator=generator), device,
                   requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the seeded stream."""
    d = _float_np_checked(dtype, "normal_kernel_cpu")
    return _finish(random.sample("normal", _size(size, "randn", d, device), d, generator=generator), device,
                   requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None,
            requires_grad: bool = False) -> Tensor:
    """Integers uniform on [low, high): ``randint(high, size)`` or ``randint(low, high, size)``."""
    if size is None:
        low, high, size = 0, low, high
    elif high is None:   # randint(high, size=...)
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    d = np.dtype(np.int64) if dtype is None else _dtype.to_np(dtype)
    drawn = d if d.kind in "iu" else np.dtype(np.int64)   # (a float or bool dtype: integers, converted)
    shape = _size((tuple(size),) if isinstance(size, (tuple, list)) else (size,), "randint", d, device)
    t = _finish(random.sample("randint", shape, drawn, low, high, generator), device, False)
    if drawn != d:
        t = t.to(_dtype.from_np(d))
    return t.requires_grad_(True) if requires_grad else t


def randperm(n: int, *, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    d = np.dtype(np.int64) if dtype is None else _dtype.to_np(dtype)
    shape = _size((n,), "randperm", d, device)
    return _finish(random.sample("permutation", shape, d, generator=generator), device, requires_grad)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
           pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """Normal samples; ``mean``/``std`` may be tensors (sampled elementwise, no gradient). With numbers for
    both, ``size`` and the factory keywords (``dtype``, ``device``, ``requires_grad``) as PyTorch's."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        r = randn_like(ref.detach() * 1.0, generator=generator) * std + mean
    else:
        r = randn(*(size or ()), generator=generator, dtype=dtype, device=device) * std + mean
        if requires_grad:
            r.requires_grad_(True)
    if out is None:
        return r
    from .elementwise import with_out
    return with_out(r, out)


def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:
    """0/1 samples with probability ``input`` (or ``p``) of a 1, in ``input``'s dtype."""
    prob = input._value if p is None else p
    r = _make(random.sample("bernoulli", input._v.shape, input._v.dtype, prob, 0.0, generator))
    # as PyTorch's: the samples require grad where ``input`` does, with a zero gradient to it
    return apply(_overwrite, input, r) if _requires_grad_here(input) else r


@method()
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None, out=None) -> Tensor:
    """int64 indices into the last dim of ``input`` (non-negative weights, need not sum to 1; a 2-d input's rows
    are drawn apart), ``num_samples`` per row, with or without ``replacement``. PyTorch's checks of the values
    (no negative, inf or NaN weight; a row summing to more than 0) read them back in eager mode; a compiled step
    does not check them."""
    v = input._value
    if not _dtype.from_np(np.dtype(v.dtype)).is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{input.dtype.legacy_name}")
    if len(v.shape) not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = int(num_samples)
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and n > v.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    _sizes.check_new(tuple(v.shape[:-1]) + (n,), np.int64)
    if type(v) is not Sym and v.size:
        if input._base is not None:
            input._sync()
            v = input._value
        a = np.asarray(v, dtype=np.float64)
        if not np.isfinite(a).all() or (a < 0).any():
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if (a.sum(-1) <= 0).any():
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    kind = "multinomial" if replacement else "multinomial_distinct"
    r = _make(random.sample(kind, tuple(v.shape[:-1]) + (n,), np.int64, v, 0.0, generator))
    if out is None:
        return r
    from .elementwise import with_out
    return with_out(r, out)


# ---------------------------------------------------------------- *_like and new_*
def _like(fn):
    def like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False, memory_format=None,
             **kwargs) -> Tensor:
        return fn(*input._v.shape, dtype=input.dtype if dtype is None else dtype,
                  device=device, requires_grad=requires_grad, **kwargs)
    like.__name__ = fn.__name__ + "_like"
    like.__doc__ = f"``{fn.__name__}`` with ``input``'s shape and dtype."
    return like


zeros_like, ones_like, empty_like, rand_like, randn_like = (
    _like(zeros), _like(ones), _like(empty), _like(rand), _like(randn))


@op("fill_like")
def _fill_like(x, *, value):
    return jnp.full_like(x, value)


def fill_like(input: Tensor, value) -> Tensor:
    """``input``'s shape and dtype filled with ``value``, as an op: under ``dynajax.compile`` it is
    recorded (the backward's implicit ``ones`` seed) instead of made eagerly and passed in."""
    return apply(_fill_like, input, value=value)


def full_like(input: Tensor, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(input._v.shape, fill_value, dtype=input.dtype if dtype is None else dtype,
                device=device, requires_grad=requires_grad)


def randint_like(input: Tensor, low, high=None, *, dtype=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    return randint(low, high, input._v.shape, dtype=input.dtype if dtype is None else dtype, device=device)


def _new(fn):
    def new(self: Tensor, *size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        return fn(*size, dtype=self.dtype if dtype is None else dtype, device=device, requires_grad=requires_grad)
    new.__name__ = "new_" + fn.__name__
    return new


method("new_zeros")(_new(zeros))
method("new_ones")(_new(ones))
method("new_empty")(_new(empty))


@method()
def new_full(self: Tensor, size, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(size, fill_value, dtype=self.dtype if dtype is None else dtype, device=device,
                requires_grad=requires_grad)


@method()
def new_tensor(self: Tensor, data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return tensor(data, dtype=self.dtype if dtype is None else dtype, device=device, requires_grad=requires_grad)


# ---------------------------------------------------------------- in-place random fills
_RANDOM_KERNELS = {"normal": "normal_kernel_cpu", "uniform": "check_uniform_bounds"}   # PyTorch's, in its errors


def _numbers(*values) -> bool:
    """Whether all ``values`` are Python numbers (a random op's parameters, checked only as such: a tensor's
    value is not read)."""
    return all(isinstance(v, numbers.Real) for v in values)


def _fill_random(self: Tensor, kind: str, a, b, generator) -> Tensor:
    if kind in _RANDOM_KERNELS:
        _float_np_checked(self.dtype, _RANDOM_KERNELS[kind])
    v = random.sample(kind, self._v.shape, self._v.dtype, a, b, generator)
    return _assign_nograd(self, v)


def _assign_nograd(self: Tensor, value) -> Tensor:
    from .views import write
    return write(self, _make(value))


@method()
def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator=None) -> Tensor:
    if _numbers(a, b) and a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}")
    return _fill_random(self, "uniform", a, b, generator)


@method()
def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    if _numbers(std) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _fill_random(self, "normal", mean, std, generator)


@method()
def bernoulli_(self: Tensor, p: float = 0.5, *, generator=None) -> Tensor:
    """Fill with 0/1 draws, 1 with probability ``p`` (a number, or a tensor broadcast to this one's shape)."""
    if isinstance(p, Tensor):
        from .shape import expand   # (PyTorch's error for a p that does not broadcast)
        p = expand(p.detach(), tuple(self.shape))._value
    return _fill_random(self, "bernoulli", p, 0.0, generator)


@method()
def random_(self: Tensor, from_: int = 0, to: int | None = None, *, generator=None) -> Tensor:
    if to is None:
        from_, to = 0, from_ if from_ else 2**31
    v = random.sample("randint", self._v.shape, np.int64, from_, to, generator).astype(self._v.dtype)
    return _assign_nograd(self, v)


@method()
def exponential_(self: Tensor, lambd: float = 1.0, *, generator=None) -> Tensor:
    if _numbers(lambd) and not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    if not self.is_floating_point():
        raise RuntimeError(f"Exponential distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {self.dtype.legacy_name}")
    u = random.sample("uniform", self._v.shape, self._v.dtype, 0.0, 1.0, generator)
    return _assign_nograd(self, -jnp.log1p(-u) / lambd)


@op("fill", backward_name="FillBackward0")
def _overwrite(x, v):
    """``v`` (broadcast, in ``x``'s dtype) in place of ``x``: what replaces a tensor that requires grad, so
    that the result still does, with a zero gradient to the overwritten ``x`` (PyTorch's ``FillBackward0``)."""
    return jnp.broadcast_to(jnp.asarray(v).astype(x.dtype), x.shape)


# (the engine sums v's cotangent down to v's shape)
_overwrite.defvjp(lambda g, out, x, v: fill_like(g, 0), lambda g, out, x, v: g)


def _requires_grad_here(t: Tensor) -> bool:
    from ..autograd import grad_mode
    return t._rg and grad_mode.state.enabled


@method()
def fill_(self: Tensor, value) -> Tensor:
    """Fill with ``value`` (a number or a 0-d tensor, whose gradient flows); a tensor that requires grad
    still does, with a zero gradient to what was overwritten, as in PyTorch."""
    from .views import write
    if isinstance(value, Tensor):
        if value._v.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value._v.ndim} dimensions.")
        if _requires_grad_here(self):
            return write(self, apply(_overwrite, self, value.to(self.dtype)), "fill_")
        from .shape import expand
        return write(self, expand(value.to(self.dtype), self._v.shape), "fill_")
    if _requires_grad_here(self):
        return write(self, apply(_overwrite, self, _dtype.checked_scalar(value, self._v.dtype)), "fill_")
    return write(self, _filled(tuple(self._v.shape), value, self._v.dtype, None, False), "fill_")  # (recorded)


@method()
def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


@method()
def copy_(self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """Write ``src`` (broadcast to this shape, cast to this dtype) into this tensor; gradients flow to
    ``src``, none to the overwritten value."""
    from .elementwise import broadcast_error
    from .views import write
    if isinstance(src, numbers.Number):   # (PyTorch takes a Python number too: a fill, cast to this dtype)
        src = tensor(src)
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'other' (position 1) must be Tensor, not {type(src).__name__}")
    broadcast_error(None, self, src)   # raises PyTorch's error where the shapes cannot broadcast
    return write(self, src.to(self.dtype))


# ---------------------------------------------------------------- strided/permuted empties, more random fills
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
                  pin_memory: bool = False) -> Tensor:
    """``empty(size)``: JAX arrays have no strides, so ``stride`` only has to match ``size`` in length."""
    if len(stride) != len(size):
        raise RuntimeError("mismatch in length of strides and shape")
    return empty(tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
                   pin_memory: bool = False) -> Tensor:
    """``empty(size)`` (the memory order ``physical_layout`` asks for has no meaning for a JAX array)."""
    if sorted(physical_layout) != list(range(len(size))):
        raise RuntimeError(f"Dimension mismatch or not a permutation: size {list(size)}, physical_layout "
                           f"{list(physical_layout)}")
    return empty(tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


@method()
def new_empty_strided(self: Tensor, size, stride, *, dtype=None, layout=None, device=None,
                      requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None, requires_grad: bool = False) -> Tensor:
    """A 0-d tensor holding the number ``s``, of the default float dtype unless told."""
    return tensor(s, dtype=dtype or _dtype.get_default_dtype(), device=device, requires_grad=requires_grad)


def fill(input: Tensor, value) -> Tensor:
    """A tensor like ``input`` filled with ``value`` (a number or a 0-d tensor), as ``torch.fill``; the
    gradient flows to a tensor ``value`` (summed), none to ``input``."""
    from .elementwise import where
    if isinstance(value, Tensor):
        if value._v.ndim != 0:
            raise RuntimeError(f"fill only supports 0-dimension value tensor but got tensor with "
                               f"{value._v.ndim} dimensions.")
        value = value.to(input.dtype)
    return where(input.new_ones(tuple(input.shape), dtype=_dtype.bool_), value, input)


def _transformed_draws(self: Tensor, what: str, kind: str, transform, generator) -> Tensor:
    """Fill a floating-point tensor with ``transform(d)`` of draws ``d`` (``kind``: standard "uniform" or
    "normal")."""
    if not self.is_floating_point():
        raise RuntimeError(f"{what} is a continuous probability distribution. dtype must be a floating point but "
                           f"you specified {self.dtype.legacy_name}")
    d = random.sample(kind, self._v.shape, self._v.dtype, 0.0, 1.0, generator)
    return _assign_nograd(self, transform(d).astype(self._v.dtype))


@method()
def cauchy_(self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator=None) -> Tensor:
    if sigma <= 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    return _transformed_draws(self, "Cauchy distribution", "uniform",
                              lambda u: median + sigma * jnp.tan(jnp.pi * (u - 0.5)), generator)


@method()
def log_normal_(self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator=None) -> Tensor:
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return _transformed_draws(self, "log_normal", "normal", lambda z: jnp.exp(mean + std * z), generator)


@method()
def geometric_(self: Tensor, p: float, *, generator=None) -> Tensor:
    """Fill with the number of Bernoulli(``p``) trials up to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = random.sample("uniform", self._v.shape, np.float64, 0.0, 1.0, generator)
    return _assign_nograd(self, jnp.ceil(jnp.log1p(-u) / np.log1p(-p)).astype(self._v.dtype))


__all__ += ["empty_permuted", "empty_strided", "fill", "scalar_tensor", "zero_"]
