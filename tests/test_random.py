"""The random stream: draws are jax.random's for the stream's keys, whatever the shape."""
import jax
import numpy as np
import pytest

import dynajax as dj
from dynajax import random


@pytest.mark.parametrize("kind,a,b,dtype", [("uniform", -1.0, 2.0, np.float32), ("normal", 0.5, 2.0, np.float32),
                                            ("randint", 0, 9, np.int64), ("bernoulli", 0.75, 1.0, np.float32)])
def test_draw_equals_jax_random_of_its_shape(kind, a, b, dtype):
    # draws are made flat and reshaped (faster on CPU); the numbers must be those of the shaped draw
    shape = (3, 4, 7, 5)
    g = dj.Generator().manual_seed(11)
    key = jax.random.split(g._key)[1]
    got = np.asarray(random.sample(kind, shape, dtype, a, b, generator=g))
    ref = {"uniform": lambda: jax.random.uniform(key, shape, dtype, a, b),
           "normal": jax.jit(lambda: jax.random.normal(key, shape, dtype) * b + a),   # jitted: same rounding
           "randint": lambda: jax.random.randint(key, shape, a, b, dtype),
           # a float32 mask compares a float32 uniform with p (a Python p alone would draw float64)
           "bernoulli": lambda: jax.random.bernoulli(key, np.float32(a), shape).astype(dtype)}[kind]()
    assert got.shape == shape
    np.testing.assert_array_equal(got, np.asarray(ref))
    assert len(np.unique(got)) > 1


def test_per_element_probabilities():
    # a Bernoulli with one probability per element (a probs tensor): drawn flat with the probs flattened
    g = dj.Generator().manual_seed(3)
    key = jax.random.split(g._key)[1]
    p = np.random.default_rng(0).uniform(0.1, 0.9, (5, 1, 6)).astype(np.float32)
    got = np.asarray(random.sample("bernoulli", (5, 4, 6), np.float32, p, generator=g))
    ref = np.asarray(jax.random.bernoulli(key, p, (5, 4, 6)).astype(np.float32))
    np.testing.assert_array_equal(got, ref)
    assert 0 < got.mean() < 1
