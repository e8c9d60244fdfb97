"""``LBFGS``: limited-memory BFGS with ``step(closure)``, PyTorch's algorithm (no line search)."""
from __future__ import annotations

from ..autograd import grad_mode
from .optimizer import Optimizer


def _dot(a, b) -> float:
    return float((a * b).sum())


class LBFGS(Optimizer):
    """L-BFGS over all parameters of its single group; ``step(closure)`` may evaluate ``closure`` many times.

    >>> def closure():
    ...     opt.zero_grad(); loss = f(x); loss.backward(); return loss
    >>> opt.step(closure)
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None) -> None:
        if line_search_fn is not None:
            raise NotImplementedError("dynajax: LBFGS line_search_fn='strong_wolfe' is not supported yet")
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

    @grad_mode.no_grad()
    def step(self, closure):
        """Run up to ``max_iter`` L-BFGS iterations; returns the first loss ``closure`` computed."""
        g = self.param_groups[0]
        lr, max_iter, max_eval = g["lr"], g["max_iter"], g["max_eval"]
        tol_grad, tol_change, history = g["tolerance_grad"], g["tolerance_change"], g["history_size"]
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
                al = [0.0] * len(old_dirs)
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
            if _dot(flat_grad, d) > -tol_change:
                break
            ls_evals = 0
            self._add_grad(t, d)
            opt_cond = False
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
