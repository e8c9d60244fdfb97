"""``LBFGS``: limited-memory BFGS with ``step(closure)``, PyTorch's algorithm (and its strong-Wolfe line search)."""
from __future__ import annotations

import math

from .._tensor import Tensor
from ..autograd import grad_mode
from .optimizer import Optimizer


def _dot(a, b) -> float:
    return float((a * b).sum())


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimizer, within ``bounds``, of the cubic through ``(x1, f1)``, ``(x2, f2)`` (slopes ``g1``, ``g2``)."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, lo), hi)


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """PyTorch's strong-Wolfe line search along ``d`` from step ``t``: ``(loss, flat grad, step, evaluations)``."""
    d_norm = float(d.abs().max())
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:   # bracketing phase
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        min_step, max_step = t + 0.01 * (t - t_prev), t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:   # zoom phase
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos], bracket_g[low_pos], bracket_gtd[low_pos] = t, f_new, g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


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
        """Loss and flat gradient at ``x + t * d``; the parameters are back at ``x`` after."""
        self._add_grad(t, d)
        with grad_mode.enable_grad():
            loss = float(closure())
        flat_grad = self._flat_grad()
        for p, v in zip(self._params, x):
            p.copy_(v)
        return loss, flat_grad

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
                loss, flat_grad, t, ls_evals = _strong_wolfe(
                    lambda x, t_, d_: self._directional_evaluate(closure, x, t_, d_), x_init, t, d, loss, flat_grad,
                    gtd, max_ls=max_eval - evals)
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
