"""Optimizers with PyTorch's update rules (single-tensor form): ``SGD``, ``Adam``, ``AdamW``,
``RMSprop``, ``Adagrad``, ``Adadelta``."""
from __future__ import annotations

from .._tensor import Tensor
from ..ops.creation import full_like, state_zeros_like, tensor
from ._fused import (adadelta_update, adagrad_update, adam_update, adamax_update, float_valued, fusable,
                     nadam_update, radam_update, rmsprop_update, sgd_momentum_update)
from .optimizer import Optimizer, _rounds, new_step, set_


def _check(lr, *, nan_ok: bool = False, **values) -> None:
    """PyTorch's argument checks, in its order: ``lr`` (a float or a 1-element tensor), then each
    ``name=(value, lowest)``: ``ValueError("Invalid <name>: <value>")`` unless ``lowest <= value`` (and, for a
    ``beta parameter``, ``value < 1``). ``nan_ok``: compare as SGD does (``value < lowest`` fails; NaN passes)."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    for name, (v, lo) in {"learning rate": (lr, 0.0), **values}.items():
        if v < lo if nan_ok else not (lo <= v < 1.0 if name.startswith("beta") else lo <= v):
            raise ValueError(f"Invalid {name}: {v}")


def _betas(betas) -> dict:
    return {f"beta parameter at index {i}": (b, 0.0) for i, b in enumerate(betas[:2])}


def _check_fused(fused, foreach, differentiable) -> None:
    if fused and differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if fused and foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def _decay(grad: Tensor, p: Tensor, wd: float) -> Tensor:
    return grad + p * wd if wd else grad


def _update_fused(opt, items: list, group: dict, names: list, update, scalars: tuple = ()) -> None:
    """Update the parameters of ``items`` (``(p, grad, state)``) whose state tensors ``names`` (each shaped as
    the parameter), 0-d float states ``scalars`` and float step ``update`` (a fused op of ``_fused``) covers
    in one op; the others one by one (``opt._update``)."""
    fused = []
    for p, grad, state in items:
        opt._init_state(p, state, group)
        kept = [state[k] for k in names]
        extra = [state[k] for k in scalars]
        extra.append(state["step"])
        if fusable(p, grad, *kept) and all([float_valued(t) for t in extra]):
            fused.append((p, grad, *kept, *extra))
        else:
            opt._update(p, grad, state, group)
    if fused:
        update(fused, group)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov and weight decay."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None) -> None:
        _check(lr, nan_ok=True, **{"momentum value": (momentum, 0.0), "weight_decay value": (weight_decay, 0.0)})
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))
        _check_fused(fused, foreach, differentiable)

    def _update_group(self, items, group) -> None:
        fused = []
        for p, grad, state in items:
            buf = state.get("momentum_buffer")
            if buf is None and group["momentum"] and not group["dampening"] and fusable(p, grad):
                # PyTorch's first step sets the buffer to the gradient; without dampening, zeros updated
                # as every later step are that gradient, so the first step is the same program as the
                # others (dynajax.compile: one executable, not one for the first step and one after)
                buf = state["momentum_buffer"] = state_zeros_like(p)
            if group["momentum"] and buf is not None and fusable(p, grad, buf):
                fused.append((p, grad, buf))
            elif not group["momentum"] and fusable(p, grad):
                fused.append((p, grad))
            else:
                self._update(p, grad, state, group)
        if fused:
            sgd_momentum_update(fused, group)

    def _update_in_rounds(self, items, group) -> None:
        """PyTorch's SGD reads the momentum buffers once per step: a parameter listed twice that has none yet
        starts each listing's buffer from its gradient (the last one kept)."""
        fresh = {id(s) for _, _, s in items if s.get("momentum_buffer") is None}
        for r in _rounds(items):
            for _, _, s in r:
                if id(s) in fresh:
                    s.pop("momentum_buffer", None)
            SGD._update_group(self, r, group)

    def _update(self, p, grad, state, group) -> None:
        grad = _decay(grad, p, group["weight_decay"])
        mu = group["momentum"]
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.clone().detach()
            else:
                set_(buf, buf * mu + grad * (1 - group["dampening"]))
            grad = grad + buf * mu if group["nesterov"] else buf
        p.add_(grad, alpha=-group["lr"])


class Adam(Optimizer):
    """Adam (optionally AMSGrad); ``weight_decay`` is L2 added to the gradient."""

    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False) -> None:
        if isinstance(lr, Tensor) and foreach and not capturable:
            raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
        _check(lr, **{"epsilon value": (eps, 0.0)}, **_betas(betas), **{"weight_decay value": (weight_decay, 0.0)})
        if not all(isinstance(b, float) for b in betas[:2]) and not all(isinstance(b, Tensor) for b in betas[:2]):
            raise ValueError("betas must be either both floats or both Tensors")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay or self._decoupled))
        _check_fused(fused, foreach, differentiable)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if self._decoupled:   # (AdamW stays decoupled, whatever the state dict says, as in PyTorch)
            for g in self.param_groups:
                g["decoupled_weight_decay"] = True

    def _update_group(self, items, group) -> None:
        _update_fused(self, items, group, ["exp_avg", "exp_avg_sq"] + ["max_exp_avg_sq"] * bool(group["amsgrad"]),
                      adam_update)

    @staticmethod
    def _init_state(p, state, group) -> None:
        if not state:
            state["step"] = new_step()
            state["exp_avg"] = state_zeros_like(p)
            state["exp_avg_sq"] = state_zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = state_zeros_like(p)

    def _update(self, p, grad, state, group) -> None:
        self._init_state(p, state, group)
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        step = self._step(state)
        if group["decoupled_weight_decay"]:
            if wd:
                p.mul_(1 - lr * wd)
        else:
            grad = _decay(grad, p, wd)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        set_(m, m + (grad - m) * (1 - b1))
        set_(v, v * b2 + grad * grad * (1 - b2))
        step_size = lr / (1 - b1 ** step)
        bc2_sqrt = (1 - b2 ** step) ** 0.5
        if group["amsgrad"]:
            vmax = state["max_exp_avg_sq"]
            set_(vmax, vmax.maximum(v))
            v = vmax
        denom = v.sqrt() / bc2_sqrt + group["eps"]
        p.add_(m / denom, alpha=-step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay``), default ``weight_decay=1e-2``."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused)


class RMSprop(Optimizer):
    """RMSprop with optional momentum and centering."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False) -> None:
        _check(lr, **{"epsilon value": (eps, 0.0), "momentum value": (momentum, 0.0),
                  "weight_decay value": (weight_decay, 0.0), "alpha value": (alpha, 0.0)})
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    @staticmethod
    def _init_state(p, state, group) -> None:
        if not state:
            state["step"] = new_step()
            state["square_avg"] = state_zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = state_zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = state_zeros_like(p)

    def _update_group(self, items, group) -> None:
        _update_fused(self, items, group, ["square_avg"] + ["grad_avg"] * bool(group["centered"])
                      + ["momentum_buffer"] * (group["momentum"] > 0), rmsprop_update)

    def _update(self, p, grad, state, group) -> None:
        self._init_state(p, state, group)
        self._step(state)
        grad = _decay(grad, p, group["weight_decay"])
        a = group["alpha"]
        sq = state["square_avg"]
        set_(sq, sq * a + grad * grad * (1 - a))
        if group["centered"]:
            ga = state["grad_avg"]
            set_(ga, ga + (grad - ga) * (1 - a))
            avg = (sq - ga * ga).sqrt()
        else:
            avg = sq.sqrt()
        avg = avg + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            set_(buf, buf * group["momentum"] + grad / avg)
            p.add_(buf, alpha=-group["lr"])
        else:
            p.add_(grad / avg, alpha=-group["lr"])


class Adagrad(Optimizer):
    """Adagrad: per-element learning rates from the running sum of squared gradients."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None) -> None:
        _check(lr, **{"lr_decay value": (lr_decay, 0.0),
                  "weight_decay value": (weight_decay, 0.0),
                  "initial_accumulator_value value": (initial_accumulator_value, 0.0), "epsilon value": (eps, 0.0)})
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))
        _check_fused(fused, foreach, differentiable)
        for g in self.param_groups:
            for p in g["params"]:
                self.state[p]["step"] = new_step()
                self.state[p]["sum"] = full_like(p, g["initial_accumulator_value"])

    def _update_group(self, items, group) -> None:   # (its state is made with the optimizer)
        _update_fused(self, items, group, ["sum"], adagrad_update)

    def _update(self, p, grad, state, group) -> None:
        step = self._step(state)
        grad = _decay(grad, p, group["weight_decay"])
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        s = state["sum"]
        set_(s, s + grad * grad)
        p.add_(grad / (s.sqrt() + group["eps"]), alpha=-clr)


class Adadelta(Optimizer):
    """Adadelta: step sizes from running averages of squared gradients and squared updates."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        _check(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check(lr, **{"epsilon value": (eps, 0.0), "weight_decay value": (weight_decay, 0.0)})
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable, foreach=foreach, differentiable=differentiable))

    @staticmethod
    def _init_state(p, state, group) -> None:
        if not state:
            state["step"] = new_step()
            state["square_avg"] = state_zeros_like(p)
            state["acc_delta"] = state_zeros_like(p)

    def _update_group(self, items, group) -> None:
        _update_fused(self, items, group, ["square_avg", "acc_delta"], adadelta_update)

    def _update(self, p, grad, state, group) -> None:
        self._init_state(p, state, group)
        self._step(state)
        grad = _decay(grad, p, group["weight_decay"])
        rho, eps = group["rho"], group["eps"]
        sq, acc = state["square_avg"], state["acc_delta"]
        set_(sq, sq * rho + grad * grad * (1 - rho))
        delta = (acc + eps).sqrt() / (sq + eps).sqrt() * grad
        set_(acc, acc * rho + delta * delta * (1 - rho))
        p.add_(delta, alpha=-group["lr"])


class _AdamFamily(Optimizer):
    """Shared setup of Adamax, NAdam and RAdam: step, first and second moment state."""

    _second = "exp_avg_sq"

    def __init__(self, params, defaults: dict) -> None:
        lr, eps, wd, betas = defaults["lr"], defaults["eps"], defaults["weight_decay"], defaults["betas"]
        _check(lr, **{"epsilon value": (eps, 0.0)}, **_betas(betas), **{"weight_decay value": (wd, 0.0)},
               **{"momentum_decay value": (defaults.get("momentum_decay", 0.0), 0.0)})
        super().__init__(params, defaults)

    def _init_state(self, p, state, group) -> None:
        if not state:
            state["step"] = new_step()
            if "momentum_decay" in group:
                state["mu_product"] = tensor(1.0)
            state["exp_avg"] = state_zeros_like(p)
            state[self._second] = state_zeros_like(p)

    def _update_group(self, items, group) -> None:
        _update_fused(self, items, group, ["exp_avg", self._second], self._fused_update, self._fused_scalars)

    _fused_scalars: tuple = ()

    def _moments(self, p, grad, state, group):
        """Update the first moment (and init state); returns (step, grad after weight decay)."""
        self._init_state(p, state, group)
        step = self._step(state)
        wd = group["weight_decay"]
        if group.get("decoupled_weight_decay") and wd:
            p.mul_(1 - group["lr"] * wd)
        elif wd:
            grad = _decay(grad, p, wd)
        m = state["exp_avg"]
        set_(m, m + (grad - m) * (1 - group["betas"][0]))
        return step, grad

    def _second_moment(self, grad, state, b2: float):
        v = state["exp_avg_sq"]
        return set_(v, v * b2 + grad * grad * (1 - b2))


class Adamax(_AdamFamily):
    """Adam with an infinity-norm second moment."""

    _second = "exp_inf"
    _fused_update = staticmethod(adamax_update)

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, p, grad, state, group) -> None:
        step, grad = self._moments(p, grad, state, group)
        b1, b2 = group["betas"]
        u = state["exp_inf"]
        set_(u, (u * b2).maximum(grad.abs() + group["eps"]))
        p.add_(state["exp_avg"] / u, alpha=-group["lr"] / (1 - b1 ** step))


class NAdam(_AdamFamily):
    """Adam with Nesterov momentum (and PyTorch's momentum decay schedule)."""

    _fused_update = staticmethod(nadam_update)
    _fused_scalars = ("mu_product",)

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False) -> None:
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, grad, state, group) -> None:
        step, grad = self._moments(p, grad, state, group)
        b1, b2 = group["betas"]
        lr, md = group["lr"], group["momentum_decay"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (step * md))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * md))
        prod = self._scale_scalar(state["mu_product"], mu)
        v = self._second_moment(grad, state, b2)
        denom = (v / (1 - b2 ** step)).sqrt() + group["eps"]
        p.add_(grad / denom, alpha=-lr * (1.0 - mu) / (1.0 - prod))
        p.add_(state["exp_avg"] / denom, alpha=-lr * mu_next / (1.0 - prod * mu_next))


class RAdam(_AdamFamily):
    """Rectified Adam: plain momentum SGD until the variance estimate is reliable."""

    _fused_update = staticmethod(radam_update)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False) -> None:
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable, differentiable=differentiable))

    def _update(self, p, grad, state, group) -> None:
        step, grad = self._moments(p, grad, state, group)
        b1, b2 = group["betas"]
        v = self._second_moment(grad, state, b2)
        bc2 = 1 - b2 ** step
        m_hat = state["exp_avg"] / (1 - b1 ** step)
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * step * (b2 ** step) / bc2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            p.add_(m_hat * group["lr"] * (bc2 ** 0.5 / (v.sqrt() + group["eps"])) * rect, alpha=-1.0)
        else:
            p.add_(m_hat * group["lr"], alpha=-1.0)
