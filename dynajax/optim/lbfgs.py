"""``LBFGS``: limited-memory BFGS with ``step(closure)``, PyTorch's algorithm (and its strong-Wolfe line search)."""
from __future__ import annotations

import math
from typing import NamedTuple

from .._tensor import Tensor
from ..autograd import grad_mode
from .optimizer import Optimizer


def _dot(a, b) -> float:
    return float((a * b).sum())


class _Point(NamedTuple):
    """A trial along the search direction: step ``t``, loss ``f``, flat gradient ``g``, directional slope."""
    t: float
    f: float
    g: object
    slope: float


def _cubic_min(a: _Point, b: _Point, bounds=None) -> float:
    """Where the cubic matching values and slopes at ``a`` and ``b`` has its minimum (Nocedal & Wright, eq.
    3.59), clipped to ``bounds`` (default: between the two); their midpoint where the cubic has none."""
    lo, hi = bounds if bounds is not None else sorted((a.t, b.t))
    d1 = a.slope + b.slope - 3 * (a.f - b.f) / (a.t - b.t)
    disc = d1 * d1 - a.slope * b.slope
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(disc)
    left, right = (a, b) if a.t <= b.t else (b, a)
    t = right.t - (right.t - left.t) * ((right.slope + d2 - d1) / (right.slope - left.slope + 2 * d2))
    return min(max(t, lo), hi)


def _strong_wolfe(evaluate, t: float, d, start: _Point, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_evals=25):
    """A step along ``d`` meeting the strong Wolfe conditions, as PyTorch's LBFGS searches (an expansion phase
    until a step is bracketed, then zooming by safeguarded cubic interpolation; Nocedal & Wright, Algorithms
    3.5-3.6). ``evaluate(t) -> _Point``; returns (the point found, evaluations)."""
    def armijo(p: _Point) -> bool:
        return p.f <= start.f + c1 * p.t * start.slope

    def curved(p: _Point) -> bool:
        return abs(p.slope) <= -c2 * start.slope

    prev, cur = start, evaluate(t)
    evals = tries = 1
    bracket = None
    while tries <= max_evals:   # expansion
        if not armijo(cur) or (tries > 2 and cur.f >= prev.f):
            bracket = [prev, cur]
            break
        if curved(cur):
            return cur, evals
        if cur.slope >= 0:
            bracket = [prev, cur]
            break
        nxt = _cubic_min(prev, cur, bounds=(cur.t + 0.01 * (cur.t - prev.t), cur.t * 10))
        prev, cur = cur, evaluate(nxt)
        evals += 1
        tries += 1
    if bracket is None:   # the evaluations ran out before a step was bracketed
        bracket = [start, cur]
    lo = 0 if bracket[0].f <= bracket[1].f else 1
    d_max = float(d.abs().max())
    stalled = False
    while tries <= max_evals:   # zoom
        a, b = bracket
        if abs(b.t - a.t) * d_max < tolerance_change:
            break
        t = _cubic_min(a, b)
        left, right = min(a.t, b.t), max(a.t, b.t)
        margin = 0.1 * (right - left)
        if min(right - t, t - left) < margin:   # too close to an end: move in, at the second time running
            if stalled or not left < t < right:
                t = right - margin if abs(t - right) < abs(t - left) else left + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        p = evaluate(t)
        evals += 1
        tries += 1
        if not armijo(p) or p.f >= bracket[lo].f:
            bracket[1 - lo] = p
            lo = 0 if bracket[0].f <= bracket[1].f else 1
            continue
        if not curved(p) and p.slope * (bracket[1 - lo].t - bracket[lo].t) >= 0:
            bracket[1 - lo] = bracket[lo]
        bracket[lo] = p
        if curved(p):
            break
    return bracket[lo], evals


class LBFGS(Optimizer):
    """L-BFGS over all parameters of its single group; ``step(closure)`` may evaluate ``closure`` many times.

    >>> def closure():
    ...     opt.zero_grad(); loss = f(x); loss.backward(); return loss
    >>> opt.step(closure)
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _flat_grad(self):
        from ..ops.creation import zeros
        from ..ops.join import cat
        return cat([p.grad.reshape(-1) if p.grad is not None else zeros(p.numel(), dtype=p.dtype)
                    for p in self._params], 0)

    def _add_grad(self, t: float, d) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(d[offset:offset + n].reshape(p.shape), alpha=t)
            offset += n

    def _directional_evaluate(self, closure, x, t, d):
        """Loss, flat gradient and slope along ``d`` at ``x + t * d``; the parameters are back at ``x`` after."""
        self._add_grad(t, d)
        with grad_mode.enable_grad():
            loss = float(closure())
        flat_grad = self._flat_grad()
        for p, v in zip(self._params, x):
            p.copy_(v)
        return loss, flat_grad, _dot(flat_grad, d)

    @grad_mode.no_grad()
    def step(self, closure):
        """Run up to ``max_iter`` L-BFGS iterations; returns the first loss ``closure`` computed."""
        g = self.param_groups[0]
        lr, max_iter, max_eval = float(g["lr"]), g["max_iter"], g["max_eval"]
        tol_grad, tol_change, history = g["tolerance_grad"], g["tolerance_change"], g["history_size"]
        line_search_fn = g["line_search_fn"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with grad_mode.enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if float(flat_grad.abs().max()) <= tol_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, H_diag = -flat_grad, [], [], [], 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == history:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / _dot(y, y)
                al = state.setdefault("al", [None] * history)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = _dot(old_stps[i], q) * ro[i]
                    q = q - old_dirs[i] * al[i]
                r = q * H_diag
                for i in range(len(old_dirs)):
                    be_i = _dot(old_dirs[i], r) * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r
            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            gtd = _dot(flat_grad, d)
            if gtd > -tol_change:
                break
            ls_evals = 0
            opt_cond = False
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = [p.clone() for p in self._params]
                found, ls_evals = _strong_wolfe(
                    lambda t_: _Point(t_, *self._directional_evaluate(closure, x_init, t_, d)), t, d,
                    _Point(0.0, loss, flat_grad, gtd), max_evals=max_eval - evals)
                loss, flat_grad, t = found.f, found.g, found.t
                self._add_grad(t, d)
                opt_cond = float(flat_grad.abs().max()) <= tol_grad
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    with grad_mode.enable_grad():
                        loss = float(closure())
                    flat_grad = self._flat_grad()
                    opt_cond = float(flat_grad.abs().max()) <= tol_grad
                    ls_evals = 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if n_iter == max_iter or evals >= max_eval or opt_cond:
                break
            if float((d * t).abs().max()) <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
