"""The pickle inside a ``torch.save`` archive (``data.pkl``), read and written without torch and
without running anything from the file.

Reading is a stack machine over pickle's opcodes that never imports or calls what the file names.
A ``GLOBAL`` resolves only names that ``torch.load(weights_only=True)`` accepts, each to a dynajax
stand-in (``torch._utils._rebuild_tensor_v2`` to a function that cuts a tensor out of a storage,
``torch.FloatStorage`` to a marker of float32 storages, ``torch.float16`` to ``dynajax.float16`` ...);
every other name is refused with :class:`pickle.UnpicklingError` before anything is built. ``REDUCE``
calls only those stand-ins, each of which checks its arguments; ``BUILD`` sets attributes only on an
``OrderedDict`` (a state dict's ``_metadata``); items go only into plain lists, dicts and sets.

Writing emits pickle protocol 2 as ``torch.save`` does: tensors as ``_rebuild_tensor_v2`` over a
persistent storage id, parameters through ``_rebuild_parameter``, and the containers, numbers and
strings that torch's weights-only loader rebuilds.
"""
from __future__ import annotations

import re
import struct
import warnings
from collections import Counter, OrderedDict
from pickle import UnpicklingError

import numpy as np

from . import _dtype
from ._device import device as Device
from ._tensor import Size, Tensor
from .nn.parameter import Parameter, _value_of

# ---------------------------------------------------------------------------------------- names
# dtypes torch's weights-only loader accepts that dynajax has no dtype for
_FOREIGN_DTYPES = frozenset(
    ["complex32", "uint16", "uint32", "uint64", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
     "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
     "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8"]
    + [f"uint{i}" for i in range(1, 8)] + [f"int{i}" for i in range(1, 8)])
_STORAGE_DTYPES = {f"{d.legacy_name}Storage": d for d in _dtype._ALL}   # FloatStorage -> float32, ...
_QUANTIZED_STORAGES = frozenset(["QInt32Storage", "QInt8Storage", "QUInt2x4Storage", "QUInt4x2Storage",
                                 "QUInt8Storage"])
_TENSOR_CLASS = re.compile(r"torch(\.cuda)?(\.sparse)?\.(BFloat16|Bool|Byte|Char|Double|Float|Half|Int|Long|Short)"
                           r"Tensor")
_BLOCKED_MODULES = frozenset(["sys", "os", "posix", "nt"])   # refused by name, as torch does
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}   # protocol 2's names from Python 2
_UNREPRESENTABLE = {   # accepted by torch's weights-only loader; no dynajax counterpart
    "torch._utils._rebuild_qtensor": "quantized tensors",
    "torch._utils._rebuild_sparse_tensor": "sparse tensors",
    "torch._utils._rebuild_nested_tensor": "nested tensors",
    "torch._utils._rebuild_wrapper_subclass": "tensor subclasses without storage (wrapper subclasses)",
    "torch._utils._rebuild_device_tensor_from_numpy": "tensors pickled through numpy arrays",
    "torch._utils._rebuild_meta_tensor_no_storage": "meta tensors (a shape without values)",
    "torch.serialization._get_layout": "sparse tensor layouts",
    "torch.storage.TypedStorage": "bare TypedStorage objects",
    "torch.per_tensor_affine": "quantization schemes", "torch.per_tensor_symmetric": "quantization schemes",
    "torch.per_channel_affine": "quantization schemes", "torch.per_channel_symmetric": "quantization schemes",
    "torch.per_channel_affine_float_qparams": "quantization schemes",
}
_TEXT_CODECS = {"latin1": "latin-1", "iso88591": "latin-1", "utf8": "utf-8", "ascii": "ascii"}
_MAX_TUPLE_DEPTH = 1000        # hashing a tuple nested deeper overflows the C stack (a crash, not an error)
_MAX_EXPANDED_BYTES = 1 << 31  # a view with more elements than its storage is materialized up to this size


class _Storage:
    """A storage the pickle named by persistent id: its raw bytes, element dtype (``None``: untyped,
    counted in bytes) and saved location."""

    __slots__ = ("raw", "dtype", "key", "location")

    def __init__(self, raw, dtype, key: str, location: str) -> None:
        self.raw, self.dtype, self.key, self.location = raw, dtype, key, location


class _StorageType:
    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype) -> None:
        self.name, self.dtype = name, dtype


class _Type:
    """``torch.Tensor`` / ``torch.nn.Parameter`` as a class named in the pickle."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Call:
    """A callable the pickle may ``REDUCE``: a named stand-in taking the unpickler and the arguments."""

    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn) -> None:
        self.name, self.fn = name, fn


class _External(Exception):
    """Carries an error raised outside the pickle (storage reads, device placement) through the loop
    that turns the pickle's own errors into UnpicklingError."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def _fail(message: str):
    raise UnpicklingError(message)


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise UnpicklingError(what)


def _is_int(x) -> bool:
    return type(x) is int


def _args(name: str, args: tuple, low: int, high: int) -> tuple:
    _need(low <= len(args) <= high, f"{name} takes {low}-{high} arguments, the pickle gives {len(args)}")
    return args + (None,) * (high - len(args))


# ------------------------------------------------------------------------------ the stand-ins
def _ordered_dict(u, args):
    a = _args("OrderedDict", args, 0, 1)[0]
    _need(a is None or type(a) in (list, dict, OrderedDict), "OrderedDict() takes a list or dict of items")
    return OrderedDict() if a is None else OrderedDict(a)


def _counter(u, args):
    a = _args("Counter", args, 0, 1)[0]
    _need(a is None or type(a) is dict, "Counter() takes a dict")
    return Counter() if a is None else Counter(a)


def _set(u, args):
    a = _args("set", args, 0, 1)[0]
    _need(a is None or type(a) in (list, tuple, set), "set() takes a list")
    return set() if a is None else set(a)


def _complex(u, args):
    re_, im = _args("complex", args, 0, 2)
    _need(all(x is None or type(x) in (int, float) for x in (re_, im)), "complex() takes two numbers")
    return complex(re_ or 0, im or 0)


def _encode(u, args):
    text, enc = _args("_codecs.encode", args, 1, 2)
    # (the name is matched here, not looked up: codecs.lookup imports the encoding's module)
    codec = _TEXT_CODECS.get((enc or "utf-8").lower().replace("-", "").replace("_", "")) if type(enc) in (
        str, type(None)) else None
    _need(type(text) is str and codec is not None,
          "_codecs.encode takes a string and one of the encodings latin1, utf-8, ascii")
    return text.encode(codec)


def _bytearray(u, args):
    a = _args("bytearray", args, 0, 1)[0]
    _need(a is None or type(a) in (bytes, bytearray), "bytearray() takes bytes")
    return bytearray() if a is None else bytearray(a)


def _size(u, args):
    a = _args("torch.Size", args, 0, 1)[0]
    _need(a is None or type(a) in (tuple, list) and all(_is_int(s) and s >= 0 for s in a),
          "torch.Size takes a tuple of non-negative ints")
    return Size(a or ())


def _device(u, args):
    kind, index = _args("torch.device", args, 1, 2)
    _need(type(kind) is str and (index is None or _is_int(index) and index >= 0),
          "torch.device takes a device type string and an optional index")
    try:
        return Device(kind, index) if index is not None else Device(kind)
    except (RuntimeError, ValueError):
        _fail(f"the checkpoint holds torch.device({kind!r}), a device type dynajax does not have")


def _element_count(size) -> int:
    n = 1
    for s in size:
        n *= s
    return n


def _values(storage: _Storage, dtype, offset, size, stride, byteorder: str) -> np.ndarray:
    """The elements of the view ``(offset, size, stride)`` (in elements of ``dtype``) of ``storage``, as a
    new C-ordered array, after checking that every element lies inside the storage."""
    _need(isinstance(storage, _Storage), "a tensor's first argument must be a storage (a persistent id)")
    _need(_is_int(offset) and offset >= 0, f"a tensor's storage offset must be an int >= 0, not {offset!r}")
    _need(type(size) in (tuple, Size) and type(stride) is tuple and len(size) == len(stride) <= 64,
          "a tensor's size and stride must be tuples of the same length (at most 64)")
    _need(all(_is_int(s) and s >= 0 for s in size) and all(_is_int(s) and s >= 0 for s in stride),
          f"a tensor's sizes and strides must be ints >= 0, not {size!r} and {stride!r}")
    item = dtype.itemsize
    have = len(storage.raw) // item
    n = _element_count(size)
    if n == 0:
        return np.empty(tuple(size), dtype.np)
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    _need(last < have, f"a tensor of size {tuple(size)}, stride {stride} at offset {offset} reaches element {last} "
                       f"of storage {storage.key!r}, which holds {have} {dtype.name} elements")
    _need(n <= have or n * item <= _MAX_EXPANDED_BYTES,
          f"a tensor of size {tuple(size)} repeats the {have} elements of storage {storage.key!r} (stride 0) "
          f"into more than {_MAX_EXPANDED_BYTES >> 30} GiB")
    order = "<" if byteorder == "little" else ">"
    stored = np.dtype(np.uint8) if dtype is _dtype.bool_ else dtype.np.newbyteorder(order)
    flat = np.frombuffer(storage.raw, stored, count=have)
    view = np.lib.stride_tricks.as_strided(flat[offset:], tuple(size), tuple(s * item for s in stride),
                                           writeable=False)
    if dtype is _dtype.bool_:
        return view != 0   # (a byte other than 0 and 1 read as numpy bool would be neither)
    return np.asarray(view, dtype.np, order="C")   # (ascontiguousarray would make 0-d 1-d)


def _tensor_from(u, name, storage, offset, size, stride, requires_grad, dtype=None):
    _need(type(requires_grad) is bool, f"{name}: requires_grad must be a bool, not {requires_grad!r}")
    if dtype is None:
        _need(isinstance(storage, _Storage), f"{name}: the first argument must be a storage")
        dtype = storage.dtype or _dtype.uint8
    _need(isinstance(dtype, _dtype.dtype), f"{name}: the dtype must be a torch dtype, not {dtype!r}")
    values = _values(storage, dtype, offset, size, stride, u.byteorder)
    try:
        t = u.place(values, storage.location)
    except Exception as e:   # (map_location's and the device's own errors, not the file's)
        raise _External(e) from e
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_tensor(u, args):
    storage, offset, size, stride = _args("_rebuild_tensor", args, 4, 4)
    return _tensor_from(u, "_rebuild_tensor", storage, offset, size, stride, False)


def _rebuild_tensor_v2(u, args):
    storage, offset, size, stride, requires_grad, _hooks, _meta = _args("_rebuild_tensor_v2", args, 6, 7)
    return _tensor_from(u, "_rebuild_tensor_v2", storage, offset, size, stride, requires_grad)


def _rebuild_tensor_v3(u, args):
    storage, offset, size, stride, requires_grad, _hooks, dtype, _meta = _args("_rebuild_tensor_v3", args, 7, 8)
    _need(isinstance(storage, _Storage), "_rebuild_tensor_v3: the first argument must be a storage")
    return _tensor_from(u, "_rebuild_tensor_v3", storage, offset, size, stride, requires_grad, dtype)


def _parameter(data, requires_grad, what: str):
    _need(isinstance(data, Tensor) and type(requires_grad) is bool,
          f"{what} takes a tensor and a bool requires_grad")
    return Parameter(data, requires_grad=requires_grad)


def _rebuild_parameter(u, args):
    data, requires_grad, _hooks = _args("_rebuild_parameter", args, 3, 3)
    return _parameter(data, requires_grad, "_rebuild_parameter")


def _rebuild_parameter_with_state(u, args):
    data, requires_grad, _hooks, state = _args("_rebuild_parameter_with_state", args, 4, 4)
    _warn_state(state)
    return _parameter(data, requires_grad, "_rebuild_parameter_with_state")


def _rebuild_from_type_v2(u, args):
    func, new_type, inner, state = _args("_rebuild_from_type_v2", args, 4, 4)
    _need(isinstance(func, _Call) and func.fn in (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3,
                                                   _rebuild_parameter, _rebuild_parameter_with_state)
          and isinstance(new_type, _Type) and type(inner) is tuple,
          "_rebuild_from_type_v2 takes a tensor rebuild function, torch.Tensor or Parameter, and its arguments")
    t = func.fn(u, inner)
    _warn_state(state)
    if new_type.name == "torch.nn.parameter.Parameter" and not isinstance(t, Parameter):
        t = Parameter(t, requires_grad=t.requires_grad)
    return t


def _rebuild_device_tensor_from_cpu_tensor(u, args):
    data, dtype, device, requires_grad = _args("_rebuild_device_tensor_from_cpu_tensor", args, 4, 4)
    _need(isinstance(data, Tensor) and type(requires_grad) is bool,
          "_rebuild_device_tensor_from_cpu_tensor takes a tensor, a dtype, a device and a bool")
    if requires_grad:
        data.requires_grad_(True)
    return data


def _warn_state(state) -> None:
    if state:
        names = sorted(map(str, state)) if isinstance(state, dict) else [type(state).__name__]
        warnings.warn(f"dynajax.load: a tensor's Python attributes {names} in the checkpoint are not restored",
                      stacklevel=4)


_CALLS = {
    "collections.OrderedDict": _ordered_dict, "collections.Counter": _counter, "builtins.set": _set,
    "builtins.complex": _complex, "builtins.bytearray": _bytearray, "_codecs.encode": _encode,
    "torch.Size": _size, "torch.device": _device,
    "torch._utils._rebuild_tensor": _rebuild_tensor, "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3, "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _rebuild_device_tensor_from_cpu_tensor,
}
_NEW = {"torch.nn.parameter.Parameter": lambda data=None, requires_grad=True: _parameter(
            data, requires_grad, "Parameter.__new__"),
        "collections.OrderedDict": lambda: OrderedDict(), "collections.Counter": lambda: Counter()}


def _refuse_global(full: str, module: str):
    shown = full[len("builtins."):] if full.startswith("builtins.") else full
    if module in _BLOCKED_MODULES:
        _fail(f"Trying to load unsupported GLOBAL {full} whose module {module} is blocked: the file asks to "
              "run code. dynajax.load rebuilds only tensors, containers, numbers and strings, as "
              "torch.load(weights_only=True) does, and ran nothing from the file")
    _fail(f"Unsupported global: GLOBAL {full} was not an allowed global by default ({shown} is not among the "
          "names torch.load(weights_only=True) accepts: tensors, storages, dtypes, torch.Size, torch.device, "
          "OrderedDict, Counter, set, complex, bytes). dynajax.load ran nothing from the file; it never "
          "unpickles arbitrary objects")


def resolve(module: str, name: str):
    """The stand-in for ``GLOBAL module.name``, or :class:`pickle.UnpicklingError` if torch's weights-only
    loader refuses the name (or accepts it but dynajax has nothing to rebuild it as)."""
    module = _PY2_MODULES.get(module, module)
    full = f"{module}.{name}"
    if full in _CALLS:
        return _Call(full, _CALLS[full])
    if full in ("torch.Tensor", "torch.nn.parameter.Parameter"):
        return _Type(full)
    if module == "torch" and name in _dtype._BY_NAME and _dtype._BY_NAME[name].name == name:
        return _dtype._BY_NAME[name]
    if module == "torch" and name in _FOREIGN_DTYPES:
        _fail(f"the checkpoint holds torch.{name} (GLOBAL {full}), a dtype dynajax does not have: cast such "
              "tensors to a supported dtype with PyTorch before saving")
    if module in ("torch", "torch.cuda") and name in _STORAGE_DTYPES:
        return _StorageType(full, _STORAGE_DTYPES[name])
    if full == "torch.storage.UntypedStorage":
        return _StorageType(full, None)
    if module in ("torch", "torch.cuda") and name in _QUANTIZED_STORAGES:
        _fail(f"the checkpoint holds quantized storages (GLOBAL {full}), which dynajax cannot represent")
    if full in _UNREPRESENTABLE or _TENSOR_CLASS.fullmatch(full):
        what = _UNREPRESENTABLE.get(full, "legacy tensor classes")
        _fail(f"the checkpoint holds {what} (GLOBAL {full}): torch.load(weights_only=True) accepts the name, "
              "but dynajax has no such objects to rebuild")
    _refuse_global(full, module)


# ------------------------------------------------------------------------------------ reading
class Unpickler:
    """Unpickle ``data`` (bytes). ``storage(key, location, dtype, numel) -> bytes`` fetches a storage's
    bytes; ``place(array, location) -> Tensor`` makes a tensor on the device the location maps to."""

    def __init__(self, data: bytes, storage, place, byteorder: str = "little") -> None:
        self.data, self.pos = memoryview(data), 0
        self._storage_bytes, self.place, self.byteorder = storage, place, byteorder
        self.memo: dict = {}
        self.storages: dict = {}
        self._stack: list = []
        self.metastack: list = []
        self._depth: dict = {}   # id(tuple) -> (tuple, nesting depth); holding the tuple keeps its id unique

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            _fail(f"data.pkl ends inside an opcode's argument (wanted {n} bytes at byte {self.pos} of "
                  f"{len(self.data)})")
        out = self.data[self.pos:self.pos + n].tobytes()
        self.pos += n
        return out

    def readline(self) -> str:
        end = bytes(self.data[self.pos:self.pos + 1024]).find(b"\n")
        _need(end >= 0, f"data.pkl: a GLOBAL's name at byte {self.pos} is not terminated")
        line = self.read(end + 1)[:-1]
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError:
            _fail(f"data.pkl: a GLOBAL's name at byte {self.pos} is not UTF-8")

    def load(self):
        """The unpickled object. Malformed input raises :class:`pickle.UnpicklingError`, never a raw
        KeyError/IndexError/MemoryError."""
        start = 0
        try:
            while True:
                start = self.pos
                op = self.read(1)
                handler = _OPS.get(op)
                if handler is None:
                    _fail(f"Unsupported operand {op[0]} (opcode {op!r} at byte {start} of data.pkl)")
                if handler is _stop:
                    _need(len(self._stack) == 1 and not self.metastack,
                          f"data.pkl: STOP with {len(self._stack)} objects on the stack")
                    return self._stack[-1]
                handler(self)
        except UnpicklingError:
            raise
        except _External as e:
            raise e.error from None
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, OverflowError, struct.error,
                MemoryError, RecursionError, UnicodeDecodeError) as e:
            detail = "not enough memory" if isinstance(e, MemoryError) else f"{type(e).__name__}: {e}"
            op = bytes(self.data[start:start + 1])
            raise UnpicklingError(f"data.pkl is malformed at byte {start} (opcode {op!r}): {detail}") from None

    def _tuple(self, items) -> tuple:
        depth = 1 + max((self._depth[id(x)][1] for x in items if type(x) is tuple and id(x) in self._depth),
                        default=0)
        _need(depth <= _MAX_TUPLE_DEPTH, f"data.pkl nests tuples more than {_MAX_TUPLE_DEPTH} deep")
        t = tuple(items)
        if t:
            self._depth[id(t)] = (t, depth)
        return t

    def persistent(self, pid):
        _need(type(pid) is tuple and len(pid) == 5 and pid[0] in ("storage", b"storage"),
              f"Only persistent_load of storage is allowed, but got {type(pid).__name__} "
              f"{pid[0] if type(pid) is tuple and pid else pid!r}")
        _, kind, key, location, numel = pid
        key, location = (x.decode("ascii") if type(x) is bytes else x for x in (key, location))
        _need(isinstance(kind, _StorageType) and type(key) is str and type(location) is str
              and _is_int(numel) and numel >= 0,
              "a storage's persistent id must be ('storage', a storage class, key, location, element count)")
        if key not in self.storages:
            itemsize = kind.dtype.itemsize if kind.dtype is not None else 1
            try:
                raw = self._storage_bytes(key, numel * itemsize)
            except Exception as e:   # (the archive's errors, which say which entry)
                raise _External(e) from e
            self.storages[key] = _Storage(raw, kind.dtype, key, location)
        return self.storages[key]


def _stop(u):   # handled in the loop
    pass


def _push(value):
    return lambda u: u._stack.append(value)


def _mark(u):
    u.metastack.append(u._stack)
    u._stack = []


def _pop_mark(u) -> list:
    items = u._stack
    u._stack = u.metastack.pop()
    return items


def _global(u):
    module, name = u.readline(), u.readline()
    u._stack.append(resolve(module, name))


def _stack_global(u):
    name, module = u._stack.pop(), u._stack.pop()
    _need(type(name) is str and type(module) is str, "STACK_GLOBAL takes two strings")
    u._stack.append(resolve(module, name))


def _reduce(u):
    args = u._stack.pop()
    fn = u._stack[-1]
    _need(type(args) is tuple, "REDUCE's arguments must be a tuple")
    if not isinstance(fn, _Call):
        _fail(f"Trying to call reduce for unrecognized function {_describe(fn)}")
    u._stack[-1] = fn.fn(u, args)


def _describe(x) -> str:
    return x.name if isinstance(x, (_Type, _StorageType)) else repr(x) if isinstance(x, _dtype.dtype) \
        else f"an object of type {type(x).__name__}"


def _newobj(u):
    args = u._stack.pop()
    cls = u._stack.pop()
    name = cls.name if isinstance(cls, (_Type, _Call)) else None
    if name not in _NEW or type(args) is not tuple:
        _fail(f"Can only create new object for nn.Parameter, OrderedDict or Counter, but got {_describe(cls)}")
    u._stack.append(_NEW[name](*args))


def _build(u):
    state = u._stack.pop()
    inst = u._stack[-1]
    if type(inst) in (OrderedDict, Counter) and type(state) is dict and all(type(k) is str for k in state):
        inst.__dict__.update(state)
        return
    _fail(f"Can only build OrderedDict (with a dict of attributes), but got {type(inst).__name__}")


def _container(u, kinds, opname):
    target = u._stack[-1]
    if type(target) not in kinds:
        _fail(f"Can only {opname} for {'/'.join(k.__name__ for k in kinds)}, but got {type(target).__name__}")
    return target


def _append(u):
    item = u._stack.pop()
    _container(u, (list,), "APPEND").append(item)


def _appends(u):
    items = _pop_mark(u)
    _container(u, (list,), "APPENDS").extend(items)


def _setitem(u):
    value, key = u._stack.pop(), u._stack.pop()
    _container(u, (dict, OrderedDict, Counter), "SETITEM")[key] = value


def _setitems(u):
    items = _pop_mark(u)
    _need(len(items) % 2 == 0, "SETITEMS with an odd number of items")
    target = _container(u, (dict, OrderedDict, Counter), "SETITEMS")
    for i in range(0, len(items), 2):
        target[items[i]] = items[i + 1]


def _additems(u):
    items = _pop_mark(u)
    _container(u, (set,), "ADDITEMS").update(items)


def _frozenset(u):
    items = _pop_mark(u)   # (first: it switches u._stack back to the outer stack)
    u._stack.append(frozenset(items))


def _tuple_mark(u):
    items = _pop_mark(u)
    u._stack.append(u._tuple(items))


def _tuple_n(n):
    def op(u):
        _need(len(u._stack) >= n, f"TUPLE{n} with {len(u._stack)} objects on the stack")
        items = u._stack[len(u._stack) - n:]
        del u._stack[len(u._stack) - n:]
        u._stack.append(u._tuple(items))
    return op


def _int_op(fmt, n):
    return lambda u: u._stack.append(struct.unpack(fmt, u.read(n))[0])


def _long(nfmt, n):
    def op(u):
        size = struct.unpack(nfmt, u.read(n))[0]
        u._stack.append(int.from_bytes(u.read(size), "little", signed=True))
    return op


def _text(nfmt, n):
    def op(u):
        size = struct.unpack(nfmt, u.read(n))[0]
        u._stack.append(u.read(size).decode("utf-8", "surrogatepass"))
    return op


def _binary(nfmt, n, kind=bytes):
    def op(u):
        size = struct.unpack(nfmt, u.read(n))[0]
        u._stack.append(kind(u.read(size)))
    return op


def _put(fmt, n):
    def op(u):
        u.memo[struct.unpack(fmt, u.read(n))[0]] = u._stack[-1]
    return op


def _memoize(u):
    u.memo[len(u.memo)] = u._stack[-1]


def _get(fmt, n):
    def op(u):
        i = struct.unpack(fmt, u.read(n))[0]
        _need(i in u.memo, f"data.pkl refers to memo entry {i}, which it never stored")
        u._stack.append(u.memo[i])
    return op


def _binpersid(u):
    u._stack.append(u.persistent(u._stack.pop()))


def _proto(u):
    version = u.read(1)[0]
    _need(2 <= version <= 5, f"unsupported pickle protocol {version}")


def _frame(u):
    u.read(8)   # a length prefix only


def _pop(u):
    if u._stack:
        u._stack.pop()
    else:
        _pop_mark(u)


def _empty(factory):
    return lambda u: u._stack.append(factory())


_OPS = {
    b"\x80": _proto, b"\x95": _frame, b".": _stop,
    b"c": _global, b"\x93": _stack_global, b"R": _reduce, b"\x81": _newobj, b"b": _build, b"Q": _binpersid,
    b"(": _mark, b"0": _pop, b"1": _pop_mark, b"2": lambda u: u._stack.append(u._stack[-1]),
    b"N": _push(None), b"\x88": _push(True), b"\x89": _push(False),
    b")": _push(()), b"]": _empty(list), b"}": _empty(dict), b"\x8f": _empty(set),
    b"t": _tuple_mark, b"\x85": _tuple_n(1), b"\x86": _tuple_n(2), b"\x87": _tuple_n(3),
    b"a": _append, b"e": _appends, b"s": _setitem, b"u": _setitems, b"\x90": _additems, b"\x91": _frozenset,
    b"J": _int_op("<i", 4), b"K": _int_op("<B", 1), b"M": _int_op("<H", 2), b"G": _int_op(">d", 8),
    b"\x8a": _long("<B", 1), b"\x8b": _long("<i", 4),
    b"X": _text("<I", 4), b"\x8c": _text("<B", 1), b"\x8d": _text("<Q", 8),
    b"U": lambda u: u._stack.append(u.read(u.read(1)[0]).decode("utf-8")),   # SHORT_BINSTRING, read as torch does
    b"C": _binary("<B", 1), b"B": _binary("<I", 4), b"\x8e": _binary("<Q", 8), b"\x96": _binary("<Q", 8, bytearray),
    b"q": _put("<B", 1), b"r": _put("<I", 4), b"\x94": _memoize, b"h": _get("<B", 1), b"j": _get("<I", 4),
}


def loads(data: bytes, storage, place, byteorder: str = "little"):
    """Unpickle ``data.pkl``'s bytes (see :class:`Unpickler`)."""
    return Unpickler(data, storage, place, byteorder).load()


# ------------------------------------------------------------------------------------ writing
_TORCH_DTYPE = re.compile(r"torch\.(\w+)")


class Pickler:
    """Pickle ``obj`` (protocol 2) as ``torch.save`` does. Each tensor's values become a storage:
    ``storages`` collects ``(key, contiguous numpy array)``."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.memo: dict = {}       # id(obj) -> (memo index, obj): obj held so that its id stays unique
        self.globals: dict = {}    # "module\nname" -> memo index
        self.storages: list = []
        self.open_tuples: set = set()

    def dumps(self, obj) -> bytes:
        self.out += b"\x80\x02"
        self.save(obj)
        self.out += b"."
        return bytes(self.out)

    # -- primitives
    def put(self, obj) -> None:
        i = len(self.memo)
        self.memo[id(obj)] = (i, obj)
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def get(self, i: int) -> None:
        self.out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def glob(self, module: str, name: str) -> None:
        key = f"{module}\n{name}\n"
        if key in self.globals:
            self.get(self.globals[key])
            return
        self.out += b"c" + key.encode()
        marker = object()
        self.put(marker)
        self.globals[key] = self.memo[id(marker)][0]

    def int_(self, x: int) -> None:
        if 0 <= x < 256:
            self.out += b"K" + bytes([x])
        elif 0 <= x < 65536:
            self.out += b"M" + struct.pack("<H", x)
        elif -2 ** 31 <= x < 2 ** 31:
            self.out += b"J" + struct.pack("<i", x)
        else:
            data = x.to_bytes((x.bit_length() + 8) // 8, "little", signed=True)
            self.out += (b"\x8a" + bytes([len(data)]) if len(data) < 256 else b"\x8b" + struct.pack("<i", len(data)))
            self.out += data

    def str_(self, s: str) -> None:
        data = s.encode("utf-8", "surrogatepass")
        self.out += b"X" + struct.pack("<I", len(data)) + data

    def call(self, module: str, name: str, *args) -> None:
        """``GLOBAL module.name`` applied (``REDUCE``) to ``args``, each saved in turn."""
        self.glob(module, name)
        self.out += b"("
        for a in args:
            self.save(a)
        self.out += b"tR"

    # -- objects
    def save(self, obj) -> None:
        t = type(obj)
        if obj is None:
            self.out += b"N"
        elif t is bool or isinstance(obj, np.bool_):
            self.out += b"\x88" if obj else b"\x89"
        elif isinstance(obj, int):
            self.int_(int(obj))
        elif isinstance(obj, float):
            self.out += b"G" + struct.pack(">d", float(obj))
        elif isinstance(obj, str):
            self.str_(str(obj))
        elif id(obj) in self.memo:
            self.get(self.memo[id(obj)][0])
        elif isinstance(obj, (Tensor, np.ndarray)) or _is_torch(obj, "Tensor", "Parameter"):
            self.tensor(obj)
        elif isinstance(obj, _dtype.dtype) or _is_torch(obj, "dtype"):
            self.glob("torch", _dtype_of(obj).name)
        elif isinstance(obj, Device) or _is_torch(obj, "device"):
            self.call("torch", "device", obj.type, *(() if obj.index is None else (obj.index,)))
        elif isinstance(obj, Size) or _is_torch(obj, "Size"):
            self.call("torch", "Size", tuple(int(s) for s in obj))
        elif isinstance(obj, (bytes, bytearray)):
            if isinstance(obj, bytearray):
                self.call("builtins", "bytearray", bytes(obj))
            else:
                self.call("_codecs", "encode", obj.decode("latin-1"), "latin1")
        elif isinstance(obj, complex):
            self.call("builtins", "complex", obj.real, obj.imag)
        elif isinstance(obj, np.generic):
            self.save(obj.item())
        elif isinstance(obj, Counter):
            self.call("collections", "Counter", dict(obj))
            self.put(obj)
        elif isinstance(obj, dict):
            self.dict_(obj)
        elif isinstance(obj, (set, frozenset)):
            self.call("builtins", "set", list(obj))
            self.put(obj)
        elif isinstance(obj, list):
            self.out += b"]"
            self.put(obj)
            self.batched(obj, b"a", b"e")
        elif isinstance(obj, tuple):
            self.tuple_(obj)
        else:
            raise TypeError(f"dynajax.save: cannot save an object of type {t.__name__}; only tensors, numpy arrays, "
                            "numbers, strings, bytes, None, dtypes, devices, torch.Size and dicts/lists/tuples/sets "
                            "of them are supported, the objects torch.load(weights_only=True) reads back (save a "
                            "module's or optimizer's state_dict(), not the object)")

    def batched(self, items, one: bytes, many: bytes) -> None:
        items = list(items)
        for i in range(0, len(items), 1000):
            chunk = items[i:i + 1000]
            if len(chunk) == 1 and one == b"a":
                self.save(chunk[0])
                self.out += one
                continue
            self.out += b"("
            for x in chunk:
                if many == b"u":
                    self.save(x[0])
                    self.save(x[1])
                else:
                    self.save(x)
            self.out += many

    def dict_(self, obj: dict) -> None:
        if isinstance(obj, OrderedDict):
            self.glob("collections", "OrderedDict")
            self.out += b")R"
        else:
            self.out += b"}"
        self.put(obj)
        self.batched(obj.items(), b"s", b"u")
        attrs = getattr(obj, "__dict__", None) if isinstance(obj, OrderedDict) else None
        if attrs:   # a state dict's _metadata
            self.save(dict(attrs))
            self.out += b"b"

    def tuple_(self, obj: tuple) -> None:
        if not obj:
            self.out += b")"
            return
        if id(obj) in self.open_tuples:
            raise ValueError("dynajax.save: cannot save a tuple that contains itself")
        self.open_tuples.add(id(obj))
        if len(obj) > 3:
            self.out += b"("
        for x in obj:
            self.save(x)
        self.open_tuples.discard(id(obj))
        self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(obj), b"t")
        self.put(obj)

    def tensor(self, obj) -> None:
        if isinstance(obj, np.ndarray):
            if obj.dtype.kind not in "biufc":
                raise TypeError(f"dynajax.save: cannot save a numpy array of dtype {obj.dtype}")
            array, location, requires_grad = obj, "cpu", False
        else:
            array = np.asarray(_value_of(obj))
            location, requires_grad = str(obj.device), bool(obj.requires_grad)
        try:
            dt = _dtype.from_np(array.dtype)
        except TypeError:
            raise TypeError(f"dynajax.save: cannot save an array of dtype {array.dtype}") from None
        array = np.asarray(array, order="C")
        key = str(len(self.storages))
        self.storages.append((key, array))
        is_param = isinstance(obj, Parameter) or _is_torch(obj, "Parameter")
        if is_param:
            self.glob("torch._utils", "_rebuild_parameter")
            self.out += b"("
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("
        self.str_("storage")
        self.glob("torch", f"{dt.legacy_name}Storage")
        self.str_(key)
        self.str_(location)
        self.int_(array.size)
        self.out += b"tQ"
        self.int_(0)
        self.tuple_items(array.shape)
        self.tuple_items(_contiguous_strides(array.shape))
        self.out += b"\x88" if requires_grad and not is_param else b"\x89"
        self.call("collections", "OrderedDict")
        self.out += b"tR"
        if is_param:
            self.out += b"\x88" if requires_grad else b"\x89"
            self.call("collections", "OrderedDict")
            self.out += b"tR"
        self.put(obj)

    def tuple_items(self, ints) -> None:
        self.out += b"("
        for s in ints:
            self.int_(int(s))
        self.out += b"t"


def _contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


def _is_torch(obj, *names) -> bool:
    """Whether ``obj`` is a torch object of one of the type ``names`` (torch itself is never imported)."""
    t = type(obj)
    return t.__module__.split(".")[0] == "torch" and any(
        getattr(c, "__name__", None) in names and getattr(c, "__module__", "").startswith("torch")
        for c in t.__mro__)


def _dtype_of(obj):
    if isinstance(obj, _dtype.dtype):
        return obj
    m = _TORCH_DTYPE.fullmatch(str(obj))
    d = _dtype._BY_NAME.get(m.group(1)) if m else None
    if d is None:
        raise TypeError(f"dynajax.save: cannot save {obj}, a dtype dynajax does not have")
    return d
