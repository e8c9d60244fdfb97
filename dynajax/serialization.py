"""``save`` / ``load``: nested dicts, lists and tuples of tensors, numpy arrays and plain values,
stored as a zip of ``.npy`` arrays plus a JSON description of the structure. No pickle:
loading never executes code from the file."""
from __future__ import annotations

import io
import json
import os
import zipfile
from collections import OrderedDict

import numpy as np

from . import _dtype
from ._tensor import Size, Tensor, _make

__all__ = ["save", "load"]

_FORMAT = "dynajax.save/1"
_TORCH_HINT = ("PyTorch's pickles are not loaded, as unpickling can run code; convert one once with PyTorch "
               "installed: dynajax.save(torch.load(path, weights_only=True), new_path) (dynajax.save takes "
               "torch tensors)")


def _encode(obj, arrays: list, memo: dict):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    is_torch = not isinstance(obj, Tensor) and hasattr(obj, "detach") and hasattr(obj, "numpy")
    if isinstance(obj, Tensor) or is_torch:
        if id(obj) in memo:
            return {"__ref__": memo[id(obj)][0]}
        from .nn.parameter import Parameter, _value_of
        a = np.asarray(_value_of(obj))
        name = _dtype.from_np(a.dtype).name
        if name == "bfloat16":
            a = a.view(np.uint16)
        arrays.append(a)
        memo[id(obj)] = (len(arrays) - 1, obj)  # holding obj keeps its id unique while saving
        return {"__tensor__": len(arrays) - 1, "dtype": name, "requires_grad": bool(obj.requires_grad),
                "parameter": isinstance(obj, Parameter) or type(obj).__name__ == "Parameter"}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biufc":
            raise TypeError(f"dynajax.save: cannot save a numpy array of dtype {obj.dtype}")
        arrays.append(obj)
        return {"__ndarray__": len(arrays) - 1}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays, memo)
    if isinstance(obj, _dtype.dtype):
        return {"__dtype__": obj.name}
    if type(obj).__name__ == "device" and hasattr(obj, "type"):
        return {"__device__": str(obj)}
    if isinstance(obj, dict):
        kind = "__odict__" if isinstance(obj, OrderedDict) else "__dict__"
        return {kind: [[_encode(k, arrays, memo), _encode(v, arrays, memo)] for k, v in obj.items()]}
    if isinstance(obj, Size):
        return {"__size__": list(obj)}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays, memo) for v in obj]}
    if isinstance(obj, list):
        return {"__list__": [_encode(v, arrays, memo) for v in obj]}
    raise TypeError(f"dynajax.save: cannot save an object of type {type(obj).__name__}; only tensors, numpy "
                    "arrays, numbers, strings, None, dtypes, devices and dicts/lists/tuples of them are supported "
                    "(save a module's or optimizer's state_dict(), not the object)")


def _decode(x, arrays, cache: dict, device):
    if not isinstance(x, dict):
        return x
    if "__tensor__" in x:
        i = x["__tensor__"]
        if i in cache:
            return cache[i]
        a = arrays(i)
        if x["dtype"] == "bfloat16":
            a = a.view(_dtype.bfloat16.np)
        import jax.numpy as jnp
        t = _make(jnp.asarray(a))
        if device is not None:
            t = t.to(device)
        if x.get("parameter"):
            from .nn.parameter import Parameter
            t = Parameter(t, requires_grad=x["requires_grad"])
        elif x["requires_grad"]:
            t.requires_grad_(True)
        cache[i] = t
        return t
    if "__ref__" in x:
        return cache[x["__ref__"]]
    if "__ndarray__" in x:
        return arrays(x["__ndarray__"])
    if "__dtype__" in x:
        return _dtype._BY_NAME[x["__dtype__"]]
    if "__device__" in x:
        from ._device import device as Device
        return Device(x["__device__"])
    if "__odict__" in x or "__dict__" in x:
        items = x.get("__odict__", x.get("__dict__"))
        pairs = [(_hashable(_decode(k, arrays, cache, device)), _decode(v, arrays, cache, device)) for k, v in items]
        return OrderedDict(pairs) if "__odict__" in x else dict(pairs)
    if "__size__" in x:
        return Size(x["__size__"])
    if "__tuple__" in x:
        return tuple(_decode(v, arrays, cache, device) for v in x["__tuple__"])
    if "__list__" in x:
        return [_decode(v, arrays, cache, device) for v in x["__list__"]]
    raise ValueError(f"dynajax.load: unknown entry {sorted(x)} in the file's structure")


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True) -> None:
    """Save ``obj`` (e.g. a ``state_dict`` or a checkpoint dict) to path or file object ``f``.

    >>> dynajax.save({"model": model.state_dict(), "epoch": 3}, "ckpt.pt")
    """
    arrays: list = []
    structure = _encode(obj, arrays, {})
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            _write(fh, structure, arrays)
    else:
        _write(f, structure, arrays)


def _write(fh, structure, arrays) -> None:
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("format", _FORMAT)
        z.writestr("structure.json", json.dumps(structure))
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            z.writestr(f"arrays/{i}.npy", buf.getvalue())


def load(f, map_location=None, pickle_module=None, *, weights_only: bool = True, mmap=None, **kwargs):
    """Load an object saved by :func:`save`.

    ``map_location``: a device to place tensors on (a string, a dynajax device, or a torch device, as a
    ported ``torch.load(f, map_location=torch.device("cpu"))`` passes). The file does not record where
    each tensor was, so PyTorch's dict and function forms, which map saved locations, have nothing to
    map: with them, as with None, tensors go to the default device."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _read(fh, map_location)
    return _read(f, map_location)


def _read(fh, map_location):
    try:
        z = zipfile.ZipFile(fh, "r")
    except zipfile.BadZipFile:
        raise RuntimeError("dynajax.load: the file is not a dynajax checkpoint (expected a zip written by "
                           f"dynajax.save). {_TORCH_HINT}") from None
    with z:
        names = z.namelist()
        if names[:1] != ["format"] or z.read("format").decode() != _FORMAT:
            if any(n.endswith("/data.pkl") for n in names):   # torch.save's zip: a pickle plus storages
                raise RuntimeError("dynajax.load: the file is not a dynajax checkpoint but a PyTorch one (written by "
                                   f"torch.save). {_TORCH_HINT}")
            raise RuntimeError("dynajax.load: the file is not a dynajax checkpoint (missing format marker)")
        structure = json.loads(z.read("structure.json"))

        def arrays(i):
            return np.load(io.BytesIO(z.read(f"arrays/{i}.npy")), allow_pickle=False)
        device = None
        if isinstance(map_location, str) or type(map_location).__name__ == "device":
            from ._device import device as Device
            device = Device(str(map_location))   # (a torch.device too: Tensor.to would read it as a dtype)
        return _decode(structure, arrays, {}, device)
