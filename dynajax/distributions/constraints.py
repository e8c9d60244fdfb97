"""Constraints on distribution parameters and supports, as ``torch.distributions.constraints``: each one's
``check(value)`` is a bool tensor (per event), and its repr is PyTorch's (it names the constraint in the
``ValueError`` a validating distribution raises)."""
from __future__ import annotations

__all__ = ["Constraint", "real", "real_vector", "positive", "nonnegative", "unit_interval", "boolean", "simplex",
           "one_hot", "greater_than", "greater_than_eq", "less_than", "interval", "half_open_interval",
           "integer_interval", "independent"]


class Constraint:
    """A set of valid values; ``event_dim`` dims on the right are checked together."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__[1:] + "()"


class _Real(Constraint):
    def check(self, value):
        return value == value   # NaN is the one value that is not equal to itself


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete, event_dim = True, 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _Bounded(Constraint):
    """A bound (a number or a tensor) on one or both sides; ``_names`` are the repr's field names."""

    _names: tuple = ()

    def __init__(self, *bounds) -> None:
        self._bounds = bounds
        for n, b in zip(self._names, bounds):
            setattr(self, n, b)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={b}" for n, b in zip(self._names, self._bounds))
        return f"{type(self).__name__[1:]}({fields})"


class _GreaterThan(_Bounded):
    _names = ("lower_bound",)

    def check(self, value):
        return self.lower_bound < value


class _GreaterThanEq(_Bounded):
    _names = ("lower_bound",)

    def check(self, value):
        return self.lower_bound <= value


class _LessThan(_Bounded):
    _names = ("upper_bound",)

    def check(self, value):
        return value < self.upper_bound


class _Interval(_Bounded):
    _names = ("lower_bound", "upper_bound")

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)


class _IntegerInterval(_Interval):
    is_discrete = True

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)


class _IndependentConstraint(Constraint):
    """``base`` checked elementwise, then all of the rightmost ``reinterpreted_batch_ndims`` dims together."""

    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        ok = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        return ok.reshape(tuple(ok.shape[:ok.dim() - n]) + (-1,)).all(-1) if n else ok

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


real, boolean, simplex, one_hot = _Real(), _Boolean(), _Simplex(), _OneHot()
real_vector = _IndependentConstraint(real, 1)
positive, nonnegative = _GreaterThan(0.0), _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
greater_than, greater_than_eq, less_than = _GreaterThan, _GreaterThanEq, _LessThan
interval, half_open_interval, integer_interval = _Interval, _HalfOpenInterval, _IntegerInterval
independent = _IndependentConstraint
