"""dynajax.func (torch.func over define-by-run code) against torch.func."""
import numpy as np
import pytest
import torch

import dynajax as dj
from dynajax import func
from helpers import assert_close, to_dj, to_torch

RNG = np.random.default_rng(0)
X = RNG.standard_normal(3)
Y = RNG.standard_normal(3)


def f_dj(x, y):
    return (x.sin() * y + x * x).sum()


def f_t(x, y):
    return (x.sin() * y + x * x).sum()


def test_grad_argnums_like_torch_func():
    for argnums in (0, 1, (0, 1)):
        a = func.grad(f_dj, argnums=argnums)(to_dj(X), to_dj(Y))
        e = torch.func.grad(f_t, argnums=argnums)(to_torch(X), to_torch(Y))
        for ai, ei in zip(a if isinstance(a, tuple) else (a,), e if isinstance(e, tuple) else (e,)):
            assert_close(ai, ei)


def test_grad_and_value_value_and_grad_has_aux():
    def with_aux(x):
        return (x * x).sum(), x.exp()
    g, (v, aux) = func.grad_and_value(with_aux, has_aux=True)(to_dj(X))
    assert_close(g, to_torch(2 * X))
    assert_close(v, torch.tensor(float(np.sum(X * X)), dtype=torch.float64))
    assert_close(aux, torch.exp(to_torch(X)))
    v2, g2 = func.value_and_grad(lambda x: (x * x).sum())(to_dj(X))
    assert_close(v2, v)
    assert_close(g2, g)
    g3, aux3 = func.grad(with_aux, has_aux=True)(to_dj(X))
    assert_close(g3, g)
    assert_close(aux3, aux)


def test_vjp_jvp():
    out, pull = func.vjp(lambda x, y: x.sin() * y, to_dj(X), to_dj(Y))
    ct = RNG.standard_normal(3)
    gx, gy = pull(to_dj(ct))
    eo, epull = torch.func.vjp(lambda x, y: x.sin() * y, to_torch(X), to_torch(Y))
    ex, ey = epull(to_torch(ct))
    assert_close(out, eo)
    assert_close(gx, ex)
    assert_close(gy, ey)
    o, t = func.jvp(lambda x: x.exp() * x, (to_dj(X),), (to_dj(Y),))
    eo, et = torch.func.jvp(lambda x: x.exp() * x, (to_torch(X),), (to_torch(Y),))
    assert_close(o, eo)
    assert_close(t, et)


def test_jacobians_and_hessian():
    def g(x):
        return x.sin() * x.sum()
    for ours, theirs in ((func.jacrev, torch.func.jacrev), (func.jacfwd, torch.func.jacfwd)):
        assert_close(ours(g)(to_dj(X)), theirs(g)(to_torch(X)))
    assert_close(func.hessian(lambda x: (x.sin() * x).sum())(to_dj(X)),
                 torch.func.hessian(lambda x: (x.sin() * x).sum())(to_torch(X)))


def test_vmap_in_dims_out_dims():
    xs = RNG.standard_normal((4, 3))
    a = func.vmap(lambda x, y: x * y.sum(), in_dims=(0, None), out_dims=1)(to_dj(xs), to_dj(Y))
    e = torch.func.vmap(lambda x, y: x * y.sum(), in_dims=(0, None), out_dims=1)(to_torch(xs), to_torch(Y))
    assert_close(a, e)
    nested = func.vmap(func.vmap(lambda x: x * 2 + 1))(to_dj(xs))
    assert_close(nested, to_torch(xs * 2 + 1))
    with pytest.raises(ValueError, match="in_dims has 1 entries but the function got 2"):
        func.vmap(lambda x, y: x, in_dims=(0,))(to_dj(xs), to_dj(Y))


def _mlp_loss(params, x, y):
    """A small MLP written with plain tensors."""
    h = (x @ params["w1"] + params["b1"]).tanh()
    return ((h @ params["w2"]).squeeze(-1) - y) ** 2


def test_vmap_grad_per_example_gradients_equal_loop_of_backward():
    params = {"w1": RNG.standard_normal((3, 5)), "b1": RNG.standard_normal(5), "w2": RNG.standard_normal((5, 1))}
    xs, ys = RNG.standard_normal((6, 3)), RNG.standard_normal(6)
    p = {k: to_dj(v) for k, v in params.items()}
    per_example = func.vmap(func.grad(_mlp_loss), in_dims=(None, 0, 0))(p, to_dj(xs), to_dj(ys))
    for i in range(len(xs)):
        pi = {k: to_dj(v, True) for k, v in params.items()}
        _mlp_loss(pi, to_dj(xs[i]), to_dj(ys[i])).backward()
        for k in params:
            assert_close(per_example[k][i], pi[k].grad)


def test_functional_call_matches_torch_and_restores_module():
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2).double()
    dm = dj.nn.Linear(3, 2).double()
    w, b = RNG.standard_normal((2, 3)), RNG.standard_normal(2)
    x = RNG.standard_normal((4, 3))
    old = dm.weight
    a = func.functional_call(dm, {"weight": to_dj(w), "bias": to_dj(b)}, (to_dj(x),))
    e = torch.func.functional_call(tm, {"weight": to_torch(w), "bias": to_torch(b)}, (to_torch(x),))
    assert_close(a, e)
    assert dm.weight is old

    def loss(params, x):
        return func.functional_call(dm, params, (x,)).sum()
    g = func.grad(loss)({"weight": to_dj(w), "bias": to_dj(b)}, to_dj(x))
    assert_close(g["weight"], to_torch(np.tile(x.sum(0), (2, 1))))
    assert_close(g["bias"], to_torch(np.full(2, 4.0)))


def test_transforms_compose_and_the_tape_differentiates_through_them():
    gg = func.grad(lambda x: func.grad(lambda y: (y ** 3).sum())(x).sum())(to_dj(X))
    assert_close(gg, to_torch(6 * X))
    x = to_dj(X, True)
    g = func.grad(lambda y: (y.sin() ** 2).sum())(x)
    g.sum().backward()
    assert_close(x.grad, to_torch(2 * np.cos(2 * X)))


def test_per_example_gradients_of_an_nn_model_equal_loop_of_backward():
    dj.manual_seed(0)
    model = dj.nn.Sequential(dj.nn.Linear(3, 4), dj.nn.Tanh(), dj.nn.Linear(4, 1)).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    xs, ys = to_dj(RNG.standard_normal((5, 3))), to_dj(RNG.standard_normal(5))

    def loss(p, x, y):
        out = func.functional_call(model, p, (x.unsqueeze(0),))
        return ((out.squeeze() - y) ** 2)
    per_example = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    for i in range(5):
        model.zero_grad()
        ((model(xs[i:i + 1]).squeeze() - ys[i]) ** 2).backward()
        for k, p in model.named_parameters():
            assert_close(per_example[k][i], p.grad)
