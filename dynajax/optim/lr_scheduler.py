"""Learning-rate schedulers with PyTorch's (chainable) update formulas, state dicts and warnings."""
from __future__ import annotations

import math
import types
import warnings
import weakref
from bisect import bisect_right
from collections import Counter
from functools import partial, wraps

from .._tensor import Tensor
from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR",
           "MultiplicativeLR", "LinearLR", "ConstantLR", "OneCycleLR", "ReduceLROnPlateau", "PolynomialLR",
           "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler", "CyclicLR"]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where possible. Please "
    "use `scheduler.step()` to step the scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. Please open an issue if you are "
    "unable to replicate your use case: https://github.com/pytorch/pytorch/issues/new/choose.")


def _format_param(name: str, optimizer, param) -> list:
    """``param`` once per param group (a list or tuple must have one per group)."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. {name} has {len(param)} "
                             f"values, param_groups has {len(optimizer.param_groups)}.")
    else:
        param = [param] * len(optimizer.param_groups)
    return [p.clone() if isinstance(p, Tensor) else p for p in param]


def _group_values(optimizer, key: str) -> list:
    """``group[key]`` of each param group (a tensor copied, so the list never aliases the optimizer's)."""
    return [g[key].clone() if isinstance(g[key], Tensor) else g[key] for g in optimizer.param_groups]


def _set_group_value(group: dict, key: str, value) -> None:
    """``group[key] = value``; a tensor ``group[key]`` is filled in place instead."""
    if isinstance(group[key], Tensor):
        group[key].fill_(float(value))
    else:
        group[key] = value


def _check_optimizer(optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")


def _track_step(opt) -> None:
    """Set ``opt._opt_called`` on ``opt``'s first ``step()`` (a scheduler stepped before it warns, as PyTorch's)
    through a wrapper that then removes itself: later steps call ``step`` directly, at no added cost."""
    if getattr(opt, "_opt_called", False) or hasattr(opt.step, "_wrapped_by_lr_sched"):
        return
    before = vars(opt).get("step")    # an instance-level step, restored after the first call
    func = getattr(opt.step, "__func__", None)
    ref = weakref.ref(opt)

    @wraps(func or opt.step)
    def wrapper(*args, **kwargs):
        o = ref()
        o._opt_called = True
        if before is None:
            vars(o).pop("step", None)
        else:
            o.step = before
        return func(o, *args, **kwargs) if func is not None else before(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    opt.step = wrapper


class LRScheduler:
    """Base class: sets each group's ``lr`` from ``get_lr()`` on every ``step()``."""

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"].clone() if isinstance(g["lr"], Tensor) else g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming scheduler "
                                   "with last_epoch >= 0.\nThis typically happens when:\n1. You're trying to resume "
                                   "training from a checkpoint but haven't properly loaded the optimizer state\n2. "
                                   "You're using last_epoch >= 0 for a fresh training run (not recommended)")
        self.base_lrs = _group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _track_step(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the first step (``_is_initial`` set while it runs)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def _warn_get_lr(self) -> None:
        """``get_lr()`` called by the user rather than by ``step()``: PyTorch's warning."""
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=3)

    def get_lr(self) -> list:
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The learning rates set by the last ``step()``."""
        return self._last_lr

    def _current(self) -> list:
        return _group_values(self.optimizer, "lr")

    def step(self, epoch=None) -> None:
        """Advance one epoch (or jump to ``epoch``) and update the optimizer's learning rates; call it after
        ``optimizer.step()`` (else PyTorch's warning, on the first call)."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            own = vars(self.optimizer).get("step")
            if own is not None and not hasattr(own, "_wrapped_by_lr_sched"):
                warnings.warn("Seems like `optimizer.step()` has been overridden after learning rate scheduler "
                              "initialization. Please, make sure to call `optimizer.step()` before "
                              "`lr_scheduler.step()`. See more details at "
                              "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                              UserWarning, stacklevel=2)
            else:
                warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 "
                              "and later, you should call them in the opposite order: `optimizer.step()` before "
                              "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
                              "value of the learning rate schedule. See more details at "
                              "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                              UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch=None) -> None:
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)

    def _set_lrs(self, values) -> None:
        for g, lr in zip(self.optimizer.param_groups, values, strict=True):
            _set_group_value(g, "lr", lr)
        self._last_lr = self._current()

    def state_dict(self) -> dict:
        """Every attribute but the optimizer (PyTorch's keys), for :meth:`load_state_dict`."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore attributes saved by :meth:`state_dict` (here or by PyTorch, as plain Python values)."""
        self.__dict__.update(state_dict)


class _LRScheduler(LRScheduler):
    pass


def _pack(sched, name: str, pack) -> dict:
    """``sched.state_dict()`` with attribute ``name`` replaced by ``pack(its value)`` (PyTorch's layout)."""
    state = {k: v for k, v in sched.__dict__.items() if k not in ("optimizer", name)}
    state[name] = pack(getattr(sched, name))
    return state


def _unpack(sched, state_dict: dict, name: str, unpack) -> None:
    """Load ``state_dict`` but key ``name``, which ``unpack(sched, its value)`` restores."""
    packed = state_dict.get(name)
    sched.__dict__.update({k: v for k, v in state_dict.items() if k != name})
    if packed is not None:
        unpack(sched, packed)


def _fn_state(fn):
    """A callable object's attributes (a plain function saves as ``None``), as PyTorch saves lambdas."""
    return None if fn is None or isinstance(fn, types.FunctionType) else fn.__dict__.copy()


class _PerGroupLambda(LRScheduler):
    """Shared by ``LambdaLR`` and ``MultiplicativeLR``: one function, or one per param group; saves the state of
    callable objects (not of plain functions), as PyTorch."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict:
        return _pack(self, "lr_lambdas", lambda fns: [_fn_state(f) for f in fns])

    def load_state_dict(self, state_dict: dict) -> None:
        def unpack(s, states):
            for fn, st in zip(s.lr_lambdas, states):
                if st is not None:
                    fn.__dict__.update(st)
        _unpack(self, state_dict, "lr_lambdas", unpack)


class LambdaLR(_PerGroupLambda):
    """lr = base lr * ``lr_lambda(epoch)`` (one function, or one per group)."""

    def get_lr(self) -> list:
        self._warn_get_lr()
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs, strict=True)]


class MultiplicativeLR(_PerGroupLambda):
    """lr *= ``lr_lambda(epoch)`` each epoch."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1) -> None:
        for f in lr_lambda if isinstance(lr_lambda, (list, tuple)) else [lr_lambda]:
            if not callable(f):
                raise TypeError(f"lr_lambda should be a function, but got {type(f).__name__}")
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        if self._is_initial:
            return self._current()
        return [g["lr"] * f(self.last_epoch) for f, g in zip(self.lr_lambdas, self.optimizer.param_groups, strict=True)]


class StepLR(LRScheduler):
    """Multiply lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current()
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply lr by ``gamma`` at each epoch in ``milestones``."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        if self.last_epoch not in self.milestones:
            return self._current()
        return [g["lr"] * self.gamma ** self.milestones[self.last_epoch] for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        ms = sorted(self.milestones.elements())
        return [b * self.gamma ** bisect_right(ms, self.last_epoch) for b in self.base_lrs]

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter(self.milestones)   # (a plain dict, from a converted PyTorch state dict)


class ConstantLR(LRScheduler):
    """Multiply lr by ``factor`` until epoch ``total_iters``."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1) -> None:
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return self._current()
        return [g["lr"] * (1.0 / self.factor) for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for b in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale lr linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        e, s, f, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
        if e == 0:
            return [g["lr"] * s for g in self.optimizer.param_groups]
        if self._is_initial or e > n:
            return self._current()
        return [g["lr"] * (1.0 + (f - s) / (n * s + (e - 1) * (f - s))) for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        s, f, n = self.start_factor, self.end_factor, self.total_iters
        return [b * (s + (f - s) * min(n, self.last_epoch) / n) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply lr by ``gamma`` every epoch."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        if self._is_initial:
            return self._current()
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


def _check_children(owner, optimizer, schedulers) -> None:
    """PyTorch's checks of ``SequentialLR``'s and ``ChainedScheduler``'s schedulers."""
    name = type(owner).__name__
    for i, s in enumerate(schedulers):
        if not hasattr(s, "optimizer"):
            raise TypeError(f"{name} at index {i} should have `optimizer` as its attribute.")
        if isinstance(s, ReduceLROnPlateau):
            raise ValueError(f"{name} does not support `ReduceLROnPlateau` scheduler as it requires additional "
                             "kwargs to be specified when calling `step`, but got one at index "
                             f"{i} in the given schedulers sequence.")
        if optimizer != s.optimizer:
            raise ValueError(f"{name} expects all schedulers to belong to the same optimizer, but got scheduler "
                             f"{type(s).__name__} at index {i} has {s.optimizer}, which is different from "
                             f"{type(optimizer).__name__}.")


class _Composite(LRScheduler):
    """Shared by ``SequentialLR`` and ``ChainedScheduler``: their schedulers' states nest in their state dict."""

    def state_dict(self) -> dict:
        return _pack(self, "_schedulers", lambda ss: [s.state_dict() for s in ss])

    def load_state_dict(self, state_dict: dict) -> None:
        def unpack(owner, states):
            for s, st in zip(owner._schedulers, states):
                s.load_state_dict(st)
        _unpack(self, state_dict, "_schedulers", unpack)


class SequentialLR(_Composite):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones``."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got no scheduler.")
        _check_children(self, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             f"number of milestone points, but got number of schedulers {len(schedulers)} and the "
                             f"number of milestones to be equal to {len(milestones)}")
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        for g in optimizer.param_groups:
            _set_group_value(g, "lr", g["initial_lr"])
        self.recursive_undo()
        i = bisect_right(self._milestones, 0)
        self._schedulers[i]._initial_step()
        self._last_lr = schedulers[i].get_last_lr()

    def recursive_undo(self, sched=None) -> None:
        """Take back the initial step of every (nested) scheduler."""
        s = self if sched is None else sched
        if hasattr(s, "_schedulers"):
            for child in s._schedulers:
                self.recursive_undo(child)
        elif hasattr(s, "last_epoch"):
            s.last_epoch -= 1

    def step(self) -> None:
        self.last_epoch += 1
        i = bisect_right(self._milestones, self.last_epoch)
        sch = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            sch._update_lr(0)
        else:
            sch.step()
        self._last_lr = sch.get_last_lr()


class PolynomialLR(LRScheduler):
    """Decay lr to 0 over ``total_iters`` epochs as ``(1 - t/T) ** power``."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        e, n = self.last_epoch, self.total_iters
        if self._is_initial or e > n:
            return self._current()
        f = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [g["lr"] * f for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list:
        return [b * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the base lr to ``eta_min`` over ``T_max`` epochs."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        groups = self.optimizer.param_groups
        if self._is_initial:
            return self._current()
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / T)) / 2 for b in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (b - lo) * (1 - math.cos(math.pi / T)) / 2 for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (g["lr"] - lo) + lo
                for g in groups]

    def _get_closed_form_lr(self) -> list:
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for b in self.base_lrs]


class ChainedScheduler(_Composite):
    """Step several schedulers together every epoch (their effects multiply)."""

    def __init__(self, schedulers, optimizer=None) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler to be chained, but got no "
                             "scheduler.")
        optimizer = optimizer or schedulers[0].optimizer
        _check_children(self, optimizer, schedulers)
        self._schedulers, self.optimizer = schedulers, optimizer
        self._last_lr = _group_values(self._schedulers[-1].optimizer, "lr")

    def step(self) -> None:
        for sch in self._schedulers:
            sch.step()
        self._last_lr = _group_values(self._schedulers[-1].optimizer, "lr")


class ReduceLROnPlateau(LRScheduler):
    """Multiply lr by ``factor`` when ``step(metric)`` has not improved for ``patience`` epochs."""

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0,
                 eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * n
        self.patience, self.cooldown, self.eps, self.last_epoch = patience, cooldown, eps, 0
        self._last_lr = self._current()
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    def step(self, metrics, epoch=None) -> None:
        """Record ``metrics`` for this epoch; reduce lr after ``patience`` epochs without improvement."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr(epoch)
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = self._current()

    def _reduce_lr(self, epoch) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"The number of param groups in the `optimizer` ({len(groups)}) differs from "
                                   f"when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually due to "
                                   "a new param group being added to the optimizer. Please modify the `min_lrs` "
                                   "field to match the length of the `optimizer` param groups.")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, g in enumerate(groups):
            old = float(g["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                _set_group_value(g, "lr", new)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < best * (1.0 - self.threshold) if self.threshold_mode == "rel" else a < best - self.threshold
        return a > best * (self.threshold + 1.0) if self.threshold_mode == "rel" else a > best + self.threshold

    def _init_is_better(self, mode, threshold, threshold_mode) -> None:
        if mode not in {"min", "max"}:
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in {"rel", "abs"}:
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode)


def _set_momentum(optimizer, groups_values, use_beta1: bool) -> None:
    """Set each group's momentum (or ``betas[0]``) to its value in ``groups_values``."""
    for g, m in zip(optimizer.param_groups, groups_values, strict=True):
        if use_beta1:
            g["betas"] = (m, *g["betas"][1:])
        else:
            g["momentum"] = m


def _init_momentum(sched, optimizer, max_momentum, base_momentum, last_epoch: int):
    """``CyclicLR``/``OneCycleLR`` momentum cycling: check the optimizer has one, and on a fresh start set each
    group's momentum to its max and record ``max_momentum``/``base_momentum`` in the groups; returns the
    per-group ``(base, max)`` lists."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
    sched.use_beta1 = "betas" in optimizer.defaults
    maxes = _format_param("max_momentum", optimizer, max_momentum)
    bases = _format_param("base_momentum", optimizer, base_momentum)
    if last_epoch == -1:
        _set_momentum(optimizer, maxes, sched.use_beta1)
        for m, b, g in zip(maxes, bases, optimizer.param_groups, strict=True):
            g["max_momentum"], g["base_momentum"] = m, b
    return bases, maxes


class CyclicLR(LRScheduler):
    """Cycle lr between ``base_lr`` and ``max_lr`` (triangular, triangular2, exp_range or ``scale_fn``), and
    momentum inversely between ``max_momentum`` and ``base_momentum``."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000, step_size_down=None,
                 mode: str = "triangular", gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9, last_epoch: int = -1) -> None:
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        base_lrs = _format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, g in zip(base_lrs, optimizer.param_groups, strict=True):
                _set_group_value(g, "lr", lr)
        self.max_lrs = _format_param("max_lr", optimizer, max_lr)
        step_size_up = float(step_size_up)
        step_size_down = float(step_size_down) if step_size_down is not None else step_size_up
        self.total_size = step_size_up + step_size_down
        self.step_ratio = step_size_up / self.total_size
        if mode not in ["triangular", "triangular2", "exp_range"] and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom, self.scale_mode = scale_fn, scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.base_momentums, self.max_momentums = _init_momentum(self, optimizer, max_momentum, base_momentum,
                                                                     last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref, self.scale_mode = self._triangular_scale_fn, "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref, self.scale_mode = self._triangular2_scale_fn, "cycle"
        elif self.mode == "exp_range":
            self._scale_fn_ref, self.scale_mode = partial(self._exp_range_scale_fn, self.gamma), "iterations"

    def scale_fn(self, x) -> float:
        """The amplitude scale at cycle (or iteration) ``x``."""
        return self._scale_fn_custom(x) if self._scale_fn_custom is not None else self._scale_fn_ref(x)

    @staticmethod
    def _triangular_scale_fn(x: float) -> float:
        return 1.0

    @staticmethod
    def _triangular2_scale_fn(x: float) -> float:
        return 1 / (2.0 ** (x - 1))

    @staticmethod
    def _exp_range_scale_fn(gamma: float, x: float) -> float:
        return gamma ** x

    def get_lr(self) -> list:
        self._warn_get_lr()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [b + (m - b) * scale_factor * scale for b, m in zip(self.base_lrs, self.max_lrs, strict=True)]
        if self.cycle_momentum:
            _set_momentum(self.optimizer, [m - (m - b) * scale_factor * scale for b, m in
                                           zip(self.base_momentums, self.max_momentums, strict=True)], self.use_beta1)
        return lrs

    def state_dict(self) -> dict:
        state = _pack(self, "_scale_fn_custom", _fn_state)
        state.pop("_scale_fn_ref", None)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        _unpack(self, state_dict, "_scale_fn_custom", lambda s, st: s._scale_fn_custom.__dict__.update(st))
        self._init_scale_fn()


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_0`` epochs (period multiplied by ``T_mult`` after each restart)."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")
        self.T_0, self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_get_lr()
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for b in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one (possibly fractional) epoch, restarting the cosine when a period ends."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        self._get_lr_called_within_step = True
        try:
            values = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up to ``max_lr`` then anneal far below the start (and cycle momentum)."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1) -> None:
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        total = self.total_steps

        def phase(end_step, start_lr, end_lr, start_momentum, end_momentum):
            return dict(end_step=end_step, start_lr=start_lr, end_lr=end_lr, start_momentum=start_momentum,
                        end_momentum=end_momentum)
        if three_phase:
            self._schedule_phases = [
                phase(float(pct_start * total) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                phase(float(2 * pct_start * total) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                phase(total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._schedule_phases = [
                phase(float(pct_start * total) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                phase(total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._anneal_func_type = anneal_strategy
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for m, g in zip(max_lrs, optimizer.param_groups):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            _init_momentum(self, optimizer, max_momentum, base_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list:
        self._warn_get_lr()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is "
                             f"{self.total_steps}")
        lrs, momenta = [], []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(self._schedule_phases):
                end = ph["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(g[ph["start_lr"]], g[ph["end_lr"]], pct))
                    if self.cycle_momentum:
                        momenta.append(self._anneal(g[ph["start_momentum"]], g[ph["end_momentum"]], pct))
                    break
                start = ph["end_step"]
        if self.cycle_momentum:
            _set_momentum(self.optimizer, momenta, self.use_beta1)
        return lrs
