"""dynajax next to the user's own JAX: no global configuration changed, tensors into JAX's transformations,
zero-copy conversions (``t.jax()``, ``dj.from_jax``) and DLPack with numpy and PyTorch (docs/jax.md)."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import dynajax as dj

_SNIPPET = """
def user_jax():
    import jax, jax.numpy as jnp, numpy as np
    f = jax.jit(lambda x: x / 3 + 1)
    return [jax.config.jax_enable_x64, str(jnp.array(1.0).dtype), str(jnp.arange(3).dtype),
            str(jnp.zeros(2).dtype), str(jnp.asarray(np.ones(2)).dtype), str(f(jnp.array(2.0)).dtype),
            repr(float(f(jnp.array(2.0)))), str(jnp.array(2 ** 31 - 1).dtype)]
"""

_RUN = _SNIPPET + """
import json, sys
out = {"before": user_jax()}
import numpy as np
import dynajax as dj
out["imported"] = user_jax()
x = dj.tensor([1.0, 2.0], dtype=dj.float64, requires_grad=True)
w = dj.nn.Linear(2, 1)
(x * x).sum().backward()
w(dj.ones(4, 2)).sum().backward()
step = dj.compile(lambda a: (a * 2).sum())
low = dj.lower(lambda a: (a * a).sum(), dj.arange(3))
out["dynajax"] = [x.grad.dtype.name, repr(x.grad.tolist()), dj.arange(3).dtype.name, dj.tensor(1.5).dtype.name,
                  step(dj.ones(3, dtype=dj.float64)).dtype.name, str(low.fn(np.arange(3)).dtype),
                  str(dj.randn(2, dtype=dj.float64).jax().dtype), str(dj.zeros(2, dtype=dj.int64).jax().dtype)]
out["after"] = user_jax()
print(json.dumps(out))
"""


def _run(env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env.update(env_extra)
    res = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("x64", ["", "1"])
def test_user_jax_is_the_same_with_and_without_dynajax(x64):
    """The user's JAX (32-bit by default, or 64-bit where the user turned it on) answers alike before the
    import, after it and after dynajax ran eager ops, backward, a compiled step and a lowering; dynajax keeps
    PyTorch's dtypes in either mode."""
    out = _run({"JAX_ENABLE_X64": x64} if x64 else {})
    assert out["before"] == out["imported"] == out["after"]
    assert out["before"][0] is bool(x64)
    assert out["before"][1:3] == (["float64", "int64"] if x64 else ["float32", "int32"])
    assert out["dynajax"] == ["float64", repr([2.0, 4.0]), "int64", "float32", "float64", "int64", "float64", "int64"]


def test_arrays_handed_out_keep_their_dtype():
    for d in (dj.float64, dj.int64, dj.float32, dj.int32, dj.bfloat16, dj.bool):
        t = dj.ones(3, dtype=d)
        assert np.dtype(t.jax().dtype) == d.np and np.dtype((t + t if d is not dj.bool else t).jax().dtype) == d.np
    t = dj.tensor([0.1, 0.2], dtype=dj.float64)
    low = dj.lower(lambda a: a * 3, t)
    got = low.fn(t.jax())
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), np.array([0.1, 0.2]) * 3)   # float64 arithmetic, not float32


# ---------------------------------------------------------------- tensors into JAX
X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)


def test_jit_takes_tensors_and_gives_tensors_back():
    t = dj.tensor(X)
    out = jax.jit(lambda a: (a * 2).exp())(t)          # dynajax ops on JAX's tracers inside jit
    assert isinstance(out, dj.Tensor)
    np.testing.assert_allclose(out.numpy(), torch.exp(torch.tensor(X) * 2).numpy(), rtol=1e-6)
    arr = jax.jit(lambda a: jnp.tanh(a.jax()))(t)       # or JAX's own on the tensor's array
    np.testing.assert_allclose(np.asarray(arr), np.tanh(X), rtol=1e-6)


def test_jnp_functions_take_tensors():
    t = dj.tensor(X)
    np.testing.assert_allclose(np.asarray(jnp.sin(t)), np.sin(X), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.add(t, 1.0)), X + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jnp.matmul(t, dj.tensor(X.T))), X @ X.T, rtol=1e-6)


def test_grad_of_a_lowered_function_at_a_tensor_matches_the_tape():
    w = dj.tensor(X[0], requires_grad=True)

    def f(x):
        return ((x * w).sin() ** 2).sum()
    low = dj.lower(f, dj.tensor(X))
    t = dj.tensor(X, requires_grad=True)
    f(t).backward()
    g = jax.grad(low.fn)(t)
    assert isinstance(g, dj.Tensor)
    np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-5)
    # and against torch
    tx, tw = torch.tensor(X, requires_grad=True), torch.tensor(X[0])
    ((tx * tw).sin() ** 2).sum().backward()
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-5)
    # a function of tensors returning JAX's scalar (``.jax()``) differentiates too
    g2 = jax.grad(lambda x: ((x * w.detach()).sin() ** 2).sum().jax())(dj.tensor(X))
    np.testing.assert_allclose(g2.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_vmap_maps_over_a_tensor():
    t = dj.tensor(X)
    out = jax.vmap(lambda row: (row * row).sum())(t)
    np.testing.assert_allclose(out.numpy(), (X * X).sum(1), rtol=1e-6)
    low = dj.lower(lambda r: r.softmax(0), dj.tensor(X[0]))
    got = jax.vmap(low.fn)(t)
    np.testing.assert_allclose(np.asarray(got), torch.softmax(torch.tensor(X), 1).numpy(), rtol=1e-6)


# ---------------------------------------------------------------- zero-copy conversions
def test_jax_and_from_jax_share_the_array():
    a = jnp.arange(6.0).reshape(2, 3)
    t = dj.from_jax(a)
    assert t.jax() is a and t.dtype is dj.from_np(np.dtype(a.dtype)) and tuple(t.shape) == (2, 3)
    t.add_(1)                                            # an in-place op binds a new array; ``a`` is unchanged
    np.testing.assert_array_equal(np.asarray(a), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0).reshape(2, 3) + 1)
    v = dj.tensor(X)[1]                                  # a view's array is its current value
    np.testing.assert_array_equal(np.asarray(v.jax()), X[1])
    assert dj.from_jax(a, requires_grad=True).requires_grad
    with pytest.raises(TypeError, match="jax.Array"):
        dj.from_jax(np.ones(2))


def test_dlpack_from_torch_is_zero_copy_and_keeps_dtype():
    for src in (torch.arange(8, dtype=torch.float64), torch.arange(8, dtype=torch.int64),
                torch.linspace(0, 1, 8, dtype=torch.float32)):
        t = dj.from_dlpack(src)
        assert t.dtype.name == str(src.dtype).removeprefix("torch.")
        src[3] = 42                                      # written on torch's side, read on dynajax's
        assert t[3].item() == 42
        np.testing.assert_array_equal(t.numpy(), src.numpy())


def _aligned(n: int, dtype, to: int = 64) -> np.ndarray:
    """``n`` zeros of ``dtype`` in a buffer aligned to ``to`` bytes (XLA's CPU alignment)."""
    raw = np.zeros(n * np.dtype(dtype).itemsize + to, np.uint8)
    off = (-raw.ctypes.data) % to
    return raw[off:off + n * np.dtype(dtype).itemsize].view(dtype)


def test_dlpack_from_numpy_is_zero_copy_when_aligned():
    n = _aligned(16, np.float64)
    n[:] = np.arange(16)
    t = dj.from_dlpack(n)
    n[5] = -1.5
    assert t.dtype is dj.float64 and t[5].item() == -1.5
    m = _aligned(17, np.float32)[1:]                   # misaligned: JAX copies, the values are the same
    m[:] = np.arange(16)
    np.testing.assert_array_equal(dj.from_dlpack(m).numpy(), np.arange(16, dtype=np.float32))


def test_torch_and_numpy_read_a_tensor_through_dlpack():
    t = dj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    pt = torch.from_dlpack(t)
    na = np.from_dlpack(t)
    assert pt.dtype == torch.float32 and tuple(pt.shape) == (3, 4)
    np.testing.assert_array_equal(pt.numpy(), t.numpy())
    np.testing.assert_array_equal(na, t.numpy())
    assert na.ctypes.data == pt.data_ptr()               # one buffer, shared by all three
    pt[0, 1] = 100.0                                     # numpy's view is read-only; torch's is not
    assert t[0, 1].item() == 100.0 and na[0, 1] == 100.0
    assert torch.from_dlpack(dj.arange(3)).dtype == torch.int64
    assert t.__dlpack_device__() == pt.__dlpack_device__()


def test_a_tensor_requiring_grad_is_not_exported_as_torchs():
    t = dj.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient") as ours:
        torch.from_dlpack(t)
    with pytest.raises(BufferError) as theirs:
        torch.from_dlpack(torch.ones(2, requires_grad=True))
    assert str(ours.value) == str(theirs.value)
    assert torch.from_dlpack(t.detach()).tolist() == [1.0, 1.0]
