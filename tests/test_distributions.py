"""distributions against torch.distributions: log_prob, entropy, KL, gradients; sample statistics."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.distributions as D
from helpers import assert_close, compare
import torch.distributions as TDi
import dynajax.distributions as DDi

RNG = np.random.default_rng(0)


def test_normal():
    loc, scale, v = RNG.standard_normal(3), RNG.random(3) + 0.5, RNG.standard_normal((2, 3))
    compare(lambda l, s, x: (D.Normal(l, s).log_prob(x), D.Normal(l, s).entropy(), D.Normal(l, s).cdf(x)),
            lambda l, s, x: (torch.distributions.Normal(l, s).log_prob(x), torch.distributions.Normal(l, s).entropy(),
                             torch.distributions.Normal(l, s).cdf(x)),
            loc, scale, v)
    n = D.Normal(dj.tensor(loc, requires_grad=True), dj.tensor(scale))
    dj.manual_seed(0)
    s = n.rsample((4000,))
    assert s.shape == (4000, 3) and s.requires_grad
    assert_close(s.mean(0), dj.tensor(loc), atol=0.1)
    assert not n.sample((2,)).requires_grad
    s.sum().backward()
    assert_close(n.loc.grad, dj.full((3,), 4000.0, dtype=dj.float64))


@pytest.mark.parametrize("use_logits", [False, True])
def test_categorical(use_logits):
    p = RNG.random((2, 4)) + 0.1
    arg = np.log(p) if use_logits else p
    v = np.array([[0, 3], [2, 1], [1, 1]])
    kw = "logits" if use_logits else "probs"
    compare(lambda a: (D.Categorical(**{kw: a}).log_prob(dj.tensor(v)), D.Categorical(**{kw: a}).entropy()),
            lambda a: (torch.distributions.Categorical(**{kw: a}).log_prob(torch.tensor(v)),
                       torch.distributions.Categorical(**{kw: a}).entropy()), arg)
    c = D.Categorical(**{kw: dj.tensor(arg)})
    dj.manual_seed(1)
    s = c.sample((5000,))
    assert s.shape == (5000, 2) and s.dtype == dj.int64
    freq = np.stack([(s.numpy() == k).mean(0) for k in range(4)], -1)
    np.testing.assert_allclose(freq, p / p.sum(-1, keepdims=True), atol=0.03)
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        D.Categorical()


def test_bernoulli_and_kl():
    p, v = RNG.random(4) * 0.8 + 0.1, np.array([0.0, 1.0, 1.0, 0.0])
    compare(lambda a: (D.Bernoulli(a).log_prob(dj.tensor(v)), D.Bernoulli(a).entropy()),
            lambda a: (torch.distributions.Bernoulli(a).log_prob(torch.tensor(v)),
                       torch.distributions.Bernoulli(a).entropy()), p)
    compare(lambda a: D.Bernoulli(logits=a).log_prob(dj.tensor(v)),
            lambda a: torch.distributions.Bernoulli(logits=a).log_prob(torch.tensor(v)), p)
    dj.manual_seed(2)
    s = D.Bernoulli(dj.tensor(p)).sample((4000,))
    np.testing.assert_allclose(s.numpy().mean(0), p, atol=0.04)
    q = RNG.random(4) * 0.8 + 0.1
    TD = torch.distributions
    compare(lambda a, b: D.kl_divergence(D.Bernoulli(a), D.Bernoulli(b)),
            lambda a, b: TD.kl_divergence(TD.Bernoulli(a), TD.Bernoulli(b)), p, q)
    compare(lambda a, b: D.kl_divergence(D.Normal(a, b), D.Normal(b, a + 1)),
            lambda a, b: TD.kl_divergence(TD.Normal(a, b), TD.Normal(b, a + 1)), p, q)
    compare(lambda a, b: D.kl_divergence(D.Categorical(a), D.Categorical(b)),
            lambda a, b: TD.kl_divergence(TD.Categorical(a), TD.Categorical(b)), p, q)
    compare(lambda a, b: (D.Uniform(a, a + b).log_prob(a + 0.5 * b), D.Uniform(a, a + b).entropy()),
            lambda a, b: (TD.Uniform(a, a + b).log_prob(a + 0.5 * b), TD.Uniform(a, a + b).entropy()), p, q)


def test_independent_normal():
    TD = torch.distributions
    loc, scale, v = RNG.standard_normal((2, 3)), RNG.random((2, 3)) + 0.5, RNG.standard_normal((4, 2, 3))
    compare(lambda l, s, x: (D.Independent(D.Normal(l, s), 1).log_prob(x), D.Independent(D.Normal(l, s), 1).entropy(),
                             D.kl_divergence(D.Independent(D.Normal(l, s), 1), D.Independent(D.Normal(s, l + 2), 1))),
            lambda l, s, x: (TD.Independent(TD.Normal(l, s), 1).log_prob(x),
                             TD.Independent(TD.Normal(l, s), 1).entropy(),
                             TD.kl_divergence(TD.Independent(TD.Normal(l, s), 1), TD.Independent(TD.Normal(s, l + 2), 1))),
            loc, scale, v)
    d = D.Independent(D.Normal(dj.tensor(loc), dj.tensor(scale)), 1)
    assert d.batch_shape == (2,) and d.event_shape == (3,) and d.rsample((5,)).shape == (5, 2, 3)

# ------------------------------------------------------------
# distributions against torch.distributions: argument and value validation (on by default, as PyTorch's),
# the properties and methods PyTorch has (mode, variance, cdf/icdf, enumerate_support, expand, support),
# KL pairs, the added Exponential/Laplace/OneHotCategorical/Gamma/Beta/Dirichlet/TransformedDistribution/
# LogNormal, and Categorical sampling inside ``dynajax.compile``.

P = [[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]


def _t(lib, v):
    return lib.tensor(np.asarray(v, dtype=np.float32))


def _same(fn, atol=1e-6):
    """``fn(lib, distributions)`` gives the same values in both libraries (NaN where torch has NaN)."""
    t, d = fn(torch, TDi), fn(dj, DDi)
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=atol)


def _errors_alike(fn):
    with pytest.raises(Exception) as te:
        fn(torch, TDi)
    with pytest.raises(type(te.value)) as de:
        fn(dj, DDi)
    # the message up to the tensors it prints (whose formatting differs)
    head = str(te.value).split("(")[0].split(":")[0]
    assert str(de.value).startswith(head), (str(de.value), str(te.value))


@pytest.mark.parametrize("make", [
    lambda t, D: D.Normal(_t(t, [0.0]), _t(t, [-1.0])),
    lambda t, D: D.Normal(_t(t, [float("nan")]), _t(t, [1.0])),
    lambda t, D: D.Uniform(_t(t, [1.0]), _t(t, [0.0])),
    lambda t, D: D.Categorical(probs=_t(t, [-0.1, 1.1])),
    lambda t, D: D.Bernoulli(probs=_t(t, [1.2])),
    lambda t, D: D.Exponential(_t(t, [0.0, 2.0])),
    lambda t, D: D.Laplace(_t(t, [0.0]), _t(t, [-2.0])),
    lambda t, D: D.Normal(_t(t, [0.0, 1.0]), _t(t, [1.0, 2.0])).log_prob(_t(t, [float("nan"), 1.0])),
    lambda t, D: D.Normal(_t(t, [0.0, 1.0]), _t(t, [1.0, 2.0])).log_prob(_t(t, [0.0, 1.0, 2.0])),
    lambda t, D: D.Normal(_t(t, 0.0), _t(t, 1.0)).log_prob(0.5),
    lambda t, D: D.Uniform(_t(t, [0.0, 1.0]), _t(t, [1.0, 3.0])).log_prob(_t(t, [0.5, 3.5])),
    lambda t, D: D.Categorical(probs=_t(t, P)).log_prob(t.tensor([3, 0])),
    lambda t, D: D.Categorical(probs=_t(t, P)).log_prob(t.tensor([-1, 0])),
    lambda t, D: D.Categorical(probs=_t(t, P)).log_prob(_t(t, [1.5, 0.0])),
    lambda t, D: D.Bernoulli(probs=_t(t, [0.2])).log_prob(_t(t, [0.5])),
    lambda t, D: D.Exponential(_t(t, [1.0])).log_prob(_t(t, [-1.0])),
    lambda t, D: D.OneHotCategorical(probs=_t(t, P)).log_prob(_t(t, [[0, 1, 1], [1, 0, 0]])),
])
def test_validation_errors_as_torch(make):
    _errors_alike(make)


def test_validation_can_be_turned_off():
    d = DDi.Normal(_t(dj, [0.0]), _t(dj, [-1.0]), validate_args=False)
    assert d.scale.item() == -1.0
    assert DDi.Categorical(probs=_t(dj, P), validate_args=False).log_prob(_t(dj, [1.0, 0.0])).shape == (2,)


@pytest.mark.parametrize("fn", [
    lambda t, D: D.Uniform(_t(t, [0.0, 1.0]), _t(t, [1.0, 3.0])).cdf(_t(t, [0.5, 2.5])),
    lambda t, D: D.Uniform(_t(t, [0.0, 1.0]), _t(t, [1.0, 3.0])).icdf(_t(t, [0.5, 0.25])),
    lambda t, D: D.Uniform(_t(t, [0.0, 1.0]), _t(t, [1.0, 3.0])).log_prob(_t(t, [0.5, 1.0])),
    lambda t, D: D.Categorical(probs=_t(t, P)).variance,
    lambda t, D: D.Categorical(probs=_t(t, P)).enumerate_support(),
    lambda t, D: D.Categorical(probs=_t(t, [0.2, 0.8])).expand((3,)).log_prob(t.tensor([0, 1, 1])),
    lambda t, D: D.Bernoulli(probs=_t(t, [0.2, 0.9, 0.5])).mode,
    lambda t, D: D.Bernoulli(probs=_t(t, [0.2, 0.9])).enumerate_support(),
    lambda t, D: D.Independent(D.Normal(_t(t, [[0.0, 1.0]]), _t(t, [[1.0, 2.0]])), 1).mode,
    lambda t, D: D.Normal(_t(t, [0.0, 1.0]), _t(t, [1.0, 2.0])).expand((3, 2)).log_prob(_t(t, [0.5, 0.5])),
    lambda t, D: D.kl_divergence(D.Bernoulli(probs=_t(t, [0.2, 1.0, 0.0])), D.Bernoulli(probs=_t(t, [0.0, 1.0, 1.0]))),
    lambda t, D: D.kl_divergence(D.Uniform(_t(t, [0.0, 0.0]), _t(t, [1.0, 1.0])),
                                 D.Uniform(_t(t, [-1.0, 0.5]), _t(t, [2.0, 2.0]))),
    lambda t, D: D.kl_divergence(D.Uniform(_t(t, [0.0]), _t(t, [1.0])), D.Normal(_t(t, [0.3]), _t(t, [2.0]))),
    lambda t, D: D.kl_divergence(D.Normal(_t(t, [0.0]), _t(t, [1.0])), D.Uniform(_t(t, [-1.0]), _t(t, [2.0]))),
])
def test_methods_as_torch(fn):
    _same(fn)


def test_support_and_repr_as_torch():
    for make in (lambda t, D: D.Categorical(probs=_t(t, P)), lambda t, D: D.Bernoulli(logits=_t(t, [0.3])),
                 lambda t, D: D.Normal(_t(t, 0.0), _t(t, 1.0)), lambda t, D: D.Exponential(_t(t, [1.0, 2.0]))):
        assert repr(make(dj, DDi).support) == repr(make(torch, TDi).support)
    assert repr(DDi.Categorical(logits=_t(dj, [[0.5, 1.0]]))) == "Categorical(logits: dynajax.Size([1, 2]))"


@pytest.mark.parametrize("name,params,value", [
    ("Exponential", ([0.5, 2.0],), [[1.0, 0.3], [0.1, 4.0]]),
    ("Laplace", ([0.5, -2.0], [1.0, 3.0]), [[1.0, 0.3], [-4.0, -2.0]]),
])
def test_exponential_laplace_as_torch(name, params, value):
    def make(t, D):
        return getattr(D, name)(*(_t(t, p) for p in params))
    for attr in ("mean", "mode", "variance", "stddev"):
        _same(lambda t, D: getattr(make(t, D), attr))
    _same(lambda t, D: make(t, D).log_prob(_t(t, value)))
    _same(lambda t, D: make(t, D).cdf(_t(t, value)))
    _same(lambda t, D: make(t, D).icdf(_t(t, [[0.1, 0.7], [0.5, 0.95]])), atol=1e-5)
    _same(lambda t, D: make(t, D).entropy())
    other = tuple(np.asarray(p)[::-1] + 0.5 for p in params)
    _same(lambda t, D: D.kl_divergence(make(t, D), getattr(D, name)(*(_t(t, p) for p in other))))
    # reparameterized draws: their mean and the gradient of E[x^2] (2/rate^2; loc^2 + 2 scale^2)
    leaves = [dj.tensor(np.asarray(p, np.float32), requires_grad=True) for p in params]
    dj.manual_seed(0)
    x = getattr(DDi, name)(*leaves).rsample((100000,))
    assert x.shape == (100000, 2) and x.dtype == dj.float32
    ref = make(torch, TDi)
    np.testing.assert_allclose(x.mean(0).detach().numpy(), ref.mean.numpy(), rtol=0.03, atol=0.03)
    (x ** 2).mean(0).sum().backward()
    p = [np.asarray(v, np.float64) for v in params]
    want = [-4 / p[0] ** 3] if name == "Exponential" else [2 * p[0], 4 * p[1]]
    for leaf, w in zip(leaves, want):
        np.testing.assert_allclose(leaf.grad.numpy(), w, rtol=0.05, atol=0.05)


def test_one_hot_categorical_as_torch():
    def make(t, D):
        return D.OneHotCategorical(probs=_t(t, P))
    for attr in ("mean", "mode", "variance"):
        _same(lambda t, D: getattr(make(t, D), attr))
    _same(lambda t, D: make(t, D).log_prob(_t(t, [[0, 0, 1], [1, 0, 0]])))
    _same(lambda t, D: make(t, D).entropy())
    _same(lambda t, D: make(t, D).enumerate_support())
    _same(lambda t, D: D.kl_divergence(make(t, D), D.OneHotCategorical(logits=_t(t, [[0, 1, 2], [3, 1, 0]]))))
    d = make(dj, DDi)
    assert d.batch_shape == (2,) and d.event_shape == (3,)
    dj.manual_seed(0)
    s = d.sample((4000,))
    assert s.shape == (4000, 2, 3) and s.dtype == dj.float32 and bool((s.sum(-1) == 1).all())
    np.testing.assert_allclose(s.mean(0).numpy(), P, atol=0.03)


def test_categorical_sample_frequencies_in_half_precision():
    p = np.array([0.001, 0.009, 0.99])
    for dtype in (dj.bfloat16, dj.float32):
        dj.manual_seed(0)
        s = DDi.Categorical(probs=dj.tensor(p).to(dtype)).sample((200000,))
        assert s.dtype == dj.int64
        np.testing.assert_allclose(np.bincount(s.numpy(), minlength=3) / 200000, p, rtol=0.25, atol=1e-4)


def test_bernoulli_sample_frequencies_in_half_precision():
    for dtype in (dj.bfloat16, dj.float16, dj.float32):
        dj.manual_seed(0)
        s = DDi.Bernoulli(probs=dj.tensor([0.001, 0.3]).to(dtype)).sample((200000,))
        assert s.dtype == dtype
        np.testing.assert_allclose(s.float().numpy().mean(0), [0.001, 0.3], rtol=0.2, atol=2e-3)


def test_categorical_sample_in_compiled_step_matches_eager():
    x = dj.tensor(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))

    def run(compiled):
        dj.manual_seed(0)
        lin = dj.nn.Linear(3, 4)
        opt = dj.optim.SGD(lin.parameters(), lr=0.1)

        def step(x):
            d = DDi.Categorical(logits=lin(x))
            a = d.sample()
            loss = -(d.log_prob(a) * 1.5).mean() - 0.01 * d.entropy().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss, a
        step = dj.compile(step) if compiled else step
        dj.manual_seed(5)
        out = [step(x) for _ in range(3)]
        return [(l.item(), a.tolist()) for l, a in out], lin.weight.detach().numpy()

    (eager, w_eager), (comp, w_comp) = run(False), run(True)
    assert [a for _, a in eager] == [a for _, a in comp]
    np.testing.assert_allclose([l for l, _ in comp], [l for l, _ in eager], rtol=1e-5)
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,params,value", [
    ("Gamma", ([0.5, 2.0], [1.5, 0.3]), [[1.0, 0.3], [0.2, 7.0]]),
    ("Beta", ([0.5, 2.0], [1.5, 3.0]), [[0.1, 0.3], [0.9, 0.5]]),
    ("Dirichlet", ([[0.5, 2.0, 1.0], [3.0, 1.0, 1.0]],), [[0.1, 0.3, 0.6], [0.2, 0.2, 0.6]]),
])
def test_gamma_beta_dirichlet_as_torch(name, params, value):
    def make(t, D, ps=params):
        return getattr(D, name)(*(_t(t, p) for p in ps))
    for attr in ("mean", "mode", "variance") if name != "Dirichlet" else ("mean", "variance"):
        _same(lambda t, D: getattr(make(t, D), attr))
    _same(lambda t, D: make(t, D).log_prob(_t(t, value)), atol=1e-5)
    _same(lambda t, D: make(t, D).entropy(), atol=1e-5)
    other = tuple(np.asarray(p)[..., ::-1] + 0.5 for p in params)
    _same(lambda t, D: D.kl_divergence(make(t, D), make(t, D, other)), atol=1e-5)
    _errors_alike(lambda t, D: make(t, D, tuple(-np.asarray(p) for p in params)))
    # draws: shape, mean, and the reparameterized gradient of E[x] against the mean's own gradient
    leaves = [dj.tensor(np.asarray(p, np.float32), requires_grad=True) for p in params]
    dj.manual_seed(0)
    n = 80000 if name == "Gamma" else 40000     # 160000 or more numbers: all three share one 2**18 kernel
    x = getattr(DDi, name)(*leaves).rsample((n,))
    ref = make(torch, TDi)
    assert tuple(x.shape) == (n,) + tuple(ref.batch_shape + ref.event_shape) and x.dtype == dj.float32
    np.testing.assert_allclose(x.mean(0).detach().numpy(), ref.mean.numpy(), rtol=0.02, atol=0.01)
    x.mean(0).sum().backward() if name != "Dirichlet" else (x.mean(0)[..., 0]).sum().backward()
    tleaves = [torch.tensor(np.asarray(p, np.float32), requires_grad=True) for p in params]
    m = getattr(TDi, name)(*tleaves).mean
    (m if name != "Dirichlet" else m[..., 0]).sum().backward()
    for leaf, tleaf in zip(leaves, tleaves):
        np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=0.05, atol=0.01)


def test_gamma_draw_inside_compiled_step_is_rejected_clearly():
    a = dj.tensor([1.0, 2.0])

    @dj.compile
    def step(a):
        return DDi.Gamma(a, 1.0).sample()
    with pytest.raises(NotImplementedError, match="dynajax.compile"):
        step(a)
    assert a.tolist() == [1.0, 2.0]


def _squashed(lib, D, parts):
    base = D.Normal(_t(lib, [0.3, -1.0]), _t(lib, [1.0, 0.5]))
    return D.TransformedDistribution(base, [make(D.transforms) for make in parts])


@pytest.mark.parametrize("parts,value", [
    ([lambda tt: tt.TanhTransform()], [[0.5, -0.9], [0.0, 0.99]]),
    ([lambda tt: tt.AffineTransform(1.0, 2.0), lambda tt: tt.TanhTransform()], [[0.5, -0.9], [0.0, 0.99]]),
    ([lambda tt: tt.SigmoidTransform()], [[0.5, 0.1], [0.3, 0.99]]),
    ([lambda tt: tt.ExpTransform()], [[0.5, 0.1], [3.0, 0.99]]),
    ([lambda tt: tt.AffineTransform(1.0, -2.0)], [[0.5, 0.1], [3.0, 0.99]]),
])
def test_transformed_distribution_as_torch(parts, value):
    _same(lambda t, D: _squashed(t, D, parts).log_prob(_t(t, value)), atol=1e-5)
    _same(lambda t, D: _squashed(t, D, parts).cdf(_t(t, [0.9, 0.2])))
    _same(lambda t, D: _squashed(t, D, parts).icdf(_t(t, [0.3, 0.8])), atol=1e-5)
    d = _squashed(dj, DDi, parts)
    assert d.batch_shape == (2,) and d.sample((4,)).shape == (4, 2)
    assert repr(d.support) == repr(_squashed(torch, TDi, parts).support)


def test_log_normal_and_cached_tanh():
    def make(t, D):
        return D.LogNormal(_t(t, [0.3, -1.0]), _t(t, [1.0, 0.5]))
    for attr in ("mean", "mode", "variance"):
        _same(lambda t, D: getattr(make(t, D), attr))
    _same(lambda t, D: make(t, D).entropy())
    _same(lambda t, D: make(t, D).log_prob(_t(t, [[0.5, 2.0]])))
    _errors_alike(lambda t, D: make(t, D).log_prob(_t(t, [[-0.5, 2.0]])))
    _errors_alike(lambda t, D: _squashed(t, D, [lambda tt: tt.TanhTransform()]).log_prob(_t(t, [1.5, 0.0])))
    # a tanh-squashed draw's log_prob with cache_size=1 inverts to the exact pre-tanh draw (tanh(30) rounds
    # to 1 in float32, where atanh would give inf)
    loc = dj.tensor([30.0, 0.0], requires_grad=True)
    base = DDi.Normal(loc, dj.tensor([1e-3, 1.0]))
    d = DDi.TransformedDistribution(base, DDi.transforms.TanhTransform(cache_size=1))
    y = d.rsample()
    x = d.transforms[0].inv(y)
    want = base.log_prob(x) - 2.0 * (np.log(2.0) - x - dj.nn.functional.softplus(-2.0 * x))
    lp = d.log_prob(y)
    np.testing.assert_allclose(lp.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert np.isfinite(lp.detach().numpy()).all()
    lp.sum().backward()
    assert np.isfinite(loc.grad.numpy()).all()


def test_expand_shapes_as_torch():
    def shapes(lib, D):
        t = lib.tensor
        out = []
        for d in [D.Gamma(t([1.0, 2.0]), t([1.0, 3.0])), D.Dirichlet(t([1.0, 2.0, 3.0])), D.Beta(t(1.0), t(2.0)),
                  D.LogNormal(t([0.0, 1.0]), t([1.0, 2.0])),
                  D.TransformedDistribution(D.Normal(t([0.0, 1.0]), t([1.0, 2.0])), [D.transforms.TanhTransform()]),
                  D.Exponential(t([1.0, 2.0])), D.Laplace(t([1.0, 2.0]), t(1.0)),
                  D.OneHotCategorical(probs=t([0.3, 0.7])), D.Bernoulli(logits=t([0.3, 0.7])),
                  D.Uniform(t(0.0), t(1.0))]:
            e = d.expand((4,) + tuple(d.batch_shape))
            # (the mean's shape for the gamma-based ones, whose sampler compiles per size)
            drawn = e.mean if isinstance(e, (D.Gamma, D.Beta, D.Dirichlet)) else e.sample()
            out.append((type(e).__name__, tuple(e.batch_shape), tuple(e.event_shape), tuple(drawn.shape)))
        return out
    assert shapes(dj, DDi) == shapes(torch, TDi)
