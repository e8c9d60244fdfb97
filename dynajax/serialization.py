"""``save`` / ``load`` in PyTorch's checkpoint format, and ``save_safetensors`` / ``load_safetensors``.

``save`` writes ``torch.save``'s zip layout (``archive/data.pkl``, ``archive/data/<key>`` storages,
``archive/byteorder``, ``archive/version``), which ``torch.load(path, weights_only=True)`` reads.
``load`` reads it without torch and without running code from the file: ``data.pkl`` is unpickled by
:mod:`dynajax._torch_pickle`, which accepts only what ``torch.load(weights_only=True)`` accepts and
builds dynajax tensors. ``load`` also reads safetensors files and the zip of ``.npy`` arrays plus JSON
that ``dynajax.save`` wrote before (``format`` marker ``dynajax.save/1``).

Broken files raise what they are: ``RuntimeError`` for a truncated or corrupted archive (naming the
entry whose CRC fails), :class:`pickle.UnpicklingError` for a pickle refused or malformed,
``EOFError`` for an empty file, as ``torch.load`` raises these types.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import sys
import uuid
import zipfile
import zlib
from collections import OrderedDict

import jax.numpy as jnp
import numpy as np

from . import _dtype
from ._device import device as Device
from ._device import put
from ._tensor import Size, Tensor, _make
from ._torch_pickle import Pickler, _is_torch, loads
from .nn.parameter import Parameter, _value_of

try:   # the optional extra dynajax[safetensors]
    import safetensors as _st
    import safetensors.numpy as _st_numpy
except ImportError:
    _st = _st_numpy = None

__all__ = ["save", "load", "save_safetensors", "load_safetensors"]

_FORMAT = "dynajax.save/1"   # the earlier dynajax format, still read
_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"   # torch.save before 1.6 (a pickled magic number)
_ALIGN = 64   # storages start on 64-byte boundaries, as torch.save writes them (for mmap)
_ST_DTYPES = {"F64": _dtype.float64, "F32": _dtype.float32, "F16": _dtype.float16, "BF16": _dtype.bfloat16,
              "I64": _dtype.int64, "I32": _dtype.int32, "I16": _dtype.int16, "I8": _dtype.int8,
              "U8": _dtype.uint8, "BOOL": _dtype.bool_, "C64": _dtype.complex64}


# ------------------------------------------------------------------------------------------ save
def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False) -> None:
    """Save ``obj`` (a ``state_dict``, an optimizer's, a checkpoint dict of them) to path or file object
    ``f`` in PyTorch's format: ``torch.load(f, weights_only=True)`` reads it back.

    Tensors, parameters, numpy arrays (saved as tensors), numbers, strings, bytes, None, dtypes, devices,
    ``Size`` and dicts, ``OrderedDict``s, lists, tuples and sets of them are saved; the pickle is always
    protocol 2 (``pickle_module``/``pickle_protocol`` are accepted for PyTorch's signature).

    >>> dynajax.save({"model": model.state_dict(), "epoch": 3}, "ckpt.pt")
    """
    if not _use_new_zipfile_serialization:
        raise ValueError("dynajax.save writes only PyTorch's zip format (_use_new_zipfile_serialization=True); "
                         "the format before PyTorch 1.6 is not written")
    pickler = Pickler()
    data = pickler.dumps(obj)   # (before opening f: an unsupported object leaves no half-written file)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            _write_archive(fh, data, pickler.storages, not _disable_byteorder_record)
    else:
        _write_archive(f, data, pickler.storages, not _disable_byteorder_record)


def _write_archive(fh, data: bytes, storages: list, byteorder: bool) -> None:
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as z:
        _add(z, "archive/data.pkl", data)
        if byteorder:
            _add(z, "archive/byteorder", sys.byteorder.encode())
        for key, array in storages:
            _add(z, f"archive/data/{key}", array)
        _add(z, "archive/version", b"3\n")
        _add(z, "archive/.data/serialization_id", str(uuid.uuid4().int).zfill(40)[:40].encode())


def _add(z: zipfile.ZipFile, name: str, payload) -> None:
    """Store ``payload`` (bytes or a contiguous array) as entry ``name``, its data padded (in the local
    header's extra field) to start on a 64-byte boundary."""
    view = memoryview(payload.reshape(-1).view(np.uint8)) if isinstance(payload, np.ndarray) else payload
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = len(view)
    zip64 = info.file_size * 1.05 > zipfile.ZIP64_LIMIT   # (zipfile's own rule; it then adds 20 header bytes)
    header = 30 + len(name.encode("utf-8")) + (20 if zip64 else 0)
    pad = -(z.fp.tell() + header + 4) % _ALIGN
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad   # ("FB": the field torch.save pads with)
    with z.open(info, "w", force_zip64=zip64) as w:
        w.write(view)


# ------------------------------------------------------------------------------------------ load
def load(f, map_location=None, pickle_module=None, *, weights_only: bool = True, mmap=None, **kwargs):
    """Load a checkpoint written by ``torch.save`` or :func:`save` (or a safetensors file), from a path or
    a file object, without torch and without running code from the file (``weights_only`` is always in
    effect: a pickle naming anything beyond tensors, containers, numbers and strings is refused).

    ``map_location`` as PyTorch: None puts each tensor on the device it was saved from; a device
    (``"cpu"``, ``dynajax.device``, ``torch.device``) puts all there; a dict maps saved locations
    (``{"cuda:0": "cpu"}``); a function ``(storage, location)`` returns ``storage`` (CPU),
    ``storage.cuda(i)``, ``storage.to(device)`` or None (the saved device)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _load(fh, map_location, repr(os.fspath(f)))
    return _load(f, map_location, "the file")


def _load(fh, map_location, src: str):
    if not (hasattr(fh, "seekable") and fh.seekable()):
        fh = io.BytesIO(fh.read())
    start = fh.tell()
    size = fh.seek(0, io.SEEK_END) - start
    fh.seek(start)
    head = fh.read(16)
    fh.seek(start)
    if size == 0:
        raise EOFError(f"dynajax.load: {src} is empty (0 bytes), not a checkpoint")
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return _load_zip(fh, map_location, src, size)
    if head[:len(_LEGACY_MAGIC)] == _LEGACY_MAGIC:
        raise RuntimeError(f"dynajax.load: {src} is in PyTorch's format from before 1.6 (a bare pickle; "
                           "torch.save(..., _use_new_zipfile_serialization=False)), which dynajax does not read. "
                           "Re-save it with PyTorch: torch.save(torch.load(path, weights_only=True), new_path)")
    if _looks_like_safetensors(head):
        return _safetensors_from_bytes(fh.read(), map_location, src, "dynajax.load")
    raise pickle.UnpicklingError(
        f"dynajax.load: {src} is not a checkpoint: it is neither a zip archive (torch.save, dynajax.save) "
        f"nor a safetensors file (its first bytes are {head[:8]!r})")


def _looks_like_safetensors(head: bytes) -> bool:
    """A safetensors file begins with its JSON header's length (8 bytes, little-endian) and the header."""
    return len(head) >= 9 and head[8:9] == b"{" and 2 <= struct.unpack("<Q", head[:8])[0] < 1 << 30


def _load_zip(fh, map_location, src: str, size: int):
    try:
        z = zipfile.ZipFile(fh, "r")
    except zipfile.BadZipFile as e:
        if "not a zip file" in str(e):
            raise RuntimeError(f"dynajax.load: {src} is truncated: it begins as a zip archive (torch.save's "
                               f"format) but its end, the archive's directory, is missing ({size} bytes: was the "
                               "write or the download cut short?)") from None
        raise RuntimeError(f"dynajax.load: {src} is corrupted: its zip directory is damaged ({e})") from None
    with z:
        names = set(z.namelist())
        if "format" in names:
            return _load_dynajax_zip(z, map_location, src)
        pkls = sorted(n for n in names if n.endswith("/data.pkl") and n.count("/") == 1)
        if not pkls:
            shown = sorted(names)[:5]
            raise RuntimeError(f"dynajax.load: {src} is a zip archive but not a checkpoint: it has no data.pkl "
                               f"(its entries include {shown})")
        prefix = pkls[0][:-len("data.pkl")]
        if prefix + "constants.pkl" in names:
            raise RuntimeError(f"dynajax.load: {src} is a TorchScript archive (torch.jit.save): dynajax.load "
                               "reads weights, not TorchScript programs; save the module's state_dict() instead")
        byteorder = "little"
        if prefix + "byteorder" in names:
            byteorder = _entry(z, prefix + "byteorder", src).decode("ascii", "replace")
            if byteorder not in ("little", "big"):
                raise ValueError(f"Unknown endianness type: {byteorder}")

        def storage(key: str, nbytes: int):
            name = f"{prefix}data/{key}"
            if name not in names:
                raise RuntimeError(f"dynajax.load: {src} is corrupted: data.pkl names storage {name!r}, which "
                                   "the archive lacks")
            raw = _entry(z, name, src)
            if len(raw) < nbytes:
                raise RuntimeError(f"dynajax.load: {src} is corrupted: entry {name!r} holds {len(raw)} bytes "
                                   f"but data.pkl describes a storage of {nbytes}")
            return raw

        data = _entry(z, prefix + "data.pkl", src)
        try:
            return loads(data, storage, _placer(map_location), byteorder)
        except pickle.UnpicklingError as e:
            raise pickle.UnpicklingError(f"dynajax.load could not load {src} (weights only): {e}") from None


def _entry(z: zipfile.ZipFile, name: str, src: str) -> bytes:
    """The bytes of entry ``name``, its CRC checked (torch.load does not check it)."""
    try:
        return z.read(name)
    except zipfile.BadZipFile as e:
        raise RuntimeError(f"dynajax.load: {src} is corrupted: entry {name!r} fails its check ({e})") from None
    except (EOFError, OSError, zlib.error, NotImplementedError, ValueError) as e:
        raise RuntimeError(f"dynajax.load: {src} is corrupted or truncated: entry {name!r} cannot be read "
                           f"({type(e).__name__}: {e})") from None


class _StorageStub:
    """What a ``map_location`` function receives as the storage: ``storage`` (left on the CPU),
    ``storage.cuda(i)``, ``.cpu()`` or ``.to(device)`` name the device to load onto."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = Device(device)

    def cpu(self):
        return _StorageStub("cpu")

    def cuda(self, device=None, non_blocking: bool = False):
        index = device.index if isinstance(device, Device) else device
        return _StorageStub("cuda" if index is None else f"cuda:{int(index)}")

    def to(self, device, *args, **kwargs):
        return _StorageStub(str(device))


def _placer(map_location):
    """``place(array, location) -> Tensor`` for the unpickler: the array put on the device that
    ``map_location`` maps the saved ``location`` to (each location resolved once)."""
    devices: dict = {}

    def resolve(location: str) -> Device:
        if map_location is None:
            target = location
        elif isinstance(map_location, (str, Device)) or _is_torch(map_location, "device"):
            target = str(map_location)
        elif isinstance(map_location, dict):
            target = str(map_location.get(location, location))
        elif callable(map_location):
            got = map_location(_StorageStub(), location)
            if got is not None and not isinstance(got, _StorageStub):
                raise TypeError("dynajax.load: a map_location function must return the storage it is given "
                                f"(or storage.cuda(i), .cpu(), .to(device)) or None, not {type(got).__name__}")
            target = location if got is None else str(got.device)
        else:
            raise TypeError(f"dynajax.load: map_location must be None, a device, a dict or a function, not "
                            f"{type(map_location).__name__}")
        dev = Device(target)
        try:
            dev.jax_device()
        except RuntimeError:
            if map_location is None and dev.type == "cuda":
                raise RuntimeError("Attempting to deserialize object on a CUDA device but "
                                   "dynajax.cuda.is_available() is False. If you are running on a CPU-only "
                                   "machine, please use dynajax.load with map_location='cpu' to map your "
                                   "storages to the CPU.") from None
            raise
        return dev

    def place(array: np.ndarray, location: str) -> Tensor:
        if location not in devices:
            devices[location] = resolve(location)
        return _make(put(array, devices[location]))
    return place


# ----------------------------------------------------------------------------------- safetensors
def _safetensors_module(who: str):
    if _st is None:
        raise ImportError(f"{who} needs the safetensors package, which is not installed: "
                          "pip install 'dynajax[safetensors]' (or pip install safetensors)")
    return _st


def save_safetensors(tensors: dict, path, metadata: dict | None = None) -> None:
    """Save a flat ``{name: tensor}`` dict as a safetensors file (dtypes kept, bfloat16 included), as
    ``safetensors.torch.save_file`` does; ``metadata`` is a ``{str: str}`` dict stored in the header."""
    _safetensors_module("dynajax.save_safetensors")
    if not isinstance(tensors, dict):
        raise TypeError(f"dynajax.save_safetensors: tensors must be a dict of name -> tensor, not "
                        f"{type(tensors).__name__}")
    arrays, owners = {}, {}
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise TypeError(f"dynajax.save_safetensors: tensor names must be strings, not {type(k).__name__}")
        if not (isinstance(v, Tensor) or _is_torch(v, "Tensor")):
            raise ValueError(f"Key `{k}` is invalid, expected dynajax.Tensor but received {type(v)}")
        root = v._base if isinstance(v, Tensor) and v._base is not None else v
        owners.setdefault(id(root), []).append(k)
        a = np.asarray(_value_of(v))
        if a.dtype == np.complex128:
            raise TypeError(f"dynajax.save_safetensors: {k!r} is complex128, which safetensors cannot store")
        arrays[k] = np.asarray(a, order="C")
    shared = [set(ks) for ks in owners.values() if len(ks) > 1]
    if shared:
        raise RuntimeError(f"dynajax.save_safetensors: some tensors share memory (the same tensor, or views of one "
                           f"base): {shared}. Save each once, or save .clone()s")
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("dynajax.save_safetensors: metadata must be a dict of str -> str")
    _st_numpy.save_file(arrays, os.fspath(path), metadata=metadata)


def load_safetensors(path, map_location=None) -> dict:
    """The ``{name: tensor}`` dict of a safetensors file (in the order of ``safetensors.torch.load_file``:
    the file's), on ``map_location`` (a device; default the CPU)."""
    _safetensors_module("dynajax.load_safetensors")
    if isinstance(path, (str, os.PathLike)):
        with open(path, "rb") as fh:
            data = fh.read()
        src = repr(os.fspath(path))
    else:
        data, src = path.read(), "the file"
    return _safetensors_from_bytes(data, map_location, src, "dynajax.load_safetensors")


def _safetensors_from_bytes(data: bytes, map_location, src: str, who: str) -> dict:
    st = _safetensors_module(who)
    if isinstance(map_location, dict) or callable(map_location) and not isinstance(map_location, Device):
        kind = "dict" if isinstance(map_location, dict) else "callable"
        raise RuntimeError(f"Loading safetensors file with {kind} map_location is not supported. Use a device "
                           "string or dynajax.device instead.")
    dev = Device("cpu" if map_location is None else str(map_location))
    order = _safetensors_order(data, src, who)
    try:
        entries = st.deserialize(data)
    except Exception as e:   # (safetensors raises its own SafetensorError)
        raise RuntimeError(f"{who}: {src} is not a valid safetensors file: {e}") from None
    out = {}
    for name, info in sorted(entries, key=lambda e: (order.get(e[0], 0), e[0])):
        dt = _ST_DTYPES.get(info["dtype"])
        if dt is None:
            raise TypeError(f"{who}: tensor {name!r} in {src} has dtype {info['dtype']}, which dynajax does not have")
        stored = np.uint8 if dt is _dtype.bool_ else dt.np.newbyteorder("<")
        a = np.frombuffer(info["data"], stored).reshape(info["shape"])
        a = a != 0 if dt is _dtype.bool_ else a.astype(dt.np, copy=False)
        out[name] = _make(put(a, dev))
    return out


def _safetensors_order(data: bytes, src: str, who: str) -> dict:
    """``{name: position}`` in the order of the tensors' data (safetensors.torch.load_file's order), after
    saying "truncated" when the file ends before its header or before the data its header describes."""
    if len(data) < 8:
        raise RuntimeError(f"{who}: {src} is truncated: {len(data)} bytes, fewer than a safetensors header's 8")
    n = struct.unpack("<Q", data[:8])[0]
    if 8 + n > len(data):
        raise RuntimeError(f"{who}: {src} is truncated: its header says {n} bytes of JSON, but the file holds "
                           f"{len(data)} bytes in all")
    try:
        header = json.loads(data[8:8 + n])
        spans = {k: [int(x) for x in v["data_offsets"]] for k, v in header.items() if k != "__metadata__"}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return {}   # (a malformed header: safetensors itself says what is wrong)
    end = max((b for a, b in spans.values()), default=0)
    if 8 + n + end > len(data):
        raise RuntimeError(f"{who}: {src} is truncated: its header describes {8 + n + end} bytes, the file holds "
                           f"{len(data)}")
    return {k: i for i, k in enumerate(sorted(spans, key=lambda k: (spans[k][0], k)))}


# ------------------------------------------------------------------- dynajax's earlier format (read only)
def _load_dynajax_zip(z: zipfile.ZipFile, map_location, src: str):
    if z.read("format").decode(errors="replace") != _FORMAT:
        raise RuntimeError(f"dynajax.load: {src} has an unknown dynajax format marker")

    def arrays(i):
        return np.load(io.BytesIO(_entry(z, f"arrays/{int(i)}.npy", src)), allow_pickle=False)
    device = None
    if isinstance(map_location, (str, Device)) or _is_torch(map_location, "device"):
        device = Device(str(map_location))
    try:
        return _decode(json.loads(_entry(z, "structure.json", src)), arrays, {}, device)
    except (KeyError, IndexError, TypeError, ValueError, RecursionError) as e:
        raise RuntimeError(f"dynajax.load: {src} is corrupted: its structure.json is malformed "
                           f"({type(e).__name__}: {e})") from None


@_dtype.x64.wrap
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
        t = _make(jnp.asarray(a))
        if device is not None:
            t = t.to(device)
        if x.get("parameter"):
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


# ---------------------------------------------------------------- torch.serialization's allowlist of globals
# Accepted so that scripts declaring theirs for torch.load(weights_only=True) run unchanged; recorded, but
# what load rebuilds does not widen: tensors, containers, numbers and strings, as without them.
_SAFE_GLOBALS: list = []


def add_safe_globals(safe_globals: list) -> None:
    _SAFE_GLOBALS.extend(safe_globals)


def get_safe_globals() -> list:
    return list(_SAFE_GLOBALS)


def clear_safe_globals() -> None:
    _SAFE_GLOBALS.clear()


class safe_globals:
    """``with safe_globals([...]):`` adds to the allowlist for the block (see :func:`add_safe_globals`)."""

    def __init__(self, safe_globals: list) -> None:
        self.safe_globals = list(safe_globals)

    def __enter__(self) -> None:
        self._before = len(_SAFE_GLOBALS)
        _SAFE_GLOBALS.extend(self.safe_globals)

    def __exit__(self, *exc) -> None:
        del _SAFE_GLOBALS[self._before:]
