"""Gradient cross-validation (``check_grads``) and ``assert_close``.

``check_grads`` is the library's correctness contract made executable: the
native tape (engine 1), ``jax.vjp`` of the lowered function (engine 2) and
float64 central finite differences must agree, to second order.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._dtype import x64 as _x64
from ._tensor import Tensor, _make
from .autograd import grad_mode
from .autograd.engine import grad as _tape_grad
from .lower import Lowered, Var, Lit, _is_float, _tree_flatten, _where_str, example_values, lower

__all__ = ["assert_close", "check_grads", "check_op_vjps"]

# torch.testing.assert_close's defaults: (rtol, atol) per dtype
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}


def _np(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return np.asarray(x.detach()._value)
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        x = x.detach()
        return x.float().numpy(force=True) if str(x.dtype) == "torch.bfloat16" else x.numpy(force=True)
    return np.asarray(x)


def _dtype_name(x) -> str:
    if isinstance(x, Tensor):
        return x.dtype.name
    d = getattr(x, "dtype", None)
    return str(d).split(".")[-1] if d is not None else np.asarray(x).dtype.name


def assert_close(actual, expected, *, rtol: float | None = None, atol: float | None = None,
                 equal_nan: bool = False, check_dtype: bool = True, msg: str | None = None) -> None:
    """Raise AssertionError unless ``actual`` and ``expected`` match in shape, dtype and value
    (``|a - e| <= atol + rtol * |e|``, PyTorch's per-dtype default tolerances).

    >>> dynajax.testing.assert_close(dynajax.tensor([1.0]), dynajax.tensor([1.0 + 1e-7]))
    """
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    a, e = _np(actual), _np(expected)
    ad, ed = _dtype_name(actual), _dtype_name(expected)
    prefix = f"{msg}\n" if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}The values for attribute 'shape' do not match: {a.shape} != {e.shape}.")
    if check_dtype and ad != ed:
        raise AssertionError(f"{prefix}The values for attribute 'dtype' do not match: {ad} != {ed}.")
    if rtol is None:
        rtol, atol = max(_TOLERANCES.get(ad, (0.0, 0.0)), _TOLERANCES.get(ed, (0.0, 0.0)))
    if a.dtype.kind in "biu" and e.dtype.kind in "biu" and rtol == 0 and atol == 0:
        bad = a != e
    else:
        a64, e64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), \
            e.astype(np.complex128 if e.dtype.kind == "c" else np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(a64 - e64) <= atol + rtol * np.abs(e64))
        bad &= ~(a64 == e64)  # equal infinities
        if equal_nan:
            bad &= ~(np.isnan(a64) & np.isnan(e64))
    if not bad.any():
        return
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(a.astype(np.complex128) - e.astype(np.complex128)).real
        rel = diff / np.abs(e.astype(np.complex128))
    ia = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(diff, nan=np.inf), -1)), a.shape)
    ir = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(rel, nan=np.inf), -1)), a.shape)
    raise AssertionError(
        f"{prefix}Tensor-likes are not close!\n\nMismatched elements: {int(bad.sum())} / {a.size} "
        f"({100 * bad.sum() / max(a.size, 1):.1f}%)\nGreatest absolute difference: {diff[ia]} at index "
        f"{tuple(int(i) for i in ia)} (up to {atol} allowed)\nGreatest relative difference: {rel[ir]} at index "
        f"{tuple(int(i) for i in ir)} (up to {rtol} allowed)")


# ---------------------------------------------------------------- check_grads
def _errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    if a.size == 0:
        return 0.0, 0.0
    d = np.abs(a - b)
    return float(d.max()), float((d / np.maximum(np.abs(b), 1e-300)).max())


def _close(a, b, rtol, atol) -> bool:
    return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) <= atol + rtol * np.abs(np.asarray(b))))


class _Setup:
    """The function's inputs as float64 tensors, its differentiable outputs and random cotangents."""

    def __init__(self, fn, inputs, seed):
        self.fn = fn
        single = isinstance(inputs, (Tensor, np.ndarray, jax.Array))
        self.arrays = []
        for x in ([inputs] if single else list(inputs)):
            v = x.detach()._value if isinstance(x, Tensor) else jnp.asarray(x)
            if np.dtype(v.dtype).kind == "f" or np.dtype(v.dtype).name == "bfloat16":
                v = v.astype(np.float64)
            self.arrays.append(v)
        self.diff = [i for i, v in enumerate(self.arrays) if np.dtype(v.dtype).kind == "f"]
        if not self.diff:
            raise ValueError("check_grads needs a floating-point input to differentiate, but the inputs have dtypes "
                             f"{[str(np.dtype(v.dtype)) for v in self.arrays]}; integer inputs have no gradient")
        self.rng = np.random.default_rng(seed)
        ts = self.tensors()
        with grad_mode.enable_grad():
            leaves = _tree_flatten(fn(*ts))[0]
        self.sel = [k for k, o in enumerate(leaves) if isinstance(o, Tensor) and o.requires_grad]
        if not self.sel:
            raise ValueError("check_grads: the function has no differentiable output (no floating-point output "
                             "depends on a floating-point input through recorded ops)")
        self.ws = [self.rng.standard_normal(tuple(leaves[k].shape)) for k in self.sel]
        self.ws = [w.astype(np.dtype(leaves[k]._v.dtype)) for w, k in zip(self.ws, self.sel)]

    def tensors(self, arrays=None) -> list:
        arrays = self.arrays if arrays is None else arrays
        return [_make(a, i in self.diff) for i, a in enumerate(arrays)]

    def tape_grads(self, arrays=None, create_graph=False):
        ts = self.tensors(arrays)
        with grad_mode.enable_grad():
            leaves = _tree_flatten(self.fn(*ts))[0]
            outs = [leaves[k] for k in self.sel]
            gs = _tape_grad(outs, [ts[i] for i in self.diff], [_make(jnp.asarray(w)) for w in self.ws],
                            create_graph=create_graph, allow_unused=True)
        gs = [g if g is not None else _make(jnp.zeros_like(ts[i]._value)) for g, i in zip(gs, self.diff)]
        return ts, gs

    def value(self, arrays) -> float:
        with grad_mode.enable_grad():  # the function may differentiate inside (a backward op's test)
            leaves = _tree_flatten(self.fn(*self.tensors(arrays)))[0]
        return float(sum(np.sum(_np(leaves[k]).astype(np.float64) * w) for k, w in zip(self.sel, self.ws)))

    def lowered_scalar(self, low: Lowered) -> Callable:
        def s(*dx):
            args = list(self.arrays)
            for i, a in zip(self.diff, dx):
                args[i] = a
            out = jax.tree_util.tree_leaves(low.fn(*args))
            return sum(jnp.sum(out[k] * w) for k, w in zip(self.sel, self.ws))
        return s

    def shifted(self, i: int, d: np.ndarray, eps: float) -> tuple[list, list]:
        plus, minus = list(self.arrays), list(self.arrays)
        plus[i], minus[i] = self.arrays[i] + eps * d, self.arrays[i] - eps * d
        return plus, minus


@_x64.wrap
def check_grads(fn: Callable, inputs, order: int = 2, *, eps: float = 1e-6, rtol: float = 1e-5,
                atol: float = 1e-7, fd_rtol: float = 1e-5, fd_atol: float = 1e-6, seed: int = 0) -> None:
    """Cross-check ``fn``'s gradients at ``inputs`` (computed in float64):

    (a) the native tape, (b) ``jax.vjp`` of the lowered function and (c) central
    finite differences along random directions; with ``order=2`` also double
    backward (``create_graph=True``) against JAX Hessian-vector products.
    Integer inputs are held fixed. On a mismatch raises AssertionError naming
    the input, the max absolute/relative error and the first recorded op
    whose tape VJP disagrees with ``jax.vjp`` of its impl.

    >>> dynajax.testing.check_grads(lambda x: (x.sin() * x).sum(), [dynajax.randn(3)])
    """
    st = _Setup(fn, inputs, seed)
    ts, tape = st.tape_grads(create_graph=order >= 2)
    low = lower(fn, *st.tensors())
    s = st.lowered_scalar(low)
    dx = [st.arrays[i] for i in st.diff]
    jgrads = jax.jit(jax.grad(s, argnums=tuple(range(len(dx)))))(*dx)  # one compile, not one per jnp call

    def fail(what: str, k: int, a, b):
        i = st.diff[k]
        ea, er = _errors(np.asarray(a, np.float64), np.asarray(b, np.float64))
        shape = list(st.arrays[i].shape)
        raise AssertionError(f"check_grads: {what} for input {i} (shape {shape}): max abs error {ea:.3g}, "
                             f"max rel error {er:.3g}{_diagnosis(low, st)}")

    for k, i in enumerate(st.diff):
        a, b = _np(tape[k]), np.asarray(jgrads[k])
        if not _close(a, b, rtol, atol):
            fail("tape gradient vs jax.vjp of the lowered function", k, a, b)
    for k, i in enumerate(st.diff):
        d = st.rng.standard_normal(st.arrays[i].shape)
        plus, minus = st.shifted(i, d, eps)
        numeric = (st.value(plus) - st.value(minus)) / (2 * eps)
        analytic = float(np.sum(_np(tape[k]) * d))
        if not abs(analytic - numeric) <= fd_atol + fd_rtol * max(abs(numeric), abs(analytic), 1.0) * 10:
            fail(f"gradient vs central finite differences along a random direction (tape {analytic:.8g}, "
                 f"finite difference {numeric:.8g})", k, analytic, numeric)
    if order < 2:
        return
    us = [st.rng.standard_normal(st.arrays[i].shape) for i in st.diff]
    with grad_mode.enable_grad():
        live = [(g, _make(jnp.asarray(u))) for g, u in zip(tape, us) if g.requires_grad]
        if live:
            proj = sum(((g * u).sum() for g, u in live[1:]), (live[0][0] * live[0][1]).sum())
            hv = _tape_grad(proj, [ts[i] for i in st.diff], allow_unused=True)
        else:
            hv = [None] * len(st.diff)
    hv = [_np(h) if h is not None else np.zeros(st.arrays[i].shape) for h, i in zip(hv, st.diff)]
    hvp = jax.jit(lambda xs, vs: jax.jvp(jax.grad(s, argnums=tuple(range(len(dx)))), xs, vs)[1])
    jhv = hvp(tuple(dx), tuple(jnp.asarray(u) for u in us))
    for k in range(len(st.diff)):
        if not _close(hv[k], np.asarray(jhv[k]), rtol * 10, atol * 10):
            fail("double backward (create_graph=True) vs jax Hessian-vector product", k, hv[k], jhv[k])
    for k, i in enumerate(st.diff):
        d = st.rng.standard_normal(st.arrays[i].shape)
        plus, minus = st.shifted(i, d, eps)
        gp, gm = st.tape_grads(plus)[1], st.tape_grads(minus)[1]
        numeric = sum(float(np.sum((_np(a) - _np(b)) * u)) for a, b, u in zip(gp, gm, us)) / (2 * eps)
        analytic = float(np.sum(hv[k] * d))
        if not abs(analytic - numeric) <= fd_atol + fd_rtol * max(abs(numeric), abs(analytic), 1.0) * 10:
            fail(f"second order vs finite differences of the gradient (tape {analytic:.8g}, finite difference "
                 f"{numeric:.8g})", k, analytic, numeric)


# ---------------------------------------------------------------- per-op diagnosis
def _diagnosis(low: Lowered, st: _Setup) -> str:
    try:
        bad = check_op_vjps(low, *st.arrays, seed=0, _first=True)
    except Exception as exc:  # noqa: BLE001 - the diagnosis must not hide the original mismatch
        return f"\n(per-op check failed to run: {type(exc).__name__}: {exc})"
    if not bad:
        return "\nevery recorded op's tape VJP matches jax.vjp of its impl (the mismatch is in how they combine)"
    return "\nfirst op whose tape VJP disagrees with jax.vjp of its impl: " + bad[0]


def _tape_cotangents(rule_out, ins, in_vals) -> list:
    from .ops.reduce import sum_to_shape
    res = rule_out if isinstance(rule_out, tuple) else (rule_out,)
    out = []
    for r, x, v in zip(res, ins, in_vals):
        if r is None or not isinstance(x, Var) or not _is_float(x.dtype):
            out.append(None if r is None else _np(r))
            continue
        if tuple(r._v.shape) != x.shape:
            r = sum_to_shape(r, x.shape)
        out.append(_np(r).astype(x.dtype))
    return out


@_x64.wrap
def check_op_vjps(low: Lowered, *args, seed: int = 0, rtol: float = 1e-5, atol: float = 1e-7,
                  _first: bool = False) -> list[str]:
    """Compare every recorded op's tape VJP rule with ``jax.vjp`` of its impl on the recorded values.

    Returns one message per disagreeing op (``[]`` when all agree); custom
    ``autograd.Function`` nodes are compared with ``jax.vjp`` of their traced forward.
    """
    env = example_values(low, *args)
    rng = np.random.default_rng(seed)
    problems = []
    checks = [("eqn", k, e) for k, e in enumerate(low.eqns)]
    for pos, node, ins, outs in low.foreign:
        checks.insert(pos + sum(1 for c in checks[:pos] if c[0] == "foreign"), ("foreign", pos, (node, ins, outs)))
    order = sorted(range(len(checks)), key=lambda j: (checks[j][1], checks[j][0] == "eqn"))
    for j in order:
        kind, _, item = checks[j]
        msg = _check_eqn(item, env, rng, rtol, atol) if kind == "eqn" else _check_foreign(low, item, env, rng,
                                                                                           rtol, atol)
        if msg:
            problems.append(msg)
            if _first:
                break
    return problems


def _val(x, env):
    return x.value if isinstance(x, Lit) else env.get(id(x), x.value)


def _random_cotangent(rng, v):
    g = rng.standard_normal(v.shape)
    if np.dtype(v.dtype).kind == "c":
        g = g + 1j * rng.standard_normal(v.shape)
    return jnp.asarray(g).astype(v.dtype)


def _check_eqn(e, env, rng, rtol, atol) -> str | None:
    if e.op is None or e.op.rule is None:
        return None
    vals = [_val(x, env) for x in e.ins]
    fpos = [j for j, x in enumerate(e.ins) if isinstance(x, Var) and _is_float(x.dtype)]
    fouts = [k for k, v in enumerate(e.outs) if _is_float(v.dtype)]
    if not fpos or not fouts:
        return None
    gs = [_random_cotangent(rng, v) if _is_float(v.dtype) else None for v in e.outs]
    # PyTorch's VJP of a complex function is the conjugate of JAX's along the conjugate cotangent
    # (conj(jax_vjp(conj(g)))); both are the same real-linear map, written in two conventions
    cplx = any(np.dtype(v.dtype).kind == "c" for v in (*e.outs, *(e.ins[j] for j in fpos)))

    def f(*fv):
        full = list(vals)
        for j, v in zip(fpos, fv):
            full[j] = v
        r = e.op.impl(*full, **e.params)
        return r if len(e.outs) == 1 else tuple(r[k] for k in fouts)
    ct = gs[0] if len(e.outs) == 1 else tuple(gs[k] for k in fouts)
    if cplx:
        ct = jax.tree_util.tree_map(jnp.conj, ct)
    jct = jax.jit(lambda xs, ct: jax.vjp(f, *xs)[1](ct))([vals[j] for j in fpos], ct)
    if cplx:
        jct = [np.conj(np.asarray(c)) for c in jct]
    outs = [_make(env[id(v)]) for v in e.outs]
    g_t = [_make(g) if g is not None else _make(jnp.zeros(v.shape, v.dtype)) for g, v in zip(gs, e.outs)]
    args = (g_t[0] if len(e.outs) == 1 else tuple(g_t), outs[0] if len(e.outs) == 1 else tuple(outs),
            *[_make(v, _is_float(x.dtype)) if isinstance(x, Var) else v for x, v in zip(e.ins, vals)])
    undefined = set()   # inputs whose derivative the op declares not implemented (PyTorch raises when asked)
    with grad_mode.no_grad():
        if e.op.per_input is None:
            r = e.op.rule(*args, **e.params)
        else:
            r = []
            for j, rule in enumerate(e.op.per_input):
                try:
                    r.append(None if rule is None else rule(*args, **e.params))
                except NotImplementedError:
                    undefined.add(j)
                    r.append(None)
            r = tuple(r)
    tape = _tape_cotangents(r, e.ins, vals)
    for jj, j in enumerate(fpos):
        if j in undefined:
            continue
        a = tape[j] if j < len(tape) else None
        b = np.asarray(jct[jj])
        if a is None:
            if np.any(b != 0):
                return _op_msg(e.label, e.where, j, "tape returns None, jax.vjp is nonzero", b, np.zeros_like(b))
            continue
        if not _close(a, b, rtol, atol):
            return _op_msg(e.label, e.where, j, "", a, b)
    return None


def _check_foreign(low: Lowered, item, env, rng, rtol, atol) -> str | None:
    node, ins, outs = item
    fin = [j for j, v in enumerate(ins) if v is not None and _is_float(v.dtype)]
    fout = [k for k, v in enumerate(outs) if v is not None]
    if not fin or not fout:
        return None
    targets = {id(ins[j]) for j in fin}

    def f(*xs):
        local = dict(env)
        for j, x in zip(fin, xs):
            local[id(ins[j])] = x
        for e in low.eqns:
            if any(id(v) in targets for v in e.outs):
                continue
            r = e.run([_val(x, local) for x in e.ins])
            for v, o in zip(e.outs, r):
                local[id(v)] = o
        return tuple(local[id(outs[k])] for k in fout)
    gs = [jnp.asarray(rng.standard_normal(outs[k].shape)).astype(outs[k].dtype) for k in fout]
    jct = jax.jit(lambda xs, ct: jax.vjp(f, *xs)[1](ct))([env[id(ins[j])] for j in fin], tuple(gs))
    gfull = [None] * len(node.out_meta)
    for k, g in zip(fout, gs):
        gfull[k] = _make(g)
    for k, (shape, dt) in enumerate(node.out_meta):
        if gfull[k] is None:
            gfull[k] = _make(jnp.zeros(shape, dt))
    with grad_mode.no_grad():
        r = node.op.rule(gfull[0] if len(gfull) == 1 else tuple(gfull), None, *([None] * len(node.edges)),
                         **node.params)
    r = r if isinstance(r, tuple) else (r,)
    for jj, j in enumerate(fin):
        a = _np(r[j]) if j < len(r) and r[j] is not None else np.zeros(ins[j].shape)
        b = np.asarray(jct[jj])
        if not _close(a, b, rtol, atol):
            return _op_msg(node.op.name, None, j, "custom autograd.Function backward vs jax.vjp of its forward",
                           a, b)
    return None


def _op_msg(name, where, j, note, a, b) -> str:
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    ea, er = _errors(np.asarray(a, wide), np.asarray(b, wide))
    loc = f" at {_where_str(where)}" if where else ""
    return (f"'{name}'{loc}: cotangent of its input {j} differs{' (' + note + ')' if note else ''}: "
            f"max abs error {ea:.3g}, max rel error {er:.3g}")
