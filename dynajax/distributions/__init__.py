"""``dynajax.distributions``: ``Normal``, ``Categorical``, ``Bernoulli``, ``Uniform`` with
``sample``/``rsample``/``log_prob``/``entropy`` and ``kl_divergence``, as ``torch.distributions``."""
from __future__ import annotations

import math

import jax
import numpy as np

from .. import random
from .._tensor import Tensor, _make
from ..autograd import grad_mode

__all__ = ["Distribution", "Normal", "Categorical", "Bernoulli", "Uniform", "Independent", "kl_divergence"]


def _as_tensor(v, like=None) -> Tensor:
    from ..ops.creation import tensor
    if isinstance(v, Tensor):
        return v
    return tensor(v, dtype=like.dtype if like is not None else None)


def _shape(sample_shape) -> tuple:
    return tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,)


class Distribution:
    """Base class: ``batch_shape``, ``event_shape``, ``sample``, ``rsample``, ``log_prob``, ``entropy``."""

    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None) -> None:
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)

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
        params = ", ".join(f"{k}: {tuple(getattr(self, k).shape) if getattr(self, k).dim() else getattr(self, k)}"
                           for k in self._param_names)
        return f"{type(self).__name__}({params})"

    _param_names: tuple = ()


class Normal(Distribution):
    """Gaussian with mean ``loc`` and standard deviation ``scale``; ``rsample`` is reparameterized."""

    has_rsample = True
    _param_names = ("loc", "scale")

    def __init__(self, loc, scale, validate_args=None) -> None:
        from ..ops.shape import broadcast_tensors
        loc = _as_tensor(loc, scale if isinstance(scale, Tensor) else None)
        scale = _as_tensor(scale, loc)
        if validate_args and not bool((scale > 0).all()):
            raise ValueError("Expected parameter scale to satisfy the constraint GreaterThan(lower_bound=0.0)")
        self.loc, self.scale = broadcast_tensors(loc, scale)
        super().__init__(tuple(self.loc.shape))

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale

    def rsample(self, sample_shape=()) -> Tensor:
        eps = _make(random.sample("normal", self._extended_shape(sample_shape), self.loc._value.dtype))
        return self.loc + eps * self.scale

    def log_prob(self, value) -> Tensor:
        value = _as_tensor(value, self.loc)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def cdf(self, value) -> Tensor:
        return 0.5 * (1 + ((value - self.loc) * (1 / math.sqrt(2)) / self.scale).erf())

    def icdf(self, value) -> Tensor:
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)


class Uniform(Distribution):
    """Uniform on ``[low, high)``."""

    has_rsample = True
    _param_names = ("low", "high")

    def __init__(self, low, high, validate_args=None) -> None:
        from ..ops.shape import broadcast_tensors
        low = _as_tensor(low, high if isinstance(high, Tensor) else None)
        self.low, self.high = broadcast_tensors(low, _as_tensor(high, low))
        super().__init__(tuple(self.low.shape))

    @property
    def mean(self) -> Tensor:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()) -> Tensor:
        u = _make(random.sample("uniform", self._extended_shape(sample_shape), self.low._value.dtype))
        return self.low + u * (self.high - self.low)

    def log_prob(self, value) -> Tensor:
        from ..ops.elementwise import where
        value = _as_tensor(value, self.low)
        inside = (value >= self.low) & (value < self.high)
        return where(inside, -(self.high - self.low).log(), -math.inf)

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


class Categorical(Distribution):
    """A distribution over ``0..K-1`` given ``probs`` or ``logits`` over the last dim."""

    _param_names = ("probs",)

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        from ..ops.reduce import logsumexp
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = _as_tensor(probs)
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=np.finfo(probs._value.dtype).tiny).log()
        else:
            logits = _as_tensor(logits)
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logsumexp(logits, -1, keepdim=True)
            self.probs = self.logits.exp()
        self._num_events = self.logits.shape[-1]
        super().__init__(tuple(self.logits.shape[:-1]))

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
        shape = _shape(sample_shape) + self._batch_shape
        idx = jax.random.categorical(random.next_key(), self.logits.detach()._value, shape=shape)
        return _make(idx.astype(np.int64))

    def log_prob(self, value) -> Tensor:
        from ..ops.shape import broadcast_tensors
        value = _as_tensor(value).long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self) -> Tensor:
        logits = self.logits.clamp(min=float(np.finfo(self.logits._value.dtype).min))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        from ..ops.creation import arange
        values = arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + self._batch_shape) if expand else values


class Bernoulli(Distribution):
    """0/1 outcomes with probability ``probs`` (or ``logits``) of a 1."""

    _param_names = ("probs",)

    def __init__(self, probs=None, logits=None, validate_args=None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _as_tensor(probs)
            eps = float(np.finfo(self.probs._value.dtype).eps)
            p = self.probs.clamp(eps, 1 - eps)
            self.logits = p.log() - (-p).log1p()
        else:
            self.logits = _as_tensor(logits)
            self.probs = self.logits.sigmoid()
        super().__init__(tuple(self.probs.shape))

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        from ..ops.shape import expand
        shape = self._extended_shape(sample_shape)
        p = expand(self.probs.detach(), shape)._value
        return _make(random.sample("bernoulli", shape, self.probs._value.dtype, p))

    def log_prob(self, value) -> Tensor:
        from ..nn.functional import binary_cross_entropy_with_logits
        from ..ops.shape import broadcast_tensors
        logits, value = broadcast_tensors(self.logits, _as_tensor(value, self.logits))
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self) -> Tensor:
        from ..nn.functional import binary_cross_entropy_with_logits
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


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
    """KL(p || q) for two Normals, two Categoricals or two Bernoullis."""
    if isinstance(p, Normal) and isinstance(q, Normal):
        var_ratio = (p.scale / q.scale) ** 2
        t1 = ((p.loc - q.loc) / q.scale) ** 2
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        from ..ops.elementwise import where
        t = p.probs * (p.logits - q.logits)
        return where(q.probs == 0, math.inf, where(p.probs == 0, 0.0, t)).sum(-1)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        from ..nn.functional import softplus
        t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
        t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
        return t1 + t2
    if isinstance(p, Independent) and isinstance(q, Independent) and \
            p.reinterpreted_batch_ndims == q.reinterpreted_batch_ndims:
        return p._sum_rightmost(kl_divergence(p.base_dist, q.base_dist))
    raise NotImplementedError(f"No KL(p || q) is implemented for {type(p).__name__} and {type(q).__name__}")
