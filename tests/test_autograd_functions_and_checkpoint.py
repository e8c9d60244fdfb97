"""Advanced autograd corners against PyTorch: custom Functions saving their outputs under ``create_graph``,
and ``utils.checkpoint`` (parameters read through the closure, ``autograd.grad``/``inputs=``, double
backward, tied weights, dropout inside ``dynajax.compile`` with ``replay=True``)."""
import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as tcp

import dynajax as dj
import dynajax.nn as nn
from dynajax.utils.checkpoint import checkpoint
from helpers import assert_close

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)).astype(np.float32)
X = RNG.standard_normal((2, 3)).astype(np.float32)
X5 = RNG.standard_normal((5, 4)).astype(np.float32)


def _exp_function(m):
    class Exp(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            r = x.exp()
            ctx.save_for_backward(r)   # an output saved: PyTorch hands back the output itself
            return r

        @staticmethod
        def backward(ctx, g):
            (r,) = ctx.saved_tensors
            return g * r
    return Exp


def test_function_saving_its_output_is_twice_differentiable():
    res = []
    for m in (torch, dj):
        x = m.tensor(X, requires_grad=True)
        r = _exp_function(m).apply(x)
        (g,) = m.autograd.grad(r.sum(), x, create_graph=True)
        (g2,) = m.autograd.grad((g * g).sum(), x)
        res.append((r, g, g2))
    for a, b in zip(*res):
        assert_close(b, a)


def _checkpoint_grads(m, cp, case):
    w = m.tensor(W, requires_grad=True)
    x = m.tensor(X, requires_grad=True)
    block = lambda h: (h @ w).tanh()   # noqa: E731  (reads the parameter through its closure)
    if case == "grad_param":
        return m.autograd.grad(cp(block, x, use_reentrant=False).sum(), [w])
    if case == "inputs_param":
        cp(block, x, use_reentrant=False).sum().backward(inputs=[w])
        assert x.grad is None
        return (w.grad,)
    if case == "grad_leaves_dot_grad_alone":
        (gx,) = m.autograd.grad(cp(block, x, use_reentrant=False).sum(), x)
        assert w.grad is None
        return (gx,)
    if case == "double":
        gx, gw = m.autograd.grad(cp(block, x, use_reentrant=False).sum(), [x, w], create_graph=True)
        return m.autograd.grad((gx ** 2).sum() + (gw ** 3).sum(), [x, w])
    if case == "tied":   # the checkpointed block's weight also made its input
        h = block(x)
        for _ in range(3):
            h = cp(block, h, use_reentrant=False)
        h.sum().backward()
        return w.grad, x.grad
    if case == "tied_double":
        h = cp(block, block(x), use_reentrant=False)
        gx, gw = m.autograd.grad(h.sum(), [x, w], create_graph=True)
        return m.autograd.grad((gx ** 2).sum() + (gw ** 3).sum(), [x, w])
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["grad_param", "inputs_param", "grad_leaves_dot_grad_alone", "double", "tied",
                                  "tied_double"])
def test_checkpoint_gradients_match_torch_non_reentrant(case):
    expected = _checkpoint_grads(torch, tcp.checkpoint, case)
    got = _checkpoint_grads(dj, checkpoint, case)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert_close(a, b, rtol=1e-5, atol=1e-5)


def _dropout_steps(mode):
    dj.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Tanh(), nn.Linear(8, 2))
    opt = dj.optim.SGD(m.parameters(), lr=0.1)
    x = dj.tensor(X5)

    def step(x):
        loss = (checkpoint(m, x, use_reentrant=False) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    f = step if mode == "eager" else dj.compile(step, replay=mode == "replay")
    dj.manual_seed(1)
    return [f(x).item() for _ in range(4)], [p.detach() for p in m.parameters()]


def test_checkpoint_dropout_in_compiled_and_replayed_steps_matches_eager():
    # the recomputation draws the forward's keys; compiled, those are the graph's, not a stale array
    losses, params = _dropout_steps("eager")
    for mode in ("compile", "replay"):
        l2, p2 = _dropout_steps(mode)
        np.testing.assert_allclose(l2, losses, rtol=1e-5)
        for a, b in zip(p2, params):
            assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_checkpoint_dropout_matches_the_plain_call():
    res = []
    for cp in (True, False):
        dj.manual_seed(0)
        w, x = dj.tensor(W, requires_grad=True), dj.tensor(X, requires_grad=True)
        f = lambda h: dj.nn.functional.dropout(h @ w, 0.5, True)   # noqa: E731
        y = checkpoint(f, x, use_reentrant=False) if cp else f(x)
        y.sum().backward()
        res.append((y, w.grad, x.grad, dj.rand(2)))   # the generator ends where the plain call leaves it
    for a, b in zip(*res):
        assert_close(a, b)


def test_reentrant_checkpoint_refuses_keyword_arguments_like_torch():
    x = dj.tensor(X, requires_grad=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda h, scale: h * scale, x, use_reentrant=True, scale=2.0)


def test_func_grad_is_differentiable_in_closure_tensors_on_the_tape():
    # ``func.grad(f)(x)`` where f reads w (requiring grad) through its closure: the tape reaches w, as torch.func
    res = []
    for m, fn in ((torch, torch.func), (dj, dj.func)):
        x = m.tensor(X[0].astype(np.float64), requires_grad=True)
        w = m.tensor(W[0].astype(np.float64), requires_grad=True)
        g = fn.grad(lambda z: (z * w).sin().sum())(x)
        res.append((g, *m.autograd.grad((g ** 2).sum(), [x, w])))
    for a, b in zip(*res):
        assert_close(b, a)


def test_vmap_of_a_module_with_parameters_requiring_grad_is_tracked():
    res = []
    for m, fn in ((torch, torch.func), (dj, dj.func)):
        lin = m.nn.Linear(3, 2)
        with m.no_grad():
            lin.weight.copy_(m.tensor(W[:2]))
            lin.bias.fill_(0.5)
        y = fn.vmap(lin)(m.tensor(X))
        assert y.requires_grad
        y.pow(2).sum().backward()
        res.append((y, lin.weight.grad, lin.bias.grad))
    for a, b in zip(*res):
        assert_close(b, a)


def test_func_dict_outputs_keep_the_arguments_key_order():
    res = []
    for m, fn in ((torch, torch.func), (dj, dj.func)):
        lin = m.nn.Linear(3, 2)
        params = {"weight": m.tensor(W[:2]), "bias": m.tensor([0.5, -1.0])}   # not sorted: weight first
        g = fn.grad(lambda p, x: fn.functional_call(lin, p, (x,)).pow(2).sum())(params, m.tensor(X[0]))
        assert list(g) == ["weight", "bias"]
        res.append(list(g.values()))
    for a, b in zip(*res):
        assert_close(b, a)


def test_func_transforms_pass_keyword_arguments_through():
    res = []
    for m, fn in ((torch, torch.func), (dj, dj.func)):
        x = m.tensor(X)
        res.append((fn.grad(lambda x, s=1.0: (x * s).sin().sum())(x, s=2.0),
                    fn.vmap(lambda x, s=1.0: x.sum() * s)(x, s=3.0)))
    for a, b in zip(*res):
        assert_close(b, a)


def test_vmap_randomness_modes():
    x = dj.ones(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        dj.func.vmap(lambda r: r + dj.rand(3))(x)
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        dj.func.vmap(lambda r: r, randomness="other")
    y = dj.func.vmap(lambda r: r + dj.rand(3), randomness="same")(x)
    assert_close(y, y[:1].expand(4, 3))


def test_func_grad_of_a_non_scalar_raises_runtime_error():
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor, got tensor with 1 dims"):
        dj.func.grad(lambda x: x * 2)(dj.tensor(X[0]))


def test_lowering_refuses_a_tensor_hook_it_would_skip():
    # torch.func.grad applies the hook (20 per element); the lowered function could not, so it says so
    def f(m, x):
        h = x * 2
        h.register_hook(lambda g: g * 10)
        return h.sum()
    expected = torch.func.grad(lambda x: f(torch, x))(torch.ones(3))
    assert expected.tolist() == [20.0, 20.0, 20.0]
    with pytest.raises(NotImplementedError, match="lowering does not run tensor hooks"):
        dj.func.grad(lambda x: f(dj, x))(dj.ones(3))

    def g(x):   # retain_grad only observes: still lowers
        h = x * 2
        h.retain_grad()
        return h.sum()
    assert_close(dj.func.grad(g)(dj.ones(3)), torch.full((3,), 2.0))


def _cube_function(m):
    class Cube(m.autograd.Function):   # PyTorch 2's style: forward without ctx, plus setup_context
        @staticmethod
        def forward(x, k):
            return x ** 3 * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.save_for_backward(x, output)
            ctx.k = k

        @staticmethod
        def backward(ctx, g):
            x, out = ctx.saved_tensors
            return 3 * out / x * g, None
    return Cube


def test_function_with_setup_context_matches_torch():
    res = []
    for m in (torch, dj):
        x = m.tensor(X[0], requires_grad=True)
        y = _cube_function(m).apply(x, 2.0)
        (g,) = m.autograd.grad(y.sum(), x, create_graph=True)
        (g2,) = m.autograd.grad(g.sum(), x)
        res.append((y, g, g2))
    for a, b in zip(*res):
        assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_function_returning_an_input_marked_non_differentiable():
    res = []
    for m in (torch, dj):
        class Keep(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.mark_non_differentiable(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g
        x = m.tensor(X[0], requires_grad=True) * 1
        y = Keep.apply(x)
        res.append((y.requires_grad, y is x, y.grad_fn is None))
    assert res[1] == res[0] == (False, False, True)


def _penalty_steps(mode):
    # a gradient penalty taken with dynajax.func (closure parameters requiring grad) inside the step
    dj.manual_seed(0)
    lin = nn.Linear(3, 1)
    opt = dj.optim.SGD(lin.parameters(), lr=0.05)

    def step(x):
        g = dj.func.vmap(dj.func.grad(lambda r: lin(r).tanh().sum()))(x)
        loss = lin(x).pow(2).mean() + (g ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    f = step if mode == "eager" else dj.compile(step)
    return [f(dj.tensor(X5[:, :3])).item() for _ in range(2)], [p.detach() for p in lin.parameters()]


def test_func_transform_inside_a_compiled_step_matches_eager():
    losses, params = _penalty_steps("eager")
    l2, p2 = _penalty_steps("compile")
    np.testing.assert_allclose(l2, losses, rtol=1e-5)
    for a, b in zip(p2, params):
        assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_func_grad_warns_that_a_custom_backward_is_not_used():
    class RoundSTE(dj.autograd.Function):   # straight-through: torch.func would use this backward
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.warns(UserWarning, match="RoundSTE ran, not its hand-written backward"):
        dj.func.grad(lambda v: (RoundSTE.apply(v) * v).sum())(dj.tensor([0.4, 1.6]))


@pytest.mark.parametrize("case", ["save_int", "grad_for_number_input", "number_as_grad"])
def test_function_misuse_raises_torchs_errors(case):
    errors = []
    for m in (torch, dj):
        class Bad(m.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                if case == "save_int":
                    ctx.save_for_backward(3)
                return x * k

            @staticmethod
            def backward(ctx, g):
                return (5 if case == "number_as_grad" else g), (g if case == "grad_for_number_input" else None)
        with pytest.raises((TypeError, RuntimeError)) as info:
            Bad.apply(m.tensor(X[0], requires_grad=True), 2.0).sum().backward()
        errors.append((info.type, str(info.value)))
    assert errors[1] == errors[0]


def test_std_of_a_constant_slice_has_zero_gradient_like_torch():
    res = []
    for m in (torch, dj):
        x = m.tensor([[2.0, 2.0, 2.0], [1.0, -1.0, 3.0]], requires_grad=True)
        s, mu = m.std_mean(x, dim=1)
        (x.std(dim=1).sum() + s.sum() + mu.sum() + x[:1].std()).backward()
        res.append((x.std(dim=1), x.grad))
    for a, b in zip(*res):
        assert_close(b, a)
    assert np.isnan(dj.tensor([1.0]).std().item())   # one element, Bessel's correction: NaN as in PyTorch


def test_lowered_gradients_agree_with_the_tape_at_kinks():
    import jax
    import jax.numpy as jnp
    z = np.array([[-1.0, 0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    for f in (lambda x: x.abs().sum(), lambda x: x.relu().sum(), lambda x: x.clamp(-1, 1).sum(),
              lambda x: x.norm(dim=1).sum(), lambda x: dj.linalg.vector_norm(x, ord=3, dim=1).sum()):
        x = dj.tensor(z, requires_grad=True)
        f(x).backward()
        low = dj.lower(f, dj.tensor(z))
        np.testing.assert_allclose(np.asarray(jax.grad(low.fn)(jnp.asarray(z))), x.grad.numpy())


@pytest.mark.parametrize("name", ["hardtanh", "relu6", "hardsigmoid", "hardswish"])
def test_hard_activations_gradients_at_their_kinks_as_torch(name):
    z = np.array([-3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 0.5], np.float32)
    got = []
    for lib in (torch, dj):
        x = lib.tensor(z, requires_grad=True)
        y = getattr(lib.nn.functional, name)(x)
        y.sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-6)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-6)


def test_removing_a_parameters_grad_hook_is_seen_by_a_replayed_step():
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)

    def run(compiled):
        dj.manual_seed(0)
        lin = dj.nn.Linear(3, 2)
        opt = dj.optim.SGD(lin.parameters(), lr=0.1)
        handle = lin.weight.register_hook(lambda g: g.clamp(-0.01, 0.01))

        def step(x):
            loss = lin(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        f = dj.compile(step, replay=True) if compiled else step
        out = [f(dj.tensor(x)).item() for _ in range(3)]
        handle.remove()
        return out + [f(dj.tensor(x)).item() for _ in range(3)]
    np.testing.assert_allclose(run(True), run(False), rtol=1e-6)


def test_engine_errors_and_batched_grads_as_torch():
    for lib in (torch, dj):
        x, z = lib.tensor([1.0, 2.0], requires_grad=True), lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="The differentiated Tensor at index 1 appears to not have been used"):
            lib.autograd.grad((x * 2).sum(), [x, z])
        h = x * 2
        h.register_hook(lambda g: g.double())
        with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the type of value"):
            (h * h).sum().backward()
        y = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        (rows,) = lib.autograd.grad(y * y, y, lib.eye(3), is_grads_batched=True)
        assert rows.tolist() == [[2.0, 0.0, 0.0], [0.0, -4.0, 0.0], [0.0, 0.0, 6.0]]
        lib.autograd.set_detect_anomaly(True)
        try:
            with pytest.raises(RuntimeError, match="'DivBackward0' returned nan values in its 1th output"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ((y * 0).div(y * 0)).sum().backward()
        finally:
            lib.autograd.set_detect_anomaly(False)
