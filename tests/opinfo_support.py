"""PyTorch's own operator database (``torch.testing._internal.common_methods_invocations.op_db``) as an
oracle for dynajax: which OpInfo dynajax has a callable for, how a torch ``SampleInput`` becomes dynajax
arguments, and the three checks test_opinfo.py runs per sample (forward values, tape gradients against
torch's, the tape against ``jax.vjp`` of the lowered graph).

The mapping is by name and is decided when the tests are collected, so a callable another engineer adds to
``dynajax``, ``dynajax.nn.functional``, ``dynajax.linalg``, ``dynajax.fft`` or ``dynajax.special`` (or as a
``Tensor`` method) is picked up without editing anything here. OpInfos whose ``op`` is a lambda (method
calls, argument reorderings, ``wrapper_set_seed``) run that very lambda with its ``torch`` global bound to
dynajax.

``python tests/opinfo_support.py`` prints the coverage and the per-sample agreement of every check.
"""
from __future__ import annotations

import dis
import itertools
import re
import sys
import time
import types
import zlib
from dataclasses import dataclass

import jax
import numpy as np
import torch
from torch.testing._internal.common_methods_invocations import op_db  # slow (several seconds), imported once

import dynajax as dj
from helpers import assert_close

# Each new input shape compiles each op again (~30 ms of XLA per kernel): these numbers are what the
# file's run time buys (about 0.2 s of CPU per OpInfo)
FORWARD_SAMPLES = 1     # torch's first samples per OpInfo, whose float32 forward values are compared
GRAD_POOL = 3           # the gradient sample is the largest of torch's first GRAD_POOL samples (in float64) ...
GRAD_SAMPLES = 1        # ... and this many of them have their values and gradients compared with torch's
LOWER_SAMPLES = 1       # of those, how many are also checked against jax.vjp of the lowered graph

def opinfo_id(o) -> str:
    """A unique test id per OpInfo: its name and, where it has one, its variant."""
    return f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name


OPINFOS = {opinfo_id(o): o for o in op_db}


# ---------------------------------------------------------------- the mapping
def _lookup(root, path: str):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _reads(code) -> tuple[set, set]:
    """What a lambda reads: the ``torch.a.b`` chains (as "a.b") and the attributes of other objects (tensor
    methods and properties), its nested lambdas included."""
    chains, attrs, chain = set(), set(), None
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL" and ins.argval == "torch":
            chain = []
            continue
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            if chain is not None:
                chain.append(ins.argval)
            else:
                attrs.add(ins.argval)
            continue
        if chain:
            chains.add(".".join(chain))
        chain = None
    if chain:
        chains.add(".".join(chain))
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            more = _reads(c)
            chains |= more[0]
            attrs |= more[1]
    return chains, attrs


def _dynajax_has(f) -> bool:
    """Whether everything the torch lambda ``f`` reads exists in dynajax."""
    chains, attrs = _reads(f.__code__)
    return all(_lookup(dj, c) is not None for c in chains) and all(hasattr(dj.Tensor, a) for a in attrs)


def _is_lambda(f) -> bool:
    return getattr(f, "__name__", "") == "<lambda>" and isinstance(f, types.FunctionType)


def _seeded(fn, *args, **kwargs):
    """dynajax's ``wrapper_set_seed``: a fixed seed for the draw, the caller's RNG state restored after."""
    state = dj.get_rng_state()
    dj.manual_seed(42)
    try:
        return fn(*args, **kwargs)
    finally:
        dj.set_rng_state(state)


_REBOUND: dict = {}   # id of a module's globals -> a copy with torch bound to dynajax


def _rebind(f):
    """The function ``f`` with its ``torch`` global bound to dynajax (and torch's seeding helper to ours)."""
    if not isinstance(f, types.FunctionType):
        return f
    g = _REBOUND.get(id(f.__globals__))
    if g is None:   # the module's own functions (helpers a wrapper calls) are rebound too
        g = _REBOUND[id(f.__globals__)] = dict(f.__globals__, torch=dj, wrapper_set_seed=_seeded)
        for name, v in list(g.items()):
            if isinstance(v, types.FunctionType) and v.__globals__ is f.__globals__:
                g[name] = _with_globals(v, g)
    return _with_globals(f, g)


def _with_globals(f, g: dict):
    new = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    new.__kwdefaults__ = f.__kwdefaults__
    return new


def dynajax_callable(o):
    """The dynajax callable that does what OpInfo ``o`` does, or None where dynajax has none."""
    op = o.op
    if _is_lambda(op):
        return _rebind(op) if _dynajax_has(op) else None
    name = o.name
    if name.startswith("__"):                      # reflected operators: Tensor methods
        return getattr(dj.Tensor, name, None)
    if "." in name:
        f = _lookup(dj, name)
        return f if callable(f) and not isinstance(f, (type, types.ModuleType)) else None
    if getattr(torch.Tensor, name, None) is op:     # a method-only op (cfloat, cdouble)
        return getattr(dj.Tensor, name, None)
    f = getattr(dj, name, None)
    if callable(f) and not isinstance(f, (type, types.ModuleType, dj.dtype)):
        return f
    method = getattr(o.method_variant, "__name__", None)   # torch.softmax(x, d) is x.softmax(d)
    if method is not None and method != "<lambda>":
        return getattr(dj.Tensor, method, None)
    return None


def mapped() -> dict:
    """{OpInfo id: dynajax callable} for every OpInfo dynajax has."""
    out = {}
    for k, o in OPINFOS.items():
        f = dynajax_callable(o)
        if f is not None:
            out[k] = f
    return out


def is_random(o) -> bool:
    """Ops whose values depend on an RNG or on uninitialised memory: only shapes and dtypes compare."""
    return (_is_lambda(o.op) and "wrapper_set_seed" in o.op.__code__.co_names) or o.has_nondeterministic_output \
        or o.name in ("bernoulli", "multinomial", "rand_like", "randn_like", "randint_like")


# ---------------------------------------------------------------- conversions
_DTYPES = {getattr(torch, n): getattr(dj, n) for n in
           ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
            "int64", "uint8", "bool") if hasattr(dj, n)}


def dj_dtype(t: torch.dtype):
    d = _DTYPES.get(t)
    if d is None:
        raise TypeError(f"dynajax has no dtype for {t}")
    return d


def tensor_to_dj(t: torch.Tensor, requires_grad: bool | None = None) -> dj.Tensor:
    rg = t.requires_grad if requires_grad is None else requires_grad
    t = t.detach().resolve_conj().resolve_neg()
    d = dj_dtype(t.dtype)
    a = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    x = dj.tensor(np.array(a), dtype=d)
    return x.requires_grad_(True) if rg else x


def to_dj(x, leaves: dict | None = None):
    """A sample's argument (possibly nested) with every torch tensor, dtype, device and size replaced by
    dynajax's. ``leaves`` (``{id(torch tensor): dynajax tensor}``) makes the same torch tensor the same
    dynajax tensor wherever it appears, so gradients line up."""
    if isinstance(x, torch.Tensor):
        if leaves is None:
            return tensor_to_dj(x)
        got = leaves.get(id(x))
        if got is None:
            got = leaves[id(x)] = tensor_to_dj(x)
        return got
    if isinstance(x, torch.Size):
        return tuple(x)
    if isinstance(x, torch.dtype):
        return dj_dtype(x)
    if isinstance(x, torch.device):
        return dj.device(x.type)
    if isinstance(x, list):
        return [to_dj(v, leaves) for v in x]
    if isinstance(x, tuple):
        vals = [to_dj(v, leaves) for v in x]
        return type(x)(*vals) if hasattr(x, "_fields") else tuple(vals)
    if isinstance(x, dict):
        return {k: to_dj(v, leaves) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(to_dj(x.start, leaves), to_dj(x.stop, leaves), to_dj(x.step, leaves))
    if isinstance(x, torch.nn.Module) and not list(x.parameters()) and hasattr(dj.nn, type(x).__name__):
        # a parameter-free torch module passed as an argument (distance_function=nn.PairwiseDistance()): dynajax's,
        # with the same settings
        m = getattr(dj.nn, type(x).__name__)()
        for k, v in vars(x).items():
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None))):
                setattr(m, k, v)
        return m
    if callable(x) and not isinstance(x, type) and str(getattr(x, "__module__", None) or "torch").startswith("torch"):
        # a torch function passed as an argument (distance_function=F.pairwise_distance): dynajax's namesake
        name = getattr(x, "__name__", "")
        return getattr(dj.nn.functional, name, None) or getattr(dj, name, x)
    return x


def leaves_of(x) -> list:
    """The leaves of a (nested) output, in order: tensors, numbers, sizes."""
    if isinstance(x, (list, tuple)) and not isinstance(x, (torch.Size, dj.Size)):
        return [leaf for v in x for leaf in leaves_of(v)]
    return [x]


@dataclass
class Call:
    """One sample converted for dynajax: the arguments, and the dynajax leaf per torch input tensor."""
    args: tuple
    kwargs: dict
    leaves: dict   # id(torch tensor) -> dynajax tensor

    def run(self, fn):
        return fn(*self.args, **self.kwargs)


def convert(sample) -> Call:
    leaves: dict = {}
    args = (to_dj(sample.input, leaves),) + tuple(to_dj(a, leaves) for a in sample.args)
    return Call(args, to_dj(dict(sample.kwargs), leaves), leaves)


def torch_inputs(sample) -> list:
    """The torch tensors of a sample, in the order ``convert`` meets them, each once."""
    seen, out = set(), []

    def visit(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in seen:
                seen.add(id(x))
                out.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
        elif isinstance(x, dict):
            for v in x.values():
                visit(v)
        elif isinstance(x, slice):
            visit(x.start), visit(x.stop), visit(x.step)
    visit(sample.input), visit(list(sample.args)), visit(dict(sample.kwargs))
    return out


# ---------------------------------------------------------------- samples
def forward_dtype(o):
    for d in (torch.float32, torch.int64, torch.bool, torch.float64, torch.complex64):
        if o.supports_dtype(d, "cpu"):
            return d
    return None


def grad_dtype(o):
    if not o.supports_autograd:
        return None
    if torch.float64 in o.supported_backward_dtypes("cpu"):
        return torch.float64
    return None


def samples(o, dtype, requires_grad: bool, n: int) -> list:
    """The first ``n`` of torch's sample inputs for ``o`` (torch's generator seeded, so they repeat)."""
    torch.manual_seed(0)
    return list(itertools.islice(o.sample_inputs("cpu", dtype, requires_grad=requires_grad), n))


def cotangent(shape, dtype, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape)).astype(dtype)


def _seed(key: str, k: int) -> int:
    return zlib.crc32(f"{key}/{k}".encode())


# ---------------------------------------------------------------- the checks
def _np(x) -> np.ndarray:
    if isinstance(x, dj.Tensor):
        x = x.detach()
        return np.asarray((x.float() if x.dtype == dj.bfloat16 else x)._value)
    x = x.detach().resolve_conj().resolve_neg().cpu()
    return (x.float() if x.dtype == torch.bfloat16 else x).numpy()


_WIDER = {torch.float32: torch.float64, torch.complex64: torch.complex128, torch.float16: torch.float64,
          torch.bfloat16: torch.float64}


def _widened(sample):
    """``sample`` with its floating-point tensors (and dtype arguments) in double precision."""
    return sample.transform(lambda t: _WIDER.get(t, t) if isinstance(t, torch.dtype)
                            else t.to(_WIDER[t.dtype]) if t.dtype in _WIDER else t)


def _within_torch_error(a: np.ndarray, e: np.ndarray, r: np.ndarray) -> bool:
    """dynajax's float32 result ``a`` is as close to torch's float64 result ``r`` as PyTorch's default float32
    tolerance, or no further than a few times torch's own worst float32 error on this output (ill-conditioned
    ops: matrix_exp, polygamma at large values, long float32 sums, where the summation order alone moves
    the last digits)."""
    a, e, r = (np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64) for x in (a, e, r))
    with np.errstate(invalid="ignore"):
        err = np.abs(e - r)
        worst = float(np.max(np.where(np.isfinite(err), err, 0))) if err.size else 0.0
        ok = np.abs(a - r) <= 1e-5 + 1.3e-6 * np.abs(r) + 4 * worst
    return bool(np.all(ok | (np.isnan(a) & np.isnan(r)) | (a == r)))


def compare_outputs(actual, expected, values: bool = True, reference=None) -> None:
    """dynajax's output against torch's: the same structure, shapes, dtypes and (``values``) values.
    ``reference()``: torch's outputs computed in double precision, for a float output that misses PyTorch's
    default tolerance (see ``_within_torch_error``)."""
    al = leaves_of(actual)
    el = leaves_of(expected)
    assert len(al) == len(el), f"{len(al)} outputs, torch has {len(el)}"
    for i, (a, e) in enumerate(zip(al, el)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, dj.Tensor), f"output {i}: {type(a).__name__}, torch gives a Tensor"
            assert str(a.dtype).split(".")[-1] == str(e.dtype).split(".")[-1], \
                f"output {i}: dtype {a.dtype}, torch {e.dtype}"
            assert tuple(a.shape) == tuple(e.shape), f"output {i}: shape {tuple(a.shape)}, torch {tuple(e.shape)}"
            if not values:
                continue
            try:
                assert_close(a, e, check_dtype=False, msg=f"output {i}")
            except AssertionError:
                if reference is None or e.dtype not in _WIDER or \
                        not _within_torch_error(_np(a), _np(e), _np(leaves_of(reference())[i])):
                    raise
        elif isinstance(e, torch.Size):
            assert isinstance(a, tuple) and tuple(a) == tuple(e), f"output {i}: {a}, torch {e}"
        elif values:
            assert a == e or (isinstance(e, float) and np.isnan(e) and np.isnan(a)), f"output {i}: {a!r}, torch {e!r}"


def check_forward(o, fn, sample) -> None:
    """Forward: dynajax's outputs equal torch's on ``sample``."""
    expected = o(sample.input, *sample.args, **sample.kwargs)
    actual = convert(sample).run(fn)
    wide = _widened(sample)
    compare_outputs(actual, expected, values=not is_random(o),
                    reference=lambda: o(wide.input, *wide.args, **wide.kwargs))


def _differentiable(outs) -> list:
    """Which outputs torch differentiates: floating-point tensors that require grad."""
    return [isinstance(e, torch.Tensor) and e.requires_grad and e.dtype.is_floating_point for e in outs]


def _grad_outputs(o, fn, sample, args, kwargs, wrapper=None, process=None):
    """The outputs gradients are taken of, as torch's gradient tests take them: the op called through the
    OpInfo's ``gradcheck_wrapper`` (Hermitian inputs symmetrised, ...), then the sample's
    ``output_process_fn_grad`` (eigenvectors made sign-free, ...). For dynajax both run with ``torch``
    bound to dynajax."""
    if wrapper is None:
        return leaves_of(sample.output_process_fn_grad(o.gradcheck_wrapper(o.op, *args, **kwargs)))
    return leaves_of(process(wrapper(fn, *args, **kwargs)))


def _cotangent(e: torch.Tensor, seed: int) -> torch.Tensor:
    w = torch.from_numpy(np.random.default_rng(seed).standard_normal(tuple(e.shape)))
    return w.to(e.dtype)


def check_grad(o, fn, sample, key: str, k: int):
    """Forward values and tape gradients in float64 against torch's. The gradients are those of the scalar
    ``sum_k (out_k * w_k).sum()`` for fixed random ``w_k``, i.e. the vector-Jacobian product with cotangents
    ``w_k`` (passed as ``grad_outputs``, which costs no extra kernels). Random ops (dropout, normal) draw
    other numbers than torch: their values and gradients are compared only with the lowering. Returns what
    :func:`check_lowering` compares with, or None where the sample has nothing to differentiate."""
    ins = [t for t in torch_inputs(sample) if t.requires_grad]
    if not ins:
        return None
    outs = _grad_outputs(o, None, sample, (sample.input,) + tuple(sample.args), sample.kwargs)
    live = [i for i, d in enumerate(_differentiable(outs)) if d]
    if not live:
        return None
    ws = [_cotangent(outs[i], _seed(key, k * 100 + i)) for i in live]
    gt = torch.autograd.grad([outs[i] for i in live], ins, ws, allow_unused=True)
    call = convert(sample)
    wrapper, process = _rebind(o.gradcheck_wrapper), _rebind(sample.output_process_fn_grad)
    douts = _grad_outputs(o, fn, sample, call.args, call.kwargs, wrapper, process)
    compare_outputs(douts, outs, values=not is_random(o))   # the float64 forward values, which cost nothing more
    for i in live:
        assert isinstance(douts[i], dj.Tensor) and douts[i].requires_grad, \
            f"output {i} does not require grad in dynajax (no gradient recorded)"
    dins = [call.leaves[id(t)] for t in ins]
    dws = [tensor_to_dj(w) for w in ws]
    gd = dj.autograd.grad([douts[i] for i in live], dins, dws, allow_unused=True)
    if not is_random(o):
        for i, (a, e) in enumerate(zip(gd, gt)):
            if e is None:
                assert a is None or not np.any(_np(a)), f"grad of input {i}: torch has none, dynajax nonzero"
                continue
            assert a is not None, f"grad of input {i}: dynajax has none"
            assert_close(a, e, check_dtype=False, msg=f"grad of input {i}")
    return Grads(call, [id(t) for t in ins], live, [w._value for w in dws], gd,
                 lambda args, kwargs: _grad_outputs(o, fn, sample, args, kwargs, wrapper, process))


@dataclass
class Grads:
    """One sample's tape gradients, as :func:`check_grad` computed them."""
    call: Call
    ids: list      # id() of the torch inputs differentiated
    live: list     # which outputs were differentiated
    ws: list       # their cotangents
    tape: tuple    # the tape's gradients, one per input
    outputs: object  # outputs(args, kwargs): the op's outputs as the gradient takes them


def check_lowering(fn, g: Grads, rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """The tape against ``jax.vjp`` of the lowered graph: ``dynajax.lower`` of the op on the differentiated
    inputs (the sample's other tensors held fixed), ``jax.vjp`` of its pure function under one ``jax.jit``,
    with the cotangents the tape was given. On a mismatch ``dynajax.testing.check_op_vjps`` names the first
    recorded op whose VJP rule disagrees with ``jax.vjp`` of its impl."""
    def f(*xs):
        args, kwargs, _ = _substitute(g.call, dict(zip(g.ids, xs)))
        outs = g.outputs(args, kwargs)
        return tuple(outs[i] for i in g.live)

    xs = [g.call.leaves[i] for i in g.ids]
    low = dj.lower(f, *xs)
    arrays = [x.detach()._value for x in xs]
    with jax.enable_x64(True):   # the backward pass of a float64 graph runs in the caller's mode: docs/jax.md
        jg = jax.jit(lambda a, w: jax.vjp(low.fn, *a)[1](tuple(w)))(arrays, g.ws)
    for i, (a, b) in enumerate(zip(g.tape, jg)):
        try:
            dj.testing.assert_close(np.zeros(b.shape, b.dtype) if a is None else _np(a), np.asarray(b),
                                    rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)
        except AssertionError as exc:
            bad = dj.testing.check_op_vjps(low, *arrays)
            where = f"; first op whose tape VJP disagrees with jax.vjp of its impl: {bad[0]}" if bad else ""
            raise AssertionError(f"grad of input {i}: tape vs jax.vjp of the lowered graph: "
                                 f"{str(exc).splitlines()[-2]}{where}") from None


def _substitute(call: Call, by_id: dict) -> tuple:
    """``call``'s arguments with the leaves whose torch ids are in ``by_id`` replaced."""
    swap = {id(call.leaves[i]): t for i, t in by_id.items()}

    def sub(x):
        if isinstance(x, dj.Tensor):
            return swap.get(id(x), x)
        if isinstance(x, list):
            return [sub(v) for v in x]
        if isinstance(x, tuple):
            vals = [sub(v) for v in x]
            return type(x)(*vals) if hasattr(x, "_fields") else tuple(vals)
        if isinstance(x, dict):
            return {k: sub(v) for k, v in x.items()}
        if isinstance(x, slice):
            return slice(sub(x.start), sub(x.stop), sub(x.step))
        return x
    leaves = {i: swap.get(id(t), t) for i, t in call.leaves.items()}
    return sub(call.args), sub(call.kwargs), leaves


# ---------------------------------------------------------------- running an OpInfo
def failure(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def run_opinfo(key: str, fn) -> dict:
    """Every check on an OpInfo's samples: ``{"forward"|"grad"|"lowering": [None (agrees) or a failure]}``,
    one entry per sample checked."""
    o = OPINFOS[key]
    res = {"forward": [], "grad": [], "lowering": []}
    fd = forward_dtype(o)
    if fd is not None:
        for s in samples(o, fd, False, FORWARD_SAMPLES):
            res["forward"].append(_attempt(check_forward, o, fn, s))
    gd = grad_dtype(o)
    if gd is not None:
        for k, s in _richest(samples(o, gd, True, GRAD_POOL)):
            if len(res["grad"]) == GRAD_SAMPLES:
                break
            box = []
            res["grad"].append(_attempt(lambda *a: box.append(check_grad(*a)), o, fn, s, key, k))
            if box and box[0] is None:
                res["grad"].pop()     # nothing differentiable in this sample: not counted
            elif box and len(res["lowering"]) < LOWER_SAMPLES:
                res["lowering"].append(_attempt(check_lowering, fn, box[0]))
    return res


def _richest(ss: list) -> list:
    """``[(index, sample)]`` with the samples of most elements first (the first samples are often 0-d, which
    hides broadcasting in a gradient), ties in torch's order."""
    size = [sum(t.numel() for t in torch_inputs(s)) for s in ss]
    return sorted(enumerate(ss), key=lambda p: -size[p[0]])


def _attempt(check, *args):
    try:
        check(*args)
        return None
    except Exception as exc:   # noqa: BLE001 -- any exception is a disagreement, reported with its type
        return failure(exc)


# ---------------------------------------------------------------- reports
def write_summary(config, lines: list) -> None:
    """Print ``lines`` in pytest's terminal output (from a fixture's teardown, where output is captured)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + "\n".join(lines))


def coverage_report(file=sys.stdout) -> dict:
    have = mapped()
    print(f"OpInfos with a dynajax callable: {len(have)} / {len(OPINFOS)} "
          f"({100 * len(have) / len(OPINFOS):.1f}%)", file=file)
    return have


def agreement_report(file=sys.stdout) -> None:
    have = coverage_report(file)
    totals = {k: [0, 0] for k in ("forward", "grad", "lowering")}
    ops_ok = {k: [0, 0] for k in totals}
    bad = []
    t0 = time.perf_counter()
    slow = []
    for key, fn in have.items():
        t1 = time.perf_counter()
        res = run_opinfo(key, fn)
        slow.append((time.perf_counter() - t1, key))
        for k, r in res.items():
            if not r:
                continue
            totals[k][0] += sum(x is None for x in r)
            totals[k][1] += len(r)
            ops_ok[k][0] += all(x is None for x in r)
            ops_ok[k][1] += 1
            for x in r:
                if x is not None:
                    bad.append(f"{key} [{k}] {x}")
                    break
    for k, (ok, n) in totals.items():
        print(f"{k:9s}: {ok}/{n} samples agree ({100 * ok / max(n, 1):.1f}%), "
              f"{ops_ok[k][0]}/{ops_ok[k][1]} OpInfos agree on every sample", file=file)
    print(f"({time.perf_counter() - t0:.0f} s; slowest: "
          f"{', '.join(f'{k} {t:.1f} s' for t, k in sorted(slow, reverse=True)[:10])})", file=file)
    for b in bad:
        print("  " + b, file=file)





# ---------------------------------------------------------------- error inputs
def error_inputs(o) -> list:
    """torch's ``ErrorInput``s for ``o`` (each: a sample, the exception type torch raises, a message regex),
    those that torch 2.13 on the CPU does raise on (a few are device-specific or xfailed in torch's suite),
    as ``[(index in torch's list, ErrorInput)]``."""
    if o.error_inputs_func is None:
        return []
    torch.manual_seed(0)
    out = []
    for k, ei in enumerate(o.error_inputs("cpu")):
        s = ei.sample_input
        try:
            o(s.input, *s.args, **s.kwargs)
        except ei.error_type:
            out.append((k, ei))
        except Exception:   # noqa: BLE001 -- torch raises another type than its table says: not a parity case
            pass
    return out


def error_outcome(fn, ei) -> tuple[bool, bool, str]:
    """Run dynajax on error input ``ei``: ``(same exception type as torch, message matches torch's regex,
    what dynajax did)``."""
    try:
        call = convert(ei.sample_input)
    except Exception as exc:   # noqa: BLE001 -- a sample dynajax cannot even represent
        return False, False, f"not convertible: {failure(exc)}"
    try:
        call.run(fn)
    except Exception as exc:   # noqa: BLE001 -- the exception is what is compared
        same = isinstance(exc, ei.error_type)
        return same, same and re.search(ei.error_regex, str(exc)) is not None, failure(exc)
    return False, False, "no exception"


def error_report(file=sys.stdout) -> None:
    have = mapped()
    n = same = regex = 0
    bad = []
    for key, fn in have.items():
        for k, ei in error_inputs(OPINFOS[key]):
            t, r, what = error_outcome(fn, ei)
            n, same, regex = n + 1, same + t, regex + r
            if not t:
                bad.append(f"{key}/{k}: torch {ei.error_type.__name__} ({ei.error_regex[:60]!r}); dynajax: {what}")
    print(f"error inputs of OpInfos dynajax has: {n}; same exception type: {same} ({100 * same / max(n, 1):.1f}%); "
          f"type and message regex: {regex} ({100 * regex / max(n, 1):.1f}%)", file=file)
    for b in bad:
        print("  " + b, file=file)


if __name__ == "__main__":
    error_report() if sys.argv[1:] == ["errors"] else agreement_report()
