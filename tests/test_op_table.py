"""Generic tests driven by the op table (tests/op_table.py): for every registered op,
the jitted lowered graph equals eager, the tape VJP equals ``jax.vjp`` of the lowered
graph (per op and end to end), and gradients check against finite differences to
second order where supported. Kinks are tested separately against PyTorch."""
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynajax as dj
from dynajax import testing
from dynajax.ops.registry import OPS
from helpers import compare
from op_table import TABLE

NAMES = sorted(TABLE)
DIFFERENTIABLE = [n for n in NAMES if TABLE[n].order > 0]


def _inputs(entry, dtype="float64", seed=0):
    arrays = entry.inputs(np.random.default_rng(seed))
    return [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]


def test_every_registered_op_has_a_table_entry():
    library_ops = {n for n, o in OPS.items() if o.impl.__module__.startswith("dynajax.")}  # not test-only ops
    missing = sorted(library_ops - set(TABLE))
    assert not missing, f"ops registered without an op-table entry (add them to tests/op_table.py): {missing}"
    stale = sorted(set(TABLE) - set(OPS))
    assert not stale, f"op-table entries for ops that are not registered: {stale}"


def test_table_checks_gradients_of_every_differentiable_op():
    wrong = sorted(n for n in NAMES if (OPS[n].rule is not None) != (TABLE[n].order > 0))
    assert not wrong, f"op-table order disagrees with whether the op has a VJP rule: {wrong}"


@pytest.mark.parametrize("name", NAMES)
def test_jit_of_lowered_graph_equals_eager(name):
    e = TABLE[name]
    for dtype in e.dtypes:
        arrays = _inputs(e, dtype)
        ts = [dj.tensor(a) for a in arrays]
        eager = jax.tree_util.tree_leaves(e.fn(*ts), is_leaf=lambda x: isinstance(x, dj.Tensor))
        low = dj.lower(e.fn, *[dj.tensor(a) for a in arrays])
        assert name in {q.op.name for q in low.eqns if q.op is not None}, f"the entry for {name} does not run it"
        with jax.enable_x64(True):   # int64 results (indices) lower in 64-bit mode only: docs/jax.md
            lowered = jax.tree_util.tree_leaves(jax.jit(low.fn)(*arrays))
        assert len(lowered) == len(eager)
        for a, b in zip(lowered, eager):
            testing.assert_close(np.asarray(a), b.detach().numpy(), rtol=e.rtol, atol=e.atol, check_dtype=False,
                                 equal_nan=True)
            assert np.asarray(a).dtype == b.detach().numpy().dtype


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_tape_matches_jax_vjp_and_finite_differences(name):
    e = TABLE[name]
    arrays = _inputs(e)
    low = dj.lower(e.fn, *[dj.tensor(a) for a in arrays])
    assert testing.check_op_vjps(low, *arrays) == []
    testing.check_grads(e.fn, arrays, order=e.order, **e.check)


# ---------------------------------------------------------------- hypothesis: shapes
def _broadcastable_pair():
    dims = st.lists(st.integers(0, 3), min_size=0, max_size=3)

    def split(shape):
        return st.tuples(st.just(tuple(shape)), st.lists(st.booleans(), min_size=len(shape),
                                                         max_size=len(shape)), st.integers(0, len(shape)))
    return dims.flatmap(split).map(lambda t: (t[0], tuple(1 if ones else s for s, ones in zip(t[0], t[1]))[t[2]:]))


@settings(max_examples=8, deadline=None)
@given(pair=_broadcastable_pair(), name=st.sampled_from(["add", "mul", "div", "maximum", "atan2", "hypot"]),
       seed=st.integers(0, 2**16))
def test_binary_ops_broadcasting_size1_and_zero_size(pair, name, seed):
    e = TABLE[name]
    r = np.random.default_rng(seed)
    x = r.uniform(0.5, 2.0, pair[0]) * r.choice([-1, 1], pair[0])
    y = r.uniform(0.5, 2.0, pair[1]) * r.choice([-1, 1], pair[1]) * 1.5  # no ties with x, y away from 0
    low = dj.lower(e.fn, dj.tensor(x), dj.tensor(y))
    eager = e.fn(dj.tensor(x), dj.tensor(y))
    testing.assert_close(np.asarray(jax.jit(low.fn)(x, y)), eager.numpy(), check_dtype=False)
    testing.check_grads(e.fn, [x, y], order=1)


@settings(max_examples=5, deadline=None)
@given(shape=st.lists(st.integers(0, 3), min_size=0, max_size=3), name=st.sampled_from(["exp", "tanh", "square"]))
def test_unary_ops_any_shape(shape, name):
    x = np.random.default_rng(0).standard_normal(shape)
    testing.check_grads(TABLE[name].fn, [x], order=2)


# ---------------------------------------------------------------- kinks: PyTorch's values
def test_kinks_match_pytorch():
    import torch
    x = np.array([-1.0, 0.0, 0.0, 2.0])
    compare(lambda t: dj.abs(t), lambda t: torch.abs(t), x)
    compare(lambda t: dj.relu(t), lambda t: torch.relu(t), x)
    compare(lambda t: F_leaky(t), lambda t: torch.nn.functional.leaky_relu(t, 0.1), x)
    compare(lambda t: dj.clamp(t, 0.0, 2.0), lambda t: torch.clamp(t, 0.0, 2.0), x)
    lo, hi = np.array([0.0, 0.0, -1.0, 2.0]), np.array([1.0, 1.0, 0.0, 2.0])
    compare(lambda t, a, b: dj.clamp(t, a, b), lambda t, a, b: torch.clamp(t, a, b), x, lo, hi)
    y = np.array([-1.0, 0.0, 1.0, 2.0])  # ties with x at 0 and 2
    compare(dj.maximum, torch.maximum, x, y)
    compare(dj.minimum, torch.minimum, x, y)
    ties = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    compare(lambda t: dj.amax(t, 1), lambda t: torch.amax(t, 1), ties)
    compare(lambda t: dj.max(t), lambda t: torch.max(t), ties)
    compare(lambda t: dj.max(t, 1).values, lambda t: torch.max(t, 1).values, ties)


def F_leaky(t):
    return dj.nn.functional.leaky_relu(t, 0.1)
