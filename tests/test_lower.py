"""Engine 2: lowering recorded define-by-run code to pure JAX functions."""
import jax
import numpy as np
import pytest

import dynajax as dj
from dynajax import viz
from helpers import assert_close, to_np

X = np.array([0.5, -0.3, 1.2])
W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1], [0.2, 0.4, 0.9]])


def _dynamic(x, w, n, use_sin):
    """Loop length from an argument and an ``if`` on a Python value: two graphs for two calls."""
    h = x
    for _ in range(n):
        h = (h.unsqueeze(0) * w).sum(1).tanh() + h
    h = h.sin() if use_sin else h.exp() * 0.5
    return (h * h).sum()


def _eager_value_and_grads(fn, *arrays, static=()):
    ts = [dj.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts, *static)
    out.backward()
    return to_np(out), [to_np(t.grad) for t in ts]


@pytest.mark.parametrize("n,use_sin", [(2, True), (3, False)])
def test_loop_and_branch_lower_jit_match_eager(n, use_sin):
    value, grads = _eager_value_and_grads(_dynamic, X, W, static=(n, use_sin))
    low = dj.lower(_dynamic, dj.tensor(X), dj.tensor(W), n, use_sin)
    assert sum(e.label == "tanh" for e in low.eqns) == n  # the loop is unrolled as it ran
    assert ("sin" in {e.label for e in low.eqns}) == use_sin
    f = jax.jit(low.fn, static_argnums=(2, 3))
    assert_close(np.asarray(f(X, W, n, use_sin)), value)
    gx, gw = jax.jit(jax.grad(low.fn, argnums=(0, 1)), static_argnums=(2, 3))(X, W, n, use_sin)
    assert_close(np.asarray(gx), grads[0])
    assert_close(np.asarray(gw), grads[1])
    assert_close(to_np(low(dj.tensor(X), dj.tensor(W), n, use_sin)), value)


def test_other_static_value_or_shape_needs_new_recording():
    low = dj.lower(_dynamic, dj.tensor(X), dj.tensor(W), 2, True)
    with pytest.raises(ValueError, match="static argument 2"):
        low.fn(X, W, 3, True)
    with pytest.raises(ValueError, match=r"x: f64\[3\].*f64\[4\].*new recording"):
        low.fn(np.ones(4), W, 2, True)


def test_closure_tensors_become_params_and_created_tensors_constants():
    w = dj.tensor(W, requires_grad=True)
    b = dj.tensor([0.1, 0.2, 0.3])

    def f(x):
        return ((x.unsqueeze(0) * w).sum(1) + b + dj.ones(3)).sum()
    low = dj.lower(f, dj.tensor(X))
    assert list(low.params) == ["w", "b"]
    assert low.params["w"] is w
    consts = [x for e in low.eqns for x in e.ins if getattr(x, "kind", None) == "const"]
    assert len(consts) == 1 and np.all(np.asarray(consts[0].value) == 1)
    out = f(dj.tensor(X))
    out.backward()
    gw = jax.grad(low.fn, argnums=1)(X, W, np.zeros(3, np.float32))
    assert_close(np.asarray(gw), to_np(w.grad))
    assert_close(np.asarray(low.fn(X)), to_np(out))  # params default to their current values
    assert_close(np.asarray(low.fn(X, *low.param_values())), to_np(out))


def test_module_parameters_are_named_params():
    lin = dj.nn.Linear(3, 2)

    def f(x):
        return lin(x).sum()
    low = dj.lower(f, dj.tensor(X, dtype=dj.float32))
    assert set(low.params) == {"lin.weight", "lin.bias"}


def test_detach_and_no_grad_cut_the_gradient_like_the_tape():
    def f(x):
        with dj.no_grad():
            s = x * 3
        return (x * x.detach() + s * x).sum()
    x = dj.tensor(X, requires_grad=True)
    f(x).backward()
    low = dj.lower(f, dj.tensor(X))
    assert "stop_gradient" in {e.label for e in low.eqns}
    assert_close(np.asarray(jax.grad(low.fn)(X)), to_np(x.grad))


def test_inplace_inside_the_function_is_lowered_functionally():
    def f(x):
        h = x * 2
        h.add_(1)
        h[0] = x[1] * 3
        h.view(3)[2:].mul_(x[:1])
        return (h * x).sum()
    x = dj.tensor(X, requires_grad=True)
    out = f(x)
    out.backward()
    low = dj.lower(f, dj.tensor(X))
    assert_close(np.asarray(jax.jit(low.fn)(X)), to_np(out))
    with jax.enable_x64(True):   # a float64 recording: jax.grad transposes in the caller's mode (docs/jax.md)
        assert_close(np.asarray(jax.grad(low.fn)(X)), to_np(x.grad))


def test_inplace_change_after_recording_uses_recorded_value():
    x = dj.tensor(X, requires_grad=True)
    c = dj.tensor([1.0, 2.0, 3.0], dtype=dj.float64)
    y = (x * c).sum()
    c.add_(10.0)  # after the graph recorded c
    low = dj.lower_graph(y, [x])
    assert_close(np.asarray(low.fn(X)), to_np(y))
    assert_close(np.asarray(jax.grad(low.fn)(X)), np.array([1.0, 2.0, 3.0]))


def test_untraced_write_to_a_used_tensor_raises():
    def f(x):
        y = x * 2
        z = y * 1
        y.data.zero_()  # a write that no recorded op performs
        return z + y
    with pytest.raises(RuntimeError, match="changed outside dynajax ops"):
        dj.lower(f, dj.tensor(X))


def test_lower_graph_inputs_params_and_after_backward():
    x = dj.tensor(X, requires_grad=True)
    w = dj.tensor(W, requires_grad=True)
    y = ((x.unsqueeze(0) * w).sum(1).sin() * 2.0).sum()
    y.backward()  # frees saved tensors; the lowered graph needs only consts and scalars
    low = dj.lower_graph(y, [x])
    assert len(low.params) == 1 and next(iter(low.params.values())) is w
    assert_close(np.asarray(low.fn(X)), to_np(y))
    assert_close(np.asarray(jax.grad(low.fn)(X)), to_np(x.grad))
    gw = jax.grad(low.fn, argnums=1)(X, W)
    assert_close(np.asarray(gw), to_np(w.grad))
    both = dj.lower_graph(y)  # all leaves
    assert len(both.params) == 0


def test_lower_graph_from_intermediate():
    x = dj.tensor(X, requires_grad=True)
    h = x.exp()
    y = (h * h).sum()
    low = dj.lower_graph(y, [h])
    hv = np.exp(X)
    assert_close(np.asarray(jax.grad(low.fn)(hv)), 2 * hv)


def test_lower_graph_unused_input_is_named():
    x = dj.tensor(X, requires_grad=True)
    z = dj.tensor(X, requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"input 1 \(f64\[3\]\) is not on the path"):
        dj.lower_graph(y, [x, z])
    low = dj.lower_graph(y, [x, z], allow_unused=True)
    g = jax.grad(low.fn, argnums=(0, 1))(X, X)
    assert_close(np.asarray(g[1]), np.zeros(3))


def test_lowered_fn_under_jax_transforms():
    def f(x):
        return (x.sin() * x).sum()
    low = dj.lower(f, dj.tensor(X))
    xs = np.stack([X, X * 2])
    assert_close(np.asarray(jax.vmap(low.fn)(xs)), np.array([to_np(f(dj.tensor(r))) for r in xs]))
    h = jax.hessian(low.fn)(X)
    expected = np.diag(2 * np.cos(X) - X * np.sin(X))
    assert_close(np.asarray(h), expected)
    _, t = jax.jvp(low.fn, (X,), (np.ones(3),))
    assert_close(float(t), float(np.sum(np.sin(X) + X * np.cos(X))))


def test_custom_function_forward_is_traced():
    class XExp(dj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(x, y)
            return x * y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return (x + 1) * y * g
    low = dj.lower(lambda x: XExp.apply(x).sum(), dj.tensor(X))
    assert_close(np.asarray(jax.grad(low.fn)(X)), (X + 1) * np.exp(X))
    assert low.foreign and low.foreign[0][1].op.name == "XExp"


def test_pytree_args_and_outputs():
    def f(p, x):
        return {"y": (p["a"] * x).sum(), "z": p["b"] + x}
    p = {"a": dj.tensor(X), "b": dj.tensor(X * 2)}
    low = dj.lower(f, p, dj.tensor(X))
    out = low.fn({"a": X, "b": X}, X)
    assert_close(float(out["y"]), float(np.sum(X * X)))
    g = jax.grad(lambda p, x: low.fn(p, x)["y"])({"a": X, "b": X}, X)
    assert_close(np.asarray(g["a"]), X)


def test_printout_lists_ops_names_shapes_and_source_lines():
    w = dj.tensor(W)

    def model(x):
        h = (x.unsqueeze(0) * w).sum(1)  # the line shown for mul and sum
        return h.relu().mean()
    low = dj.lower(model, dj.tensor(X, dtype=dj.float32))
    text = str(low)
    assert text.splitlines()[0] == "lowered model(x: f32[3])"
    assert "params: w: f64[3,3]" in text
    lines = {ln.split("=")[1].split("(")[0].strip(): ln for ln in text.splitlines() if " = " in ln and "(" in ln}
    assert "relu" in lines and "f64[3] = relu(" in lines["relu"]
    assert "test_lower.py:" in lines["relu"] and "return h.relu().mean()" in lines["relu"]
    assert "h = (x.unsqueeze(0) * w).sum(1)" in lines["mul"]
    assert text.splitlines()[-1].startswith("  return t")


def test_to_dot_and_draw(tmp_path, monkeypatch):
    x = dj.tensor(X, requires_grad=True)
    y = (x.exp() * 2).sum()
    dot = viz.to_dot(y)
    assert dot.startswith("digraph") and '"in0"' in dot and "exp" in dot and "->" in dot
    p = viz.draw(y, str(tmp_path / "g.dot"))
    assert open(p).read() == dot
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="Install Graphviz"):
        viz.draw(y, str(tmp_path / "g.svg"))
    with pytest.raises(ValueError, match="no recorded graph"):
        viz.draw(x.detach(), str(tmp_path / "h.dot"))


def test_call_follows_parameter_updates_and_casts_same_kind_dtypes():
    w = dj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    low = dj.lower(lambda x: (x * w).sum(), dj.tensor([1.0, 1.0, 1.0]))
    assert_close(to_np(low(dj.ones(3))), np.float32(6.0))
    with dj.no_grad():
        w.mul_(2)  # an optimizer-style update after lowering
    assert_close(to_np(low(dj.ones(3))), np.float32(12.0))
    out = low.fn(np.ones(3, np.float64))  # float64 array: computed in the recorded float32
    assert out.dtype == np.float32
    with pytest.raises(ValueError, match="kind of dtype"):
        low.fn(np.ones(3, np.int64))
