"""A stateful random stream over ``jax.random``: ``manual_seed`` makes every
random op reproducible, as in PyTorch."""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from . import _kernel_cache
from ._device import cuda, host_made, host_put
from ._dtype import x64 as _x64
from ._tensor import _make
from .ops import registry

DEFAULT_SEED = 67280421310721


class Generator:
    """A random stream; pass as ``generator=`` where PyTorch accepts one."""

    def __init__(self, device="cpu") -> None:
        self.device = device
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        # jax.random.PRNGKey's threefry key ([high word, low word]) built on the host: seeding (the default
        # generator at import) must not start JAX's backend, which dynajax.distributed.initialize needs idle
        s = int(seed) % 2**64
        self._key = np.array([s >> 32, s & 0xFFFFFFFF], np.uint32)
        return self

    def seed(self) -> int:
        import random as _r
        s = _r.getrandbits(63)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    @_x64.wrap
    def get_state(self):
        """The stream's state as a uint8 tensor (PyTorch's type), usable with ``dynajax.save``."""
        return _make(jnp.asarray(np.asarray(self._key, np.uint32).view(np.uint8)))

    def set_state(self, state) -> None:
        arr = np.asarray(state._value if hasattr(state, "_value") else state)
        if arr.dtype == np.uint8:
            arr = arr.view(np.uint32)
        if arr.shape != (2,):
            raise RuntimeError(f"Invalid RNG state: expected 8 bytes (uint8) or 2 words (uint32), got shape "
                               f"{list(arr.shape)} dtype {arr.dtype}")
        self._key = jnp.asarray(arr, jnp.uint32)

    def next_key(self):
        self._key, sub = _split_stored(self._key)
        return sub


@jax.jit
def _split(key):
    k1, k2 = jax.random.split(key)
    return k1, k2


_SPLIT: list = []   # the eager split's kernel, from the kernel store where it is on (``_kernel_cache.stored``)


def _split_stored(key):
    """``_split(key)`` of a concrete key (a recording records ``_split`` itself)."""
    if isinstance(key, jax.core.Tracer):   # (dynajax inside a JAX transformation)
        return _split(key)
    if not _SPLIT:
        _SPLIT.append(_kernel_cache.stored("random split", _split.trace, (key,)) or _split)
    return _SPLIT[0](key)


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default random stream (also used by dropout and nn.init)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)


@_x64.wrap
def next_key(generator: Generator | None = None):
    """A fresh jax PRNG key from ``generator`` (default stream if None)."""
    return (generator or default_generator).next_key()


@functools.partial(jax.jit, static_argnames=("kind", "shape", "dtype"))
def _sample(key, a, b, *, kind, shape, dtype):
    # drawn flat, then reshaped: the same numbers (threefry counts elements in row-major order), but
    # XLA's CPU loops vectorize along the last dim, and an NCHW activation's last dim is small (7 for a
    # 28x28 image pooled twice), which made a dropout mask's draw cost ~5x more than the flat one
    # (a per-element ``a``/``b``, as a Bernoulli's probs tensor, is flattened alike)
    if kind in ("multinomial", "multinomial_distinct"):
        return _multinomial(key, a, shape, kind == "multinomial").astype(dtype)
    a, b = (jnp.broadcast_to(v, shape).reshape(-1) if jnp.ndim(v) else v for v in (a, b))
    return _draw(key, a, b, kind, (math.prod(shape),), dtype).reshape(shape)


_SAMPLE_JIT = _sample   # (a recording, ``compile.capture``, puts its own ``_sample`` in its place meanwhile)


def _multinomial(key, probs, shape, replacement: bool):
    """Indices into the last dim of ``probs`` (unnormalised weights; rows of a 2-d one drawn apart), ``shape[-1]``
    per row: independent categorical draws, or (``replacement`` False) distinct ones in the order a draw
    without replacement makes them -- the top-k of the log-weights plus Gumbel noise, which is such a draw."""
    logits = jnp.log(probs.astype(jnp.promote_types(probs.dtype, jnp.float32)))
    n = shape[-1]
    if replacement:
        return jnp.moveaxis(jax.random.categorical(key, logits, shape=(n,) + logits.shape[:-1]), 0, -1)
    return jax.lax.top_k(logits + jax.random.gumbel(key, logits.shape, logits.dtype), n)[1]


def _draw(key, a, b, kind, shape, dtype):
    if kind == "uniform":
        return jax.random.uniform(key, shape, dtype, minval=a, maxval=b)
    if kind == "normal":
        return (jax.random.normal(key, shape, dtype) * b + a).astype(dtype)
    if kind == "randint":
        return jax.random.randint(key, shape, a, b, dtype)
    if kind == "bernoulli":
        if jnp.ndim(a) and jnp.issubdtype(a.dtype, jnp.floating) and jnp.finfo(a.dtype).bits < 32:
            # JAX draws the uniform in p's dtype: in half precision its 2**-8 steps near 0 skew small
            # probabilities (p = 0.001 gave 1s ~8x too often in bfloat16)
            a = a.astype(jnp.float32)
        elif not jnp.ndim(a) and jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits <= 32:
            # a Python p would be float64 (x64 is on), and JAX draws the uniform in p's dtype: two
            # 32-bit words and float64 compares per element for a float32 mask (a dropout's)
            a = jnp.asarray(a, jnp.float32)
        return jax.random.bernoulli(key, a, shape).astype(dtype)
    if kind == "permutation":
        return jax.random.permutation(key, shape[0]).astype(dtype)
    raise ValueError(kind)


_ELEMENTWISE = frozenset({"uniform", "normal", "randint", "bernoulli"})   # numbers drawn one per element


@_x64.wrap
def sample(kind: str, shape, dtype, a=0.0, b=1.0, generator=None):
    """Draw an array: kind is uniform [a, b), normal (mean a, std b), randint [a, b), bernoulli (p=a),
    permutation (of ``range(shape[0])``, ``shape`` 1-d), multinomial or multinomial_distinct (``shape[-1]``
    indices per row of the weights ``a``, with or without replacement)."""
    key, shape, dtype = next_key(generator), tuple(shape), np.dtype(dtype)
    n = math.prod(shape)
    if kind in _ELEMENTWISE and _drawn_in_bulk(key, a, b, (kind, shape, dtype), n):   # (a cut one is none)
        m = 1 << max(16, (n - 1).bit_length())
        return host_put(np.asarray(_sample_stored(key, a, b, kind, (m,), dtype))[:n].reshape(shape))
    return _sample_stored(key, a, b, kind, shape, dtype)


def _sample_stored(key, a, b, kind: str, shape: tuple, dtype):
    """``_sample``, through its kernel from the kernel store where it is on (a model's initialisation draws
    at a few shapes, each a compile of ~0.1 s in every process otherwise)."""
    k = None
    if _sample is _SAMPLE_JIT and not any(isinstance(v, jax.core.Tracer) for v in (key, a, b)):   # (not recording)
        k = _kernel_cache.stored("random draw", functools.partial(_sample.trace, kind=kind, shape=shape, dtype=dtype),
                                 (key, a, b), (kind, shape, dtype))
    return k(key, a, b) if k is not None else _sample(key, a, b, kind=kind, shape=shape, dtype=dtype)


def _drawn_in_bulk(key, a, b, what: tuple, n: int) -> bool:
    """Whether an eager draw of ``n`` numbers takes the first ``n`` of a draw of a power-of-two size
    (>= 2**16), cut on the host, instead of compiling the sampler for its shape (~150 ms each). Threefry
    numbers depend only on the key and their position, so they are the same numbers. When
    ``_device.host_made`` says so (at most 2**24 numbers: past that, drawing up to twice as many costs
    more than a compile), with scalar bounds, and never while ``dynajax.compile`` records or JAX traces
    (the draw is then part of a graph)."""
    if registry.record_creation or any(isinstance(v, jax.core.Tracer) for v in (key, a, b)):
        return False
    return not (np.ndim(a) or np.ndim(b)) and host_made(("draw",) + what, n, 1 << 24)


cuda.manual_seed = cuda.manual_seed_all = staticmethod(lambda seed: manual_seed(seed))
