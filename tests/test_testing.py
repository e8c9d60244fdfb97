"""dynajax.testing: check_grads catches wrong VJPs and names the op; assert_close follows PyTorch."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import dynajax as dj
from dynajax import testing
from dynajax.ops.registry import Op, apply

RNG = np.random.default_rng(0)


def test_check_grads_passes_on_correct_functions():
    testing.check_grads(lambda x: (x.sin() * x).sum(), [RNG.standard_normal(3)])
    testing.check_grads(lambda x, y: (x.exp() * y).tanh(), [RNG.standard_normal(3), RNG.standard_normal((2, 1))])
    testing.check_grads(lambda x, i: x.gather(0, i) * 2, [RNG.standard_normal(4), np.array([3, 0, 0])], order=1)


def _wrong_square():
    o = Op("wrong_square_test_only", lambda x: x * x)  # not in OPS: the coverage test stays honest
    o.defvjp(lambda g, out, x: (g * x,))              # should be 2 * g * x
    return o


def test_wrong_vjp_rule_fails_naming_the_op_and_input():
    bad = _wrong_square()
    with pytest.raises(AssertionError) as info:
        testing.check_grads(lambda x, y: apply(bad, x.sin()).sum() + y.sum(), [RNG.standard_normal(3), np.ones(2)])
    msg = str(info.value)
    assert "input 0 (shape [3])" in msg and "max abs error" in msg and "max rel error" in msg
    assert "first op whose tape VJP disagrees" in msg and "'wrong_square_test_only'" in msg
    assert "test_testing.py" in msg  # the line that created it
    assert "'sin'" not in msg


def test_wrong_second_order_is_caught():
    o = Op("bad_double_test_only", lambda x: jnp.sin(x))
    o.defvjp(lambda g, out, x: (g * dj.cos(x.detach()),))  # right first order, no second order
    with pytest.raises(AssertionError, match="double backward"):
        testing.check_grads(lambda x: apply(o, x).sum(), [RNG.standard_normal(3)])
    testing.check_grads(lambda x: apply(o, x).sum(), [RNG.standard_normal(3)], order=1)


class _WrongCube(dj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * x * g  # should be 3 x^2


def test_wrong_custom_function_fails_naming_it():
    with pytest.raises(AssertionError) as info:
        testing.check_grads(lambda x: _WrongCube.apply(x.sin()).cos().sum(), [RNG.standard_normal(3)], order=1)
    assert "'_WrongCube'" in str(info.value) and "custom autograd.Function" in str(info.value)


def test_check_op_vjps_is_empty_for_correct_graph():
    low = dj.lower(lambda x: (x.exp() * x).tanh().sum(), dj.tensor(RNG.standard_normal(3)))
    assert testing.check_op_vjps(low, RNG.standard_normal(3)) == []


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="needs a floating-point input.*int64"):
        testing.check_grads(lambda i: i * 2, [np.array([1, 2])])
    with pytest.raises(ValueError, match="no differentiable output"):
        testing.check_grads(lambda x: x.detach() * 2, [np.ones(2)])
    with pytest.raises(ValueError, match="no differentiable output"):
        testing.check_grads(lambda x: x > 0, [np.ones(2)])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_assert_close_uses_torch_default_tolerances(dtype):
    tt = getattr(torch, dtype)
    dd = getattr(dj, dtype)
    base = np.array([1.0, 2.0, -3.0])
    for scale in (1e-8, 1e-6, 1e-4, 1e-2):
        other = base * (1 + scale)
        a, e = dj.tensor(base, dtype=dd), dj.tensor(other, dtype=dd)
        ta, te = torch.tensor(base, dtype=tt), torch.tensor(other, dtype=tt)
        try:
            torch.testing.assert_close(ta, te)
            torch_ok = True
        except AssertionError:
            torch_ok = False
        if torch_ok:
            testing.assert_close(a, e)
        else:
            with pytest.raises(AssertionError, match="Tensor-likes are not close"):
                testing.assert_close(a, e)


def test_assert_close_shape_dtype_and_explicit_tolerances():
    with pytest.raises(AssertionError, match="'shape' do not match"):
        testing.assert_close(dj.ones(2), dj.ones(3))
    with pytest.raises(AssertionError, match="'dtype' do not match: float32 != float64"):
        testing.assert_close(dj.ones(2), dj.ones(2, dtype=dj.float64))
    testing.assert_close(dj.ones(2), dj.ones(2, dtype=dj.float64), check_dtype=False)
    testing.assert_close(dj.tensor([1.0]), torch.tensor([1.05]), rtol=0.1, atol=0.0)
    with pytest.raises(AssertionError, match=r"Greatest absolute difference: .* at index \(1,\)"):
        testing.assert_close(dj.tensor([1.0, 2.0]), dj.tensor([1.0, 2.5]))
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        testing.assert_close(dj.ones(1), dj.ones(1), rtol=1.0)
    testing.assert_close(dj.tensor([1, 2]), dj.tensor([1, 2]))
    with pytest.raises(AssertionError):
        testing.assert_close(dj.tensor([1, 2]), dj.tensor([1, 3]))
    testing.assert_close(dj.tensor([float("nan")]), dj.tensor([float("nan")]), equal_nan=True)
    with pytest.raises(AssertionError):
        testing.assert_close(dj.tensor([float("nan")]), dj.tensor([float("nan")]))
