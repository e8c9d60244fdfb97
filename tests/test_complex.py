"""Complex tensors: creation, promotion, the complex ops, printing, and gradients in PyTorch's convention
(``dL/dx + i dL/dy`` for a real loss of ``z = x + iy``), against torch and, through real inputs that build the
complex values, against ``jax.vjp`` of the lowered graph and finite differences (``dj.testing.check_grads``)."""
import math

import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close

RNG = np.random.default_rng(0)


def crandn(*shape, dtype=np.complex128) -> np.ndarray:
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _diff(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc"


def _np_of(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().resolve_neg().numpy()
    return np.asarray(t.detach()._value)


def compare_c(fn_dj, fn_torch, *arrays, rtol=None, atol=None, grad: bool = True, seed: int = 0) -> None:
    """``fn_dj`` and ``fn_torch`` on the same numpy ``arrays`` (float and complex ones require grad): outputs
    equal (values and dtypes), and the gradients of every input for random real or complex cotangents."""
    rng = np.random.default_rng(seed)
    needs = [grad and _diff(a) for a in arrays]
    xd = [dj.tensor(a, requires_grad=r) for a, r in zip(arrays, needs)]
    xt = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, needs)]
    od, ot = fn_dj(*xd), fn_torch(*xt)
    od, ot = (list(od), list(ot)) if isinstance(ot, (tuple, list)) else ([od], [ot])
    for i, (a, e) in enumerate(zip(od, ot)):
        assert a.dtype.name == str(e.dtype).split(".")[1], f"output {i}: {a.dtype} != {e.dtype}"
        assert_close(a, _np_of(e), rtol, atol, msg=f"output {i}")
    pairs = [(a, e) for a, e in zip(od, ot) if e.requires_grad]
    if not any(needs) or not pairs:
        return
    cots = []
    for _, e in pairs:
        c = rng.standard_normal(tuple(e.shape))
        if e.is_complex():
            c = c + 1j * rng.standard_normal(tuple(e.shape))
        cots.append(c.astype(_np_of(e).dtype))
    gi = [i for i, r in enumerate(needs) if r]
    gd = dj.autograd.grad([a for a, _ in pairs], [xd[i] for i in gi], [dj.tensor(c) for c in cots], allow_unused=True)
    gt = torch.autograd.grad([e for _, e in pairs], [xt[i] for i in gi], [torch.tensor(c) for c in cots],
                             allow_unused=True)
    for k, (a, e) in enumerate(zip(gd, gt)):
        if e is None:
            assert a is None or not np.any(_np_of(a)), f"grad of input {gi[k]}: torch has none"
            continue
        assert a is not None, f"grad of input {gi[k]}: dynajax has none"
        assert a.dtype.name == str(e.dtype).split(".")[1], f"grad {gi[k]}: {a.dtype} != {e.dtype}"
        assert_close(a, _np_of(e), rtol, atol, msg=f"grad of input {gi[k]}")


# ---------------------------------------------------------------- creation, dtypes, promotion
def test_creation_and_dtypes():
    t = dj.tensor([1 + 2j, 3 - 1j])
    assert t.dtype is dj.complex64 and t.is_complex() and dj.is_complex(t) and not t.is_floating_point()
    assert dj.tensor([1 + 2j], dtype=dj.complex128).dtype is dj.complex128
    assert dj.zeros(2, dtype=dj.complex64).dtype is dj.complex64
    assert dj.ones(2, 2, dtype=dj.cdouble).dtype is dj.complex128
    v = t[0].item()
    assert type(v) is complex and v == 1 + 2j
    assert complex(dj.tensor(2 - 1j)) == 2 - 1j
    assert t.abs().dtype is dj.float32 and dj.tensor([1j], dtype=dj.complex128).abs().dtype is dj.float64
    x = dj.randn(3, requires_grad=True)
    assert dj.zeros(3, dtype=dj.complex64, requires_grad=True).requires_grad


@pytest.mark.parametrize("a,b", [("float32", "complex64"), ("float64", "complex64"), ("int64", "complex128"),
                                 ("float32", "complex128"), ("bool", "complex64")])
def test_promotion_matches_torch(a, b):
    ta, tb = torch.ones(2, dtype=getattr(torch, a)), torch.ones(2, dtype=getattr(torch, b))
    da, db = dj.ones(2, dtype=getattr(dj, a if a != "bool" else "bool")), dj.ones(2, dtype=getattr(dj, b))
    assert (da + db).dtype.name == str((ta + tb).dtype).split(".")[1]
    # a 0-d complex tensor and a Python complex raise the category only, to the complex of the float dtype
    assert (da * dj.tensor(1j, dtype=dj.complex128)).dtype.name == \
        str((ta * torch.tensor(1j, dtype=torch.complex128)).dtype).split(".")[1]
    assert (da * 1j).dtype.name == str((ta * 1j).dtype).split(".")[1]


def test_complex_and_polar():
    re, im = RNG.standard_normal((2, 3)), RNG.standard_normal(3)
    compare_c(dj.complex, torch.complex, re, im)
    compare_c(dj.complex, torch.complex, re.astype(np.float32), im.astype(np.float32))
    r, a = np.abs(RNG.standard_normal(4)) + 0.1, RNG.standard_normal(4)
    compare_c(dj.polar, torch.polar, r, a)


@pytest.mark.parametrize("name", ["real", "imag", "angle", "conj", "conj_physical", "resolve_conj", "view_as_real",
                                  "abs", "sgn_abs"])
def test_unary_values_and_grads(name):
    z = crandn(3, 4)
    if name == "sgn_abs":   # |z|^2 through abs, sqrt and a product: a chain through real and complex
        compare_c(lambda t: (t.abs() * t).sqrt(), lambda t: (t.abs() * t).sqrt(), z)
        return
    compare_c(getattr(dj, name), getattr(torch, name), z)
    compare_c(getattr(dj, name), getattr(torch, name), z.astype(np.complex64))


def test_real_inputs_of_complex_ops():
    x = dj.tensor([1.0, -2.0])
    assert dj.real(x) is x and x.real is x and x.conj() is x and dj.resolve_conj(x) is x
    assert_close(dj.angle(dj.tensor([1, -1, 0])), torch.angle(torch.tensor([1, -1, 0])))
    assert_close(dj.angle(dj.tensor([float("nan"), -0.5])), torch.angle(torch.tensor([float("nan"), -0.5])))
    compare_c(dj.angle, torch.angle, RNG.standard_normal(4))


def test_view_as_complex():
    a = RNG.standard_normal((3, 2))
    compare_c(dj.view_as_complex, torch.view_as_complex, a)
    compare_c(lambda t: dj.view_as_real(dj.view_as_complex(t) * (1 + 2j)),
              lambda t: torch.view_as_real(torch.view_as_complex(t) * (1 + 2j)), RNG.standard_normal((2, 4, 2)))


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda m, a, b: a * b),
    ("div", lambda m, a, b: a / (b + 2)),
    ("exp", lambda m, a, b: m.exp(a) * b),
    ("matmul", lambda m, a, b: m.matmul(a, b.transpose(0, 1))),
    ("matvec", lambda m, a, b: m.matmul(a, b[0])),
    ("dot", lambda m, a, b: m.matmul(a[0], b[1])),
    ("sub_sum", lambda m, a, b: (a - 2j * b).sum(0)),
    ("log_sqrt", lambda m, a, b: m.log(a).sqrt() + m.sin(b) * m.tanh(a)),
    ("pow_recip", lambda m, a, b: a ** 2 + b.reciprocal()),
])
def test_holomorphic_grads(name, fn):
    a, b = crandn(3, 4), crandn(3, 4)
    compare_c(lambda x, y: fn(dj, x, y), lambda x, y: fn(torch, x, y), a, b)


def test_mixed_real_and_complex_inputs():
    """A real input of a complex result gets the real part of the complex gradient (torch's engine)."""
    x, z = RNG.standard_normal(4), crandn(4)
    compare_c(lambda x, z: (x * z).exp(), lambda x, z: (x * z).exp(), x, z)
    compare_c(lambda x, z: (x.to(dj.complex128) / z).abs(), lambda x, z: (x.to(torch.complex128) / z).abs(), x, z)


def test_grads_against_jax_and_finite_differences():
    """Real parameters building complex values: the tape agrees with jax.vjp of the lowered graph and with
    float64 finite differences (first and second order)."""
    x, y = dj.randn(3, 3, dtype=dj.float64), dj.randn(3, 3, dtype=dj.float64)
    dj.testing.check_grads(lambda x, y: (dj.complex(x, y) @ dj.complex(y, x)).abs().sum(), [x, y])
    dj.testing.check_grads(lambda x, y: dj.angle(dj.complex(x, y) * (1 - 2j)).sum()
                           + dj.imag(dj.complex(x, y).exp() / dj.complex(y, x)).sum(), [x, y])
    dj.testing.check_grads(lambda x, y: dj.view_as_real(dj.polar(x.abs() + 1, y) ** 2).sum(), [x, y], order=1)


def test_backward_into_leaf_grad():
    z = dj.tensor([1 + 2j, 3 - 1j], dtype=dj.complex128, requires_grad=True)
    zt = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex128, requires_grad=True)
    (dj.real(z * z.conj() * 1j + z).sum() + z.angle().sum()).backward()
    (torch.real(zt * zt.conj() * 1j + zt).sum() + zt.angle().sum()).backward()
    assert_close(z.grad, zt.grad.numpy())


def test_part_setters_write_in_place():
    z = dj.tensor([1 + 2j, 3 - 1j])
    zt = torch.tensor([1 + 2j, 3 - 1j])
    z.real = dj.tensor([5.0, 6.0]); zt.real = torch.tensor([5.0, 6.0])
    z.imag = 0.5; zt.imag = 0.5
    assert_close(z, zt.numpy())


def test_errors_as_torch():
    x = dj.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes"):
        x.imag
    with pytest.raises(RuntimeError, match="view_as_real is only supported for complex tensors"):
        dj.view_as_real(x)
    with pytest.raises(RuntimeError, match="Tensor must have a last dimension of size 2"):
        dj.view_as_complex(dj.ones(3, 3))
    with pytest.raises(RuntimeError, match="only supported for half, float and double tensors.*Long"):
        dj.view_as_complex(dj.ones(3, 2, dtype=dj.int64))
    with pytest.raises(RuntimeError, match="Expected object of scalar type Float but got scalar type Double"):
        dj.complex(x, x.double())
    with pytest.raises(RuntimeError, match="Expected both inputs to be Half, Float or Double tensors but got Long"):
        dj.complex(dj.ones(2, dtype=dj.int64), dj.ones(2, dtype=dj.int64))
    z = dj.tensor([1 + 2j], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for real scalar outputs"):
        (z * 2).sum().backward()


@pytest.mark.parametrize("data", [[1 + 2j, -3.5 - 1e-3j], 1 - 2j, [[1 + 0j, 1j]], [1.2 + 2j, 3.5e6j],
                                  [complex("nan"), 1 + 1j, complex(0, math.inf)], [0j, 0j]])
def test_printing_matches_torch(data):
    assert repr(dj.tensor(data)) == repr(torch.tensor(data)).replace("torch.", "dynajax.")
    assert repr(dj.tensor(data, dtype=dj.complex128)) == \
        repr(torch.tensor(data, dtype=torch.complex128)).replace("torch.", "dynajax.")
