"""Eager ops on sizes that keep changing: bucketed kernels, and an on-disk store of them.

An eager op runs one XLA kernel per (op, static parameters, input shapes), and XLA:CPU takes ~10-30 ms
to compile one. A loop whose batch size or sequence length changes every step would compile every op
again at each new size. Instead, an op declared here, on a leading size ``n`` that is not a bucket size
(1, 2, 4, 8, 16, ...: powers of two), runs on the bucket's kernel:

- its inputs are padded on the host to the bucket ``B >= n`` (a copy, no compile; so this is on only
  where the arrays live in host memory: JAX's CPU backend, one device),
- the kernel for the bucket shape runs (compiled once per bucket, or loaded from the on-disk store),
- its result stays padded (``_rows.Rows``: the bucket's array and ``n``) while bucketed ops read it: the
  next one takes the padded array as it is, with no host copy and no wait for the kernel that made it.
  An op summing over the rows (or reading the pad rows' values: an NLL target) first sets them to what
  adds nothing, by a small kernel. Anything else reading the tensor gets its first ``n`` rows, sliced on
  the host once.

Only ops whose results on the true rows do not depend on the pad rows are declared: elementwise ops and
row-wise ones (a linear layer, log_softmax over a later dim, an embedding lookup) pass the rows through,
and the pad rows are dropped; a few reduce over the padded dim and get pads that add nothing (zeros for a
sum or a weight gradient, ``ignore_index`` for an NLL target). So a bucketed call gives the unpadded
call's values up to float rounding (a sum may add its terms in another order).

A shape met again and again stops paying the pads: after ``SETTLE`` calls on one exact shape the op runs
its exact kernel (the ski-rental rule: rent the bucket until buying pays), kept in the store too and called
through JAX's C++ path, as fast as the op's jit; so is a call the rule has no bucketed form for.

An optimizer's fused update (one call a step, on shapes that do not change) and dynajax.random's draws
(a model's initialisation) always run their exact kernels through the store (``stored``), so a second run
compiles none of them either.

The bucket kernels can persist in a folder (``$DYNAJAX_KERNEL_CACHE``, or by default one inside the compile
cache's folder while ``dynajax.set_compile_cache`` has one), so a script's second run loads them instead of
compiling. A kernel that JAX's persistent cache supplied is not written (XLA:CPU would write it without
some of its code: ``_exe_store``). Entries are keyed by the kernel's traced program (its jaxpr), the
compiler options and XLA flags, JAX's lowering settings, the backend and the jax/jaxlib versions. This
store is dynajax's own: JAX's global configuration is left as it is.
``DYNAJAX_EAGER_BUCKETS=0`` turns the bucketed path off (every new shape compiles its exact kernel).
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import os
import typing

import jax
import numpy as np

from . import _exe_store
from ._device import eager_compiler_options, host_put
from ._rows import Rows, exact

__all__ = ["bucket", "run_bucketed", "rule_for", "stored", "stats", "kernel_dir", "set_kernel_dir"]

SETTLE = 32   # calls on one exact non-bucket shape after which the op compiles that shape's own kernel


# rows a bucket has at least. 16 saved compiles where batch sizes vary over 1..256 (buckets 1, 2, 4 and 8
# made 74 of the 183 kernels of benchmarks/eager_shapes.py's MLP; XLA compile 3.6 -> 2.3-2.8 s of a ~13 s
# run), but a fixed small batch (8) then ran its first 32 steps padded, on host copies: a tiny MLP's eager
# step took 3.5 ms instead of 0.85 ms until it settled. 1: a power-of-two size runs on its own kernel
MIN_BUCKET = 1


def _make_buckets(top: int = 1 << 40) -> list:
    # powers of two: buckets 1.5x apart (16 up to 256, not 9) compiled 323 kernels where these compile 183
    # in benchmarks/eager_shapes.py's MLP over batch sizes 1..256 (first run 17.0 -> 13.2 s; the GRU LM over
    # lengths 10..50: 134 -> 77 kernels, 11.9 -> 8.6 s); the extra padded rows cost less than the compiles
    return [1 << k for k in range(MIN_BUCKET.bit_length() - 1, top.bit_length())]


BUCKETS = _make_buckets()


def bucket(n: int) -> int:
    """The smallest bucket size ``>= n`` (a power of two, at least ``MIN_BUCKET``)."""
    return BUCKETS[bisect.bisect_left(BUCKETS, n)]


_BUCKET_SET = frozenset(b for b in BUCKETS if b <= 1 << 20)
stats = {"bucketed_calls": 0, "kernels_compiled": 0, "kernels_loaded": 0, "settled_shapes": 0, "masked": 0}


# ---------------------------------------------------------------- where the bucketed path is on
_STATE: dict = {}


def _enabled() -> bool:
    on = _STATE.get("on")
    if on is None:
        flag = os.environ.get("DYNAJAX_EAGER_BUCKETS", "1").strip().lower()
        on = flag not in ("0", "off", "false", "no") and jax.default_backend() == "cpu" \
            and jax.device_count() == 1
        _STATE["on"] = on
    return on


# ---------------------------------------------------------------- the rules
# A rule looks at one call's values and static params and answers None (not this call: run the exact
# kernel) or (n, pad) with ``n`` the call's leading size and ``pad(B) -> (vals, params, finish)`` the call
# at bucket size ``B`` and what turns the bucket's result into this call's.

def _pad_rows(v, B: int, fill=0, clean: bool = False):
    """``v`` with rows appended up to ``B``, filled with ``fill``. A host-resident JAX array is padded on the
    host: a numpy array, which the bucket's kernel takes as it is (its call copies it in, in C++: ~10 us,
    where making it a JAX array first costs ~30 us more). An earlier bucketed op's padded result (``Rows``)
    of ``B`` rows is taken as it is, with no wait for the op that made it; ``clean`` (the op sums over the
    rows, or reads the pad rows' values): with its pad rows set to ``fill`` first, by a kernel."""
    if type(v) is Rows:
        if v.full.shape[0] == B:
            return _masked(v, fill) if clean else v.full
        v = v.exact()
    a = np.asarray(v)
    out = np.empty((B,) + a.shape[1:], a.dtype)
    out[:a.shape[0]] = a
    out[a.shape[0]:] = fill
    return out


def _rows_of(m):
    """A bucket kernel's result whose first ``m`` rows are the call's: kept padded (``Rows``)."""
    return lambda out: out if out.shape[0] == m else Rows(out, m)


def _whole(out):
    return out


def _padded(vals, which, B, fills=None, clean=False):
    vals = list(vals)
    for k, i in enumerate(which):
        vals[i] = _pad_rows(vals[i], B, 0 if fills is None else fills[k], clean)
    return vals


def _elementwise(vals, params):
    """Every array input of the output's rank with leading size n is padded; size-1 or lower-rank inputs
    broadcast as they are. The output's rows are the inputs' rows."""
    rank = max((getattr(v, "ndim", 0) for v in vals), default=0)
    if rank == 0:
        return None
    n, which = None, []
    for i, v in enumerate(vals):
        if getattr(v, "ndim", 0) == rank:
            d = v.shape[0]
            if d != 1:
                if n is not None and d != n:
                    return None
                n = d
                which.append(i)
    if n is None:   # every row-carrying input has one row: that row's own kernel (1 is a bucket size)
        return (1, None) if any(getattr(v, "ndim", 0) == rank for v in vals) else None
    return n, lambda B: (_padded(vals, which, B), params, _rows_of(n))


def _rows(*which, min_rank=1, fills=None, keep=True):
    """Inputs ``which`` share the leading size n (at least ``min_rank`` dims each); with ``keep`` the
    output's first n rows are the result, else (a reduction over the rows) the output is taken whole."""
    def rule(vals, params):
        n = None
        for i in which:
            v = vals[i]
            if getattr(v, "ndim", 0) < min_rank:
                return None
            if n is None:
                n = v.shape[0]
            elif v.shape[0] != n:
                return None
        f = None if fills is None else [fl(params) for fl in fills]
        return n, lambda B: (_padded(vals, which, B, f, clean=not keep), params, _rows_of(n) if keep else _whole)
    return rule


def _log_softmax(vals, params):
    v = vals[0]
    if getattr(v, "ndim", 0) < 2 or params["dim"] % v.ndim == 0:
        return None
    return _rows(0)(vals, params)


def _sum(vals, params):
    v, dims = vals[0], params["dims"]    # dims None: every dim
    if getattr(v, "ndim", 0) < 1 or params["shape"] != tuple(v.shape) or \
            (dims is not None and any(d < 0 for d in dims)):
        return None
    n, over_rows = v.shape[0], dims is None or 0 in dims

    def pad(B):
        p = dict(params, shape=(B,) + tuple(v.shape[1:]))
        return [_pad_rows(v, B, clean=over_rows)], p, _whole if over_rows else _rows_of(n)
    return n, pad


def _nll(vals, params):
    logp, target = vals[0], vals[1]
    if getattr(logp, "ndim", 0) != 2 or getattr(target, "ndim", 0) != 1 or logp.shape[0] != target.shape[0]:
        return None
    n, ign = target.shape[0], params["ignore_index"]
    keep = params["reduction"] == "none"
    return n, lambda B: ([_pad_rows(logp, B, clean=not keep), _pad_rows(target, B, ign, clean=True), *vals[2:]],
                         params, _rows_of(n) if keep else _whole)


def _nll_backward(vals, params):
    g, target = vals[0], vals[1]
    if getattr(target, "ndim", 0) != 1:
        return None
    n, ign = target.shape[0], params["ignore_index"]
    if getattr(g, "ndim", 0) == 1 and g.shape[0] == n:     # reduction='none': one cotangent per row
        return n, lambda B: ([_pad_rows(g, B), _pad_rows(target, B, ign, clean=True), *vals[2:]], params,
                             _rows_of(n))
    if getattr(g, "ndim", 0) != 0:
        return None
    return n, lambda B: ([g, _pad_rows(target, B, ign, clean=True), *vals[2:]], params, _rows_of(n))


def _embedding_backward(vals, params):
    if params.get("scale_grad_by_freq"):   # pad lookups would count as lookups of row 0
        return None
    g, idx = vals[0], vals[1]
    if getattr(idx, "ndim", 0) < 1 or getattr(g, "ndim", 0) <= idx.ndim or g.shape[0] != idx.shape[0]:
        return None
    return _rows(0, 1, keep=False)(vals, params)


def _unbind(vals, params):
    v = vals[0]
    if params["dim"] != 0 or getattr(v, "ndim", 0) < 1:
        return None
    return v.shape[0], None   # (no bucket kernel: it runs on the host, ``_ON_HOST``)


# ops whose bucketed call is done on the host instead, with numpy (their arrays are in host memory here):
# a kernel for them has one input or output per row, and XLA:CPU took ~250 ms to compile an unbind into
# 64 rows (1.5 of the 3.5 s the GRU LM of benchmarks/eager_shapes.py spent compiling kernels)
def _unbind_on_host(vals, params):
    a = np.array(vals[0])   # (a copy: the rows must not alias the input's buffer, which a step may donate)
    return tuple(host_put(r) for r in a)


def _stack_on_host(vals, params):
    first = vals[0]
    if any(type(v) is not type(first) or v.shape != first.shape or v.dtype != first.dtype
           or getattr(v, "weak_type", False) for v in vals):
        return None
    return host_put(np.stack([np.asarray(v) for v in vals]))


_ON_HOST = {"unbind": _unbind_on_host, "stack": _stack_on_host}


def _stack(vals, params):
    if params["dim"] != 0 or not vals or any(not hasattr(v, "shape") for v in vals):
        return None
    n = len(vals)
    return n, lambda B: (list(vals) + [vals[0]] * (B - n), params, _rows_of(n))


def _reshape(vals, params):
    """A reshape that merges the leading dim with the next ones ((n, a, b) -> (n*a, b)) or splits it
    ((n*a, b) -> (n, a, b)): row blocks map to row blocks, so the leading size can be padded."""
    v, shape, in_shape = vals[0], tuple(params["shape"]), tuple(params["in_shape"])
    if len(shape) < 1 or len(in_shape) < 1 or in_shape != tuple(v.shape) or -1 in shape:
        return None
    i0, o0 = in_shape[0], shape[0]
    if i0 <= 0 or o0 <= 0:
        return None
    if o0 % i0 == 0:                      # merge: each input row becomes k output rows
        k, n = o0 // i0, i0

        def pad(B):
            p = dict(params, in_shape=(B,) + in_shape[1:], shape=(B * k,) + shape[1:])
            return [_pad_rows(v, B)], p, _rows_of(n * k)
        return n, pad
    if i0 % o0 == 0:                      # split: k input rows become one output row
        k, n = i0 // o0, o0

        def pad(B):
            p = dict(params, in_shape=(B * k,) + in_shape[1:], shape=(B,) + shape[1:])
            return [_pad_rows(v, B * k)], p, _rows_of(n)
        return n, pad
    return None


def _expand(vals, params):
    """A broadcast to ``shape`` whose leading size n comes from the input (n rows) or is made (1 or no
    leading dim in the input): pad the input's rows or just ask for B rows; keep the first n."""
    v, shape, in_shape = vals[0], tuple(params["shape"]), tuple(params["in_shape"])
    if not shape or in_shape != tuple(getattr(v, "shape", ())) or -1 in shape:
        return None
    n = shape[0]
    rows = len(in_shape) == len(shape) and in_shape[0] == n != 1

    def pad(B):
        p = dict(params, shape=(B,) + shape[1:], in_shape=((B,) + in_shape[1:]) if rows else in_shape)
        return [_pad_rows(v, B) if rows else v], p, _rows_of(n)
    return n, pad


def _sum_to_shape(vals, params):
    """Summing a broadcast operand's cotangent back to ``shape``: the leading size n stays (rows) or is
    summed away (zero pad rows add nothing)."""
    v, shape, in_shape = vals[0], tuple(params["shape"]), tuple(params["in_shape"])
    if getattr(v, "ndim", 0) < 1 or in_shape != tuple(v.shape):
        return None
    n = in_shape[0]
    lead = len(in_shape) - len(shape)
    kept = lead == 0 and shape[0] == n

    def pad(B):
        p = dict(params, in_shape=(B,) + in_shape[1:], shape=((B,) + shape[1:]) if kept else shape)
        return [_pad_rows(v, B, clean=not kept)], p, _rows_of(n) if kept else _whole
    return n, pad


_ELEMENTWISE = (
    "exp log sqrt rsqrt reciprocal sin cos tan asin acos atan sinh cosh tanh asinh atanh sigmoid erf erfc "
    "erfinv lgamma digamma square neg abs relu sign floor ceil trunc frac logical_not bitwise_not isnan "
    "isinf isfinite add sub mul div floor_divide div_trunc remainder fmod pow maximum minimum hypot "
    "logaddexp eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor "
    "where acosh sinc xlogy copysign fmax fmin").split()

_RULES = dict.fromkeys(_ELEMENTWISE, _elementwise)
_RULES.update({
    "linear": _rows(0, min_rank=2), "linear_bias": _rows(0, min_rank=2),
    "linear_input_grad": _rows(0, min_rank=2), "linear_weight_grad": _rows(0, 1, min_rank=2, keep=False),
    "log_softmax": _log_softmax, "sum": _sum, "embedding": _rows(1), "embedding_dense_backward": _embedding_backward,
    "nll_loss_index": _nll, "nll_loss_index_backward": _nll_backward, "unbind": _unbind, "stack": _stack,
    "reshape": _reshape, "expand": _expand, "sum_to_shape": _sum_to_shape,
})


def _stored(vals, params):
    """The mark of an op whose kernel is always its exact one, from the store (``run_bucketed`` looks for it
    first): an optimizer's fused update (one call a step, on the same shapes all run long, and ~0.15 s of XLA
    compile in each process otherwise)."""


_RULES.update(dict.fromkeys(("adam_update", "sgd_momentum_update", "rmsprop_update", "adagrad_update",
                             "adadelta_update", "adamax_update", "nadam_update", "radam_update"), _stored))


def _exact(vals, params):
    """The rule of an op with no bucketed form: its exact kernel, from the store."""


def rule_for(name: str):
    """The bucketing rule of op ``name``: every op has one (``_exact`` where it has no bucketed form), so every
    eager kernel is kept in the store."""
    return _RULES.get(name, _exact)


# ---------------------------------------------------------------- the bucketed call
_SEEN: dict = {}      # (the op's jit for its params, exact input types) -> calls so far through bucket kernels, or
                      # once settled the exact kernel's call
_ON: list = [None]    # whether the bucketed path is on (decided at the first call)
_KERNELS: dict = {}   # (op, params, avals) -> a compiled kernel (a bucket's, or an exact bucket-size shape's)


def clear() -> None:
    """Forget the compiled bucket kernels and the calls counted so far (``registry.clear_kernels``)."""
    _SEEN.clear()
    _KERNELS.clear()


def _aval_key(vals) -> tuple:
    """(shape, dtype, weak type) of each array in ``vals`` (a JAX array's read from its aval: ~0.1 us against
    ~0.5 us through its properties; a Python number's type), alike for a JAX array and a numpy one."""
    out = []
    for v in vals:
        av = getattr(v, "aval", None)
        if av is not None:
            out.append((av.shape, av.dtype, av.weak_type))
        else:
            out.append((v.shape, v.dtype, getattr(v, "weak_type", False)) if hasattr(v, "shape") else type(v))
    return tuple(out)


def run_bucketed(op, fn, vals, params, lazy: bool = True):
    """Run eager ``op`` on ``vals`` through a bucket's kernel or its exact one from the store, or None where
    its own jit ``fn`` (the op's ``jax.jit`` for these params) should run: the arrays are not in host memory.

    An exact call type (``fn`` and the inputs' shapes and dtypes) goes through a bucket's kernel for its
    first ``SETTLE`` calls: padded to its bucket (or as it is, when its size is a bucket size), on kernels
    this module compiles once and keeps on disk. After that, or from the first call where the rule has no
    bucketed form for it, it runs its own exact kernel, kept on disk too, called as fast as ``fn``.
    ``lazy`` False: no value in ``vals`` is a ``Rows``."""
    on = _ON[0]
    if on is None:
        on = _ON[0] = _enabled()
    if not on:
        return None
    if op.eager_pad is _stored:   # (never settles: its store's kernel is its own)
        vals = [exact(v) for v in vals]
        return _kernel(op, params, vals)(*vals)
    key = (fn, *_aval_key(vals))
    seen = _SEEN.get(key, 0)
    if type(seen) is not int:   # a settled call type: its exact kernel
        return seen(*[exact(v) for v in vals]) if lazy else seen(*vals)
    got = op.eager_pad(vals, params) if seen < SETTLE else None
    if got is None or got[0] < 1:   # settled now, or no bucketed form: the exact kernel from now on
        if seen >= SETTLE:
            stats["settled_shapes"] += 1
        vals = [exact(v) for v in vals]
        k = _kernel(op, params, vals)
        out = k(*vals)
        _SEEN[key] = getattr(k, "_call", None) or k   # (JAX's C++ call, set by the first: as fast as jit's)
        return out
    _SEEN[key] = seen + 1
    n, pad = got
    host = _ON_HOST.get(op.name)
    if host is not None:
        out = host([exact(v) for v in vals], params)
        if out is not None:
            return out
    if n in _BUCKET_SET:
        vals = [exact(v) for v in vals]
        return _kernel(op, params, vals)(*vals)
    pvals, pparams, finish = pad(bucket(n))
    pvals = [exact(v) for v in pvals]   # (inputs the rule leaves as they are: weights, broadcast rows)
    stats["bucketed_calls"] += 1
    return finish(_kernel(op, pparams, pvals)(*pvals))


def _kernel(op, params, vals):
    return _cached((op.name, tuple(params.items()), _aval_key(vals)), lambda: op.jitted(params).trace, vals)


def _cached(key: tuple, trace_of, vals):
    """The kernel kept in memory under ``key``, else loaded or compiled from ``trace_of()(*vals)``."""
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = _load_or_compile(trace_of(), vals)
    return k


def stored(name: str, trace, args, static: tuple = ()):
    """The kernel ``trace(*args)`` compiles to (``trace``: a ``jax.jit``'s ``trace``, static arguments bound;
    ``static``: them, for the key), from the store or compiled and kept there; None where the bucketed path
    is off (``_enabled``: then the caller runs its own jit). For eager work outside the ops that every
    process would compile again: dynajax.random's key split and draws."""
    on = _ON[0]
    if on is None:
        on = _ON[0] = _enabled()
    if not on:
        return None
    return _cached((name, static, _aval_key(args)), lambda: trace, args)


def _mask_rows(full, n, fill):
    rows = jax.lax.broadcasted_iota(np.int32, full.shape, 0)
    return jax.numpy.where(rows < n, full, jax.numpy.asarray(fill, full.dtype))


class _PadRows:
    """What :func:`_kernel` needs of an op, for the kernel setting a padded array's rows from ``n`` on to
    ``fill``."""
    name = "pad rows"
    _jits: typing.ClassVar[dict] = {}   # fill -> its jit

    @classmethod
    def jitted(cls, params):
        fill = params["fill"]
        j = cls._jits.get(fill)
        if j is None:
            j = cls._jits[fill] = jax.jit(functools.partial(_mask_rows, fill=fill))
        return j


def _masked(v: Rows, fill):
    """``v``'s padded array with its pad rows set to ``fill``, by a kernel (one per bucket shape, kept in the
    store like the ops' own): what an op summing over the rows adds of them must be nothing."""
    m = v.masked
    if m is not None and m[0] == fill:   # (a gradient summed for a bias and multiplied for a weight: once)
        return m[1]
    args = (v.full, np.int32(v.n))
    stats["masked"] += 1
    out = _kernel(_PadRows, {"fill": fill}, args)(*args)
    v.masked = (fill, out)
    return out


# ---------------------------------------------------------------- the on-disk store
_WITH_COMPILE_CACHE = "with the compile cache"   # kernel_dir's default: a folder inside set_compile_cache's


def kernel_dir() -> str | None:
    """The folder bucket kernels persist in (None: not kept on disk): ``$DYNAJAX_KERNEL_CACHE`` or
    :func:`set_kernel_dir`'s; by default ``dynajax-kernels`` inside the compile cache's folder while
    ``dynajax.set_compile_cache`` has one, else none."""
    d = _STATE.get("dir", _STATE)
    if d is _STATE:
        env = os.environ.get("DYNAJAX_KERNEL_CACHE", "").strip()
        if not env:
            d = _STATE["dir"] = _WITH_COMPILE_CACHE
        else:
            set_kernel_dir(None if env.lower() in ("0", "off", "false", "no") else env)
            d = _STATE["dir"]
    if d is _WITH_COMPILE_CACHE:
        folder = jax.config.jax_compilation_cache_dir
        return os.path.join(folder, "dynajax-kernels") if folder else None
    return d


def set_kernel_dir(path) -> None:
    """Keep bucket kernels in ``path`` (created if missing); None: keep them in memory only. A folder that
    cannot be made leaves them in memory (a cache only saves time)."""
    if path is not None:
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            path = None
    _STATE["dir"] = path


def _fingerprint() -> str:
    """What every stored kernel depends on besides its own program: jax and jaxlib, the backend, the eager
    compiler options and XLA's flags."""
    fp = _STATE.get("fingerprint")
    if fp is None:
        from jax.extend import backend
        b = backend.get_backend()
        fp = _STATE["fingerprint"] = "\0".join(map(str, (
            jax.__version__, getattr(jax.lib, "__version__", ""), b.platform, b.platform_version,
            repr(eager_compiler_options()), os.environ.get("XLA_FLAGS", ""))))
    return fp


def _entry_name(traced) -> str:
    """The store's name for a kernel: a hash of its traced program (the jaxpr, with its constants' bytes),
    the fingerprint and JAX's lowering settings. Keyed by the program rather than by dynajax's source, an
    edit to an op changes the names of that op's kernels only."""
    h = hashlib.sha256(f"{_fingerprint()}\0{_exe_store.config_key()}".encode())
    closed = traced.jaxpr
    h.update(str(closed).encode())
    for c in closed.consts:
        a = np.asarray(c)
        h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
    return h.hexdigest()


def _load_or_compile(trace, vals):
    folder = kernel_dir()
    traced = trace(*vals)
    if folder is None:
        stats["kernels_compiled"] += 1
        return traced.lower().compile()
    name = _entry_name(traced)
    path = os.path.join(folder, name + ".xla")
    got = _exe_store.read(path, name)
    if got is not None:
        stats["kernels_loaded"] += 1
        return got[0]
    k, fresh = _exe_store.compile_fresh(traced.lower())   # (a stale or torn entry: compiled, written again)
    stats["kernels_compiled"] += 1
    if fresh:
        _exe_store.write(path, name, k)
    return k
