"""Learning-rate schedulers with PyTorch's (chainable) update formulas."""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR",
           "MultiplicativeLR", "LinearLR", "ConstantLR", "OneCycleLR", "ReduceLROnPlateau", "PolynomialLR",
           "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler"]


class LRScheduler:
    """Base class: sets each group's ``lr`` from ``get_lr()`` on every ``step()``."""

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming an "
                                   "optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self.step()

    def get_lr(self) -> list:
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The learning rates set by the last ``step()``."""
        return self._last_lr

    def _current(self) -> list:
        return [g["lr"] for g in self.optimizer.param_groups]

    def step(self, epoch=None) -> None:
        """Advance one epoch (or jump to ``epoch``) and update the optimizer's learning rates."""
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = self._get_closed_form_lr() if hasattr(self, "_get_closed_form_lr") else self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = self._current()

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


_LRScheduler = LRScheduler


class StepLR(LRScheduler):
    """Multiply lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current()
        return [lr * self.gamma for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply lr by ``gamma`` at each epoch in ``milestones``."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch not in self.milestones:
            return self._current()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        ms = sorted(self.milestones.elements())
        return [b * self.gamma ** bisect_right(ms, self.last_epoch) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply lr by ``gamma`` every epoch."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0:
            return self._current()
        return [lr * self.gamma for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the base lr to ``eta_min`` over ``T_max`` epochs."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return self._current()
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / T)) / 2 for b in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (b - lo) * (1 - math.cos(math.pi / T)) / 2 for b, lr in zip(self.base_lrs, self._current())]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (lr - lo) + lo
                for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """lr = base lr * ``lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1) -> None:
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(LambdaLR):
    """lr *= ``lr_lambda(epoch)`` each epoch."""

    def get_lr(self) -> list:
        if self.last_epoch > 0:
            return [lr * f(self.last_epoch) for f, lr in zip(self.lr_lambdas, self._current())]
        return self._current()


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
        e, s, f, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
        if e == 0:
            return [lr * s for lr in self._current()]
        if e > n:
            return self._current()
        return [lr * (1.0 + (f - s) / (n * s + (e - 1) * (f - s))) for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        s, f, n = self.start_factor, self.end_factor, self.total_iters
        return [b * (s + (f - s) * min(n, self.last_epoch) / n) for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply lr by ``factor`` until epoch ``total_iters``."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1) -> None:
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._current()]
        if self.last_epoch != self.total_iters:
            return self._current()
        return [lr * (1.0 / self.factor) for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay lr to 0 over ``total_iters`` epochs as ``(1 - t/T) ** power``."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        e, n = self.last_epoch, self.total_iters
        if e == 0 or e > n:
            return self._current()
        f = ((1.0 - e / n) / (1.0 - (e - 1) / n)) ** self.power
        return [lr * f for lr in self._current()]

    def _get_closed_form_lr(self) -> list:
        return [b * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_0`` epochs (period multiplied by ``T_mult`` after each restart)."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for b in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one (possibly fractional) epoch, restarting the cosine when a period ends."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
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
        self._step_count += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr
        self._last_lr = self._current()


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones``."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1) -> None:
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             f"number of milestone points, but got number of schedulers {len(schedulers)} and the "
                             f"number of milestones to be equal to {len(milestones)}")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch, self.optimizer = last_epoch + 1, optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for sch in self._schedulers:
            sch.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        i = bisect_right(self._milestones, self.last_epoch)
        sch = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            sch.step(0)
        else:
            sch.step()
        self._last_lr = sch.get_last_lr()


class ChainedScheduler(LRScheduler):
    """Step several schedulers together every epoch (their effects multiply)."""

    def __init__(self, schedulers, optimizer=None) -> None:
        self._schedulers = list(schedulers)
        self.optimizer = optimizer or self._schedulers[0].optimizer
        self._last_lr = self._current()

    def step(self) -> None:
        for sch in self._schedulers:
            sch.step()
        self._last_lr = self._current()


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up to ``max_lr`` then anneal far below the start (and cycle momentum)."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1) -> None:
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.total_steps = total_steps
        self._anneal_func_type = anneal_strategy
        if three_phase:
            self._schedule_phases = [
                dict(end_step=float(pct_start * total_steps) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=float(2 * pct_start * total_steps) - 2, start_lr="max_lr", end_lr="initial_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
                dict(end_step=total_steps - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum")]
        else:
            self._schedule_phases = [
                dict(end_step=float(pct_start * total_steps) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=total_steps - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum")]
        groups = optimizer.param_groups
        max_lrs = self._per_group(max_lr, groups, "max_lr")
        if last_epoch == -1:
            for m, g in zip(max_lrs, groups):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for mm, bm, g in zip(self._per_group(max_momentum, groups, "max_momentum"),
                                     self._per_group(base_momentum, groups, "base_momentum"), groups):
                    if self.use_beta1:
                        g["betas"] = (mm, *g["betas"][1:])
                    else:
                        g["momentum"] = mm
                    g["max_momentum"], g["base_momentum"] = mm, bm
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _per_group(v, groups, name):
        if isinstance(v, (list, tuple)):
            if len(v) != len(groups):
                raise ValueError(f"expected {len(groups)} values for {name}, got {len(v)}")
            return list(v)
        return [v] * len(groups)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is "
                             f"{self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(self._schedule_phases):
                end = ph["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(g[ph["start_lr"]], g[ph["end_lr"]], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(g[ph["start_momentum"]], g[ph["end_momentum"]], pct)
                    break
                start = ph["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    g["betas"] = (mom, *g["betas"][1:])
                else:
                    g["momentum"] = mom
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply lr by ``factor`` when ``step(metric)`` has not improved for ``patience`` epochs."""

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0,
                 eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        self.optimizer, self.factor = optimizer, factor
        n = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.cooldown_counter, self.num_bad_epochs, self.last_epoch = 0, 0, 0
        self.best = math.inf if mode == "min" else -math.inf
        self._last_lr = self._current()

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < best * (1.0 - self.threshold) if self.threshold_mode == "rel" else a < best - self.threshold
        return a > best * (self.threshold + 1.0) if self.threshold_mode == "rel" else a > best + self.threshold

    def step(self, metrics, epoch=None) -> None:
        """Record ``metrics`` for this epoch; reduce lr after ``patience`` epochs without improvement."""
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for i, g in enumerate(self.optimizer.param_groups):
                old = float(g["lr"])
                new = max(old * self.factor, self.min_lrs[i])
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = self._current()
