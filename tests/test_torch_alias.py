"""Unmodified PyTorch programs on dynajax: ``python -m dynajax.run script.py`` and the torch alias.

The scripts in tests/torch_scripts/ are written as PyTorch programs (in the style of well-known public
examples). Each runs twice in a subprocess, unchanged: with PyTorch, and through ``python -m dynajax.run``;
their data and initial weights come from seeded numpy, so the two runs print the same losses for 20
steps (to 1e-4 relative) and the same final lines. The rest checks the alias itself (resolution, misses
named as torch APIs, install/uninstall) and the small torch APIs added for such scripts, against torch.

The dynajax runs share an on-disk compile cache in the temp folder (``DYNAJAX_COMPILE_CACHE``): most of a
cold run is XLA compiling eager kernels (the GPT: ~12 s of CPU cold, ~5 s warm).
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import warnings

import numpy as np
import pytest
import torch

import dynajax as dj

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS_DIR = os.path.join(ROOT, "tests", "torch_scripts")
CACHE = os.path.join(tempfile.gettempdir(), "dynajax-test-torch-alias-cache")
STEPS = 20

# script, its arguments (the same in both runs)
SCRIPTS = {
    "mnist_cnn": ["mnist_cnn.py"],
    "word_language_model": ["word_language_model.py", "--model", "RNN_TANH,LSTM,GRU,Transformer", "--tied"],
    "sine_lstm_lbfgs": ["sine_lstm_lbfgs.py"],
    "vae": ["vae.py"],
    "polynomial_regression": ["polynomial_regression.py"],
    "tiny_gpt": ["tiny_gpt.py"],
}


def _run(engine: str, args: list) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    prefix = [sys.executable]
    if engine == "dynajax":
        prefix += ["-m", "dynajax.run"]
        env["DYNAJAX_COMPILE_CACHE"] = CACHE
    else:   # PyTorch's idle intra-op threads spin: on a shared 2-core machine they cost it 4x the CPU time
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    script = os.path.join(SCRIPTS_DIR, args[0])
    return subprocess.run(prefix + [script] + args[1:] + ["--steps", str(STEPS), "--seed", "3"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def _probe_run(tmp: str) -> subprocess.CompletedProcess:
    with open(os.path.join(tmp, "helper_mod.py"), "w") as fh:
        fh.write("VALUE = 41\n")
    with open(os.path.join(tmp, "prog.py"), "w") as fh:
        fh.write(_PROG)
    return subprocess.run([sys.executable, "-m", "dynajax.run", os.path.join(tmp, "prog.py"), "a", "--b"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Every subprocess of this file, four at a time: each script under both engines ({(name, engine):
    CompletedProcess}), the alias probe ("probe"), a small program through dynajax.run ("prog") and
    dynajax.run without arguments ("usage")."""
    tmp = str(tmp_path_factory.mktemp("torch_alias"))
    jobs = {(name, engine): functools.partial(_run, engine, SCRIPTS[name])
            for name in SCRIPTS for engine in ("torch", "dynajax")}
    jobs["probe"] = functools.partial(subprocess.run, [sys.executable, "-c", _PROBE], cwd=ROOT,
                                      capture_output=True, text=True, timeout=600)
    jobs["prog"] = functools.partial(_probe_run, tmp)
    jobs["usage"] = functools.partial(subprocess.run, [sys.executable, "-m", "dynajax.run"], cwd=ROOT,
                                      capture_output=True, text=True, timeout=600)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = {key: pool.submit(job) for key, job in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _same_line(a: str, b: str, rtol: float) -> bool:
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if _NUMBER.match(x) and _NUMBER.match(y):
            fx, fy = float(x), float(y)
            if not math.isclose(fx, fy, rel_tol=rtol, abs_tol=1e-6):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_runs_unchanged_on_dynajax(runs, name):
    ref, got = runs[(name, "torch")], runs[(name, "dynajax")]
    assert ref.returncode == 0, f"{name} under torch failed:\n{ref.stderr[-3000:]}"
    assert got.returncode == 0, f"{name} under dynajax.run failed:\n{got.stderr[-3000:]}"
    ref_lines, got_lines = ref.stdout.splitlines(), got.stdout.splitlines()
    losses = [line for line in ref_lines if line.startswith("step ")]
    assert len(losses) == STEPS * (4 if name == "word_language_model" else 1)
    assert all(re.match(r"^step \d+ loss \S+$", line) for line in losses)
    assert len(ref_lines) == len(got_lines), f"{name}: different output\n{ref.stdout}\n---\n{got.stdout}"
    for a, b in zip(ref_lines, got_lines):   # losses to 1e-4 relative, the other lines (test loss, samples) too
        assert _same_line(a, b, 1e-4), f"{name}: torch printed {a!r}, dynajax {b!r}"
    assert any(float(line.split()[-1]) < float(losses[0].split()[-1]) for line in losses[1:])   # it trains


# ---------------------------------------------------------------- the alias itself, in a fresh process

_PROBE = textwrap.dedent('''
    import sys, importlib.util
    import dynajax
    dynajax.install_torch_alias()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim.lr_scheduler, torch.utils.data, torch.distributions, torch.autograd, torch.nn.init
    import torch.nn.utils.rnn, torch.amp, torch.cuda, torch.linalg, torch.onnx, torch.serialization
    import torch.backends.cudnn as cudnn
    from torch.nn.modules.activation import MultiheadAttention
    from torch.nn.modules.conv import Conv2d
    from torch.nn.modules import dropout, linear, sparse, normalization, rnn, loss, container, module
    from torch.nn.modules import batchnorm, pooling, transformer
    from torch.nn.parallel import DataParallel, DistributedDataParallel
    from torch.autograd import Variable
    assert torch.nn.Linear is dynajax.nn.Linear and torch.Tensor is dynajax.Tensor
    assert MultiheadAttention is dynajax.nn.MultiheadAttention and Conv2d is dynajax.nn.Conv2d
    assert sparse.Embedding is nn.Embedding and batchnorm.BatchNorm2d is nn.BatchNorm2d
    assert torch.__version__.startswith("2.13") and torch.version.cuda is None
    cudnn.benchmark = True
    assert dynajax.backends.cudnn.benchmark is True          # writes reach dynajax's flag
    assert isinstance(torch.ones(2), Variable) and Variable(torch.ones(2), requires_grad=True).is_leaf
    assert not hasattr(torch, "jit") and hasattr(torch.backends, "mps")
    try:
        torch.nn.functional.no_such_op
    except AttributeError as e:
        assert type(e).__name__ == "MissingTorchAPI" and "torch.nn.functional.no_such_op" in str(e), e
    try:
        torch.sparse_coo_tensor
    except AttributeError as e:
        assert "dynajax has no torch.sparse_coo_tensor" in str(e) and "sparse tensors" in str(e), e
    try:
        import torch.no_such_module
    except ModuleNotFoundError as e:
        assert e.name == "torch.no_such_module" and "dynajax has no torch.no_such_module" in str(e), e
    try:
        from torch.jit import script
    except ModuleNotFoundError as e:
        assert "torch.jit" in str(e), e
    assert "tensor" in dir(torch) and "Linear" in torch.nn.__all__
    ns = {}
    exec("from torch.nn.functional import *", ns)
    assert ns["relu"] is dynajax.nn.functional.relu
    model = nn.Linear(2, 2)
    assert torch.compile(model) is model and torch.compile(mode="max-autotune")(F.relu) is F.relu
    dynajax.uninstall_torch_alias()
    assert "torch" not in sys.modules and not any(k.startswith("torch.") for k in sys.modules)
    assert importlib.util.find_spec("torch") is not None   # the real one again
    import torch as real
    assert real.__file__.endswith("__init__.py") and "dynajax" not in real.__version__
    try:
        dynajax.install_torch_alias()
    except RuntimeError as e:
        assert "already imported" in str(e), e
    else:
        raise AssertionError("install_torch_alias() after real torch was imported did not refuse")
    print("ok")
''')


def test_alias_resolution_misses_and_uninstall(runs):
    proc = runs["probe"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
    assert "torch.compile returns the model unchanged" in proc.stderr   # said once
    assert proc.stderr.count("torch.compile returns") == 1


_PROG = textwrap.dedent('''
    import sys
    import torch
    from helper_mod import VALUE          # the script's folder is on sys.path, as under `python prog.py`
    print(__name__, sys.argv[1:], VALUE + 1, type(torch.zeros(1)).__module__)
    torch.nn.functional.no_such_op(torch.ones(1))
''')


def test_run_sets_argv_main_and_path_and_reports_missing_api(runs):
    proc = runs["prog"]
    assert proc.stdout.splitlines()[0] == "__main__ ['a', '--b'] 42 dynajax._tensor"
    assert proc.returncode == 1
    # the traceback ends at the user's line, naming the torch API
    assert 'prog.py", line 6' in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "dynajax._torch_alias.MissingTorchAPI: dynajax has no torch.nn.functional.no_such_op")
    usage = runs["usage"]
    assert usage.returncode == 2 and "usage: python -m dynajax.run script.py" in usage.stderr


def test_install_refuses_when_real_torch_is_imported():
    assert "torch" in sys.modules   # this test module imported it
    with pytest.raises(RuntimeError, match="PyTorch itself is already imported"):
        dj.install_torch_alias()
    assert not dj._torch_alias.installed()


# ---------------------------------------------------------------- the small APIs, side by side with torch

def test_legacy_tensor_types():
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "ByteTensor", "BoolTensor"):
        T, R = getattr(dj, name), getattr(torch, name)
        assert repr(T) == repr(R) and T.dtype.name == str(R.dtype).removeprefix("torch.")
        assert tuple(T(2, 3).shape) == tuple(R(2, 3).shape) == (2, 3)
        assert tuple(T(dj.Size([4])).shape) == (4,) and tuple(T().shape) == (0,)
        data = [[1, 0], [2, 3]]
        np.testing.assert_array_equal(T(data).numpy(), R(data).numpy())
        np.testing.assert_array_equal(T(np.array([1.0, 2.0])).numpy(), R(np.array([1.0, 2.0])).numpy())
        assert T(data).type() == R(data).type() == f"torch.{name}"
        assert isinstance(T(data), T) and not isinstance(T(data), dj.HalfTensor)
        assert isinstance(R(data), R)
    assert not issubclass(dj.FloatTensor, dj.Tensor) and not issubclass(torch.FloatTensor, torch.Tensor)
    t = dj.zeros(2)
    assert dj.FloatTensor(t) is t
    for lib in (dj, torch):
        for bad in (lambda: lib.FloatTensor(2.5), lambda: lib.FloatTensor([1], dtype=lib.float64),
                    lambda: lib.FloatTensor(lib.zeros(2, dtype=lib.int64))):
            with pytest.raises(TypeError):
                bad()


def test_creation_keywords_and_deque():
    for lib in (dj, torch):
        assert tuple(lib.randint(10, size=(3, 2)).shape) == (3, 2)
        assert tuple(lib.empty(size=(2, 3)).shape) == (2, 3)
        assert tuple(lib.zeros(size=(4,)).shape) == (4,) and tuple(lib.ones(size=[1, 2]).shape) == (1, 2)
        with pytest.raises(TypeError):
            lib.zeros(2, size=(3,))
    assert int(dj.randint(3, size=(1000,)).max()) == 2 and int(dj.randint(3, size=(1000,)).min()) == 0
    for data in (collections.deque([1, 2, 3]), collections.deque([[1.5], [2.5]])):
        a, b = dj.tensor(data), torch.tensor(data)
        assert a.dtype.name == str(b.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_tensor_device_flags():
    a, b = dj.ones(2), torch.ones(2)
    flags = ["is_xpu", "is_mps", "is_sparse", "is_quantized", "is_meta"]
    if a.device.type == "cpu":
        flags += ["is_cpu", "is_cuda"]
    else:
        assert not a.is_cpu and a.is_cuda == (a.device.type == "cuda")
    for flag in flags:
        assert getattr(a, flag) is getattr(b, flag), flag


def test_backends_accelerator_and_precision_flags():
    assert dj.backends.mps.is_available() is torch.backends.mps.is_available() is False
    assert dj.backends.cudnn.enabled and not dj.backends.cudnn.deterministic
    before = dj.get_float32_matmul_precision()
    assert before == "highest" == torch.get_float32_matmul_precision()
    try:
        dj.set_float32_matmul_precision("high")
        assert dj.get_float32_matmul_precision() == "high" and dj.backends.cuda.matmul.allow_tf32
        with pytest.warns(UserWarning, match="not one of 'highest', 'high', or 'medium'"):
            dj.set_float32_matmul_precision("fast")
        assert dj.get_float32_matmul_precision() == "high"
        dj.backends.cuda.matmul.allow_tf32 = False
        assert dj.get_float32_matmul_precision() == "highest"
        x = dj.tensor(np.random.RandomState(0).randn(8, 8).astype(np.float32))
        dj.set_float32_matmul_precision("medium")   # recorded, not applied: full float32 products
        np.testing.assert_allclose((x @ x).numpy(), x.numpy().astype(np.float64) @ x.numpy(), rtol=1e-5, atol=1e-5)
    finally:
        dj.set_float32_matmul_precision(before)
    dj.backends.cudnn.benchmark = True
    dj.backends.cudnn.benchmark = False
    accelerated = dj.accelerator.is_available()
    assert accelerated == (dj._device.default_accelerator() != "cpu")
    if not accelerated:
        assert dj.accelerator.current_accelerator() is None and dj.accelerator.device_count() == 0
        assert torch.accelerator.current_accelerator() is None
        for fn in (dj.accelerator.current_device_index, dj.accelerator.synchronize,
                   lambda: dj.accelerator.set_device_index(0)):
            with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
                fn()
    else:
        assert dj.accelerator.current_accelerator().type == dj._device.default_accelerator()
        assert dj.accelerator.device_count() >= 1


def test_data_parallel_wrappers():
    for lib in (dj, torch):
        lib.manual_seed(0)
        inner = lib.nn.Linear(3, 2)
        dp = lib.nn.DataParallel(inner)
        assert list(dp.state_dict()) == ["module.weight", "module.bias"] and dp.module is inner
        x = lib.ones(4, 3)
        np.testing.assert_allclose(dp(x).detach().numpy(), inner(x).detach().numpy())
    ddp = dj.nn.parallel.DistributedDataParallel(dj.nn.Linear(3, 2))
    with ddp.no_sync():
        ddp(dj.ones(1, 3)).sum().backward()
    assert ddp.module.weight.grad is not None
    assert "DataParallel(\n  (module): Linear(" in repr(dj.nn.DataParallel(dj.nn.Linear(3, 2)))


def test_distributed_process_group_of_one():
    d = dj.distributed
    assert d.is_available() and not d.is_initialized()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        d.get_rank()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        torch.distributed.get_world_size()
    with pytest.raises(NotImplementedError, match="process group of 2 processes"):
        d.init_process_group("gloo", world_size=2, rank=0)
    assert not d.is_initialized()
    d.init_process_group("gloo", world_size=1, rank=0)
    try:
        assert d.is_initialized() and d.get_rank() == 0 and d.get_world_size() == 1
        d.barrier()
        with pytest.raises(ValueError, match="twice"):
            d.init_process_group("gloo")
        dj.nn.parallel.DistributedDataParallel(dj.nn.Linear(2, 2))
    finally:
        d.destroy_process_group()
    assert not d.is_initialized()


def test_serialization_safe_globals_and_onnx(tmp_path):
    s = dj.serialization
    s.clear_safe_globals()
    s.add_safe_globals([np.dtype])
    with s.safe_globals([collections.OrderedDict]):
        assert s.get_safe_globals() == [np.dtype, collections.OrderedDict]
        dj.save({"w": dj.ones(2)}, tmp_path / "w.pt")
        np.testing.assert_array_equal(dj.load(tmp_path / "w.pt")["w"].numpy(), [1.0, 1.0])
    assert s.get_safe_globals() == [np.dtype]
    s.clear_safe_globals()
    assert dj.onnx.is_in_onnx_export() is torch.onnx.is_in_onnx_export() is False
    with pytest.raises(NotImplementedError, match="dynajax has no torch.onnx.export"):
        dj.onnx.export(dj.nn.Linear(2, 2), (dj.ones(1, 2),), str(tmp_path / "m.onnx"))


def test_rnn_flatten_parameters_and_misc():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for lib in (dj, torch):
            lstm = lib.nn.LSTM(3, 4)
            assert lstm.flatten_parameters() is None
    assert dj.manual_seed(0) is dj.random.default_generator and isinstance(dj.manual_seed(1), dj.Generator)
    dj.cuda.manual_seed_all(0)
    assert dj.is_floating_point(dj.ones(1)) and not dj.is_floating_point(dj.ones(1, dtype=dj.int64))
    dj.use_deterministic_algorithms(True)
    assert dj.are_deterministic_algorithms_enabled()
    dj.use_deterministic_algorithms(False)
    n = dj.get_num_threads()
    assert n >= 1
    with pytest.raises(RuntimeError):
        dj.set_num_threads(0)
