"""dynajax.distributed and dynajax.compile(mesh=...): data-parallel and FSDP training on 8 simulated CPU
devices match one device; parameter memory per device; placement errors; two processes on loopback.

JAX in this process already runs on one CPU device, so the multi-device checks run in subprocesses
(tests/_distributed_worker.py, started with XLA_FLAGS=--xla_force_host_platform_device_count=N); each
prints its measurements as one JSON line and the tests below assert on them. Four processes in all, started
together when the first of these tests runs (they overlap, which shortens the wait on a multi-core machine
and on a busy one alike): one with 8 devices, a pair with 2 devices each, and examples/data_parallel.py on 8
simulated devices.
"""
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import dynajax as dj
from dynajax.distributed import PartitionSpec as P

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = str(ROOT / "tests" / "_distributed_worker.py")
TOL = 1e-5   # float32 reassociation of the batch mean across devices


def _env(devices: int) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


class _Run:
    """A started process (output to temporary files, so a chatty one never blocks on a full pipe)."""

    def __init__(self, args: list, devices: int) -> None:
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable] + args, env=_env(devices), stdout=self.out, stderr=self.err,
                                     text=True)

    def stdout(self) -> str:
        """Its output once it exited with status 0 (the test fails with its stderr otherwise)."""
        try:
            code = self.proc.wait(timeout=600)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.out.seek(0)
        self.err.seek(0)
        assert code == 0, f"{self.proc.args[1:]} failed (exit {code}):\n{self.err.read()[-3000:]}"
        return self.out.read()

    def json(self) -> dict:
        return json.loads(self.stdout().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    started = {"mesh": _Run([WORKER, "mesh"], 8),
               "hosts": [_Run([WORKER, "host", str(rank), port], 2) for rank in (0, 1)],
               "example": _Run([str(ROOT / "examples" / "data_parallel.py"), "--simulate", "8", "--steps", "3",
                                "--batch", "64"], 1)}
    yield started
    for r in [started["mesh"], started["example"]] + started["hosts"]:
        if r.proc.poll() is None:
            r.proc.kill()


@pytest.fixture(scope="module")
def mesh8(runs):
    return runs["mesh"].json()


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("mode", ["dp", "fsdp"])
def test_training_matches_one_device(mesh8, kind, mode):
    assert mesh8["devices"] == 8
    r = mesh8[kind]
    assert len(r["losses"]) == 10 and np.all(np.isfinite(r["losses"]))
    assert r[mode]["loss"] < TOL, r[mode]
    assert r[mode]["state"] < TOL, r[mode]   # every parameter and buffer (BatchNorm running stats too)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_placement(mesh8, kind):
    r = mesh8[kind]
    assert r["batch_spec"] == "P('data',)"        # the batch argument was split over the data axis
    assert r["dp_param_specs"] == ["P()"]          # data parallel: parameters replicated
    specs = r["fsdp_param_specs"]                   # FSDP: each split along its largest divisible dim
    assert specs["0.weight"] == "P('data',)"
    assert specs[max(specs)] in ("P(None, 'data')", "P('data',)")
    assert all(s != "P()" for s in specs.values()), specs
    assert r["compiles"] == [1, 1, 1] and r["layouts"] == [1, 1]   # placed once: no re-jit per step


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_fsdp_memory_per_device(mesh8, kind):
    r = mesh8[kind]
    replicated, sharded = r["param_bytes"]
    assert sharded <= replicated / 8 + 64, r["param_bytes"]
    replicated, sharded = r["state_bytes"]        # parameters + optimizer state (Adam: 2 moments + steps)
    assert sharded <= replicated / 8 + 64, r["state_bytes"]


def test_batch_not_divisible_by_devices(mesh8):
    r = mesh8["odd_batch"]
    assert r["error"].startswith("dynajax.compile(mesh=...): argument 0 of shape [12, 16] cannot be split over "
                                 "the 8 devices of mesh axis 'data'"), r["error"]
    assert r["unchanged"]                          # the failed call left parameters as they were
    assert np.isfinite(r["loss_after"])           # and the step still runs on a divisible batch


def test_user_placement_on_2d_mesh(mesh8):
    r = mesh8["model_parallel"]
    assert r["diff"]["loss"] < TOL and r["diff"]["state"] < TOL
    assert r["weight_spec"] == "P('model', None)"      # compile kept the user's layout ...
    assert r["weight_grad_spec"] == "P('model', None)"  # ... gave it to the grad ...
    assert r["other_spec"] == "P()"                     # ... and replicated the rest


def test_arrays_the_user_holds_survive_the_first_layout_on_the_mesh(mesh8):
    r = mesh8["held"]
    assert r["intact"] is True and r["moved"] is True, r


def test_eager_ops_on_sharded_tensors(mesh8):
    r = mesh8["shard"]
    assert r["x_spec"] == "P('data',)" and r["y_spec"] == "P('data',)" and r["y_devices"] == 8
    assert r["y_err"] == 0.0 and r["grad_err"] == 0.0
    assert "incompatible devices" in r["mixed_error"]    # pinned to one device + sharded: an error
    assert "[10, 4]" in r["indivisible_error"]


def test_two_processes_on_loopback(runs):
    results = [r.json() for r in runs["hosts"]]
    for rank, r in enumerate(results):
        assert (r["process"], r["processes"], r["devices"], r["local_devices"]) == (rank, 2, 4, 2)
        for mode in ("dp", "fsdp", "local_batches"):
            assert r[mode]["loss"] < TOL and r[mode]["state"] < TOL, (mode, r[mode])
    assert results[0]["losses"] == results[1]["losses"]


# ---------------------------------------------------------------- in this process (one device)
def test_mesh_api_errors():
    with pytest.raises(ValueError, match="needs 2 devices"):
        dj.distributed.Mesh((2,))
    with pytest.raises(ValueError, match="axis_names"):
        dj.distributed.Mesh((1,), ("data", "model"))
    mesh = dj.distributed.Mesh()
    with pytest.raises(ValueError, match="data_axis 'batch'"):
        dj.compile(lambda x: x, mesh=mesh, data_axis="batch")
    with pytest.raises(ValueError, match="param_sharding"):
        dj.compile(lambda x: x, mesh=mesh, param_sharding="zero2")
    with pytest.raises(ValueError, match="needs a mesh"):
        dj.compile(lambda x: x, param_sharding="fsdp")
    with pytest.raises(ValueError, match="verify"):
        dj.compile(lambda x: x, mesh=mesh, verify=True)
    with pytest.raises(ValueError, match="'model'"):
        dj.ones(4).shard(mesh, P("model"))


def test_shard_inside_compiled_step_on_one_device():
    mesh = dj.distributed.Mesh()
    w = dj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)

    @dj.compile(mesh=mesh)
    def step(x):
        y = (w.shard(mesh, P()) * x).sum()
        y.backward()
        return y

    x = np.ones((2, 3))
    assert step(dj.tensor(x)).item() == 15.0
    np.testing.assert_array_equal(w.grad.numpy(), x)


def test_data_parallel_example_on_simulated_devices(runs):
    out = runs["example"].stdout()
    lines = out.strip().splitlines()
    assert len(lines) == 4 and all("8 devices: loss" in ln and "samples/s" in ln for ln in lines[:3]), out
    summary = lines[-1]
    assert "throughput ratio 8/1 = " in summary
    assert float(summary.split("largest loss difference ")[1]) < TOL


def test_data_parallel_example_flags():
    sys.path.insert(0, str(ROOT / "examples"))
    from test_examples import load
    ex = load("data_parallel")
    with pytest.raises(SystemExit) as e:   # JAX already runs in this process: too late to split the CPU
        ex.parse_args(["--simulate", "8"])
    assert "already started" in str(e.value.code) and "\n" not in str(e.value.code)


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 7, 67280421310721, 2**64 - 1, -3])
def test_seeding_builds_jax_key_on_the_host(seed):
    import jax
    dj.manual_seed(seed)   # a numpy key: seeding at import must not start JAX (distributed.initialize after it)
    key = dj.random.default_generator._key
    with jax.enable_x64(True):   # (a 64-bit seed, as dynajax's own key is made)
        ref = jax.random.PRNGKey(np.uint64(seed % 2**64))
    np.testing.assert_array_equal(np.asarray(key), np.asarray(ref))
