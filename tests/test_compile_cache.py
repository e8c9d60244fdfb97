"""dynajax.set_compile_cache: compiled executables kept on disk and loaded, not recompiled, by a later
compile of the same program (a new process, or this one after its in-memory caches are cleared)."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import train_step

RNG = np.random.default_rng(3)
X = RNG.standard_normal((12, 7)).astype(np.float32)
Y = RNG.integers(0, 5, 12)


@pytest.fixture
def cache_dir(tmp_path):
    """A fresh cache folder for the test; the cache is off again afterwards."""
    yield tmp_path / "xla"
    dj.set_compile_cache(None)


def _run(compiled: bool, steps: int = 4):
    """Losses and final parameters of ``steps`` Adam steps on a small MLP built from seed 0."""
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(7, 11), nn.Tanh(), nn.Linear(11, 5))
    step = train_step(model, dj.optim.Adam(model.parameters(), lr=1e-2), F.cross_entropy)
    if compiled:
        step = dj.compile(step)
    x, y = dj.tensor(X), dj.tensor(Y)
    losses = [step(x, y).item() for _ in range(steps)]
    return losses, [p.detach().numpy() for p in model.parameters()], step


def test_a_step_compiled_before_is_loaded_from_the_cache(cache_dir):
    dj.set_compile_cache(cache_dir)
    assert dj.compile_cache_dir() == str(cache_dir)
    first = _run(compiled=True)
    assert first[2].stats.compiles == 1 and first[2].stats.cache_loads == 0
    assert len(os.listdir(cache_dir)) > 0
    jax.clear_caches()      # as in a new process: only the disk cache remains
    second = _run(compiled=True)
    assert second[2].stats.compiles == 1 and second[2].stats.cache_loads == 1
    assert second[0] == first[0]
    for a, b in zip(first[1], second[1]):
        np.testing.assert_array_equal(a, b)
    eager = _run(compiled=False)   # and the loaded executable computes what the step computes eagerly
    np.testing.assert_allclose(second[0], eager[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(second[1], eager[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_switched_off_the_cache_writes_nothing(cache_dir):
    dj.set_compile_cache(cache_dir)
    dj.set_compile_cache(None)
    assert dj.compile_cache_dir() is None
    f = dj.compile(lambda a: (a * 3.5).tanh().sum())
    np.testing.assert_allclose(f(dj.tensor(X[:5])).item(), np.tanh(X[:5] * 3.5).sum(), rtol=1e-5)
    assert not cache_dir.exists() or os.listdir(cache_dir) == []
    assert f.stats.cache_loads == 0


def test_bad_arguments_raise_and_change_nothing(cache_dir, tmp_path):
    dj.set_compile_cache(cache_dir)
    a_file = tmp_path / "not_a_folder"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="not_a_folder"):
        dj.set_compile_cache(a_file)
    with pytest.raises(ValueError, match="max_bytes"):
        dj.set_compile_cache(tmp_path / "other", max_bytes=-5)
    assert dj.compile_cache_dir() == str(cache_dir)
    assert not (tmp_path / "other").exists()


def test_the_environment_variable_turns_the_cache_on_at_import(tmp_path):
    env = dict(os.environ, DYNAJAX_COMPILE_CACHE=str(tmp_path / "env_cache"))
    out = subprocess.run([sys.executable, "-c", "import dynajax; print(dynajax.compile_cache_dir())"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path / "env_cache")
    assert (tmp_path / "env_cache").is_dir()


def test_a_verified_first_call_counts_its_compile_once(cache_dir):
    dj.set_compile_cache(cache_dir)
    w = dj.tensor(X[:3, :4], requires_grad=True)
    f = dj.compile(lambda a: (a * w).tanh().sum(), verify=True)
    got = f(dj.tensor(X[:3, :4])).item()
    np.testing.assert_allclose(got, np.tanh(X[:3, :4] ** 2).sum(), rtol=1e-5)
    assert 0 < f.stats.compile_time < 60 and f.stats.cache_loads == 0 and f.stats.compiles == 1


# ---------------------------------------------------------------- the recorded ops' shapes kept with the cache
def _modules():
    import importlib
    return importlib.import_module("dynajax.compile.capture"), importlib.import_module("dynajax.compile.cache")


def _as_a_new_process():
    """Forget the op shapes this process inferred or read (a new process has none in memory)."""
    capture, disk = _modules()
    capture._SHAPES.clear()
    disk._SHAPE_STORE.clear()
    disk._SHAPES_NEW.clear()


def test_a_later_recording_reads_its_ops_shapes_from_the_cache(cache_dir, monkeypatch):
    capture, disk = _modules()
    dj.set_compile_cache(cache_dir)
    _as_a_new_process()
    first = _run(compiled=True)
    assert [f for f in os.listdir(cache_dir) if f.startswith("dynajax-shapes-")] == \
        [f"dynajax-shapes-{disk._source()}.pkl"]
    _as_a_new_process()
    inferred = []
    monkeypatch.setattr(disk, "note_shape", lambda *a: inferred.append(a))   # called after each inference
    loaded = disk.shape_stats["loaded"]
    second = _run(compiled=True)
    assert inferred == [] and disk.shape_stats["loaded"] > loaded
    assert second[0] == first[0]
    for a, b in zip(first[1], second[1]):
        np.testing.assert_array_equal(a, b)


def test_a_torn_shapes_file_is_ignored_and_written_again(cache_dir):
    _, disk = _modules()
    dj.set_compile_cache(cache_dir)
    path = cache_dir / f"dynajax-shapes-{disk._source()}.pkl"
    path.write_bytes(b"not a pickle")
    _as_a_new_process()
    got, eager = _run(compiled=True), _run(compiled=False)
    np.testing.assert_allclose(got[0], eager[0], rtol=1e-5, atol=1e-6)
    import pickle
    assert len(pickle.loads(path.read_bytes())) > 0


def test_shapes_are_kept_only_under_names_every_process_shares():
    _, disk = _modules()
    from dynajax.ops.index import _index_impl
    f32 = (((3, 4), np.dtype("float32")),)
    basic = (("basic", ((None, None, None), 0)), ("dims", ()), ("in_shape", (3, 4)))
    assert disk._shape_key(_index_impl, basic, f32) is not None
    assert disk._shape_key(lambda x: x, (), f32) is None                          # no name outside this process
    assert disk._shape_key(_index_impl, (("basic", object()),), f32) is None      # a param without a stable repr
    from dynajax.ops.registry import OPS
    assert disk._shape_key(OPS["add"].impl, (("dtype", np.dtype("float32")),), f32 + f32) is not None


# ---------------------------------------------------------------- compiled steps kept under their recording
def test_a_later_process_loads_the_step_without_tracing_it(cache_dir, monkeypatch):
    """With the cache on, a compiled step is kept under a key made from its recording
    (``compile.cache.executable_key``); a later recording of the same step loads it without JAX tracing
    and lowering it, and trains as the first did (and as eager does)."""
    import jax
    _, disk = _modules()
    dj.set_compile_cache(cache_dir)
    _as_a_new_process()
    written = disk.exe_stats["written"]
    first = _run(compiled=True)
    assert disk.exe_stats["written"] == written + 1
    assert len([f for f in os.listdir(cache_dir) if f.startswith(f"dynajax-step-{disk._source()}-")]) == 1
    _as_a_new_process()
    jax.clear_caches()
    lowered = []
    real = jax.jit

    def watched_jit(*a, **k):   # (every jit made from here on: none of the step's is lowered)
        j = real(*a, **k)
        lowered_lower = j.lower
        j.lower = lambda *x, **y: lowered.append(1) or lowered_lower(*x, **y)
        return j
    monkeypatch.setattr(jax, "jit", watched_jit)
    loaded = disk.exe_stats["loaded"]
    second = _run(compiled=True)
    monkeypatch.undo()
    assert disk.exe_stats["loaded"] == loaded + 1 and disk.exe_stats["written"] == written + 1
    assert second[2].stats.cache_loads == 1 and lowered == []
    assert second[0] == first[0]
    for a, b in zip(first[1], second[1]):
        np.testing.assert_array_equal(a, b)
    eager = _run(compiled=False)
    np.testing.assert_allclose(second[0], eager[0], rtol=1e-5, atol=1e-6)


def test_a_torn_step_file_is_compiled_again(cache_dir):
    _, disk = _modules()
    dj.set_compile_cache(cache_dir)
    _as_a_new_process()
    first = _run(compiled=True)
    (path,) = [cache_dir / f for f in os.listdir(cache_dir) if f.startswith("dynajax-step-")]
    path.write_bytes(b"torn")
    _as_a_new_process()
    loaded = disk.exe_stats["loaded"]
    second = _run(compiled=True)
    # (compiled again, not loaded from JAX's cache, which does not keep what the store keeps; written again)
    assert disk.exe_stats["loaded"] == loaded and second[0] == first[0] and second[2].stats.cache_loads == 0
    import pickle
    assert pickle.loads(path.read_bytes())[0] is not None


def test_only_recordings_every_process_names_alike_are_kept():
    _, disk = _modules()
    assert disk._stable((1, 2.0, -0.0, "a", None, (np.float32(1.5),))) != disk._stable((1, 2.0, 0.0, "a", None,
                                                                                         (np.float32(1.5),)))
    assert disk._stable(np.arange(3)) != disk._stable(np.arange(3) + 1)
    assert disk._stable(dj.nn.functional.relu) == disk._stable(dj.nn.functional.relu)
    for unnamed in (lambda x: x, object(), np.add):
        with pytest.raises(disk._Unnamed):
            disk._stable({"fn": unnamed})


def test_only_executables_this_process_compiled_are_written(cache_dir, tmp_path):
    """An executable JAX's persistent cache supplied is not written to dynajax's stores: XLA:CPU serialized
    such an executable without some of its kernels' code, and a later process that loaded it failed at its
    first call ("Function wrapped_reduce not found"). What this process compiled is written, and another
    process loads and runs it."""
    import jax.numpy as jnp
    from dynajax import _exe_store
    dj.set_compile_cache(cache_dir)
    w = RNG.standard_normal((7, 5)).astype(np.float32)

    def lowered():
        return jax.jit(lambda w, x: (jnp.tanh(x @ w) * 2.5 + x.sum()).max(axis=0)).lower(w, X)
    compiled, fresh = _exe_store.compile_fresh(lowered())
    assert fresh
    jax.clear_caches()
    compiled, fresh = _exe_store.compile_fresh(lowered())
    assert fresh   # (JAX's cache did not keep it: the store does)
    lowered().compile()   # (compiled outside a store: JAX's cache keeps it)
    jax.clear_caches()
    again, fresh_again = _exe_store.compile_fresh(lowered())
    assert not fresh_again   # (from JAX's cache: not to be written)
    expected = (np.tanh(X @ w) * 2.5 + X.sum()).max(axis=0)
    np.testing.assert_allclose(np.asarray(again(w, X)), expected, rtol=1e-5)
    path = str(tmp_path / "entry.xla")
    assert _exe_store.write(path, "k", compiled)
    np.save(tmp_path / "w.npy", w)
    code = ("import sys, numpy as np; from dynajax import _exe_store; exe, extra = _exe_store.read(sys.argv[1], 'k');"
            "assert _exe_store.read(sys.argv[1], 'other') is None;"
            "np.save(sys.argv[2], np.asarray(exe(np.load(sys.argv[3]), np.load(sys.argv[4]))))")
    np.save(tmp_path / "x.npy", X)
    p = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "out.npy"), str(tmp_path / "w.npy"),
                        str(tmp_path / "x.npy")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-5)


def test_jaxs_lowering_settings_are_part_of_the_stores_keys(cache_dir):
    """A program's text does not show JAX's default matmul precision: a step or kernel kept under one
    setting is not loaded under another."""
    _, disk = _modules()
    dj.set_compile_cache(cache_dir)
    parts = ((("op", "add"),), 3, (1, 2))
    before = disk.executable_key(parts)
    from jax._src import config
    other = "bfloat16" if config.default_matmul_precision.value != "bfloat16" else "highest"
    with jax.default_matmul_precision(other):
        during = disk.executable_key(parts)
    assert before is not None and during is not None and before != during
    assert disk.executable_key(parts) == before


def test_the_stores_keep_within_the_caches_bound_least_recently_used_first(cache_dir, tmp_path):
    """dynajax's own entries in a folder stay within ``set_compile_cache``'s ``max_bytes`` (-1: unbounded):
    the least recently used go first, and a load renews an entry."""
    import jax.numpy as jnp
    from dynajax import _exe_store
    folder = tmp_path / "store"
    compiled, _ = _exe_store.compile_fresh(jax.jit(lambda x: jnp.sin(x) * 3).lower(X))
    dj.set_compile_cache(cache_dir, max_bytes=10 ** 9)
    paths = [str(folder / f"e{i}.xla") for i in range(5)]
    for i, p in enumerate(paths[:4]):
        assert _exe_store.write(p, f"k{i}", compiled)
        os.utime(p, (1000 + i, 1000 + i))   # (written in this order, a second apart)
    size = os.path.getsize(paths[0])
    assert _exe_store.read(paths[0], "k0") is not None   # (e0 used again: now the newest)
    dj.set_compile_cache(cache_dir, max_bytes=-1)
    assert _exe_store.write(paths[4], "k4", compiled) and len(os.listdir(folder)) == 5
    os.unlink(paths[4])
    _exe_store._SIZES.clear()
    dj.set_compile_cache(cache_dir, max_bytes=int(4.5 * size))   # room for 4 entries, not 5
    assert _exe_store.write(paths[4], "k4", compiled)
    left = sorted(f for f in os.listdir(folder) if f.endswith(".xla"))
    assert left == ["e0.xla", "e2.xla", "e3.xla", "e4.xla"]   # (e1, the least recently used, went)
    exe, _ = _exe_store.read(paths[0], "k0")
    np.testing.assert_allclose(np.asarray(exe(X)), np.sin(X) * 3, rtol=1e-6)


def test_a_bound_method_is_not_named_by_its_class_alone():
    """An object's state is not in its method's name: a recording holding a bound method of one of
    dynajax's objects is not kept (two such objects would share a key)."""
    _, disk = _modules()
    from dynajax.compile.bucketing import Padder
    assert disk._fn_name(disk.executable_key) == ("dynajax.compile.cache", "executable_key")
    assert disk._fn_name(Padder.price) is not None        # (a function of a class: named)
    p = object.__new__(Padder)
    assert disk._fn_name(p.price) is None
    with pytest.raises(disk._Unnamed):
        disk._stable(p.price)


def _bucketed(sizes, compiled=True):
    """A padded step (``compile``'s automatic policy) over batches of ``sizes`` rows, from seed 0: its losses
    and the compiled step."""
    dj.manual_seed(0)
    model = nn.Sequential(nn.Linear(7, 3))
    step = train_step(model, dj.optim.SGD(model.parameters(), lr=0.1), F.cross_entropy)
    if compiled:
        step = dj.compile(step)
    losses = [step(dj.tensor(X[:n]), dj.tensor(Y[:n] % 3)).item() for n in sizes]
    return losses, step


XY = (("x", 0), ("y", 0))   # the padded dims of ``_bucketed``'s step


def test_a_later_process_runs_at_the_buckets_an_earlier_one_kept(cache_dir):
    """The compile cache folder keeps which buckets of a padded step it holds executables for, and what
    padding past the others has cost (``compile.cache.bucket_record``): a later process runs at kept buckets
    at once (a load, not a compile) and goes on with the debts; a record the step's executables do not match
    is dropped after one compile."""
    _, disk = _modules()
    dj.set_compile_cache(cache_dir)
    _as_a_new_process()
    first, f1 = _bucketed([5, 3])   # the second call goes padded: it compiles the bucket of 5 rows, (8, 8)
    ident = disk.step_identity(f1.fn)
    rec = disk.bucket_record(ident)
    assert rec["bought"] == {(XY, (8, 8))} and rec["debt"] == {} and rec["price"] == f1._padder.price() > 0
    assert first == _bucketed([5, 3], compiled=False)[0]

    def later(sizes):   # (as in a new process: only the folder remains)
        _as_a_new_process()
        jax.clear_caches()
        written = disk.exe_stats["written"]
        losses, f = _bucketed(sizes)
        eager = _bucketed(sizes, compiled=False)[0]
        np.testing.assert_allclose(losses, eager, rtol=1e-6)
        return f, disk.exe_stats["written"] - written

    # the record names the dims that vary: 3 rows are padded from the first call; their own bucket (4, 4) is
    # not kept and the kept (8, 8) fits: it is loaded and 3 and 2 rows run in it, nothing compiled
    f2, written = later([3, 2])
    assert written == 0 and f2.stats.cache_loads == 1 and f2._padder.sizes.ran == {(8, 8): XY}
    f2._padder.sizes.debt[(2, 2)] = 123.0   # what padding 2 rows to 8 cost so far
    f2._padder.save()
    assert disk.bucket_record(ident)["debt"][(2, 2)] == 123.0   # (a compile costs less than 123 s)
    f5, written = later([5])   # the record names the dims that vary: padded from the first call (a load)
    assert written == 0 and f5.stats.cache_loads == 1 and f5._padder.sizes.ran == {(8, 8): XY}
    assert f5.stats.dynamic_dims == ["x dim 0", "y dim 0"]
    f3, written = later([5, 2])   # the debt is past any compile's price: 2 rows buy their own bucket
    assert written == 1 and f3.stats.cache_loads == 1 and list(f3._padder.sizes.ran) == [(8, 8), (2, 2)]
    rec = disk.bucket_record(ident)
    assert rec["bought"] == {(XY, (8, 8)), (XY, (2, 2))} and (2, 2) not in rec["debt"]
    # a record of executables the folder does not hold (another step's): one compile, and it is dropped
    disk.save_bucket_record(str(cache_dir), ident, {"bought": {(XY, (16, 16)), (XY, (32, 32))}, "debt": {}})
    assert len([f for f in os.listdir(cache_dir) if f.startswith("dynajax-buckets-")]) == 1
    f4, written = later([5, 9])
    assert written == 1 and f4.stats.cache_loads == 1   # (5 rows at the kept (8, 8) loaded; 16 rows compiled)
    assert f4._padder.sizes.bought == {(XY, (16, 16))}
