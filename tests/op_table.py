"""The op table: one entry per registered op, driving the generic tests in test_op_table.py.

An entry names the registry op, a function of dynajax tensors that runs it through
the public API (backward-only ops are reached by a ``create_graph`` backward of
their parent inside the function), a sample-input generator with its domain,
the dtypes to run, the derivative order that is checked (0: not differentiable,
1: no double backward) and tolerances. Samples stay away from kinks (abs and
relu at 0, clamp at its bounds, ties of max); test_op_table.py tests the kinks
against PyTorch separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import dynajax as dj
import dynajax.nn.functional as F

F64, F32 = "float64", "float32"


@dataclass
class OpEntry:
    name: str                      # the name in dynajax.ops.registry.OPS
    fn: Callable                   # fn(*tensors) -> tensor(s); runs the op
    inputs: Callable               # inputs(rng) -> list of numpy arrays (floats as float64)
    domain: str = "normal"         # where float samples come from (documentation)
    dtypes: tuple = (F32,)         # dtypes of the eager-vs-jit test (check_grads runs float64)
    order: int = 2                 # derivative order checked by check_grads (0: none)
    rtol: float | None = None      # eager-vs-jit tolerances (None: PyTorch's per-dtype defaults)
    atol: float | None = None
    check: dict = field(default_factory=dict)  # extra check_grads keyword arguments


TABLE: dict[str, OpEntry] = {}


def entry(name, fn, inputs, **kw) -> None:
    if name in TABLE:
        raise ValueError(f"duplicate op-table entry {name!r}")
    TABLE[name] = OpEntry(name, fn, inputs, **kw)


# ---------------------------------------------------------------- samplers
def normal(*shape):
    return lambda r: [r.standard_normal(shape)]


def uniform(lo, hi, *shape):
    return lambda r: [r.uniform(lo, hi, shape)]


def away(pts, margin, *shape, lo=-2.0, hi=2.0):
    """Uniform samples at least ``margin`` away from each point in ``pts`` (kinks, discontinuities)."""
    def gen(r):
        x = r.uniform(lo, hi, shape)
        for p in pts:
            near = np.abs(x - p) < margin
            x = np.where(near, p + np.sign(x - p + 1e-12) * margin * (1 + r.uniform(0, 1, shape)), x)
        return [x]
    return gen


def off_integers(*shape, lo=-3.0, hi=3.0):
    """Values whose fractional part is in [0.2, 0.8] (floor/round/frac are smooth there)."""
    return lambda r: [np.floor(r.uniform(lo, hi, shape)) + r.uniform(0.2, 0.8, shape)]


def cat_inputs(*gens):
    return lambda r: [a for g in gens for a in g(r)]


def const(*arrays):
    return lambda r: [np.array(a) for a in arrays]


def vjp_of(f, wrt=(0,)):
    """``fn(*inputs, g)``: the ``create_graph`` VJP of ``f`` along cotangent ``g``: runs ``f``'s backward ops."""
    def fn(*args):
        *xs, g = args
        targets = [xs[i] for i in wrt]
        for t in targets:
            if not t.requires_grad:
                t.requires_grad_(True)
        gs = dj.autograd.grad(f(*xs), targets, g, create_graph=True, allow_unused=True)
        return gs[0] if len(gs) == 1 else gs
    return fn


# ---------------------------------------------------------------- elementwise: unary
S = (2, 3)
for _n, _gen, _dom, _order in [
    ("exp", normal(*S), "normal", 2), ("exp2", normal(*S), "normal", 2), ("expm1", normal(*S), "normal", 2),
    ("log", uniform(0.3, 3, *S), "(0.3, 3)", 2), ("log2", uniform(0.3, 3, *S), "(0.3, 3)", 2),
    ("log10", uniform(0.3, 3, *S), "(0.3, 3)", 2), ("log1p", uniform(-0.7, 3, *S), "(-0.7, 3)", 2),
    ("sqrt", uniform(0.3, 3, *S), "(0.3, 3)", 2), ("rsqrt", uniform(0.3, 3, *S), "(0.3, 3)", 2),
    ("reciprocal", away([0], 0.3, *S), "|x| > 0.3", 2), ("sin", normal(*S), "normal", 2),
    ("cos", normal(*S), "normal", 2), ("tan", uniform(-1.2, 1.2, *S), "(-1.2, 1.2)", 2),
    ("asin", uniform(-0.9, 0.9, *S), "(-0.9, 0.9)", 2), ("acos", uniform(-0.9, 0.9, *S), "(-0.9, 0.9)", 2),
    ("atan", normal(*S), "normal", 2), ("sinh", normal(*S), "normal", 2), ("cosh", normal(*S), "normal", 2),
    ("tanh", normal(*S), "normal", 2), ("asinh", normal(*S), "normal", 2),
    ("atanh", uniform(-0.9, 0.9, *S), "(-0.9, 0.9)", 2), ("sigmoid", normal(*S), "normal", 2),
    ("erf", normal(*S), "normal", 2), ("erfc", normal(*S), "normal", 2),
    ("erfinv", uniform(-0.9, 0.9, *S), "(-0.9, 0.9)", 2),
    ("lgamma", uniform(0.5, 3, *S), "(0.5, 3)", 2), ("digamma", uniform(0.5, 3, *S), "(0.5, 3)", 2),
    ("square", normal(*S), "normal", 2), ("neg", normal(*S), "normal", 2),
    ("abs", away([0], 0.2, *S), "|x| > 0.2", 2), ("relu", away([0], 0.2, *S), "|x| > 0.2", 2),
    ("sign", away([0], 0.2, *S), "|x| > 0.2", 2), ("floor", off_integers(*S), "frac in [.2,.8]", 2),
    ("ceil", off_integers(*S), "frac in [.2,.8]", 2), ("trunc", off_integers(*S), "frac in [.2,.8]", 2),
    ("frac", off_integers(*S), "frac in [.2,.8]", 2),
]:
    entry(_n, getattr(dj, _n), _gen, domain=_dom, order=_order)

entry("polygamma", lambda x: dj.polygamma(1, x), uniform(0.5, 3, *S), domain="(0.5, 3)")
entry("round", dj.round, off_integers(*S), domain="frac in [.2,.8]")
entry("nan_to_num", dj.nan_to_num, normal(*S))
entry("leaky_relu", lambda x: F.leaky_relu(x, 0.1), away([0], 0.2, *S), domain="|x| > 0.2")
for _n in ("isnan", "isinf", "isfinite"):
    entry(_n, getattr(dj, _n), const([1.0, float("nan"), float("inf"), -float("inf")]), order=0)
entry("logical_not", dj.logical_not, lambda r: [r.uniform(size=S) > 0.5], order=0)
entry("bitwise_not", dj.bitwise_not, lambda r: [r.integers(-5, 5, S)], order=0)


# ---------------------------------------------------------------- elementwise: binary
def two(gx, gy):
    return cat_inputs(gx, gy)


B = (2, 1)  # broadcast against S
entry("add", lambda x, y: dj.add(x, y, alpha=2), two(normal(*S), normal(*B)))
entry("sub", dj.sub, two(normal(*S), normal(*B)))
entry("mul", dj.mul, two(normal(*S), normal(*B)))
entry("div", dj.div, two(normal(*S), away([0], 0.3, *B)), domain="|y| > 0.3")
_ratio = const([[1.3, 2.5, -3.7], [4.1, -0.4, 0.9]], [[0.7, 1.1, 2.3], [1.7, 0.3, 0.6]])  # x/y frac in (.15,.85)
entry("floor_divide", dj.floor_divide, _ratio, domain="x/y away from integers")
entry("div_trunc", lambda x, y: dj.div(x, y, rounding_mode="trunc"), _ratio, domain="x/y away from integers")
entry("remainder", dj.remainder, _ratio, domain="x/y away from integers")
entry("fmod", dj.fmod, _ratio, domain="x/y away from integers")
entry("pow", dj.pow, two(uniform(0.5, 2, *S), uniform(-1.5, 1.5, *B)), domain="x in (0.5, 2)")
entry("atan2", dj.atan2, two(normal(*S), away([0], 0.3, *B)))
entry("hypot", dj.hypot, two(away([0], 0.3, *S), away([0], 0.3, *B)))
entry("logaddexp", dj.logaddexp, two(normal(*S), normal(*B)))
_apart = lambda r: (lambda x: [x, x + r.choice([-1, 1], S) * r.uniform(0.2, 1, S)])(r.standard_normal(S))  # noqa: E731
entry("maximum", dj.maximum, _apart, domain="no ties")
entry("minimum", dj.minimum, _apart, domain="no ties")
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    entry(_n, getattr(dj, _n), lambda r: (lambda x: [x, np.where(r.uniform(size=S) > 0.5, x, r.standard_normal(S))])(
        r.standard_normal(S)), order=0)
_bools = lambda r: [r.uniform(size=S) > 0.5, r.uniform(size=S) > 0.5]  # noqa: E731
for _n in ("logical_and", "logical_or", "logical_xor"):
    entry(_n, getattr(dj, _n), _bools, order=0)
_ints = lambda r: [r.integers(-8, 8, S), r.integers(-8, 8, S)]  # noqa: E731
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    entry(_n, getattr(dj, _n), _ints, order=0)
_shifts = lambda r: [r.integers(-8, 8, S), r.integers(0, 4, S)]  # noqa: E731
entry("gcd", dj.gcd, _ints, order=0)
entry("lcm", dj.lcm, _ints, order=0)
entry("nextafter", dj.nextafter, two(normal(*S), normal(*B)), order=1)
entry("bitwise_left_shift", dj.bitwise_left_shift, _shifts, order=0)
entry("bitwise_right_shift", dj.bitwise_right_shift, _shifts, order=0)
entry("where", lambda c, x, y: dj.where(c, x, y),
      lambda r: [r.uniform(size=S) > 0.5, r.standard_normal(S), r.standard_normal(B)])


def _clamp_inputs(r):
    lo, hi = r.uniform(-1, -0.2, S), r.uniform(0.2, 1, S)
    x = np.where(r.uniform(size=S) < 0.5, lo, hi) + r.choice([-1, 1], S) * r.uniform(0.1, 0.3, S)
    return [x, lo, hi]


entry("clamp", dj.clamp, _clamp_inputs, domain="x at least 0.1 from either bound")


# ---------------------------------------------------------------- shape, conversion, views
entry("to_dtype", lambda x: x.to(dj.float32) * 1.5, normal(*S), dtypes=(F64,),
      check=dict(eps=1e-2, fd_rtol=1e-4, fd_atol=1e-5, rtol=1e-6, atol=1e-6))
entry("clone", dj.clone, normal(*S))
entry("shard", lambda x: x.shard(dj.distributed.Mesh(), None) * 1.5, normal(*S))
entry("expand", lambda x: x.expand(2, 2, 3), normal(*B))
entry("reshape", lambda x: x.reshape(3, 2), normal(*S))
entry("permute", lambda x: x.permute(1, 0), normal(*S))
entry("sum", lambda x: x.sum(1), normal(*S))
entry("mean", lambda x: x.mean(0, keepdim=True), normal(*S))
entry("sum_to_shape", lambda x: x.sum_to_size(1, 3), normal(*S))


def _write_through_view(x, v):
    h = x * 1.0
    h.select(0, 0).mul_(v)  # an in-place op on a view of h writes back with view_scatter
    return h


entry("view_scatter", _write_through_view, two(normal(*S), normal(3)))

# ---------------------------------------------------------------- indexing
_IDX = np.array([2, 0, 2])
entry("slice", lambda x: x[1:, ::2], normal(3, 4))
entry("index", lambda x, i: x[i], lambda r: [r.standard_normal((3, 2)), _IDX.copy()])
entry("index_backward", vjp_of(lambda x, i: x[i]),
      lambda r: [r.standard_normal((3, 2)), _IDX.copy(), r.standard_normal((3, 2))])
entry("index_put", lambda x, i, v: dj.index_put(x, (i,), v, accumulate=True),
      lambda r: [r.standard_normal((3, 2)), _IDX.copy(), r.standard_normal((3, 2))])
_G = np.array([[0, 2, 2], [1, 1, 0]])
entry("gather", lambda x, i: dj.gather(x, 1, i), lambda r: [r.standard_normal((2, 3)), _G.copy()])
entry("gather_backward", vjp_of(lambda x, i: dj.gather(x, 1, i)),
      lambda r: [r.standard_normal((2, 3)), _G.copy(), r.standard_normal((2, 3))])
_PERM = np.array([[2, 0, 1], [1, 2, 0]])  # scatter without duplicates: which write wins is unspecified
entry("scatter", lambda x, i, s: dj.scatter(x, 1, i, s),
      lambda r: [r.standard_normal((2, 3)), _PERM.copy(), r.standard_normal((2, 3))])
entry("scatter_add", lambda x, i, s: dj.scatter_add(x, 1, i, s),
      lambda r: [r.standard_normal((2, 3)), _G.copy(), r.standard_normal((2, 3))])
entry("scatter_reduce", lambda x, i, s: dj.scatter_reduce(x, 1, i, s, "amax"),
      lambda r: [r.standard_normal((2, 3)), _G.copy(), r.standard_normal((2, 3))], domain="continuous (no ties)")

# ---------------------------------------------------------------- join / reorder
entry("cat", lambda x, y: dj.cat([x, y], 1), two(normal(2, 3), normal(2, 1)))
entry("stack", lambda x, y: dj.stack([x, y * 2, x], 1), two(normal(2, 3), normal(2, 3)))
entry("unbind", lambda x: [p * (i + 1) for i, p in enumerate(x.unbind(1))], normal(2, 3, 2))
entry("flip", lambda x: dj.flip(x, (0, 1)), normal(*S))
entry("roll", lambda x: dj.roll(x, 1, 1), normal(*S))
entry("repeat", lambda x: x.repeat(2, 1, 2), normal(*S))
entry("repeat_interleave", lambda x: dj.repeat_interleave(x, 2, dim=1), normal(*S))
entry("repeat_interleave_sum", vjp_of(lambda x: dj.repeat_interleave(x, 2, dim=1)),
      lambda r: [r.standard_normal(S), r.standard_normal((2, 6))])
entry("tril", lambda x: dj.tril(x, 0), normal(3, 3))
entry("triu", lambda x: dj.triu(x, 1), normal(3, 3))
entry("diagonal", lambda x: dj.diagonal(x, 1), normal(3, 4))
entry("unfold_dim", lambda x: x.unfold(1, 3, 2), normal(2, 7, 3))
entry("unfold_dim_backward", vjp_of(lambda x: x.unfold(1, 3, 2)), lambda r: [r.standard_normal((2, 7, 3)),
                                                                            r.standard_normal((2, 3, 3, 3))])
entry("diag_embed", dj.diag_embed, normal(2, 3))

# ---------------------------------------------------------------- reductions
entry("amax", lambda x: dj.amax(x, 1), normal(*S), domain="no ties (continuous)")
entry("amin", lambda x: dj.amin(x, 1), normal(*S), domain="no ties (continuous)")
entry("max_dim", lambda x: dj.max(x, 1).values, normal(*S))
entry("min_dim", lambda x: dj.min(x, 1).values, normal(*S))
entry("median", dj.median, normal(*S))
entry("nanmedian", dj.nanmedian, normal(*S))
entry("median_dim", lambda x: dj.median(x, 1).values, normal(*S))
entry("nanmedian_dim", lambda x: dj.nanmedian(x, 1).values, normal(*S))
entry("kthvalue", lambda x: dj.kthvalue(x, 2, 1).values, normal(*S))
entry("gather_along", lambda x: dj.sort(x, 1).values, normal(*S))
entry("scatter_along", vjp_of(lambda x: dj.sort(x, 1).values), lambda r: [r.standard_normal(S),
                                                                          r.standard_normal(S)])
entry("argmax", lambda x: dj.argmax(x, 1), normal(*S), order=0)
entry("argmin", lambda x: dj.argmin(x, 1), normal(*S), order=0)
entry("argsort", lambda x: dj.argsort(x, 1), normal(*S), order=0)
entry("searchsorted", lambda s, v: dj.searchsorted(s, v),
      lambda r: [np.sort(r.standard_normal(5)), r.standard_normal(4)], order=0)
entry("all", lambda x: dj.all(x, 1), lambda r: [r.uniform(size=S) > 0.3], order=0)
entry("any", lambda x: dj.any(x, 1), lambda r: [r.uniform(size=S) > 0.7], order=0)
entry("count_nonzero", lambda x: dj.count_nonzero(x, 1), lambda r: [r.integers(0, 2, S)], order=0)
entry("prod", lambda x: dj.prod(x, 1), away([0], 0.3, *S), domain="|x| > 0.3")
entry("prod_others", vjp_of(lambda x: dj.prod(x, 1)), lambda r: [
    np.array([[0.0, 1.5, -0.7], [0.8, 1.2, -1.1]]), r.standard_normal(2)], domain="with a zero")
entry("cumsum", lambda x: dj.cumsum(x, 1), normal(*S))
entry("cumprod", lambda x: dj.cumprod(x, 1), away([0], 0.3, *S), domain="|x| > 0.3")
entry("var", lambda x: dj.var(x, 1), normal(*S))
entry("vector_norm", lambda x: dj.norm(x, dim=1), normal(*S))
entry("logsumexp", lambda x: dj.logsumexp(x, 1), normal(*S))

# ---------------------------------------------------------------- linear algebra
entry("matmul", dj.matmul, two(normal(2, 3, 4), normal(4, 2)))
entry("einsum", lambda a, b: dj.einsum("bij,jk->bik", a, b), two(normal(2, 3, 4), normal(4, 2)))

# ---------------------------------------------------------------- nn
entry("linear", F.linear, cat_inputs(normal(2, 3), normal(4, 3)))
entry("linear_bias", F.linear, cat_inputs(normal(2, 5, 3), normal(4, 3), normal(4)))
entry("linear_input_grad", vjp_of(F.linear, wrt=(0,)), cat_inputs(normal(2, 5, 3), normal(4, 3), normal(2, 5, 4)))
entry("linear_weight_grad", vjp_of(F.linear, wrt=(1,)), cat_inputs(normal(2, 5, 3), normal(4, 3), normal(2, 5, 4)))
_conv = lambda x, w: F.conv2d(x, w, padding=1)  # noqa: E731
entry("convolution", _conv, two(normal(1, 2, 4, 4), normal(3, 2, 3, 3)))
entry("convolution_bias", lambda x, w, b: F.conv2d(x, w, b, padding=1),
      cat_inputs(normal(2, 2, 4, 4), normal(3, 2, 3, 3), normal(3)))
entry("convolution_input_grad", vjp_of(_conv, wrt=(0,)),
      cat_inputs(normal(1, 2, 4, 4), normal(3, 2, 3, 3), normal(1, 3, 4, 4)))
entry("convolution_weight_grad", vjp_of(_conv, wrt=(1,)),
      cat_inputs(normal(1, 2, 4, 4), normal(3, 2, 3, 3), normal(1, 3, 4, 4)))
entry("softmax", lambda x: F.softmax(x, 1), normal(*S))
entry("log_softmax", lambda x: F.log_softmax(x, 1), normal(*S))
_EMB = np.array([[0, 3], [3, 1]])
entry("embedding", lambda i, w: F.embedding(i, w), lambda r: [_EMB.copy(), r.standard_normal((4, 2))])
entry("embedding_dense_backward", vjp_of(lambda i, w: F.embedding(i, w), wrt=(1,)),
      lambda r: [_EMB.copy(), r.standard_normal((4, 2)), r.standard_normal((2, 2, 2))])
entry("one_hot", lambda i: F.one_hot(i, 4), lambda r: [_EMB.copy()], order=0)


def linearized(name, f, x_shape, out_shape, domain="normal"):
    """Entries for an op declared with ``linearized`` and its ``_backward``/``_jvp`` ops."""
    def normals(*shapes):
        return lambda r: [r.standard_normal(sh) for sh in shapes]
    entry(name, f, normals(x_shape), domain=domain)
    entry(name + "_backward", vjp_of(f), normals(x_shape, out_shape), domain=domain)
    entry(name + "_jvp", vjp_of(vjp_of(f), wrt=(1,)), normals(x_shape, out_shape, x_shape), domain=domain)


linearized("max_pool", lambda x: F.max_pool2d(x, 2), (1, 2, 4, 4), (1, 2, 2, 2), "continuous (no ties)")
linearized("pad", lambda x: F.pad(x, (1, 2), mode="reflect"), (2, 4), (2, 7))
linearized("resample", lambda x: F.avg_pool2d(x, 2), (1, 2, 4, 4), (1, 2, 2, 2))
linearized("adaptive_max_pool", lambda x: F.adaptive_max_pool2d(x, (2, 3)), (1, 2, 4, 5), (1, 2, 2, 3),
           "continuous (no ties)")
linearized("im2col", lambda x: F.unfold(x, 2), (1, 2, 4, 4), (1, 8, 9))
linearized("col2im", lambda x: F.fold(x, (3, 3), 2), (1, 8, 4), (1, 2, 3, 3))


def _pool_indices(r):
    """Valid, distinct max_pool2d(2) indices into a 4x4 plane: one position per 2x2 window."""
    i, j = np.meshgrid(np.arange(2), np.arange(2), indexing="ij")
    pick = r.integers(0, 2, (1, 2, 2, 2, 2))
    return (2 * i + pick[..., 0]) * 4 + (2 * j + pick[..., 1])


entry("max_pool_indices", lambda x: F.max_pool2d(x, 2, return_indices=True)[1], normal(1, 2, 4, 4), order=0)
entry("adaptive_max_pool_indices", lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True)[1],
      normal(1, 2, 5, 7), order=0)
_unpool = lambda x, i: F.max_unpool2d(x, i, 2)  # noqa: E731
entry("max_unpool", _unpool, lambda r: [r.standard_normal((1, 2, 2, 2)), _pool_indices(r)])
entry("max_unpool_backward", vjp_of(_unpool),
      lambda r: [r.standard_normal((1, 2, 2, 2)), _pool_indices(r), r.standard_normal((1, 2, 4, 4))])


# ---------------------------------------------------------------- batch norm (training): one op, one backward op
from dynajax.nn import _ops as _nn_ops  # noqa: E402
from dynajax.ops.registry import apply as _apply  # noqa: E402


def _bn(x, w, b):
    """The op's three outputs (normalized, batch mean, batch variance), so every cotangent is checked, in
    both layouts it computes in (channel-first eagerly, channels-last inside a whole program)."""
    return tuple(o for cl in (False, True)
                 for o in _apply(_nn_ops.batch_norm_train, x, w, b, eps=1e-5, channels_last=cl))


def _bn_vjp(x, w, b, gy, gm, gv):
    for t in (x, w, b):
        t.requires_grad_(True)
    return dj.autograd.grad(_bn(x, w, b), (x, w, b), (gy, gm, gv) * 2, create_graph=True)


_BN_IN = cat_inputs(normal(4, 3, 2, 2), normal(3), normal(3))
_BN_CT = cat_inputs(normal(4, 3, 2, 2), normal(3), normal(3))
entry("batch_norm", _bn, _BN_IN)
entry("batch_norm_running_stats",
      lambda rm, rv, m, v: dj.ops.registry.apply(dj.nn._ops.running_stats, rm, rv, m, v, 0.9, 0.1, 4 / 3),
      cat_inputs(normal(3), uniform(0.5, 2.0, 3), normal(3), uniform(0.5, 2.0, 3)), order=0)
entry("batch_norm_backward", _bn_vjp, cat_inputs(_BN_IN, _BN_CT), order=1)
entry("batch_norm_backward_backward", vjp_of(lambda *a: _bn_vjp(*a)[0], wrt=(0, 1, 3, 5)),
      cat_inputs(_BN_IN, _BN_CT, normal(4, 3, 2, 2)), order=0)


# ---------------------------------------------------------------- fused optimizer updates (no VJP)
from dynajax.optim._fused import (adadelta_update, adagrad_update, adam_update, adamax_update,  # noqa: E402
                                  nadam_update, radam_update, rmsprop_update, sgd_momentum_update)

_ADAM = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, decoupled_weight_decay=True)


def _two_params(k, extra=()):
    """Inputs of a fused update of two parameters (shapes S and (3,)): ``k`` tensors each, then ``extra``."""
    def gen(r):
        return ([r.standard_normal(S) for _ in range(k - 1)] + [r.uniform(0.1, 1.0, S)]
                + [r.standard_normal(3) for _ in range(k - 1)] + [r.uniform(0.1, 1.0, 3)] + list(extra))
    return gen


def _updated(update, items, group) -> list:
    """The values fused ``update`` writes into copies of ``items`` (each ``(p, g, *state)``): the new ``p`` and
    state of each, in order."""
    items = [tuple(t.clone() for t in item) for item in items]
    update(items, group)
    return [t for item in items for t in item[:1] + item[2:]]


def _adam2(p1, g1, m1, v1, p2, g2, m2, v2, t1, t2):
    return _updated(adam_update, [(p1, g1, m1, v1, t1), (p2, g2, m2, v2, t2)], _ADAM)


entry("adam_update", _adam2, _two_params(4, (np.array(3.0), np.array(7.0))), order=0)
_RMSPROP = dict(lr=0.01, alpha=0.9, eps=1e-8, momentum=0.9, centered=False, weight_decay=0.1)
entry("rmsprop_update",
      lambda p1, g1, b1, s1, p2, g2, b2, s2, t1, t2: _updated(rmsprop_update,
          [(p1, g1, s1, b1, t1), (p2, g2, s2, b2, t2)], _RMSPROP),
      _two_params(4, (np.array(3.0), np.array(7.0))), order=0)
entry("adagrad_update",
      lambda p1, g1, s1, p2, g2, s2, t1, t2: _updated(adagrad_update,
          [(p1, g1, s1, t1), (p2, g2, s2, t2)], dict(lr=0.1, lr_decay=0.01, eps=1e-10, weight_decay=0.01)),
      _two_params(3, (np.array(3.0), np.array(7.0))), order=0)
entry("adadelta_update",
      lambda p1, g1, s1, a1, p2, g2, s2, a2, t1, t2: _updated(adadelta_update,
          [(p1, g1, s1, a1, t1), (p2, g2, s2, a2, t2)], dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.01)),
      _two_params(4, (np.array(3.0), np.array(7.0))), order=0)
entry("adamax_update",
      lambda p1, g1, m1, u1, p2, g2, m2, u2, t1, t2: _updated(adamax_update,
          [(p1, g1, m1, u1, t1), (p2, g2, m2, u2, t2)], dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)),
      _two_params(4, (np.array(3.0), np.array(7.0))), order=0)
entry("nadam_update",
      lambda p1, g1, m1, v1, p2, g2, m2, v2, q1, q2, t1, t2: _updated(nadam_update,
          [(p1, g1, m1, v1, q1, t1), (p2, g2, m2, v2, q2, t2)], dict(_ADAM, momentum_decay=4e-3)),
      _two_params(4, (np.array(0.8), np.array(0.7), np.array(3.0), np.array(7.0))), order=0)
entry("radam_update",   # betas (0.9, 0.999): the first parameter before rectification (step 4), the second after (8)
      lambda p1, g1, m1, v1, p2, g2, m2, v2, t1, t2: _updated(radam_update,
          [(p1, g1, m1, v1, t1), (p2, g2, m2, v2, t2)], _ADAM),
      _two_params(4, (np.array(3.0), np.array(7.0))), order=0)
entry("sgd_momentum_update",
      lambda p1, g1, b1, p2, g2, b2: _updated(sgd_momentum_update,
          [(p1, g1, b1), (p2, g2, b2)], dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=True)),
      _two_params(3), order=0)


# ---------------------------------------------------------------- class-index NLL (linear in the log-probs)
def _nll_inputs(r):
    return [r.standard_normal((4, 5)), np.array([1, -100, 4, 0])]


# ---------------------------------------------------------------- binary cross-entropy (probabilities in (0, 1))
entry("binary_cross_entropy", lambda x, y: F.binary_cross_entropy(x, y, reduction="none"),
      lambda r: [r.uniform(0.1, 0.9, (3, 4)), r.uniform(0.0, 1.0, (3, 4))], domain="probabilities in (0.1, 0.9)")


entry("nll_loss_index", lambda lp, t: F.nll_loss(lp, t), _nll_inputs)
entry("nll_loss_index_backward", vjp_of(lambda lp, t: F.nll_loss(lp, t, reduction="none")),
      lambda r: _nll_inputs(r) + [r.standard_normal(4)])
entry("fill_like", lambda x: dj.ops.creation.fill_like(x, 1), normal(2, 3), order=0)
# (``fill_``/``zero_``/``bernoulli`` of a tensor that requires grad: ``v`` over ``x``, a zero gradient to ``x``)
entry("fill", lambda x, v: dj.ops.registry.apply(dj.ops.creation._overwrite, x, v) * x,
      lambda r: [r.standard_normal((2, 3)), r.standard_normal(())])
entry("full", lambda x: x * dj.ops.registry.apply(dj.ops.creation._full, shape=(2, 3), value=2.0,
                                                 dtype=dj._dtype.to_np(x.dtype)),
      normal(2, 3), order=0)
entry("arange", lambda x: x * dj.ops.registry.apply(dj.ops.creation._arange, start=0.5, step=-0.25, n=3,
                                                   dtype=dj._dtype.to_np(x.dtype)),
      normal(2, 3), order=0)
entry("eye", lambda x: x * dj.ops.registry.apply(dj.ops.creation._eye, n=2, m=3, dtype=dj._dtype.to_np(x.dtype)),
      normal(2, 3), order=0)
entry("linspace", lambda x: x * dj.ops.registry.apply(dj.ops.creation._linspace, start=-1.0, end=2.0, steps=3,
                                                     dtype=dj._dtype.to_np(x.dtype), base=2.0),
      normal(2, 3), order=0)


# ---------------------------------------------------------------- fused recurrences (one scan per layer)
from dynajax.nn._rnn_scan import run_layer  # noqa: E402

_gru = lambda gi, h, w, b: run_layer("GRU", gi, h, w, b, None, False)  # noqa: E731
_GRU_IN = cat_inputs(normal(3, 2, 6), normal(2, 2), normal(6, 2), normal(6))
entry("rnn_scan", _gru, _GRU_IN, rtol=1e-4, atol=1e-5)
entry("rnn_scan_backward", vjp_of(lambda *a: _gru(*a)[0], wrt=(0, 2)), cat_inputs(_GRU_IN, normal(3, 2, 2)),
      order=1, rtol=1e-4, atol=1e-5)
entry("rnn_scan_backward_backward", vjp_of(vjp_of(lambda *a: _gru(*a)[0], wrt=(2,)), wrt=(4,)),
      cat_inputs(_GRU_IN, normal(3, 2, 2), normal(6, 2)), order=0, rtol=1e-4, atol=1e-5)
_MASK = np.array([[[True], [True]], [[True], [False]], [[False], [False]]])
_lstm = lambda gi, h, c, w, b: run_layer("LSTM", gi, (h, c), w, b, dj.tensor(_MASK), True)  # noqa: E731
_LSTM_IN = cat_inputs(normal(3, 2, 8), normal(2, 2), normal(2, 2), normal(8, 2), normal(8))
entry("lstm_scan", lambda *a: (lambda r: (r[0], *r[1]))(_lstm(*a)), _LSTM_IN, rtol=1e-4, atol=1e-5)
entry("lstm_scan_backward", vjp_of(lambda *a: _lstm(*a)[1][1], wrt=(0, 3)), cat_inputs(_LSTM_IN, normal(2, 2)),
      order=1, rtol=1e-4, atol=1e-5)
entry("lstm_scan_backward_backward", vjp_of(vjp_of(lambda *a: _lstm(*a)[0], wrt=(3,)), wrt=(5,)),
      cat_inputs(_LSTM_IN, normal(3, 2, 2), normal(8, 2)), order=0, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- fused cell steps (one op per step)
from dynajax.nn._rnn_scan import cell_step  # noqa: E402

_gru_cell = lambda x, h, wi, wh, bi, bh: cell_step("GRU", x, h, wi, wh, bi, bh)  # noqa: E731
_GRU_CELL_IN = cat_inputs(normal(2, 3), normal(2, 2), normal(6, 3), normal(6, 2), normal(6), normal(6))
entry("rnn_cell", _gru_cell, _GRU_CELL_IN, rtol=1e-4, atol=1e-5)
entry("rnn_cell_backward", vjp_of(_gru_cell, wrt=(0, 1, 2, 3)), cat_inputs(_GRU_CELL_IN, normal(2, 2)),
      order=1, rtol=1e-4, atol=1e-5)
entry("rnn_cell_backward_backward", vjp_of(vjp_of(_gru_cell, wrt=(3,)), wrt=(6,)),
      cat_inputs(_GRU_CELL_IN, normal(2, 2), normal(6, 2)), order=0, rtol=1e-4, atol=1e-5)
_lstm_cell = lambda x, h, c, wi, wh, bi, bh: cell_step("LSTM", x, (h, c), wi, wh, bi, bh)  # noqa: E731
_LSTM_CELL_IN = cat_inputs(normal(2, 3), normal(2, 2), normal(2, 2), normal(8, 3), normal(8, 2), normal(8),
                           normal(8))
entry("lstm_cell", _lstm_cell, _LSTM_CELL_IN, rtol=1e-4, atol=1e-5)
entry("lstm_cell_backward", vjp_of(lambda *a: _lstm_cell(*a)[1], wrt=(0, 2, 3, 4)),
      cat_inputs(_LSTM_CELL_IN, normal(2, 2)), order=1, rtol=1e-4, atol=1e-5)
entry("lstm_cell_backward_backward", vjp_of(vjp_of(lambda *a: _lstm_cell(*a)[0], wrt=(4,)), wrt=(7,)),
      cat_inputs(_LSTM_CELL_IN, normal(2, 2), normal(8, 2)), order=0, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- issue 37: more elementwise ops, scans, stats
entry("acosh", lambda x: dj.acosh(x), uniform(1.3, 3, *S), domain="(1.3, 3)")
entry("sinc", lambda x: dj.sinc(x), away([0], 0.3, *S), domain="|x| > 0.3")
entry("signbit", lambda x: dj.signbit(x), normal(*S), order=0)
entry("logit", lambda x: dj.logit(x), uniform(0.2, 0.8, *S), domain="(0.2, 0.8)")
entry("xlogy", lambda x, y: dj.xlogy(x, y), cat_inputs(normal(*S), uniform(0.3, 3, *S)), domain="y in (0.3, 3)")
entry("copysign", lambda x, y: dj.copysign(x, y), cat_inputs(away([0], 0.2, *S), away([0], 0.2, *S)),
      domain="|x|, |y| > 0.2")
entry("fmax", lambda x, y: dj.fmax(x, y), cat_inputs(normal(*S), normal(*S)))
entry("fmin", lambda x, y: dj.fmin(x, y), cat_inputs(normal(*S), normal(*S)))
entry("cummax", lambda x: dj.cummax(x, 1).values, normal(*S))
entry("cummin", lambda x: dj.cummin(x, 0).values, normal(*S))
entry("logcumsumexp", lambda x: dj.logcumsumexp(x, 1), normal(*S), rtol=1e-5, atol=1e-6)
entry("isclose", lambda x, y: dj.isclose(x, y, atol=0.5), cat_inputs(normal(*S), normal(*S)), order=0)
entry("mode", lambda x: dj.mode(x, 1).values, normal(*S))   # (distinct values: the smallest of each row)
_nuc = lambda x: dj.norm(x, p="nuc")  # noqa: E731
entry("nuclear_norm", _nuc, normal(3, 2), rtol=1e-5, atol=1e-6)
entry("nuclear_norm_grad", vjp_of(_nuc), cat_inputs(normal(3, 2), normal()), order=1, rtol=1e-5, atol=1e-6)
entry("nuclear_norm_grad_backward", vjp_of(vjp_of(_nuc)), cat_inputs(normal(3, 2), normal(), normal(3, 2)),
      order=0, rtol=1e-5, atol=1e-6)
_ctc = lambda lp, tg: F.ctc_loss(lp.log_softmax(2), tg, [4, 3], [2, 1], reduction="none")  # noqa: E731
_CTC_IN = cat_inputs(normal(4, 2, 3), const([[1, 2], [2, 0]]))
entry("ctc_loss", _ctc, _CTC_IN, order=1, rtol=1e-5, atol=1e-6)
entry("ctc_loss_backward", vjp_of(_ctc), cat_inputs(_CTC_IN, normal(2)), order=0, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- issue 37: torch.linalg factorizations (ops/decomp.py)
def _well_conditioned(*shape):
    """Random matrices plus 3 I (invertible, away from repeated singular values)."""
    return lambda r: [r.standard_normal(shape) + 3 * np.eye(shape[-1])]


entry("linalg_inv_ex", lambda a: dj.linalg.inv(a), _well_conditioned(2, 3, 3))
entry("linalg_solve_ex", lambda a, b: dj.linalg.solve(a, b), cat_inputs(_well_conditioned(3, 3), normal(3, 2)))
entry("linalg_solve_triangular", lambda a, b: dj.linalg.solve_triangular(a, b, upper=True),
      cat_inputs(_well_conditioned(3, 3), normal(3, 2)))
entry("linalg_cholesky_ex", lambda a: dj.linalg.cholesky(a @ a.mT), _well_conditioned(3, 3))
entry("linalg_det", lambda a: dj.linalg.det(a), _well_conditioned(3, 3))
entry("linalg_slogdet", lambda a: dj.linalg.slogdet(a).logabsdet, _well_conditioned(3, 3))
entry("linalg_eigh", lambda a: dj.linalg.eigh(a + a.mT), normal(3, 3))
entry("linalg_svd", lambda a: dj.linalg.svd(a, full_matrices=False), normal(4, 3))
entry("linalg_qr", lambda a: dj.linalg.qr(a), normal(4, 3))
entry("linalg_lu_factor_ex", lambda a: dj.linalg.lu_factor(a).LU, normal(4, 4))
entry("lu_permutation", lambda a: dj.linalg.lu(a).P, normal(3, 3), order=0)
entry("linalg_pinv", lambda a: dj.linalg.pinv(a), normal(3, 4))
entry("linalg_matrix_exp", lambda a: dj.linalg.matrix_exp(a), lambda r: [0.5 * r.standard_normal((3, 3))], order=1)


# ---------------------------------------------------------------- issue 37: complex numbers, FFT, torch.special
# complex values enter and leave through view_as_complex/view_as_real, so the gradient checks run on real numbers
def _c(x):
    return dj.view_as_complex(x)


entry("view_as_complex", lambda x: dj.real(_c(x) * _c(x)), normal(3, 2))
entry("view_as_real", lambda a, b: dj.view_as_real(dj.complex(a, b) * dj.complex(b, a)), two(normal(3), normal(3)))
entry("complex", lambda a, b: dj.view_as_real(dj.complex(a, b)), two(normal(3), normal(3)))
entry("real", lambda x: dj.real(_c(x)) * 2, normal(3, 2))
entry("imag", lambda x: dj.imag(_c(x)) * 2, normal(3, 2))
entry("angle", lambda x: dj.angle(_c(x)), lambda r: [r.standard_normal((4, 2)) + np.array([2.0, 0.0])])
entry("fft_c2c", lambda x: dj.view_as_real(dj.fft.fft(_c(x))), normal(2, 4, 2))
entry("fft_r2c", lambda x: dj.view_as_real(dj.fft.rfft(x)), normal(2, 6))
entry("fft_resize", lambda x: dj.view_as_real(dj.fft.rfft(x, n=8)), normal(5))
_irfft = lambda x: dj.fft.irfft(_c(x), n=6)  # noqa: E731
entry("fft_c2r", _irfft, normal(4, 2))
entry("fft_twice_mirrored", vjp_of(_irfft), cat_inputs(normal(4, 2), normal(6)), order=1)
for _n, _gen, _order in [
    ("entr", uniform(0.2, 3, *S), 2), ("erfcx", normal(*S), 2), ("i0", normal(*S), 2), ("i0e", away([0], 0.2, *S), 2),
    ("i1", normal(*S), 2), ("i1e", away([0], 0.2, *S), 2), ("log_ndtr", normal(*S), 2), ("ndtr", normal(*S), 2),
    ("ndtri", uniform(0.1, 0.9, *S), 2), ("modified_bessel_i0", normal(*S), 0),
    ("modified_bessel_i1", normal(*S), 0), ("spherical_bessel_j0", normal(*S), 0),
]:
    entry(_n, getattr(dj.special, _n), _gen, order=_order)
# gradients with respect to the first argument are not defined (as in PyTorch): it is a constant here
entry("special_gammainc", lambda x: dj.special.gammainc(dj.tensor(1.5, dtype=x.dtype), x), uniform(0.3, 3, *S))
entry("special_gammaincc", lambda x: dj.special.gammaincc(dj.tensor(1.5, dtype=x.dtype), x), uniform(0.3, 3, *S))
entry("special_zeta", lambda q: dj.special.zeta(dj.tensor(2.5, dtype=q.dtype), q), uniform(0.5, 2, *S))
entry("special_xlog1py", dj.special.xlog1py, two(normal(*S), uniform(-0.5, 3, *S)))
