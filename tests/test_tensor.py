"""Tensor basics: creation, attributes, conversions, repr, Python protocols."""
import copy
import pickle

import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import DEFAULT_DEVICE, assert_close, same


def test_seed_snippet_prints_exactly():
    x = dj.tensor(1.0, requires_grad=True)
    y = dj.tensor(2.0, requires_grad=True)
    z = x + y
    z.backward()
    assert str(x.grad) == "tensor(1.)"


@pytest.mark.parametrize("data", [
    1.0, 3, True, [1.0, 2.0], [1, 2, 3], [[1.5, -2.25], [3.0, 4.0]], [[True, False]], [],
    [0.1, 200000.0], [1e-5, 1.0], [1e10, 1.0], [float("nan"), 1.0, float("inf")], [[1, -20], [300, 4]],
    list(range(1200)), [[0.001234, 12.5]] * 3,
])
def test_repr_matches_torch(data):
    assert repr(dj.tensor(data)) == repr(torch.tensor(data))


def test_repr_suffixes_match_torch():
    for dt in ("float64", "int32", "float16", "uint8"):
        assert repr(dj.tensor([1, 2], dtype=getattr(dj, dt))) == \
            repr(torch.tensor([1, 2], dtype=getattr(torch, dt))).replace("torch.", "dynajax.")
    assert repr(dj.tensor([1.0, 2.0], requires_grad=True)) == "tensor([1., 2.], requires_grad=True)"
    x = dj.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<MulBackward0>)"
    assert repr(dj.zeros(0, 3)) == repr(torch.zeros(0, 3))
    assert repr(dj.ones(2, 3, 4)) == repr(torch.ones(2, 3, 4))
    assert repr(dj.tensor(np.arange(30.0).reshape(3, 10) / 7)) == \
        repr(torch.tensor(np.arange(30.0).reshape(3, 10) / 7)).replace("torch.", "dynajax.")


def test_creation_functions_match_torch():
    cases = [
        (lambda m: m.zeros(2, 3), None), (lambda m: m.ones((2, 3), dtype=m.int32), None),
        (lambda m: m.full((2, 2), 7.5), None), (lambda m: m.empty(3).shape, None),
        (lambda m: m.arange(5), None), (lambda m: m.arange(1, 7, 2), None), (lambda m: m.arange(0, 1, 0.25), None),
        (lambda m: m.arange(10, 0, -3), None), (lambda m: m.linspace(0, 1, 5), None),
        (lambda m: m.logspace(0, 2, 3), None), (lambda m: m.eye(3), None), (lambda m: m.eye(2, 4), None),
        (lambda m: m.zeros_like(m.ones(2, dtype=m.float64)), None), (lambda m: m.ones_like(m.ones(3)), None),
        (lambda m: m.full_like(m.ones(2, dtype=m.int64), 4), None),
        (lambda m: m.ones(2).new_zeros(3), None), (lambda m: m.ones(2, dtype=m.int32).new_ones((2,)), None),
        (lambda m: m.ones(2).new_full((2,), 3.0), None), (lambda m: m.ones(2).new_tensor([1, 2]), None),
        (lambda m: m.from_numpy(np.arange(3, dtype=np.int32)), None),
        (lambda m: m.tensor(np.float32(2.5)), None), (lambda m: m.as_tensor([1, 2], dtype=m.float64), None),
    ]
    for make, _ in cases:
        a, e = make(dj), make(torch)
        if isinstance(e, torch.Tensor):
            assert_close(a, e)
        else:
            assert tuple(a) == tuple(e)


def test_random_creation_is_seeded_and_shaped():
    dj.manual_seed(0)
    a = dj.rand(3, 4)
    b = dj.randn(2, 2, dtype=dj.float64)
    c = dj.randint(0, 10, (5,))
    d = dj.randint(3, (2, 2))
    dj.manual_seed(0)
    assert np.array_equal(dj.rand(3, 4).numpy(), a.numpy())
    assert a.shape == (3, 4) and a.dtype == dj.float32 and 0 <= a.min().item() and a.max().item() < 1
    assert b.dtype == dj.float64 and c.dtype == dj.int64 and d.shape == (2, 2)
    assert ((c >= 0) & (c < 10)).all().item() if hasattr(c, "all") else True
    perm = dj.randperm(6)
    assert sorted(perm.tolist()) == list(range(6))
    state = dj.get_rng_state()
    x1 = dj.randn(4)
    dj.set_rng_state(state)
    assert np.array_equal(dj.randn(4).numpy(), x1.numpy())
    g = dj.Generator().manual_seed(5)
    g2 = dj.Generator().manual_seed(5)
    assert np.array_equal(dj.rand(3, generator=g).numpy(), dj.rand(3, generator=g2).numpy())
    big = dj.randn(20000)
    assert abs(float(big.mean())) < 0.05 and abs(float((big * big).mean()) - 1) < 0.05


def test_attributes():
    x = dj.ones(2, 3, dtype=dj.float64)
    assert x.shape == (2, 3) and x.size() == dj.Size([2, 3]) and x.size(1) == 3 and x.size(-1) == 3
    assert x.dim() == 2 and x.ndim == 2 and x.numel() == 6 and x.element_size() == 8
    assert x.device == dj.device(DEFAULT_DEVICE) and x.device.type == DEFAULT_DEVICE
    assert x.is_cuda == (DEFAULT_DEVICE == "cuda")
    assert x.is_leaf and not x.requires_grad and x.grad is None and x.grad_fn is None
    assert repr(x.shape) == "dynajax.Size([2, 3])" and x.shape.numel() == 6
    assert x.is_floating_point() and not dj.ones(1, dtype=dj.int64).is_floating_point()
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(2)


def test_conversions():
    x = dj.tensor([[1.5, 2.0]])
    assert x.tolist() == [[1.5, 2.0]]
    assert isinstance(x.numpy(), np.ndarray) and x.numpy().dtype == np.float32
    assert dj.tensor(2.5).item() == 2.5 and isinstance(dj.tensor(3).item(), int)
    assert float(dj.tensor([2.5])) == 2.5 and int(dj.tensor(3.7)) == 3
    assert [1, 2, 3][dj.tensor(1)] == 2
    assert bool(dj.tensor(1.0)) and not bool(dj.tensor(0))
    assert len(dj.ones(4, 2)) == 4
    assert np.asarray(dj.tensor([1, 2])).tolist() == [1, 2]
    assert f"{dj.tensor(3.14159):.2f}" == "3.14"


def test_dtype_conversions_and_type():
    x = dj.tensor([1.7, -2.2])
    assert x.long().tolist() == [1, -2] and x.int().dtype == dj.int32 and x.double().dtype == dj.float64
    assert x.half().dtype == dj.float16 and x.bfloat16().dtype == dj.bfloat16 and x.bool().tolist() == [True, True]
    assert x.to(dj.float64).dtype == dj.float64 and x.to(DEFAULT_DEVICE) is x and x.to(dj.ones(1, dtype=dj.int64)).dtype == dj.int64
    assert x.to("cpu", dj.float64).dtype == dj.float64 and x.to(dtype=dj.float16).dtype == dj.float16
    assert x.type() == "torch.FloatTensor" and x.type(dj.float64).dtype == dj.float64
    assert x.type("torch.LongTensor").dtype == dj.int64 and x.type_as(dj.ones(1, dtype=dj.int32)).dtype == dj.int32
    assert (x.cpu() is x) == (DEFAULT_DEVICE == "cpu") and x.cpu().device == dj.device("cpu") and x.float() is x
    w = dj.tensor([1.0, 2.0], requires_grad=True)
    w.double().sum().backward()
    assert w.grad.dtype == dj.float32 and w.grad.tolist() == [1.0, 1.0]


def test_cuda_reports_false_without_gpu():
    assert dj.cuda.is_available() in (True, False)
    if not dj.cuda.is_available():
        with pytest.raises(RuntimeError, match="no 'cuda' device"):
            dj.ones(2).to("cuda")


def test_protocol_errors():
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(dj.ones(2))
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        dj.ones(2, requires_grad=True).numpy()
    assert dj.ones(2, requires_grad=True).detach().numpy().tolist() == [1, 1]
    with pytest.raises(RuntimeError, match="elements cannot be converted to Scalar"):
        dj.ones(3).item()
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(dj.tensor(1.0))
    with pytest.raises(TypeError):
        iter(dj.tensor(1.0))
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        dj.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="negative dimension"):
        dj.zeros(-1)


def test_pickle_and_deepcopy_roundtrip():
    x = dj.tensor([1.0, 2.0], requires_grad=True)
    y = pickle.loads(pickle.dumps(x))
    assert y.tolist() == [1.0, 2.0] and y.requires_grad
    z = copy.deepcopy(x)
    assert z is not x and z.requires_grad and z.tolist() == x.tolist()
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


def test_random_inplace_fills_are_seeded():
    dj.manual_seed(3)
    a = dj.empty(4).uniform_(-1, 1)
    b = dj.empty(4).normal_(2.0, 0.5)
    dj.manual_seed(3)
    assert np.array_equal(dj.empty(4).uniform_(-1, 1).numpy(), a.numpy())
    assert np.array_equal(dj.empty(4).normal_(2.0, 0.5).numpy(), b.numpy())
    assert ((a >= -1) & (a < 1)).numpy().all()
    z = dj.ones(3).zero_()
    assert z.tolist() == [0, 0, 0] and z._version == 1
    f = dj.ones(2).fill_(4.5)
    assert f.tolist() == [4.5, 4.5]


@pytest.mark.parametrize("shape, src_shape, src_dtype", [((2, 3), (3,), "float32"), ((2, 3), (2, 3), "float64"),
                                                         ((2, 3), (1, 3), "int64"), ((4,), (), "float32")])
def test_copy_broadcasts_casts_and_passes_gradients_to_its_source(shape, src_shape, src_dtype):
    rng = np.random.default_rng(3)
    src = (rng.standard_normal(src_shape) * 3).astype(src_dtype)
    dst = np.zeros(shape, np.float32)
    want = torch.tensor(dst).copy_(torch.tensor(src))
    got = dj.tensor(dst)
    assert got.copy_(dj.tensor(src)) is got
    assert_close(got, want)
    int_dst = torch.zeros(shape, dtype=torch.int64).copy_(torch.tensor(src))   # a float source truncated
    assert_close(dj.zeros(shape, dtype=dj.int64).copy_(dj.tensor(src)), int_dst)
    if src_dtype != "int64":
        ts, ds = torch.tensor(src, requires_grad=True), dj.tensor(src, requires_grad=True)
        for lib, s in ((torch, ts), (dj, ds)):
            out = lib.ones(shape)
            out.copy_(s * 2)
            (out * lib.arange(out.numel()).reshape(shape)).sum().backward()
        assert_close(ds.grad, ts.grad)


def test_copy_raises_as_pytorch_for_shapes_that_do_not_broadcast():
    for src in ((4,), (3, 3), (2, 2, 3)):
        with pytest.raises(RuntimeError) as want:
            torch.zeros(2, 3).copy_(torch.ones(src))
        with pytest.raises(RuntimeError) as got:
            dj.zeros(2, 3).copy_(dj.ones(src))
        assert str(got.value).split(" (shapes")[0] == str(want.value)
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        dj.zeros(2).copy_([1.0, 2.0])


def test_eager_kernels_drop_a_compiler_option_their_xla_rejects(monkeypatch):
    """jaxlib 0.11's XLA has no ``xla_cpu_use_fusion_emitters``: eager kernels then compile without options
    (found on a machine with jax 0.11.2, where every eager op raised INVALID_ARGUMENT)."""
    import jax
    from dynajax import _device
    if jax.default_backend() != "cpu":
        assert _device.eager_compiler_options() is None
        return
    monkeypatch.setattr(_device, "_EAGER_OPTIONS", [])
    monkeypatch.setattr(_device, "EAGER_CPU_OPTIONS", {"xla_cpu_no_such_option_here": False})
    assert _device.eager_compiler_options() is None
    f = jax.jit(lambda x: x * 3, compiler_options=_device.eager_compiler_options())
    np.testing.assert_array_equal(np.asarray(f(np.arange(3.0))), [0.0, 3.0, 6.0])
    t = dj.tensor([1.0, 2.0]) * 2   # an eager op whose kernel compiles under the probed options
    np.testing.assert_array_equal(t.numpy(), [2.0, 4.0])


@pytest.mark.parametrize("n", [(), (4,), (1024,), (100_000,)])
def test_tensor_of_a_numpy_array_is_a_copy_as_torchs(n):
    """jax.device_put may alias a host buffer on CPU (seen at 100000 float32s): a later write into the numpy
    array, or into the torch tensor whose .numpy() it is, must not reach the tensor made from it."""
    a = np.zeros(n, np.float32)
    t = dj.tensor(a)
    a[...] = 5
    assert not t.numpy().any()


# ---------------------------------------------------------------- Tensor.to with positional flags
# Regression tests of issue 37's fixes, each side by side with PyTorch: Tensor.to's positional non_blocking and
# copy flags, which were refused where PyTorch takes them (and PyTorch's error for copy given twice).
TO_POSITIONAL = {
    "to device dtype flags": lambda L: L.ones(2).to("cpu", L.float64, False, True),
    "to dtype flags": lambda L: L.ones(2).to(L.float64, False, True),
    "to tensor flags": lambda L: L.ones(2).to(L.ones(1, dtype=L.float64), False, False),
    "to copy twice": lambda L: L.ones(2).to("cpu", L.float64, False, True, copy=True),
}


@pytest.mark.parametrize("case", sorted(TO_POSITIONAL))
def test_to_positional_flags_like_torch(case):
    same(TO_POSITIONAL[case])


def test_to_copy_flag_copies():
    x = dj.ones(2)
    assert x.to(dj.float32, False, True) is not x and x.to(dj.float32, False, False) is x
