"""Sizes checked before JAX sees them (``dynajax._sizes``), side by side with torch: overflowing sizes
raise PyTorch's RuntimeError instead of aborting the interpreter, non-integer sizes its TypeError, tensors
larger than the machine raise at creation, a huge ``expand`` stays an unmade view; plus softmax of 0-d and
integer inputs and ``linear`` of a 0-d input.

The probes that used to abort the process run in one subprocess (an abort there fails the test, naming the
probe, instead of killing the test run)."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from dynajax import _sizes

# Each used to end the process with XLA's "overflow in static extent product" (uncaught C++ exception).
# ``M`` is the library: torch in this process, dynajax in the subprocess.
FATAL = [
    "M.zeros(2**62)", "M.ones(2**31, 2**31)", "M.randn(2**62)", "M.zeros(3, 2**61)", "M.full((2**62,), 1.0)",
    "M.empty(2**62)", "M.rand(2**62)", "M.randint(0, 3, (2**62,))", "M.normal(0.0, 1.0, (2**62,))",
    "M.arange(2**62)", "M.linspace(0, 1, 2**62)", "M.eye(2**31)", "M.zeros(2**30, 2**30, 2**30)",
    "M.zeros(0, 2**62, 2**62)", "M.zeros(2**62, 2**62, 0)", "M.randperm(2**62)", "M.zeros(3).new_zeros(2**62)",
    "M.zeros(2, 3).new_ones((2**62, 2))", "M.zeros_like(M.zeros(1).expand(2**62))",
    "M.multinomial(M.ones(3), 2**62, True)",
    "M.randn(4)[:1].expand(2**62).shape", "M.randn(4)[:1].expand(2**63 - 1).shape", "M.randn(4)[:1].expand(2**62, 4)",
    "M.zeros(0, dtype=M.int8).view(2**62, 0).shape",
]
# torch makes these; XLA cannot hold them (its byte extent of the leading dims overflows): a clear RuntimeError
NOT_REPRESENTABLE = ["M.zeros(2**62, 0)", "M.zeros(0).view(2**62, 0)"]

_RUNNER = r"""
import json, sys
import dynajax as M
out = sys.stdout
for src in json.loads(sys.argv[1]):
    try:
        r = eval(src)
        res = ["ok", repr(tuple(r)) if isinstance(r, tuple) else type(r).__name__]
    except Exception as e:
        res = ["raised", type(e).__name__, str(e)]
    out.write(json.dumps([src] + res) + "\n"); out.flush()
"""


def _outcome(src: str, module):
    try:
        r = eval(src, {"M": module})
        return ["ok", repr(tuple(r)) if isinstance(r, tuple) else type(r).__name__]
    except Exception as e:
        return ["raised", type(e).__name__, str(e)]


@pytest.fixture(scope="module")
def dj_outcomes():
    """The outcome of every FATAL / NOT_REPRESENTABLE probe in dynajax, from one subprocess."""
    probes = FATAL + NOT_REPRESENTABLE + ["M.compile(lambda x: M.zeros(2**62) + x)(M.ones(1))",
                                          "M.compile(lambda x: x.expand(2**62) + 1)(M.ones(1))"]
    p = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(probes)], capture_output=True, text=True,
                       timeout=300)
    got = {}
    for line in p.stdout.splitlines():
        src, *res = json.loads(line)
        got[src] = res
    missing = [s for s in probes if s not in got]
    assert not missing, f"the process died (rc {p.returncode}) at {missing[0]}: {p.stderr[-800:]}"
    return got


@pytest.mark.parametrize("src", FATAL)
def test_overflowing_sizes_raise_as_torch(src, dj_outcomes):
    got, want = dj_outcomes[src], _outcome(src, torch)
    assert got[:2] == want[:2], (got, want)
    if want[0] == "raised":   # (torch's *_like adds the strides it would have used)
        assert want[2].startswith(got[2]), (got, want)


@pytest.mark.parametrize("src", NOT_REPRESENTABLE)
def test_shapes_xla_cannot_hold_raise_clearly(src, dj_outcomes):
    kind, *rest = dj_outcomes[src]
    assert kind == "raised" and rest[0] == "RuntimeError" and "XLA" in rest[1], dj_outcomes[src]


def test_overflow_inside_compiled_step_raises(dj_outcomes):
    assert dj_outcomes["M.compile(lambda x: M.zeros(2**62) + x)(M.ones(1))"] == [
        "raised", "RuntimeError", "Storage size calculation overflowed with sizes=[4611686018427387904]"]
    kind, typ, msg = dj_outcomes["M.compile(lambda x: x.expand(2**62) + 1)(M.ones(1))"]
    assert (kind, typ) == ("raised", "RuntimeError") and "overflowed" in msg


# ---------------------------------------------------------------- sizes that are not integers, or negative
SIZE_ERRORS = [
    "M.zeros(2.5)", "M.randn(3.7, 2)", "M.zeros((2, 3.0))", "M.rand(2, -1.0)", "M.full((2.5,), 1.0)",
    "M.full(2.5, 1.0)", "M.zeros(True)", "M.zeros(M.tensor(3.0))", "M.zeros(2**63)", "M.ones(3).new_zeros(2.5)",
    "M.randint(0, 3, (2.5,))", "M.eye(2.5)", "M.linspace(0, 1, 2.5)", "M.randperm(2.5)",
    "M.zeros(4).view(2.0, 2)", "M.zeros(4).view(2, -1.0)", "M.zeros(4).reshape((2, 2.0))", "M.zeros(1).expand(2.0)",
    "M.zeros(1).expand((2, 2.0))", "M.zeros(2, 2).permute(0.0, 1)",
    "M.zeros(-1)", "M.randn(-1)", "M.rand(2, -1)", "M.full((-1,), 1.0)", "M.randint(0, 3, (-1,))",
    "M.zeros(3).new_empty(-1)", "M.randperm(-1)", "M.eye(-1)", "M.eye(3, -1)", "M.linspace(0, 1, -1)",
    "M.zeros(4).view(-2, 2)", "M.arange(0.0, float('inf'))", "M.arange(0.0, 1e19)",
]
SIZE_OK = ["M.zeros(2, True).shape", "M.zeros(M.tensor(3)).shape", "M.zeros(np.int64(3)).shape",
           "M.zeros(2**62, 0, dtype=M.int8).shape", "M.zeros(4).view(2, M.tensor(2)).shape",
           "M.randn(4)[:1].expand(2**40).shape"]


@pytest.mark.parametrize("src", SIZE_ERRORS)
def test_bad_sizes_raise_torchs_error_type(src):
    want, got = _outcome(src, torch), _outcome(src, dj)
    assert want[0] == "raised" and got[:2] == want[:2], (want, got)
    if want[1] == "RuntimeError" and src not in ("M.zeros(-1)",):   # (torch's zeros words it its own way)
        assert got[2] == want[2]


@pytest.mark.parametrize("src", SIZE_OK)
def test_good_sizes_as_torch(src):
    g = {"M": torch, "np": np}
    want = tuple(eval(src, g))
    g["M"] = dj
    assert tuple(eval(src, g)) == want


# ---------------------------------------------------------------- more than the machine holds
def _host_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _allocator_message(nbytes: int) -> str:
    return f"DefaultCPUAllocator: can't allocate memory: you tried to allocate {nbytes} bytes"


@pytest.mark.parametrize("make", [lambda n: dj.randn(n), lambda n: dj.zeros(n // 2, 2), lambda n: dj.ones(n),
                                  lambda n: dj.empty(n), lambda n: dj.full((n,), 2.0), lambda n: dj.rand(n),
                                  lambda n: dj.zeros(1).new_zeros(n), lambda n: dj.randint(0, 4, (n,), dtype=dj.int32)])
def test_larger_than_memory_raises_at_creation(make):
    n = 2 * (_host_bytes() // 4)   # float32 / int32 elements: twice the host's memory
    with pytest.raises(RuntimeError, match=_allocator_message(4 * n)) as err:
        make(n)
    assert not isinstance(err.value, dj.OutOfMemoryError)   # (the CPU's is a plain RuntimeError, as PyTorch's)


def test_accelerator_memory_error_is_out_of_memory_error():
    class FakeGPU:   # what ``memory_stats`` reports on a GPU
        platform, id = "gpu", 0

        def memory_stats(self):
            return {"bytes_limit": 2**30}

    err = _sizes.memory_error(3 * 2**30, FakeGPU())
    assert isinstance(err, dj.OutOfMemoryError) and isinstance(err, RuntimeError)
    assert str(err).startswith("CUDA out of memory. Tried to allocate 3.00 GiB.")
    assert _sizes.memory_error(2**29, FakeGPU()) is None
    assert issubclass(dj.OutOfMemoryError, RuntimeError)


# ---------------------------------------------------------------- a huge expand: a view, unmade
def test_huge_expand_is_a_view_that_raises_where_used():
    base = dj.randn(4)
    n = 10**12   # 4 TB of float32 (free in torch: a stride-0 view)
    x = base[:1].expand(n)
    tx = torch.randn(4)[:1].expand(n)
    assert x.shape == tx.shape and x.dtype == dj.float32 and x.numel() == tx.numel()
    assert x.is_contiguous() == tx.is_contiguous() and x.device == dj.device("cpu")
    assert x.expand(3, n).shape == tx.expand(3, n).shape
    msg = _allocator_message(4 * n)
    for use in (lambda: x + 1, lambda: x.sum(), lambda: x[:5], lambda: repr(x), lambda: x.numpy(),
                lambda: x.clone(), lambda: np.asarray(x)):
        with pytest.raises(RuntimeError, match=msg):
            use()
    with pytest.raises(RuntimeError, match=_allocator_message(12 * n)):
        x.expand(3, n).sum()
    base.add_(1)   # a write into the base leaves the view unmade, not made
    assert x.shape == (n,)
    with pytest.raises(RuntimeError, match="kept unmade"):
        x.mul(2)
    y = dj.randn(1, requires_grad=True).expand(n)
    assert y.requires_grad


# ---------------------------------------------------------------- softmax / linear
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("v", [2.0, float("inf"), -3.5])
def test_softmax_of_0d_as_torch(fn, dim, v):
    tx = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    x = dj.tensor(v, dtype=dj.float64, requires_grad=True)
    want, got = getattr(torch.nn.functional, fn)(tx, dim), getattr(F, fn)(x, dim)
    assert got.shape == () and np.allclose(got.item(), want.item(), equal_nan=True)
    if np.isfinite(v):
        want.backward()
        got.backward()
        assert x.grad.item() == pytest.approx(tx.grad.item())


def test_softmax_dim_out_of_range_on_0d():
    with pytest.raises(IndexError, match=r"expected to be in range of \[-1, 0\], but got 1"):
        dj.tensor(2.0).softmax(1)
    with pytest.raises(IndexError):
        torch.tensor(2.0).softmax(1)


@pytest.mark.parametrize("src", ["F.softmax(M.tensor([1, 2]), 0)", "F.log_softmax(M.tensor([1, 2]), 0)",
                                 "F.softmax(M.tensor([[1, 2]]), 0)", "F.log_softmax(M.tensor([[1, 2]]), 0)",
                                 "F.softmax(M.tensor([True]), -1)", "F.softmin(M.tensor([1, 2]), 0)",
                                 "M.tensor([1, 2]).softmax(0)"])
def test_softmax_of_integers_raises_as_torch(src):
    def run(m, f):
        try:
            eval(src, {"M": m, "F": f})
        except Exception as e:
            return type(e), str(e)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (it leaked numpy's cast warning and returned float64)
        assert run(dj, F) == run(torch, torch.nn.functional)


def test_softmax_of_integers_with_dtype():
    got = F.softmax(dj.tensor([1, 2]), 0, dtype=dj.float32)
    want = torch.nn.functional.softmax(torch.tensor([1, 2]), 0, dtype=torch.float32)
    assert got.dtype == dj.float32 and np.allclose(got.numpy(), want.numpy())


def test_linear_of_0d_input_as_torch():
    with pytest.raises(RuntimeError) as want:
        torch.nn.Linear(3, 2)(torch.tensor(2.0))
    with pytest.raises(RuntimeError) as got:
        nn.Linear(3, 2)(dj.tensor(2.0))
    assert str(got.value) == str(want.value)
