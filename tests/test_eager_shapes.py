"""Eager ops on sizes that keep changing (issue 33): a new leading size runs on a bucket's kernel (inputs
padded, result sliced back) and the bucket kernels persist on disk. Checked here: the bucketed results and
gradients equal PyTorch's on sizes that are not bucket sizes, a run of new sizes compiles only the buckets'
kernels, a shape that keeps coming settles on its own kernel, and a second process loads the kernels the
first one stored instead of compiling them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn.functional as F
from dynajax import _kernel_cache as kc
from helpers import XLA_CPU_ONLY, assert_close, compare, to_dj, to_np, torch, xla_compiles

pytestmark = [XLA_CPU_ONLY, pytest.mark.skipif(torch is None, reason="PyTorch oracle not installed")]

ODD = (5, 37)   # none of them a bucket size: every call below pads


@pytest.fixture(autouse=True)
def _store(tmp_path):
    before = kc.kernel_dir()
    kc.set_kernel_dir(tmp_path / "kernels")
    yield
    kc.set_kernel_dir(before)


def _bucketed(fn):
    """``fn()`` and how many calls it ran on a bucket's kernel."""
    n0 = kc.stats["bucketed_calls"]
    out = fn()
    return out, kc.stats["bucketed_calls"] - n0


def test_buckets_are_powers_of_two():
    assert [kc.bucket(n) for n in (1, 2, 3, 5, 7, 9, 13, 16, 17, 25, 37, 50, 200)] == \
        [1, 2, 4, 8, 8, 16, 16, 16, 32, 32, 64, 64, 256]
    assert kc.BUCKETS[0] == 1 and all(b2 == 2 * b1 for b1, b2 in zip(kc.BUCKETS, kc.BUCKETS[1:]))


@pytest.mark.parametrize("n", ODD)
def test_mlp_values_and_grads_on_odd_batch_sizes(n):
    rng = np.random.default_rng(n)
    x, w1, b1 = rng.standard_normal((n, 6)), rng.standard_normal((5, 6)) * 0.4, rng.standard_normal(5) * 0.4
    w2, b2 = rng.standard_normal((3, 5)) * 0.4, rng.standard_normal(3) * 0.4
    y = rng.integers(0, 3, n)
    y[0] = -100   # an ignored row, so the true count differs from n

    def fn(lib, reduction):
        def f(x, w1, b1, w2, b2):
            h = lib.nn.functional.linear(x, w1, b1).relu()
            logits = lib.nn.functional.linear(h, w2, b2)
            t = lib.tensor(y) if lib is dj else torch.from_numpy(y)
            return lib.nn.functional.cross_entropy(logits, t, reduction=reduction, ignore_index=-100), \
                logits.log_softmax(-1), h.sum(0), (h * 0.5 - 1).exp()
        return f
    args = [a.astype(np.float32) for a in (x, w1, b1, w2, b2)]
    for reduction in ("mean", "sum", "none"):
        _, calls = _bucketed(lambda: compare(fn(dj, reduction), fn(torch, reduction), *args,
                                                  rtol=1e-5, atol=1e-5))
        assert calls > 0


@pytest.mark.parametrize("n", (5, 13))
def test_broadcasting_elementwise_where_and_reductions(n):
    rng = np.random.default_rng(n)
    a, row, col = (rng.standard_normal(s).astype(np.float32) for s in ((n, 4), (1, 4), (4,)))

    def f(lib):
        def g(a, row, col):
            m = a > 0
            return (lib.where(m, a * row, col) + a.tanh() / (1 + col.abs()), a.sum(1, keepdim=True),
                    a.sum((0, 1)), lib.maximum(a, row))
        return g
    _, calls = _bucketed(lambda: compare(f(dj), f(torch), a, row, col))
    assert calls > 0


@pytest.mark.parametrize("T", (11, 13))
def test_gru_cell_loop_lm_on_odd_lengths(T):
    """Embedding, unbind and stack over a length that is no bucket size, reshapes merging and splitting
    the length with the batch, a linear head, cross-entropy: loss and every parameter's gradient."""
    rng = np.random.default_rng(T)
    V, E, H, B = 11, 4, 5, 3
    tok, tgt = rng.integers(0, V, (T, B)), rng.integers(0, V, (T, B))
    shapes = [(V, E), (3 * H, E), (3 * H, H), (3 * H,), (3 * H,), (V, H), (V,)]
    init = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]

    def loss(lib, ps):
        emb, wih, whh, bih, bhh, hw, hb = ps
        x = lib.nn.functional.embedding(lib.tensor(tok), emb)
        h, hs = lib.zeros(B, H), []
        for xt in x.unbind(0):
            gi, gh = xt @ wih.T + bih, h @ whh.T + bhh
            r, z = (gi[:, :H] + gh[:, :H]).sigmoid(), (gi[:, H:2 * H] + gh[:, H:2 * H]).sigmoid()
            h = (1 - z) * (gi[:, 2 * H:] + r * gh[:, 2 * H:]).tanh() + z * h
            hs.append(h)
        logits = lib.nn.functional.linear(lib.stack(hs), hw, hb).reshape(-1, V)
        per = lib.nn.functional.cross_entropy(logits, lib.tensor(tgt).reshape(-1), reduction="none")
        return per.reshape(T, B).mean()
    pd = [to_dj(a, True) for a in init]
    pt = [torch.from_numpy(a).requires_grad_() for a in init]
    ld, calls = _bucketed(lambda: loss(dj, pd))
    assert calls > 0
    lt = loss(torch, pt)
    assert_close(ld, lt)
    ld.backward()
    lt.backward()
    for a, e in zip(pd, pt):
        assert_close(a.grad, e.grad, rtol=1e-5, atol=1e-6)


def test_a_chain_of_bucketed_ops_keeps_its_results_padded_until_read():
    """Between bucketed ops a result stays padded (a ``Rows``, no host slice and no wait); its pad rows hold
    what the kernels made of the pads (here NaN: log of a negative number), and a sum over the rows, a
    weight gradient and a mean cross-entropy still add none of them. Any other read (``.numpy()``, an op
    with no bucketed form, an in-place write) sees the exact value."""
    from dynajax._rows import Rows
    n = 37
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2.0, (n, 6)).astype(np.float32)
    w = (rng.standard_normal((4, 6)) * 0.5).astype(np.float32)
    y = rng.integers(0, 4, n)

    def f(lib, x, w):
        h = (x - 0.25).log()                 # pad rows: log(-0.25), NaN
        z = lib.nn.functional.linear(h, w)
        return h, z, h.sum(0), lib.nn.functional.cross_entropy(z, lib.tensor(y) if lib is dj else torch.from_numpy(y))

    xd, wd = to_dj(x, True), to_dj(w, True)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    masked = kc.stats["masked"]
    (h, z, hs, loss), calls = _bucketed(lambda: f(dj, xd, wd))
    ht, zt, hst, losst = f(torch, xt, wt)
    assert calls >= 4
    assert type(h._v) is Rows and type(z._v) is Rows and h._v.full.shape[0] == 64
    assert np.isnan(np.asarray(h._v.full)[n:]).all()     # the pads' own values, never read as values
    assert h.shape == (n, 6) and z.dtype == dj.float32 and h.ndim == 2 and h.numel() == n * 6
    (loss + hs.sum()).backward()
    (losst + hst.sum()).backward()
    assert kc.stats["masked"] > masked          # the sums over rows zeroed the pad rows first
    assert_close(hs, hst, rtol=1e-5, atol=1e-5)
    assert_close(loss, losst, rtol=1e-5, atol=1e-6)
    assert_close(xd.grad, xt.grad, rtol=1e-5, atol=1e-6)
    assert_close(wd.grad, wt.grad, rtol=1e-5, atol=1e-5)
    assert type(z._v) is Rows
    np.testing.assert_allclose(z.detach().numpy(), zt.detach().numpy(), rtol=1e-5, atol=1e-5)   # an exact read
    assert type(z._v) is not Rows and z._v.shape == (n, 4)
    assert_close(h.detach().cumsum(0), ht.detach().cumsum(0), rtol=1e-5, atol=1e-5)   # an op with no bucketed form
    g = h.detach() * 2
    assert type(g._v) is Rows
    g.add_(1)                                     # an in-place write on a padded result
    assert_close(g, ht.detach() * 2 + 1, rtol=1e-5, atol=1e-5)


def test_a_padded_result_enters_a_compiled_step_exact():
    from dynajax._rows import Rows
    n = 13
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    h = to_dj(x).exp()
    assert type(h._v) is Rows

    @dj.compile
    def step(h):
        return (h * h).sum(0)
    np.testing.assert_allclose(np.asarray(step(h)), (np.exp(x) ** 2).sum(0), rtol=1e-5)


def test_new_sizes_compile_only_the_bucket_kernels(monkeypatch):
    """Sizes 9..16 share bucket 16: after the first of them, the others compile nothing. (From a clean
    start: calls counted by earlier tests in the process could make a shape settle on its own kernel here,
    and the memory-mapping check could drop every kernel in the middle: both made this flaky.)"""
    from dynajax import _device
    from dynajax.ops.registry import clear_kernels
    monkeypatch.setattr(_device, "MAPS_CHECK_EVERY", 1 << 40)
    clear_kernels()
    rng = np.random.default_rng(0)
    w = to_dj(rng.standard_normal((3, 4)).astype(np.float32), True)
    outs = {}

    def step(n):
        x = to_dj(rng.standard_normal((n, 4)).astype(np.float32))
        y = (F.linear(x, w).relu() * 3).sum(0).sum()
        y.backward()
        outs[n] = (to_np(y), to_np(w.grad))
        w.grad = None
    step(9)
    c0, b0 = xla_compiles(), kc.stats["bucketed_calls"]
    for n in (10, 11):
        step(n)
    assert xla_compiles() == c0
    assert kc.stats["bucketed_calls"] > b0


@pytest.mark.parametrize("n", ODD)
def test_unbind_and_stack_of_a_new_length_compile_no_kernel(n):
    """A kernel for unbind or stack has one output or input per row (an unbind into 64 rows took ~250 ms to
    compile): on a new length they run on the host, equal to PyTorch's, and compile nothing."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, 3, 2)).astype(np.float32)
    x = to_dj(a)
    c0 = xla_compiles()
    rows = x.unbind(0)
    back = dj.stack(list(rows))
    assert xla_compiles() == c0
    want = torch.from_numpy(a).unbind(0)
    assert len(rows) == n
    for r, w in zip(rows, want):
        assert_close(r, w)
    assert_close(back, torch.stack(want))


def test_a_shape_that_keeps_coming_settles_on_its_own_kernel():
    x = dj.tensor(np.linspace(-2, 2, 7 * 3, dtype=np.float32).reshape(7, 3))
    first = to_np(x.sigmoid())
    b0 = kc.stats["bucketed_calls"]
    for _ in range(kc.SETTLE + 3):
        out = x.sigmoid()
    assert kc.stats["bucketed_calls"] - b0 == kc.SETTLE - 1   # the first call above was one of SETTLE
    np.testing.assert_array_equal(to_np(out), first)
    np.testing.assert_allclose(first, to_np(torch.from_numpy(to_np(x)).sigmoid()), rtol=1e-6)


_SCRIPT = textwrap.dedent("""
    import sys, json
    sys.path.insert(0, {tests!r})
    from helpers import xla_compiles
    import numpy as np
    import dynajax as dj
    from dynajax import _kernel_cache as kc
    rng = np.random.default_rng(0)
    w = dj.tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    vals = []
    for n in (5, 7, 13):
        x = dj.tensor(rng.standard_normal((n, 6)).astype(np.float32))
        loss = dj.nn.functional.linear(x, w).tanh().log_softmax(-1).sum(0).sum()
        loss.backward()
        vals.append([float(loss), w.grad.numpy().tolist()])
        w.grad = None
    c0 = xla_compiles()
    dj.manual_seed(0)   # a model's random initialisation and an optimizer's fused update: kernels from the store
    lin = dj.nn.Linear(6, 3)
    opt = dj.optim.Adam(lin.parameters(), lr=0.1)
    for n in (6, 6):
        opt.zero_grad()
        x = dj.tensor(rng.standard_normal((n, 6)).astype(np.float32))
        lin(x).square().sum().backward()
        opt.step()
    vals.append(lin.weight.detach().numpy().tolist())
    c1 = xla_compiles()
    x = dj.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    for _ in range(kc.SETTLE + 2):   # a shape that keeps coming: its ops' own exact kernels, from the store too
        out = (x * 2).tanh().sum(0)
    vals.append(out.numpy().tolist())
    print(json.dumps({{"compiles": xla_compiles(), "model_compiles": c1 - c0, "settled_compiles": xla_compiles() - c1,
                      "stats": kc.stats, "vals": vals}}))
""")


@pytest.mark.parametrize("variable", ["DYNAJAX_KERNEL_CACHE", "DYNAJAX_COMPILE_CACHE"])
def test_a_second_process_loads_the_kernels_the_first_stored(tmp_path, variable):
    """The kernel store's own folder, or (by default) one inside the compile cache's."""
    import json
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAJAX_KERNEL_CACHE", "DYNAJAX_COMPILE_CACHE")}
    env[variable] = str(tmp_path / "store")
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["stats"]["kernels_compiled"] > 0 and first["stats"]["kernels_loaded"] == 0
    assert second["stats"]["kernels_compiled"] == 0
    assert second["stats"]["kernels_loaded"] == first["stats"]["kernels_compiled"]
    assert second["compiles"] <= first["compiles"] - first["stats"]["kernels_compiled"]
    assert first["model_compiles"] >= 3 and second["model_compiles"] <= 1   # (at most the loss's scalar kernels)
    assert first["stats"]["settled_shapes"] >= 3 and second["stats"]["settled_shapes"] == first["stats"]["settled_shapes"]
    assert first["settled_compiles"] >= 3 and second["settled_compiles"] == 0
    assert second["vals"] == first["vals"]
    if variable == "DYNAJAX_COMPILE_CACHE":
        assert len(os.listdir(tmp_path / "store" / "dynajax-kernels")) == first["stats"]["kernels_compiled"]


def test_eager_kernels_are_dropped_near_the_memory_mapping_limit(monkeypatch):
    """Every MAPS_CHECK_EVERY eager compiles the process's memory mappings are counted; past MAPS_SHARE of
    vm.max_map_count the next eager op drops every eager kernel (XLA crashes past the limit), and ops go on
    computing the same values with kernels compiled again."""
    from dynajax import _device
    from dynajax.ops import registry
    if _device.mappings() is None:
        pytest.skip("no /proc/self/maps on this system: the bound is off")
    cleared = []
    real = registry.clear_kernels
    monkeypatch.setattr(registry, "clear_kernels", lambda: cleared.append(1) or real())
    monkeypatch.setattr(_device, "MAPS_CHECK_EVERY", 1)
    monkeypatch.setattr(_device, "MAPS_SHARE", 1e-9)   # any count is past it
    x = np.linspace(-2, 2, 7 * 13, dtype=np.float32).reshape(7, 13)   # a shape no other test compiles for
    got = (dj.tensor(x).exp() * 3).sum(1)                     # compiles: the bound trips
    assert _device.KERNELS_FULL[0] or cleared
    again = (dj.tensor(x).exp() * 3).sum(1)                   # the next eager op drops the kernels first
    assert cleared and not _device.KERNELS_FULL[0]
    want = (np.exp(x.astype(np.float64)) * 3).sum(1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(again.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16", "int64", "float64", "complex64"])
@pytest.mark.parametrize("x64", [False, True])
def test_host_put_makes_what_device_put_makes(dtype, x64):
    """``_device.host_put`` (the padded and sliced arrays of bucketed eager ops, ``tensor()`` of host data)
    skips ``jax.device_put``'s Python path: the same array, dtype (narrowed as device_put narrows it with
    JAX's 64-bit types off), placement and commitment, and values, before and after the numpy array it was
    made from changes (whether or not device_put copied it, host_put does the same)."""
    import contextlib

    import jax
    from dynajax._device import host_put
    from dynajax._dtype import x64 as in_x64

    a = (np.arange(24).reshape(4, 6) % 5).astype(dtype)
    view = a[1:3]
    with (in_x64() if x64 else contextlib.nullcontext()):
        got, want = host_put(view), jax.device_put(view)
    assert type(got) is type(want)
    assert (got.shape, got.dtype, got.committed, got.sharding) == (want.shape, want.dtype, want.committed,
                                                                    want.sharding)
    np.testing.assert_array_equal(np.asarray(got), view.astype(want.dtype))
    a[:] = 0
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
