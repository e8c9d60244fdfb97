"""dtypes and PyTorch's type promotion (category rules for 0-d tensors and Python scalars)."""
import itertools

import numpy as np
import pytest
import torch

import dynajax as dj

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _val(kind, name, lib):
    dt = getattr(lib, name)
    if kind == "dim":
        return lib.ones(2, dtype=dt)
    return lib.tensor(1, dtype=dt)


@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(NAMES, 2)))
def test_tensor_tensor_promotion_matches_torch(a, b):
    for ka, kb in (("dim", "dim"), ("dim", "zero"), ("zero", "dim"), ("zero", "zero")):
        expected = (_val(ka, a, torch) + _val(kb, b, torch)).dtype if a != "bool" or b != "bool" else torch.bool
        got = dj.result_type(_val(ka, a, dj), _val(kb, b, dj))
        assert got.name == str(expected).split(".")[-1], (ka, a, kb, b)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scalar", [True, 2, 2.5])
def test_tensor_scalar_promotion_matches_torch(name, scalar):
    expected = torch.result_type(torch.ones(2, dtype=getattr(torch, name)), scalar)
    assert dj.result_type(dj.ones(2, dtype=getattr(dj, name)), scalar).name == str(expected).split(".")[-1]


def test_issue_examples():
    assert (dj.ones(2) + dj.tensor(1.0, dtype=dj.float64)).dtype == dj.float32
    assert (dj.tensor([1, 2]) + 1.5).dtype == dj.float32
    assert (dj.tensor([1, 2]) / dj.tensor([2, 2])).dtype == dj.float32
    assert (dj.tensor([1, 2]) * 2).dtype == dj.int64
    assert (dj.tensor([1, 2], dtype=dj.int32) + dj.tensor(5)).dtype == dj.int32


def test_defaults_never_leak_from_jax():
    assert dj.tensor([1.0]).dtype == dj.float32
    assert dj.tensor([1]).dtype == dj.int64
    assert dj.tensor([True]).dtype == dj.bool
    assert dj.arange(3).dtype == dj.int64 and dj.arange(0.0, 1.0, 0.5).dtype == dj.float32
    assert dj.zeros(2).dtype == dj.float32 and dj.rand(2).dtype == dj.float32
    assert dj.tensor(np.array([1.0])).dtype == dj.float64  # numpy's dtype is kept, as in torch
    assert dj.full((2,), 3).dtype == dj.int64 and dj.full((2,), 3.0).dtype == dj.float32
    assert dj.tensor([1, 2]).sum().dtype == dj.int64
    assert dj.tensor([True, False]).sum().dtype == dj.int64


def test_default_dtype_switch():
    dj.set_default_dtype(dj.float64)
    try:
        assert dj.tensor([1.0]).dtype == dj.float64 and (dj.tensor([1]) + 0.5).dtype == dj.float64
    finally:
        dj.set_default_dtype(dj.float32)
    with pytest.raises(TypeError):
        dj.set_default_dtype(dj.int64)


def test_dtype_attributes_and_names():
    assert dj.float32.is_floating_point and not dj.int64.is_floating_point
    assert dj.float is dj.float32 and dj.double is dj.float64 and dj.long is dj.int64
    assert repr(dj.float64) == "dynajax.float64"
    assert dj.finfo(dj.float32).eps == torch.finfo(torch.float32).eps
    assert dj.iinfo(dj.int32).max == torch.iinfo(torch.int32).max
    assert dj.promote_types(dj.int32, dj.float16) == dj.float16
    assert dj.promote_types(dj.bfloat16, dj.float16) == dj.float32
