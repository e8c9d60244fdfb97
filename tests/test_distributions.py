"""distributions against torch.distributions: log_prob, entropy, KL, gradients; sample statistics."""
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.distributions as D
from helpers import assert_close, compare

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
