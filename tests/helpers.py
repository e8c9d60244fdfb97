"""Shared test oracles: compare a dynajax function with PyTorch (values, gradients,
double backward) and with float64 central finite differences.

Every op test goes through these two functions, so there is one definition of
"matches PyTorch" and one of "gradient is right" for the whole suite.
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

import dynajax as dj

_XLA_COMPILES: list = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *a, **k: _XLA_COMPILES.append(name) if name.endswith("backend_compile_duration") else None)


# a test of what only JAX's CPU backend does (XLA:CPU's lowering, arrays made on the host); on a GPU or TPU
# these tests are skipped, and the numbers they guard are tested by the rest of the suite there
XLA_CPU_ONLY = pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks what JAX's CPU backend does")

# where a new tensor lands: JAX's default device, as PyTorch's name ("cpu", or "cuda" on a GPU machine)
DEFAULT_DEVICE = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())


def unavailable_device() -> str:
    """A device name that a ``--device`` flag must refuse on this machine."""
    return next(d for d in ("cuda", "tpu", "mps") if not _jax_has(d))


def _jax_has(name: str) -> bool:
    try:
        dj.device(name).jax_device()
        return True
    except RuntimeError:
        return False


def xla_compiles() -> int:
    """How many XLA compilations this process has run (JAX's backend-compile events)."""
    return len(_XLA_COMPILES)


try:
    import torch
except ImportError:  # the test extra installs torch; without it only numpy/FD oracles run
    torch = None

_TOL = {np.dtype(np.float64): (1e-7, 1e-7), np.dtype(np.float32): (1.3e-6, 1e-5),
        np.dtype(np.float16): (1e-3, 1e-5)}


def to_np(x) -> np.ndarray:
    if isinstance(x, dj.Tensor):
        return np.asarray(x.detach()._value)
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy(force=True)
    return np.asarray(x)


def to_torch(a: np.ndarray, requires_grad: bool = False):
    t = torch.from_numpy(np.array(a))
    return t.requires_grad_(requires_grad) if requires_grad else t


def to_dj(a: np.ndarray, requires_grad: bool = False):
    return dj.tensor(np.array(a), requires_grad=requires_grad)


def assert_close(actual, expected, rtol=None, atol=None, check_dtype: bool = True, msg: str = "") -> None:
    """``dynajax.testing.assert_close`` (PyTorch's per-dtype tolerances, NaNs equal) with this suite's
    conventions: dtypes are compared only between a dynajax result and a torch expectation, and a lone
    ``rtol`` or ``atol`` takes the other from the expected dtype's default."""
    if (rtol is None) != (atol is None):
        r, t = _TOL.get(to_np(expected).dtype, (1e-7, 1e-7))
        rtol, atol = (r if rtol is None else rtol), (t if atol is None else atol)
    strict = check_dtype and isinstance(actual, dj.Tensor) and torch is not None and isinstance(expected, torch.Tensor)
    dj.testing.assert_close(actual, expected if strict else to_np(expected), rtol=rtol, atol=atol,
                            equal_nan=True, check_dtype=strict, msg=msg or None)


def _flat_outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _is_float(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind == "f"


def compare(fn_dj, fn_torch, *inputs, grad: bool = True, double: bool = False, rtol=None, atol=None,
            seed: int = 0) -> None:
    """Run ``fn_dj`` and ``fn_torch`` on the same numpy ``inputs``; compare outputs,
    gradients for a random cotangent, and (``double``) second-order gradients."""
    if torch is None:
        pytest.skip("PyTorch oracle not installed")
    rng = np.random.default_rng(seed)
    needs = [grad and _is_float(a) for a in inputs]
    xd = [to_dj(a, r) for a, r in zip(inputs, needs)]
    xt = [to_torch(a, r) for a, r in zip(inputs, needs)]
    od, ot = _flat_outputs(fn_dj(*xd)), _flat_outputs(fn_torch(*xt))
    assert len(od) == len(ot)
    for i, (a, e) in enumerate(zip(od, ot)):
        assert_close(a, e, rtol, atol, msg=f"output {i}")
    if not grad or not any(needs):
        return
    pairs = [(a, e) for a, e in zip(od, ot) if e.requires_grad]
    if not pairs:
        return
    cots = [rng.standard_normal(to_np(e).shape).astype(to_np(e).dtype) for _, e in pairs]
    gi = [i for i, r in enumerate(needs) if r]
    gd = dj.autograd.grad([a for a, _ in pairs], [xd[i] for i in gi], [to_dj(c) for c in cots],
                          create_graph=double, allow_unused=True)
    gt = torch.autograd.grad([e for _, e in pairs], [xt[i] for i in gi], [to_torch(c) for c in cots],
                             create_graph=double, allow_unused=True)
    for k, (a, e) in enumerate(zip(gd, gt)):
        if e is None:
            assert a is None or np.all(to_np(a) == 0), f"grad {k}: torch has none, dynajax nonzero"
            continue
        assert a is not None, f"grad of input {gi[k]}: dynajax returned None"
        assert_close(a, e, rtol, atol, msg=f"grad of input {gi[k]}")
    if double:
        live = [(a, e) for a, e in zip(gd, gt) if e is not None and e.requires_grad]
        if not live:
            return
        vs = [rng.standard_normal(to_np(e).shape) .astype(to_np(e).dtype) for _, e in live]
        sd = sum(((a * to_dj(v)).sum() for (a, _), v in zip(live, vs)), dj.tensor(0.0, dtype=live[0][0].dtype))
        st = sum(((e * to_torch(v)).sum() for (_, e), v in zip(live, vs)))
        ggt = torch.autograd.grad(st, [xt[i] for i in gi], allow_unused=True)
        if not sd.requires_grad:  # dynajax knows the second derivative is identically zero
            for k, e in enumerate(ggt):
                assert e is None or np.allclose(to_np(e), 0), f"double grad of input {gi[k]}: dynajax has none"
            return
        ggd = dj.autograd.grad(sd, [xd[i] for i in gi], allow_unused=True)
        for k, (a, e) in enumerate(zip(ggd, ggt)):
            if e is None:
                assert a is None or np.allclose(to_np(a), 0), f"double grad {k}: torch none, dynajax nonzero"
                continue
            assert a is not None, f"double grad of input {gi[k]}: dynajax returned None"
            assert_close(a, e, rtol, atol, msg=f"double grad of input {gi[k]}")


def gradcheck(fn, *inputs, order: int = 1, eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
              seed: int = 0) -> None:
    """Float64 central finite differences along random directions against the tape
    (``order=2`` also checks the gradient of a random gradient projection)."""
    rng = np.random.default_rng(seed)
    xs = [np.asarray(a, np.float64) if _is_float(a) else np.asarray(a) for a in inputs]
    diff = [i for i, a in enumerate(xs) if _is_float(a)]

    def scalar(*arrs, create_graph=False):
        ts = [dj.tensor(a, requires_grad=(i in diff)) for i, a in enumerate(arrs)]
        outs = [o for o in _flat_outputs(fn(*ts)) if o.dtype.is_floating_point]
        ws = [dj.tensor(w) for w in weights]
        s = sum(((o * w).sum() for o, w in zip(outs, ws)), dj.tensor(0.0, dtype=dj.float64))
        return s, ts

    probe = [o for o in _flat_outputs(fn(*[dj.tensor(a) for a in xs])) if o.dtype.is_floating_point]
    weights = [rng.standard_normal(to_np(o).shape) for o in probe]

    def check(f_val, f_grad, label):
        dirs = {i: rng.standard_normal(xs[i].shape) for i in diff}
        grads = f_grad(xs)
        analytic = sum(float(np.sum(to_np(grads[k]) * dirs[i])) if grads[k] is not None else 0.0
                       for k, i in enumerate(diff))
        plus = [a + eps * dirs[i] if i in dirs else a for i, a in enumerate(xs)]
        minus = [a - eps * dirs[i] if i in dirs else a for i, a in enumerate(xs)]
        numeric = (f_val(plus) - f_val(minus)) / (2 * eps)
        assert abs(analytic - numeric) <= atol + rtol * max(abs(numeric), abs(analytic)) * 10 + 1e-6 * \
            max(1.0, abs(numeric)), f"{label}: analytic {analytic!r} vs finite difference {numeric!r}"

    def value(arrs):
        with dj.no_grad():
            return float(scalar(*arrs)[0].item())

    def first(arrs, create_graph=False):
        s, ts = scalar(*arrs)
        return dj.autograd.grad(s, [ts[i] for i in diff], allow_unused=True, create_graph=create_graph)

    check(value, first, "first order")
    if order >= 2:
        us = {i: rng.standard_normal(xs[i].shape) for i in diff}

        def gproj(arrs, create_graph=False):
            gs = first(arrs, create_graph=True)
            return sum(((g * dj.tensor(us[i])).sum() for g, i in zip(gs, diff) if g is not None),
                       dj.tensor(0.0, dtype=dj.float64)), gs

        def gval(arrs):
            return float(gproj(arrs)[0].detach().item())

        def ggrad(arrs):
            s, ts = scalar(*arrs)
            gs = dj.autograd.grad(s, [ts[i] for i in diff], allow_unused=True, create_graph=True)
            p = sum(((g * dj.tensor(us[i])).sum() for g, i in zip(gs, diff) if g is not None and g.requires_grad),
                    dj.tensor(0.0, dtype=dj.float64))
            if not p.requires_grad:
                return [None] * len(diff)
            return dj.autograd.grad(p, [ts[i] for i in diff], allow_unused=True)

        check(gval, ggrad, "second order")


def outcome(L, fn):
    """``("ok", values, dtype name)`` of ``fn(L)``'s tensor (``L``: torch or dynajax), or ``(exception type,
    message)``."""
    try:
        r = fn(L)
    except Exception as e:   # noqa: BLE001 -- the exception itself is compared
        return type(e).__name__, str(e)
    if isinstance(r, dj.Tensor) or (torch is not None and isinstance(r, torch.Tensor)):
        return "ok", r.tolist(), str(r.dtype).split(".")[-1]
    return "ok", r


def same(fn):
    """``fn(torch)`` and ``fn(dynajax)`` give the same values and dtype, or raise the same error; the outcome."""
    expected, actual = outcome(torch, fn), outcome(dj, fn)
    assert actual == expected, f"torch: {expected}\ndynajax: {actual}"
    return actual


def raises_like_torch(fn, exc, msg: str) -> None:
    """``fn(torch)`` and ``fn(dynajax)`` both raise ``exc`` with ``msg`` in the message."""
    if torch is None:
        pytest.skip("PyTorch oracle not installed")
    for m in (torch, dj):
        with pytest.raises(exc) as info:
            fn(m)
        assert msg in str(info.value), f"{m.__name__} says: {info.value}"


def train_step(model, opt, loss_fn):
    """The usual training step ``step(x, y) -> loss`` (zero_grad, forward, backward, optimizer step),
    eager or to be compiled by the test."""
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step
