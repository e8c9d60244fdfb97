"""Device names as in PyTorch ("cpu", "cuda", "cuda:1", "tpu") mapped onto JAX devices."""
from __future__ import annotations

import collections
import os
import sys
import warnings

import jax
import jax.numpy as jnp

from ._dtype import _X64 as _X64_FLAG, x64 as _x64

_PLATFORM = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "tpu": "tpu", "mps": "METAL"}


class device:
    """A device handle: ``dynajax.device("cuda:0")``; compares equal to its string name."""

    __slots__ = ("type", "index")

    def __init__(self, type, index: int | None = None) -> None:
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int):
            type, index = default_accelerator(), type
        elif ":" in type:
            type, idx = type.split(":")
            index = int(idx)
        if type not in _PLATFORM:
            raise RuntimeError(f"Expected one of cpu, cuda, tpu, mps device type at start of device string: {type}")
        self.type, self.index = type, index

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and self.type == other.type and (
            self.index == other.index or self.index is None or other.index is None)

    def __hash__(self) -> int:
        return hash(self.type)

    def jax_device(self):
        """The jax.Device this names, raising PyTorch-style if absent."""
        try:
            devs = jax.devices(_PLATFORM[self.type])
        except RuntimeError:
            devs = []
        if not devs:
            raise RuntimeError(f"dynajax: no '{self.type}' device is available to JAX on this machine "
                               f"(available: {[d.platform for d in jax.devices()]}). Use device='cpu'.")
        i = self.index or 0
        if i >= len(devs):
            raise RuntimeError(f"dynajax: {self.type} device index {i} out of range ({len(devs)} available)")
        return devs[i]


def default_jax_device():
    """The jax.Device new arrays land on: ``jax.config.jax_default_device`` if set to a device, else this
    process's first device of that backend (``jax.devices()`` spans all hosts)."""
    d = jax.config.jax_default_device
    if d is None or isinstance(d, str):
        d = jax.local_devices(backend=d)[0]
    return d


_NAMES: dict = {}   # (device type, index, jax.Device) -> names's answer


def names(dev, jdev) -> bool:
    """Whether ``dev`` (a :class:`device` or its name) names the jax.Device ``jdev``. False for a name with no
    such device here (eager code then raises its error)."""
    d = dev if isinstance(dev, device) else device(dev)
    key = (d.type, d.index, jdev)
    hit = _NAMES.get(key)
    if hit is None:
        try:
            hit = d.jax_device() == jdev
        except RuntimeError:
            hit = False
        if len(_NAMES) > 64:
            _NAMES.clear()
        _NAMES[key] = hit
    return hit


class Numbers:
    """How a compiled step's executable takes its Python numbers: as device arrays made once per set of values,
    one array per kind of number -- its dtype and weak type, as jit makes them of each number -- not one
    argument per number. A jit call copies every Python number it is passed to the device (measured on an
    H200: 7 Python floats took a call 0.27 ms, as device arrays 0.07 ms), and each argument costs the call ~1 us
    on a CPU host; an Adam step passes 7 numbers. ``slots``: per number, (its kind's position, its position in
    that kind's array); ``kinds``: per kind, (dtype, weak, count). The executable reads each number back as
    the 0-d value jit would have made of it (``unpack``), so it computes what separate arguments did."""

    __slots__ = ("kinds", "slots")

    def __init__(self, kinds: tuple, slots: tuple) -> None:
        self.kinds, self.slots = kinds, slots

    def pack(self, numbers: list, dev) -> tuple:
        """The arrays this layout takes ``numbers`` as, on the jax.Device ``dev`` (None: numpy arrays, for
        jit to place), made once per set of values: a step's numbers seldom change."""
        if not self.kinds:
            return ()
        key = (dev, self, *numbers)
        if 0 in numbers:   # -0.0 == 0.0 (and hashes alike): zeros' signs tell the two apart
            key += tuple([repr(s) for s in numbers if s == 0])
        got = _PACKED.get(key)
        if got is None:
            got = self._put(numbers, dev)
            if len(_PACKED) >= 256:
                _PACKED.clear()
            _PACKED[key] = got
        return got

    @_x64.wrap
    def _put(self, numbers: list, dev) -> tuple:
        import numpy as np
        cols = [[] for _ in self.kinds]
        for s, (k, _) in zip(numbers, self.slots):
            cols[k].append(s)
        host = [np.asarray(c, dtype) for c, (dtype, _, _) in zip(cols, self.kinds)]
        return tuple(host) if dev is None else tuple(jax.device_put(host, dev))

    def unpack(self, packed) -> list:
        """Inside the executable's trace: the numbers as 0-d values, weak-typed where jit's are."""
        from jax._src.lax.lax import _convert_element_type
        out = []
        for k, i in self.slots:
            dtype, weak, _ = self.kinds[k]
            v = packed[k][i]
            out.append(_convert_element_type(v, dtype, weak_type=True) if weak else v)
        return out


_PACKED: dict = {}    # (jax.Device, Numbers, numbers..., repr of zeros) -> its arrays there (Numbers.pack)
_LAYOUTS: dict = {}   # the numbers' types -> their Numbers


@_x64.wrap
def number_layout(numbers: list) -> Numbers:
    """The :class:`Numbers` of a step passing ``numbers`` (one object per sequence of types)."""
    types = tuple(map(type, numbers))
    got = _LAYOUTS.get(types)
    if got is None:
        kinds, slots = {}, []
        for s in numbers:
            a = jax.numpy.asarray(s)   # (what jit makes of the number: its dtype, and weak type)
            kind = (a.dtype, bool(getattr(a, "weak_type", False)))
            k = kinds.setdefault(kind, [len(kinds), 0])
            slots.append((k[0], k[1]))
            k[1] += 1
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        got = _LAYOUTS[types] = Numbers(tuple((d, w, n) for (d, w), (_, n) in kinds.items()), tuple(slots))
    return got


def default_on_cpu() -> bool:
    """Whether new arrays land on a CPU device (JAX's default device). There an array made in numpy and
    copied in costs a memcpy, while an eager ``jnp`` op compiles an XLA kernel for every new shape
    (~30 ms for a fill, ~150 ms for a random draw), which made building a small model take ~1 s."""
    d = jax.config.jax_default_device
    if d is None or isinstance(d, str):
        return (d or jax.default_backend()) == "cpu"
    return d.platform == "cpu"


def cpu_loop_flag():
    """Inside a traced loop body: on XLA:CPU a True that XLA cannot fold away, else None. A step run as
    ``lax.cond(cpu_loop_flag(), step, skip)`` is the same step, executed faster there: measured on XLA:CPU
    (2 cores), a GRU layer's forward scan (batch 32, hidden 128, 50 steps) took 7.3 ms with the step in
    the loop body and 3.7 ms with the same step as the branch of a conditional (an LSTM language model's
    compiled training step, both its scans so run: 14.9 -> 12.9 ms waiting for each step, 13.6 -> 11.8 ms
    back to back, side by side in one process). The difference is in XLA:CPU's runtime and was found by
    measuring, presumably its executor running a loop body's dozen small kernels as a dataflow graph and a
    conditional's branch as a plain sequence. Off the CPU a conditional per step would cost a
    device-to-host read of its predicate, so the step runs as it is there."""
    if jax.default_backend() != "cpu":
        return None
    return jax.lax.optimization_barrier(jnp.ones((), bool))


def eager_compiler_options() -> dict | None:
    """XLA options for eager op kernels, which compile once per op, static parameters and input shapes.
    On a machine whose only backend is the CPU they use XLA:CPU's older elemental emitters: a small
    kernel then compiles in about half the time (a transpose 40 -> 22 ms) and runs as fast, which is
    what eager code with a new shape waits for (a new sequence length compiles ~30 kernels). Compiled
    steps keep the default, whose fusions run faster inside one large program."""
    if jax.default_backend() != "cpu":
        return None
    if not _EAGER_OPTIONS:   # an XLA that dropped the option rejects it: probe once
        opts = dict(EAGER_CPU_OPTIONS)
        try:
            jax.jit(lambda x: x + 1, compiler_options=opts).lower(jnp.float32(0)).compile()
        except Exception as exc:   # jax.errors.JaxRuntimeError: INVALID_ARGUMENT (jaxlib 0.11)
            if "compile option" not in str(exc):
                raise
            opts = None
        _EAGER_OPTIONS.append(opts)
    return _EAGER_OPTIONS[0]


# XLA options of a compiled step's executables: every float16/bfloat16 value rounded to its type after
# each op, as eager kernels (one op each) and PyTorch round it (XLA's default lets a fusion skip that)
STEP_COMPILER_OPTIONS = {"xla_allow_excess_precision": False}

EAGER_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}   # (jaxlib 0.11's XLA has no such option)
_EAGER_OPTIONS: list = []   # once probed: the options XLA:CPU accepted (None: it rejected them)


_EARLY: dict = {}   # what -> eager makes of it so far (host_made)


def host_made(what: tuple, n: int, limit: int, once: bool = False) -> bool:
    """Whether the eager make of ``what`` (an array of ``n`` elements; ``what`` names its kind, shape and
    dtype) is done in numpy and copied in instead of by a compiled kernel: only on the CPU backend
    (``default_on_cpu``), for at most ``limit`` elements (past that the copy costs more than a compile),
    and for the first two makes of ``what``. Building a model makes each parameter's shape once or twice,
    and a compile per shape made that slow; a shape made every step (a dropout mask, zeros) gets its
    kernel, which beats a host copy from a few thousand elements on. ``once``: the caller makes this
    array once in its life (an optimizer's state), so the host makes it whatever the count: a model's
    parameters share a few shapes, and Adam's two moments per parameter would otherwise compile a fill
    kernel per shape (~30 ms each, ~0.2 s in a first training step)."""
    if not 0 < n <= limit or not default_on_cpu():
        return False
    if once:
        return True
    if len(_EARLY) > 4096:
        _EARLY.clear()
    seen = _EARLY[what] = _EARLY.get(what, 0) + 1
    return seen <= 2


def default_accelerator() -> str:
    p = jax.default_backend()
    return {"gpu": "cuda"}.get(p, p)


def device_of(array) -> device:
    """The device holding ``array`` (a value a step being recorded computes, a Sym, answers ``devices()`` with
    the device that step runs on)."""
    try:
        d = next(iter(array.devices()))
    except Exception:
        return device("cpu")
    t = {"gpu": "cuda"}.get(d.platform, d.platform)
    return device(t if t in _PLATFORM else "cpu", d.id if t != "cpu" else None)


def _host_putter():
    """A function making a numpy array a JAX array on the default device, as ``jax.device_put(a)`` does
    (uncommitted, the same dtype), through the C++ transfer ``device_put`` itself ends in: its Python path
    costs ~30 us a call, the transfer ~10 us (an eager op on a new size pads and slices its arrays on the
    host, ``_kernel_cache``). Checked against ``device_put`` once; where JAX's internals differ, it is
    ``device_put``."""
    try:
        import numpy as np
        from jax._src import core
        from jax._src.interpreters.pxla import batched_device_put
        dev = jax.devices()[0]
        sharding = jax.sharding.SingleDeviceSharding(dev)
        shaped = core.ShapedArray

        def fast(a):
            return batched_device_put(shaped(a.shape, a.dtype), sharding, [a], [dev], False)
        probe = np.arange(6, dtype=np.float32).reshape(2, 3)[1:]
        got, want = fast(probe), jax.device_put(probe)
        if (type(got) is type(want) and got.shape == want.shape and got.dtype == want.dtype
                and got.committed == want.committed and got.sharding == want.sharding
                and (np.asarray(got) == probe).all()):
            return fast
    except Exception:
        pass
    return jax.device_put


_HOST_PUT: list = []
# dtypes that ``device_put`` keeps as they are whatever JAX's 64-bit flag (others it may narrow)
_AS_IS = frozenset({"float32", "int32", "bool", "uint8", "int8", "int16", "uint16", "uint32", "float16",
                    "bfloat16", "complex64"})


def host_put(a):
    """``jax.device_put(a)`` of a numpy array ``a`` (see :func:`_host_putter`), for the default device."""
    if not _HOST_PUT:
        _HOST_PUT.append(_host_putter() if jax.default_backend() == "cpu" and len(jax.devices()) == 1
                         else jax.device_put)
    if a.dtype.name in _AS_IS or _X64_FLAG.value:
        return _HOST_PUT[0](a)
    return jax.device_put(a)


@_x64.wrap
def put(array, dev):
    """Place ``array`` on device ``dev`` (None keeps it where it is)."""
    if dev is None:
        return array
    d = dev if isinstance(dev, device) else device(dev)
    return jax.device_put(array, d.jax_device())


class cuda:
    """``dynajax.cuda.is_available()`` and friends, answered from JAX's GPU backend."""

    @staticmethod
    def is_available() -> bool:
        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:
            return False

    @staticmethod
    def device_count() -> int:
        return len(jax.devices("gpu")) if cuda.is_available() else 0

    # manual_seed / manual_seed_all: attached by dynajax.random (the floor above), which owns the seed

    @staticmethod
    def synchronize() -> None:
        pass


# ---------------------------------------------------------------- eager recompiles
# An eager op compiles one XLA kernel per new input shape. Inputs whose shapes keep changing (a varying
# sequence length, a decode loop that grows its sequence) then compile every op again and again; the
# first such storm in a process gets one warning naming the way out.
STORM_SECONDS = 20.0    # eager compile time, all kernels together, before the warning may fire
STORM_KERNELS = 32      # and compiles of one op's kernel (a parameter set or shape each)
_EAGER_NAMES: set = set()                  # the jit names of eager op kernels
_EAGER_COMPILES: collections.Counter = collections.Counter()   # kernel name -> XLA compiles
_STORM = {"seconds": 0.0, "warned": False, "listening": False}


def watch_eager_kernel(name: str) -> None:
    """Count the XLA compiles of the eager kernel whose compiles JAX reports as ``name`` ("jit(op)"),
    listening from the first one."""
    _EAGER_NAMES.add(name)
    if not _STORM["listening"]:
        _STORM["listening"] = True
        jax.monitoring.register_event_duration_secs_listener(_on_compile)


# Each live XLA:CPU executable holds a few memory mappings of its code, and a process may hold at most
# vm.max_map_count of them (65530 by default on Linux): past it the next compile crashes inside XLA. A
# long-lived process compiling eager kernels for many shapes gets there, so every MAPS_CHECK_EVERY eager
# compiles the mappings are counted, and past MAPS_SHARE of the limit the next eager op drops every eager
# kernel first (``ops.registry.clear_kernels``; they compile again on their next use).
MAPS_CHECK_EVERY = 1000
MAPS_SHARE = 0.5
KERNELS_FULL = [False]   # set here, acted on by the next eager op (not inside a compile's callback)
_MAPS = {"compiles": 0}


def mappings():
    """(memory mappings this process holds, the system's limit), or None where /proc does not say."""
    try:
        with open("/proc/self/maps", "rb") as f:
            n = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            return n, int(f.read())
    except (OSError, ValueError):
        return None


def _on_compile(event: str, secs: float, fun_name: str = "", **_) -> None:
    if event != "/jax/core/compile/backend_compile_duration" or fun_name not in _EAGER_NAMES:
        return
    _MAPS["compiles"] += 1
    if _MAPS["compiles"] % MAPS_CHECK_EVERY == 0:
        m = mappings()
        if m is not None and m[0] > MAPS_SHARE * m[1]:
            KERNELS_FULL[0] = True
    _EAGER_COMPILES[fun_name] += 1
    _STORM["seconds"] += secs
    if _STORM["warned"] or _STORM["seconds"] < STORM_SECONDS:
        return
    top, n = _EAGER_COMPILES.most_common(1)[0]
    if n < STORM_KERNELS:
        return
    _STORM["warned"] = True
    _warn_at_caller(
        f"dynajax: eager ops have compiled {sum(_EAGER_COMPILES.values())} XLA kernels in "
        f"{_STORM['seconds']:.0f} s, {n} of them for op '{top[4:-1]}' alone. An eager op compiles once per new "
        "input shape, so inputs whose shapes keep changing (varying sequence lengths, a decode loop growing "
        "its sequence) compile every op again. Compile the step with dynajax.compile(step, "
        "dynamic={'x': {1: [32, 64, 128]}}) to pad the varying dim to a few bucket sizes (one executable "
        "each; a loop over it rolls into one scan), or pad the inputs to a few lengths "
        "(dynajax.utils.data.pad_sequence(..., multiple_of=16)).")


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_JAX = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep


def user_frame(skip_jax: bool = False):
    """The innermost frame outside dynajax (and, with ``skip_jax``, outside JAX too): the user's line that
    called in, however deep inside the libraries the caller is; None if every frame is theirs."""
    libraries = (_PACKAGE, _JAX) if skip_jax else (_PACKAGE,)
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(libraries):
        f = f.f_back
    return f


def _warn_at_caller(message: str) -> None:
    """A UserWarning shown at the user's line that ran the op (``user_frame``: JAX's compile listener
    calls in from inside JAX)."""
    f = user_frame(skip_jax=True) or sys._getframe(1)
    warnings.warn_explicit(message, UserWarning, f.f_code.co_filename, f.f_lineno,
                           module=f.f_globals.get("__name__"), registry=f.f_globals.setdefault("__warningregistry__", {}))
