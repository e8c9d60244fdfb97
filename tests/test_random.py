"""The random stream: draws are jax.random's for the stream's keys, whatever the shape."""
import jax
import numpy as np
import pytest

import dynajax as dj
from dynajax import _device, random
from helpers import XLA_CPU_ONLY, xla_compiles


@pytest.mark.parametrize("kind,a,b,dtype", [("uniform", -1.0, 2.0, np.float32), ("normal", 0.5, 2.0, np.float32),
                                            ("randint", 0, 9, np.int64), ("bernoulli", 0.75, 1.0, np.float32)])
def test_draw_equals_jax_random_of_its_shape(kind, a, b, dtype):
    # draws are made flat and reshaped (faster on CPU); the numbers must be those of the shaped draw
    shape = (3, 4, 7, 5)
    g = dj.Generator().manual_seed(11)
    key = jax.random.split(g._key)[1]
    got = np.asarray(random.sample(kind, shape, dtype, a, b, generator=g))
    with jax.enable_x64(True):   # dynajax draws in 64-bit JAX (an int64 randint from 64-bit words)
        ref = {"uniform": lambda: jax.random.uniform(key, shape, dtype, a, b),
               "normal": jax.jit(lambda: jax.random.normal(key, shape, dtype) * b + a),   # jitted: same rounding
               "randint": lambda: jax.random.randint(key, shape, a, b, dtype),
               # a float32 mask compares a float32 uniform with p (a Python p alone would draw float64)
               "bernoulli": lambda: jax.random.bernoulli(key, np.float32(a), shape).astype(dtype)}[kind]()
    assert got.shape == shape
    np.testing.assert_array_equal(got, np.asarray(ref))
    assert len(np.unique(got)) > 1


@XLA_CPU_ONLY   # elsewhere every eager make is a compiled kernel (_device.default_on_cpu)
def test_new_shapes_drawn_eagerly_share_one_compiled_sampler():
    """The first two eager draws of a shape take the first numbers of a power-of-two draw (building a
    model compiles a sampler per size class, not per parameter shape); the third compiles its own
    sampler. All three are the numbers jax.random draws for the shape."""
    shapes = [(37, 3), (5, 11, 2), (101,), (2, 2, 2, 9)]   # all within the smallest draw (2**16)
    random.sample("uniform", (1,), np.float32)             # that draw's sampler compiled
    n = xla_compiles()
    g = dj.Generator().manual_seed(5)
    for s in shapes:
        random.sample("uniform", s, np.float32, generator=g)
        dj.zeros(*s)                                       # fills are made on the host too
    assert xla_compiles() - n <= 1                         # at most a split of the generator's key
    for draw in range(3):
        g = dj.Generator().manual_seed(7)
        key = jax.random.split(g._key)[1]
        got = np.asarray(random.sample("normal", (13, 17), np.float64, 1.0, 3.0, generator=g))
        with jax.enable_x64(True):   # the float64 reference needs 64-bit JAX
            ref = np.asarray(jax.jit(lambda: jax.random.normal(key, (13, 17), np.float64) * 3.0 + 1.0)())
        np.testing.assert_array_equal(got, ref)
    assert _device._EARLY[("draw", "normal", (13, 17), np.dtype(np.float64))] == 3
    for make in range(3):   # the third fill of a shape is jnp.full's kernel: the same values
        np.testing.assert_array_equal(dj.full((3, 5), -2.5, dtype=dj.float16).numpy(),
                                      np.full((3, 5), -2.5, np.float16))
    assert _device._EARLY[("fill", (3, 5), np.dtype(np.float16))] == 3


@XLA_CPU_ONLY
def test_optimizer_state_of_shared_shapes_compiles_no_fill():
    """Optimizer moments are made once per parameter, on the host whatever the count of their shape:
    eight same-shaped parameters' Adam state compiles no fill kernel, and is zeros of each dtype."""
    params = [dj.nn.Parameter(dj.randn(19, 23, dtype=d)) for d in (dj.float32, dj.float64) for _ in range(4)]
    n = xla_compiles()
    opt = dj.optim.Adam(params)
    for p in params:
        opt._init_state(p, opt.state[p], opt.param_groups[0])
    assert xla_compiles() == n
    for p in params:
        for name in ("exp_avg", "exp_avg_sq"):
            m = opt.state[p][name]
            assert m.dtype == p.dtype and m.shape == p.shape
            np.testing.assert_array_equal(m.numpy(), np.zeros((19, 23), p.detach().numpy().dtype))


def test_per_element_probabilities():
    # a Bernoulli with one probability per element (a probs tensor): drawn flat with the probs flattened
    g = dj.Generator().manual_seed(3)
    key = jax.random.split(g._key)[1]
    p = np.random.default_rng(0).uniform(0.1, 0.9, (5, 1, 6)).astype(np.float32)
    got = np.asarray(random.sample("bernoulli", (5, 4, 6), np.float32, p, generator=g))
    ref = np.asarray(jax.random.bernoulli(key, p, (5, 4, 6)).astype(np.float32))
    np.testing.assert_array_equal(got, ref)
    assert 0 < got.mean() < 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "bool", "int32"])
def test_randint_of_a_non_integer_dtype_draws_integers_in_it(dtype):
    """As torch.randint(..., dtype=torch.float32) and torch.randint_like(a float tensor): integer values in
    [low, high), held in the requested dtype."""
    torch = pytest.importorskip("torch")
    dj.manual_seed(0)
    high = 2 if dtype == "bool" else 5
    a = dj.randint(0, high, (400,), dtype=getattr(dj, dtype)).numpy()
    b = dj.randint_like(dj.zeros(400, dtype=getattr(dj, dtype)), high).numpy()
    want = torch.randint(0, high, (400,), dtype=getattr(torch, dtype)).numpy().dtype
    for v in (a, b):
        assert v.dtype == want
        assert set(np.unique(v.astype(np.int64))) == set(range(high))   # every value drawn, none outside


MULTINOMIAL_ERRORS = {
    "integer weights": lambda L: L.multinomial(L.tensor([1, 2]), 1),
    "3-d weights": lambda L: L.multinomial(L.ones(2, 2, 2), 1),
    "no samples": lambda L: L.multinomial(L.ones(3), 0),
    "more distinct samples than categories": lambda L: L.multinomial(L.ones(3), 4),
    "negative weight": lambda L: L.multinomial(L.tensor([1.0, -1.0, 1.0]), 1, True),
    "NaN weight": lambda L: L.multinomial(L.tensor([1.0, float("nan")]), 1, True),
    "zero row": lambda L: L.multinomial(L.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, True),
}


@pytest.mark.parametrize("case", list(MULTINOMIAL_ERRORS))
def test_multinomial_rejects_what_torch_rejects(case):
    torch = pytest.importorskip("torch")
    got = []
    for L in (torch, dj):
        with pytest.raises(RuntimeError) as info:
            MULTINOMIAL_ERRORS[case](L)
        got.append(str(info.value))
    assert got[1] == got[0]


def test_multinomial_draws_follow_the_weights_with_and_without_replacement():
    dj.manual_seed(3)
    w = dj.tensor([[1.0, 0.0, 6.0, 3.0], [2.0, 2.0, 0.0, 4.0]])
    draws = dj.multinomial(w, 20000, replacement=True)
    assert draws.dtype == dj.int64 and tuple(draws.shape) == (2, 20000)
    for row, want in zip(draws.numpy(), w.numpy() / w.numpy().sum(1, keepdims=True)):
        np.testing.assert_allclose(np.bincount(row, minlength=4) / 20000, want, atol=0.015)
    # without replacement: distinct, zero weights never drawn while others remain, and the ordered pairs
    # drawn with the probabilities of drawing one after the other: p_i * p_j / (1 - p_i)
    p = np.array([0.5, 0.3, 0.2, 0.0])
    pairs = dj.tensor(p).expand(20000, 4).multinomial(2).numpy()
    assert (pairs[:, 0] != pairs[:, 1]).all() and (pairs != 3).all()
    joint = np.zeros((4, 4))
    np.add.at(joint, (pairs[:, 0], pairs[:, 1]), 1 / 20000)
    want = np.array([[p[i] * p[j] / (1 - p[i]) if i != j else 0.0 for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(joint, want, atol=0.015)
    assert sorted(dj.multinomial(dj.ones(10), 10).tolist()) == list(range(10))


def test_multinomial_in_a_compiled_step_draws_eagers_numbers():
    w = dj.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    g = dj.Generator()

    def sample(w):
        return dj.multinomial(w, 4, replacement=True), w.multinomial(2), dj.multinomial(w, 3, generator=g)
    results = []
    for fn in (sample, dj.compile(sample)):
        dj.manual_seed(5)
        g.manual_seed(9)
        results.append([[t.tolist() for t in fn(w)] for _ in range(3)])
    assert results[0] == results[1]
    assert results[0][0] != results[0][1]   # the stream moves on between calls


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_bernoulli_of_half_precision_probabilities_is_unbiased(dtype):
    """JAX draws the uniform in the probabilities' dtype; in half precision its coarse steps near 0 made
    p = 0.001 give ones ~8x too often."""
    dj.manual_seed(0)
    p = dj.full((400_000,), 0.001, dtype=getattr(dj, dtype))
    rate = float(dj.bernoulli(p).float().mean())
    assert abs(rate - 0.001) < 0.0003   # ~6 standard deviations of the rate
    assert float(p.clone().bernoulli_(p).float().mean()) == pytest.approx(0.001, abs=0.0003)


def test_bernoulli_inplace_takes_a_probability_tensor_as_torch():
    torch = pytest.importorskip("torch")
    for L in (torch, dj):
        got = L.zeros(2, 3).bernoulli_(L.tensor([0.0, 1.0, 0.0]))   # broadcast over the rows
        assert got.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
        with pytest.raises(RuntimeError, match="The expanded size of the tensor \\(3\\) must match the existing "
                                               "size \\(2\\) at non-singleton dimension 1"):
            L.zeros(2, 3).bernoulli_(L.tensor([0.0, 1.0]))
