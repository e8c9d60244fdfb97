"""``dynajax.distributions``: ``Normal``, ``Categorical``, ``Bernoulli``, ``Uniform``, ``Exponential``,
``Laplace``, ``OneHotCategorical``, ``Gamma``, ``Beta``, ``Dirichlet``, ``Independent``,
``TransformedDistribution`` and ``LogNormal`` with ``sample``/``rsample``/``log_prob``/``entropy`` and
``kl_divergence``, as ``torch.distributions``.

Parameters and ``log_prob`` values are validated by default, with PyTorch's ``ValueError`` messages
(``validate_args=False`` or ``Distribution.set_default_validate_args(False)`` turns it off). A check reads
the values back, so inside a step ``dynajax.compile`` records it is skipped (shape checks still run)."""
from __future__ import annotations

import math

import jax
import numpy as np

from .. import random
from .._tensor import Tensor, _make
from ..autograd import grad_mode

from . import constraints
from . import transforms

__all__ = ["Distribution", "Normal", "Categorical", "Bernoulli", "Uniform", "Independent", "Exponential", "Laplace",
           "OneHotCategorical", "Gamma", "Beta", "Dirichlet", "TransformedDistribution", "LogNormal", "kl_divergence",
           "constraints", "transforms"]


def _as_tensor(v, like=None) -> Tensor:
    from ..ops.creation import tensor
    if isinstance(v, Tensor):
        return v
    return tensor(v, dtype=like.dtype if like is not None else None)


def _shape(sample_shape) -> tuple:
    return tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)


def _values_checkable(t: Tensor) -> bool:
    """Whether a value check can read ``t`` back: not while ``dynajax.compile`` records a step or JAX traces
    (a check there would be a graph break each call, or fail), where, as for index bounds, it is skipped."""
    from ..ops import registry
    v = t._value
    return not registry.record_creation and isinstance(v, (jax.Array, np.ndarray)) \
        and not isinstance(v, jax.core.Tracer)


def _broadcast_params(*values) -> list:
    """Parameters as tensors of one shape; Python numbers take a tensor parameter's dtype (or the default)."""
    from ..ops.shape import broadcast_tensors
    like = next((v for v in values if isinstance(v, Tensor)), None)
    return broadcast_tensors(*(_as_tensor(v, like) for v in values))


class Distribution:
    """Base class: ``batch_shape``, ``event_shape``, ``sample``, ``rsample``, ``log_prob``, ``entropy``."""

    has_rsample = False
    has_enumerate_support = False
    _validate_default = True     # PyTorch validates unless told not to (``set_default_validate_args``)
    arg_constraints: dict = {}
    support = None

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None) -> None:
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)
        self._validate_args = Distribution._validate_default if validate_args is None else validate_args

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Whether distributions made without ``validate_args`` check their parameters and values."""
        if value not in (True, False):
            raise ValueError
        Distribution._validate_default = value

    def _check_params(self, *names: str) -> None:
        """PyTorch's check of the parameters ``names`` against ``arg_constraints`` (when validating)."""
        if not self._validate_args:
            return
        for name in names:
            value, constraint = getattr(self, name), self.arg_constraints[name]
            if _values_checkable(value) and not bool(constraint.check(value).all()):
                raise ValueError(f"Expected parameter {name} (Tensor of shape {tuple(value.shape)}) of distribution "
                                 f"{self!r} to satisfy the constraint {constraint!r}, but found invalid values:\n"
                                 f"{value}")

    def _validate_sample(self, value) -> None:
        """PyTorch's checks of a ``log_prob``/``cdf`` argument: a Tensor, of a shape that broadcasts with
        ``batch_shape + event_shape``, inside the support."""
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        from .._tensor import Size
        actual, event = tuple(value.shape), self._event_shape
        if actual[len(actual) - len(event):] != event or len(actual) < len(event):
            raise ValueError(f"The right-most size of value must match event_shape: {Size(actual)} vs "
                             f"{Size(event)}.")
        expected = self._batch_shape + event
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {Size(actual)} vs "
                                 f"{Size(expected)}.")
        support = self.support
        if support is not None and _values_checkable(value) and not bool(support.check(value).all()):
            raise ValueError(f"Expected value argument (Tensor of shape {tuple(value.shape)}) to be within the "
                             f"support ({support!r}) of the distribution {self!r}, but found invalid values:\n"
                             f"{value}")

    def _value(self, value, like: Tensor) -> Tensor:
        """``value`` checked (when validating) and as a tensor of ``like``'s dtype."""
        if self._validate_args:
            self._validate_sample(value)
        return _as_tensor(value, like)

    def expand(self, batch_shape, _instance=None) -> "Distribution":
        """The same distribution with its parameters broadcast to ``batch_shape``."""
        batch_shape = _shape(batch_shape)
        params = {}
        for name in self._param_names:
            v = getattr(self, name)
            params[name] = v.expand(batch_shape + tuple(v.shape[len(self._batch_shape):]))
        return type(self)(**params, validate_args=False)

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError

    @property
    def batch_shape(self):
        from .._tensor import Size
        return Size(self._batch_shape)

    @property
    def event_shape(self):
        from .._tensor import Size
        return Size(self._event_shape)

    def _extended_shape(self, sample_shape=()) -> tuple:
        return _shape(sample_shape) + self._batch_shape + self._event_shape

    def sample(self, sample_shape=()) -> Tensor:
        """A draw without gradient (from the seeded stream)."""
        with grad_mode.no_grad():
            return self.rsample(sample_shape).detach()

    def rsample(self, sample_shape=()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not support rsample")

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def __repr__(self) -> str:
        # PyTorch's: a one-element parameter shown as its value, a larger one as its size
        params = ", ".join(f"{k}: {getattr(self, k) if getattr(self, k).numel() == 1 else getattr(self, k).shape}"
                           for k in self._param_names)
        return f"{type(self).__name__}({params})"

    _param_names: tuple = ()


class _LocScale(Distribution):
    """A real-valued distribution given by a location ``loc`` (its mean and mode) and a positive ``scale``;
    ``rsample`` is reparameterized."""

    has_rsample = True
    _param_names = ("loc", "scale")
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real

    def __init__(self, loc, scale, validate_args=None) -> None:
        self.loc, self.scale = _broadcast_params(loc, scale)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)
        self._check_params("loc", "scale")

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc


class Normal(_LocScale):
    """Gaussian with mean ``loc`` and standard deviation ``scale``; ``rsample`` is reparameterized."""

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale

    def rsample(self, sample_shape=()) -> Tensor:
        eps = _make(random.sample("normal", self._extended_shape(sample_shape), self.loc._v.dtype))
        return self.loc + eps * self.scale

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.loc)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def cdf(self, value) -> Tensor:
        value = self._value(value, self.loc)
        return 0.5 * (1 + ((value - self.loc) * (1 / math.sqrt(2)) / self.scale).erf())

    def icdf(self, value) -> Tensor:
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)


class Uniform(Distribution):
    """Uniform on ``[low, high)``."""

    has_rsample = True
    _param_names = ("low", "high")

    def __init__(self, low, high, validate_args=None) -> None:
        self.low, self.high = _broadcast_params(low, high)
        super().__init__(tuple(self.low.shape), validate_args=validate_args)
        self._check_params("low", "high")

    @property
    def arg_constraints(self) -> dict:
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    @property
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mode(self) -> Tensor:
        return self.low * math.nan

    @property
    def mean(self) -> Tensor:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()) -> Tensor:
        u = _make(random.sample("uniform", self._extended_shape(sample_shape), self.low._v.dtype))
        return self.low + u * (self.high - self.low)

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.low)
        inside = ((value >= self.low) & (value < self.high)).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value) -> Tensor:
        value = self._value(value, self.low)
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value) -> Tensor:
        return value * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


class Categorical(Distribution):
    """A distribution over ``0..K-1`` given ``probs`` or ``logits`` over the last dim."""

    _param_names = ("probs",)
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        from ..ops.reduce import logsumexp
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = _as_tensor(probs)
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=np.finfo(probs._v.dtype).tiny).log()
        else:
            logits = _as_tensor(logits)
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logsumexp(logits, -1, keepdim=True)
            self.probs = self.logits.exp()
        self._param_names = ("probs",) if probs is not None else ("logits",)
        self._num_events = self.logits.shape[-1]
        super().__init__(tuple(self.logits.shape[:-1]), validate_args=validate_args)
        self._check_params(*self._param_names)

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    def expand(self, batch_shape, _instance=None) -> "Categorical":
        name = self._param_names[0]
        return Categorical(**{name: getattr(self, name).expand(_shape(batch_shape) + (self._num_events,))},
                           validate_args=False)

    @property
    def variance(self) -> Tensor:
        return self.mean

    @property
    def param_shape(self):
        return self.logits.shape

    @property
    def mean(self) -> Tensor:
        from ..ops.creation import full
        return full(self._batch_shape, math.nan, dtype=self.probs.dtype)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1)

    def sample(self, sample_shape=()) -> Tensor:
        # the Gumbel-max draw: the argmax of the log-probabilities plus Gumbel noise is a categorical draw.
        # It is made of recorded ops (uniform noise, log, argmax), so it also runs inside ``dynajax.compile``
        with grad_mode.no_grad():
            shape = _shape(sample_shape) + self._batch_shape + (self._num_events,)
            logits = self.logits.detach()
            # noise in at least float32: a half-precision uniform has 2**-8 steps, which would skew the draw
            work = np.promote_types(logits._v.dtype, np.float32)
            if work != logits._v.dtype:
                logits = logits.float()
            u = _make(random.sample("uniform", shape, work))
            tiny = float(np.finfo(work).tiny)
            gumbel = -(-(u.clamp(min=tiny)).log()).log()
            return (logits + gumbel).argmax(-1)

    def log_prob(self, value) -> Tensor:
        from ..ops.shape import broadcast_tensors
        if self._validate_args:
            self._validate_sample(value)
        value = _as_tensor(value).long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self) -> Tensor:
        logits = self.logits.clamp(min=float(np.finfo(self.logits._v.dtype).min))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        from ..ops.creation import arange
        values = arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values


class Bernoulli(Distribution):
    """0/1 outcomes with probability ``probs`` (or ``logits``) of a 1."""

    _param_names = ("probs",)
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _as_tensor(probs)
            eps = float(np.finfo(self.probs._v.dtype).eps)
            p = self.probs.clamp(eps, 1 - eps)
            self.logits = p.log() - (-p).log1p()
        else:
            self.logits = _as_tensor(logits)
            self.probs = self.logits.sigmoid()
        self._param_names = ("probs",) if probs is not None else ("logits",)
        super().__init__(tuple(self.probs.shape), validate_args=validate_args)
        self._check_params(*self._param_names)

    @property
    def mode(self) -> Tensor:
        from ..ops.elementwise import where
        return where(self.probs == 0.5, math.nan, (self.probs > 0.5).to(self.probs.dtype))

    def enumerate_support(self, expand: bool = True) -> Tensor:
        from ..ops.creation import arange
        values = arange(2, dtype=self.probs.dtype).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        from ..ops.shape import expand
        shape = self._extended_shape(sample_shape)
        probs = self.probs.detach()
        if np.dtype(probs._v.dtype).itemsize < 4:
            # compared with a uniform drawn in the probabilities' dtype, which in half precision has 2**-8
            # steps near 0 (p = 0.001 came out 1s ~8x too often in bfloat16)
            probs = probs.float()
        p = expand(probs, shape)._value
        return _make(random.sample("bernoulli", shape, self.probs._v.dtype, p))

    def log_prob(self, value) -> Tensor:
        from ..nn.functional import binary_cross_entropy_with_logits
        from ..ops.shape import broadcast_tensors
        logits, value = broadcast_tensors(self.logits, self._value(value, self.logits))
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self) -> Tensor:
        from ..nn.functional import binary_cross_entropy_with_logits
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Exponential(Distribution):
    """Exponential with ``rate`` (mean ``1 / rate``); ``rsample`` is reparameterized (inverse-cdf of a uniform)."""

    has_rsample = True
    _param_names = ("rate",)
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative

    def __init__(self, rate, validate_args=None) -> None:
        (self.rate,) = _broadcast_params(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)
        self._check_params("rate")

    @property
    def mean(self) -> Tensor:
        return self.rate.reciprocal()

    @property
    def mode(self) -> Tensor:
        return self.rate * 0

    @property
    def variance(self) -> Tensor:
        return self.rate.pow(-2)

    @property
    def stddev(self) -> Tensor:
        return self.rate.reciprocal()

    def rsample(self, sample_shape=()) -> Tensor:
        u = _make(random.sample("uniform", self._extended_shape(sample_shape), self.rate._v.dtype))
        return -(-u).log1p() / self.rate     # u < 1, so the draw is finite

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.rate)
        return self.rate.log() - self.rate * value

    def cdf(self, value) -> Tensor:
        value = self._value(value, self.rate)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value) -> Tensor:
        return -(-value).log1p() / self.rate

    def entropy(self) -> Tensor:
        return 1.0 - self.rate.log()


class Laplace(_LocScale):
    """Laplace with location ``loc`` and scale ``scale``; ``rsample`` is reparameterized."""

    @property
    def variance(self) -> Tensor:
        return 2 * self.scale.pow(2)

    @property
    def stddev(self) -> Tensor:
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()) -> Tensor:
        # u uniform on (-1, 1) (the open end keeps log1p(-|u|) finite): loc - scale * sign(u) * log(1 - |u|)
        dtype = self.loc._v.dtype
        eps = float(np.finfo(dtype).eps)
        u = _make(random.sample("uniform", self._extended_shape(sample_shape), dtype, eps - 1, 1.0))
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.loc)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value) -> Tensor:
        value = self._value(value, self.loc)
        return 0.5 - 0.5 * (value - self.loc).sign() * (-(value - self.loc).abs() / self.scale).expm1()

    def icdf(self, value) -> Tensor:
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self) -> Tensor:
        return 1 + (2 * self.scale).log()


class OneHotCategorical(Distribution):
    """A Categorical whose outcomes are one-hot vectors over the last dim (event shape ``(K,)``)."""

    _param_names = ("probs",)
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self._param_names = self._categorical._param_names
        k = self._categorical._num_events
        super().__init__(self._categorical._batch_shape, (k,), validate_args=validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)
    param_shape = property(lambda self: self._categorical.param_shape)

    def expand(self, batch_shape, _instance=None) -> "OneHotCategorical":
        name = self._param_names[0]
        k = self._event_shape[0]
        return OneHotCategorical(**{name: getattr(self, name).expand(_shape(batch_shape) + (k,))},
                                 validate_args=False)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        from ..nn.functional import one_hot
        return one_hot(self.probs.argmax(-1), self._event_shape[0]).to(self.probs.dtype)

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        from ..nn.functional import one_hot
        return one_hot(self._categorical.sample(sample_shape), self._event_shape[0]).to(self.probs.dtype)

    def log_prob(self, value) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return self._categorical.log_prob(_as_tensor(value).argmax(-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        from ..ops.creation import eye
        k = self._event_shape[0]
        values = eye(k, dtype=self.probs.dtype).reshape((k,) + (1,) * len(self._batch_shape) + (k,))
        return values.expand((k,) + self._batch_shape + (k,)) if expand else values


def _xlogy(x: Tensor, y: Tensor) -> Tensor:
    """``x * log(y)``, 0 where ``x`` is 0 (so a 0 ** 0 term of a density is 1), as ``torch.xlogy``."""
    from ..ops.elementwise import where
    return where(x == 0, 0.0, x * y.log())


@jax.jit
def _gamma_draw(key, alpha):
    """Gamma(alpha, 1) draws (one per element of ``alpha``), clamped to the smallest normal as PyTorch's,
    and their derivatives in ``alpha`` (0 where not finite); one compiled kernel per shape and dtype."""
    import jax.numpy as jnp
    x = jnp.maximum(jax.random.gamma(key, alpha, alpha.shape, alpha.dtype), jnp.finfo(alpha.dtype).tiny)
    dx = jax.lax.random_gamma_grad(alpha, x)
    return x, jnp.where(jnp.isfinite(dx), dx, 0.0)


def _standard_gamma(alpha: Tensor, shape: tuple) -> Tensor:
    """Gamma(alpha, 1) draws of ``shape`` (``alpha`` broadcast to it), reparameterized: the gradient with
    respect to ``alpha`` is the implicit one, d x / d alpha = -(d cdf / d alpha) / pdf, which JAX computes
    for its gamma sampler; it enters as ``x + dx * (alpha - alpha.detach())`` (zero in value)."""
    import jax.numpy as jnp
    a = alpha.detach()
    if not _values_checkable(a):
        # the sampler's rejection loop is no recorded op: a step would have to break its graph per draw
        raise NotImplementedError("Gamma, Beta and Dirichlet draws are not supported inside a dynajax.compile'd "
                                  "step (or a JAX trace); draw them outside the step")
    # drawn flat, padded to a power of two (with alpha 1), so that draws of other shapes reuse the
    # sampler's kernel (its rejection loop takes seconds to compile)
    flat = jnp.broadcast_to(a._value, shape).reshape(-1)
    n = flat.shape[0]
    m = 1 << max(10, (n - 1).bit_length())
    x, dx = _gamma_draw(random.next_key(), jnp.pad(flat, (0, m - n), constant_values=1))
    x, dx = x[:n].reshape(shape), dx[:n].reshape(shape)
    if not (alpha.requires_grad and grad_mode.is_grad_enabled()):
        return _make(x)
    return _make(x) + _make(dx) * (alpha - a)


class Gamma(Distribution):
    """Gamma with shape ``concentration`` and ``rate``; ``rsample`` is reparameterized (eagerly)."""

    has_rsample = True
    _param_names = ("concentration", "rate")
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative

    def __init__(self, concentration, rate, validate_args=None) -> None:
        self.concentration, self.rate = _broadcast_params(concentration, rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)
        self._check_params("concentration", "rate")

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = _standard_gamma(self.concentration, shape) / self.rate
        tiny = float(np.finfo(self.rate._v.dtype).tiny)
        return x.clamp(min=tiny)

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.rate)
        return (_xlogy(self.concentration, self.rate) + _xlogy(self.concentration - 1, value)
                - self.rate * value - self.concentration.lgamma())

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - self.rate.log() + a.lgamma() + (1.0 - a) * a.digamma()


class Dirichlet(Distribution):
    """Dirichlet over the simplex of the last dim of ``concentration``; ``rsample`` is reparameterized (eagerly)."""

    has_rsample = True
    _param_names = ("concentration",)
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex

    def __init__(self, concentration, validate_args=None) -> None:
        concentration = _as_tensor(concentration)
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)
        self._check_params("concentration")

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self) -> Tensor:
        # (alpha - 1) normalized where that is a point of the simplex; where every alpha < 1 the density
        # grows toward the corners, and PyTorch names the corner of the largest alpha
        from ..nn.functional import one_hot
        from ..ops.elementwise import where
        m1 = (self.concentration - 1).clamp(min=0.0)
        mode = m1 / m1.sum(-1, keepdim=True)
        corner = one_hot(mode.argmax(-1), m1.shape[-1]).to(mode.dtype)
        return where((self.concentration < 1).all(-1, keepdim=True), corner, mode)

    @property
    def variance(self) -> Tensor:
        a, a0 = self.concentration, self.concentration.sum(-1, keepdim=True)
        return a * (a0 - a) / (a0.pow(2) * (a0 + 1))

    def rsample(self, sample_shape=()) -> Tensor:
        g = _standard_gamma(self.concentration, self._extended_shape(sample_shape))
        x = g / g.sum(-1, keepdim=True)
        tiny = float(np.finfo(self.concentration._v.dtype).tiny)
        return x.clamp(min=tiny, max=1 - float(np.finfo(self.concentration._v.dtype).eps))

    def log_prob(self, value) -> Tensor:
        value = self._value(value, self.concentration)
        a = self.concentration
        return _xlogy(a - 1.0, value).sum(-1) + a.sum(-1).lgamma() - a.lgamma().sum(-1)

    def entropy(self) -> Tensor:
        a = self.concentration
        k, a0 = a.shape[-1], a.sum(-1)
        return a.lgamma().sum(-1) - a0.lgamma() - (k - a0) * a0.digamma() - ((a - 1.0) * a.digamma()).sum(-1)


class Beta(Distribution):
    """Beta with ``concentration1`` (alpha) and ``concentration0`` (beta): a two-category Dirichlet's first
    coordinate; ``rsample`` is reparameterized (eagerly)."""

    has_rsample = True
    _param_names = ("concentration1", "concentration0")
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval

    def __init__(self, concentration1, concentration0, validate_args=None) -> None:
        from ..ops.join import stack
        self.concentration1, self.concentration0 = _broadcast_params(concentration1, concentration0)
        # checked as the pair PyTorch checks, the underlying Dirichlet's concentration
        self._dirichlet = Dirichlet(stack([self.concentration1, self.concentration0], -1),
                                    validate_args=validate_args)
        super().__init__(tuple(self.concentration1.shape), validate_args=validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self) -> Tensor:
        return self._dirichlet.mode.select(-1, 0)

    @property
    def variance(self) -> Tensor:
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()) -> Tensor:
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value) -> Tensor:
        from ..ops.join import stack
        value = self._value(value, self.concentration1)
        return self._dirichlet.log_prob(stack([value, 1.0 - value], -1))

    def entropy(self) -> Tensor:
        return self._dirichlet.entropy()


class TransformedDistribution(Distribution):
    """``base_distribution`` pushed through ``transforms`` (elementwise bijections, applied in order): a draw
    is the transformed base draw, and ``log_prob(y)`` is the base log-density of ``x = inverse(y)`` less
    ``log |dy/dx|`` of each step (summed over the event dims)."""

    def __init__(self, base_distribution: Distribution, transforms, validate_args=None) -> None:
        from .transforms import Transform
        if isinstance(transforms, Transform):
            transforms = [transforms]
        elif not (isinstance(transforms, list) and all(isinstance(t, Transform) for t in transforms)):
            raise ValueError(f"transforms must be a Transform or a list of Transforms, but was {transforms}")
        self.base_dist, self.transforms = base_distribution, list(transforms)
        self.has_rsample = base_distribution.has_rsample
        super().__init__(base_distribution._batch_shape, base_distribution._event_shape, validate_args)

    @property
    def support(self):
        support = self.transforms[-1].codomain if self.transforms else self.base_dist.support
        n = len(self._event_shape)
        return constraints.independent(support, n) if n and support is not None else support

    def expand(self, batch_shape, _instance=None) -> "TransformedDistribution":
        base = self.base_dist.expand(_shape(batch_shape))
        return TransformedDistribution(base, self.transforms, validate_args=False)

    def _sum_event(self, x: Tensor) -> Tensor:
        n = len(self._event_shape)
        return x.sum(list(range(x.dim() - n, x.dim()))) if n else x

    def sample(self, sample_shape=()) -> Tensor:
        with grad_mode.no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def rsample(self, sample_shape=()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        y, lp = _as_tensor(value), 0.0
        for t in reversed(self.transforms):
            x = t.inv(y)
            lp = lp - self._sum_event(t.log_abs_det_jacobian(x, y))
            y = x
        return lp + self.base_dist.log_prob(y)

    def cdf(self, value) -> Tensor:
        for t in reversed(self.transforms):
            value = t.inv(value)
        value = self.base_dist.cdf(value)
        sign = 1
        for t in self.transforms:
            sign = sign * t.sign
        return value if isinstance(sign, int) and sign == 1 else sign * (value - 0.5) + 0.5

    def icdf(self, value) -> Tensor:
        sign = 1
        for t in self.transforms:
            sign = sign * t.sign
        if not (isinstance(sign, int) and sign == 1):
            value = sign * (value - 0.5) + 0.5
        value = self.base_dist.icdf(value)
        for t in self.transforms:
            value = t(value)
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LogNormal(TransformedDistribution):
    """``exp`` of a ``Normal(loc, scale)`` draw."""

    _param_names = ("loc", "scale")
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive

    def __init__(self, loc, scale, validate_args=None) -> None:
        from .transforms import ExpTransform
        base = Normal(loc, scale, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    loc = property(lambda self: self.base_dist.loc)
    scale = property(lambda self: self.base_dist.scale)
    expand = Distribution.expand

    @property
    def mean(self) -> Tensor:
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self) -> Tensor:
        return (self.loc - self.scale.pow(2)).exp()

    @property
    def variance(self) -> Tensor:
        s2 = self.scale.pow(2)
        return s2.expm1() * (2 * self.loc + s2).exp()

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc

    def __repr__(self) -> str:
        return Distribution.__repr__(self)


class Independent(Distribution):
    """Treat the last ``reinterpreted_batch_ndims`` batch dims of ``base_distribution`` as event dims."""

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args=None) -> None:
        n = reinterpreted_batch_ndims
        if n > len(base_distribution._batch_shape):
            raise ValueError(f"Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual {n} "
                             f"vs {len(base_distribution._batch_shape)}")
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        bs = base_distribution._batch_shape
        super().__init__(bs[:len(bs) - n], bs[len(bs) - n:] + base_distribution._event_shape)
        self.has_rsample = base_distribution.has_rsample
        self.has_enumerate_support = False
        self._validate_args = base_distribution._validate_args if validate_args is None else validate_args

    @property
    def support(self):
        base = self.base_dist.support
        return constraints.independent(base, self.reinterpreted_batch_ndims) if base is not None else None

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    def expand(self, batch_shape, _instance=None) -> "Independent":
        event = self._event_shape[:self.reinterpreted_batch_ndims]
        return Independent(self.base_dist.expand(_shape(batch_shape) + event), self.reinterpreted_batch_ndims)

    def _sum_rightmost(self, x: Tensor) -> Tensor:
        n = self.reinterpreted_batch_ndims
        return x.sum(list(range(x.dim() - n, x.dim()))) if n else x

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape=()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        return self._sum_rightmost(self.base_dist.log_prob(value))

    def entropy(self) -> Tensor:
        return self._sum_rightmost(self.base_dist.entropy())

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) for the pairs PyTorch registers among the distributions here: two of one kind
    (Normal, Categorical, OneHotCategorical, Bernoulli, Uniform, Exponential, Laplace, Gamma, Beta,
    Dirichlet, Independent with
    the same reinterpreted dims), Uniform against Normal, and Normal against Uniform (infinite)."""
    from ..ops.elementwise import where
    if isinstance(p, Normal) and isinstance(q, Normal):
        var_ratio = (p.scale / q.scale) ** 2
        t1 = ((p.loc - q.loc) / q.scale) ** 2
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())
    if isinstance(p, OneHotCategorical) and isinstance(q, OneHotCategorical):
        return kl_divergence(p._categorical, q._categorical)
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        t = p.probs * (p.logits - q.logits)
        return where(q.probs == 0, math.inf, where(p.probs == 0, 0.0, t)).sum(-1)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        from ..nn.functional import softplus
        t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
        t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
        # a q that is certain (probs 0 or 1, whose logits are clamped) makes the KL infinite where p may
        # differ from it; a certain p contributes no term for the outcome it never has
        t1 = where(p.probs == 0, 0.0, where(q.probs == 0, math.inf, t1))
        t2 = where(p.probs == 1, 0.0, where(q.probs == 1, math.inf, t2))
        return t1 + t2
    if isinstance(p, Uniform) and isinstance(q, Uniform):
        kl = ((q.high - q.low) / (p.high - p.low)).log()
        return where((q.low > p.low) | (q.high < p.high), math.inf, kl)
    if isinstance(p, Uniform) and isinstance(q, Normal):
        width = p.high - p.low
        t1 = (math.sqrt(2 * math.pi) * q.scale / width).log()
        t2 = width.pow(2) / 12
        t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
        return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)
    if isinstance(p, Normal) and isinstance(q, Uniform):
        from ..ops.shape import broadcast_tensors
        return broadcast_tensors(p.loc, q.low)[0].detach() * 0 + math.inf
    if isinstance(p, Exponential) and isinstance(q, Exponential):
        ratio = q.rate / p.rate
        return ratio - ratio.log() - 1
    if isinstance(p, Gamma) and isinstance(q, Gamma):
        t1 = q.concentration * (p.rate / q.rate).log()
        t2 = q.concentration.lgamma() - p.concentration.lgamma()
        t3 = (p.concentration - q.concentration) * p.concentration.digamma()
        t4 = (q.rate - p.rate) * (p.concentration / p.rate)
        return t1 + t2 + t3 + t4
    if isinstance(p, Beta) and isinstance(q, Beta):
        return kl_divergence(p._dirichlet, q._dirichlet)
    if isinstance(p, Dirichlet) and isinstance(q, Dirichlet):
        a, b = p.concentration, q.concentration
        a0, b0 = a.sum(-1), b.sum(-1)
        t1 = a0.lgamma() - b0.lgamma()
        t2 = (a.lgamma() - b.lgamma()).sum(-1)
        return t1 - t2 + ((a - b) * (a.digamma() - a0.digamma().unsqueeze(-1))).sum(-1)
    if isinstance(p, Laplace) and isinstance(q, Laplace):
        scale_ratio = p.scale / q.scale
        diff = (p.loc - q.loc).abs()
        return -scale_ratio.log() + diff / q.scale + scale_ratio * (-diff / p.scale).exp() - 1
    if isinstance(p, Independent) and isinstance(q, Independent) and \
            p.reinterpreted_batch_ndims == q.reinterpreted_batch_ndims:
        return p._sum_rightmost(kl_divergence(p.base_dist, q.base_dist))
    raise NotImplementedError(f"No KL(p || q) is implemented for {type(p).__name__} and {type(q).__name__}")
