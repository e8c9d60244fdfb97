"""Less-travelled paths of dynajax.compile and of saving state: bucketed dims that must stay apart
(different true sizes) or together (equal true sizes), data-parallel steps on 4 simulated CPU devices
against one device (dropout, BatchNorm, ``.item()`` inside the step, checkpoints taken between mesh
steps, a bucketed batch on a mesh), PyTorch checkpoints met by ``dynajax.load``, and the compile cache's
folder argument.

The multi-device checks run this file as a script in a subprocess started with
XLA_FLAGS=--xla_force_host_platform_device_count=4 (JAX in the test process already runs on one CPU
device); it prints its measurements as one JSON line, which the tests assert on.
"""
from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOL = 1e-5


# ---------------------------------------------------------------- bucketing
def _gru_step(gru):
    def step(x):
        out, h = gru(x)
        return out, h
    return step


@pytest.mark.parametrize("shape", [(8, 5, 3), (5, 7, 3)])
def test_bucketed_dims_of_different_true_sizes_never_share_a_padded_size(shape):
    """Batch and time both bucketed to [8, 16]: a batch of 8 beside 5 steps, or 5 rows beside 7 steps,
    would both pad to 8, and slicing and the recurrent mask go by the padded size alone (they took the
    larger true size: h_n ran over padded steps, and padded rows came back)."""
    dj.manual_seed(0)
    gru = nn.GRU(3, 4, batch_first=True)
    step = _gru_step(gru)
    compiled = dj.compile(step, dynamic={"x": {0: [8, 16], 1: [8, 16]}})
    x = dj.tensor(np.random.default_rng(1).standard_normal(shape).astype(np.float32))
    with dj.no_grad():
        want = [t.numpy() for t in step(x)]
        got = [t.numpy() for t in compiled(x)]
    for w, g in zip(want, got):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=TOL, atol=1e-6)


def test_bucketed_result_keeps_each_dims_own_true_size():
    compiled = dj.compile(lambda x: x * 2, dynamic={"x": {0: [8], 1: [8]}})
    x = np.arange(35.0, dtype=np.float32).reshape(5, 7)
    out = compiled(dj.tensor(x))
    assert tuple(out.shape) == (5, 7)
    np.testing.assert_array_equal(out.numpy(), 2 * x)


@pytest.mark.parametrize("n", [20, 40])
def test_bucketed_dims_of_equal_true_size_pad_alike_under_different_buckets(n):
    """Tokens bucketed to [16, 32] and their targets to multiples of 16: 40 tokens padded to 64 and their
    targets to 48 made the loss's shapes disagree."""
    dj.manual_seed(0)
    emb, head = nn.Embedding(10, 4), nn.Linear(4, 10)

    def step(tokens, targets):
        out = head(emb(tokens))
        return F.cross_entropy(out, targets), out

    compiled = dj.compile(step, dynamic={"tokens": {0: [16, 32]}, "targets": {0: 16}}, pad={"targets": -100})
    rng = np.random.default_rng(n)
    tokens, targets = dj.tensor(rng.integers(0, 10, n)), dj.tensor(rng.integers(0, 10, n))
    with dj.no_grad():
        want_loss, want_out = step(tokens, targets)
        loss, out = compiled(tokens, targets)
    np.testing.assert_allclose(loss.item(), want_loss.item(), rtol=TOL)
    np.testing.assert_allclose(out.numpy(), want_out.numpy(), rtol=TOL, atol=1e-6)


def test_bucketed_step_changing_its_arguments_in_place_changes_the_callers_tensors():
    """The step runs on padded copies of the bucketed arguments: their in-place changes were dropped, where
    eager mode (and compile without dynamic=) change the caller's tensors and views of them."""
    def step(x, y):
        x.mul_(2)
        y[0] = 7
        return x.sum()

    results = []
    for fn in (step, dj.compile(step, dynamic={"x": {0: [8]}, "y": {0: [8]}})):
        x, y = dj.tensor(np.arange(5.0, dtype=np.float32)), dj.tensor(np.arange(5))
        view = x[1:3]
        results.append((fn(x, y).item(), x.numpy().tolist(), y.numpy().tolist(), view.numpy().tolist()))
    assert results[1] == results[0] == (20.0, [0.0, 2.0, 4.0, 6.0, 8.0], [7, 1, 2, 3, 4], [2.0, 4.0])
    x = dj.tensor(np.arange(5.0, dtype=np.float32))
    dj.compile(lambda x: x * 2, dynamic={"x": {0: [8]}})(x)
    assert x._version == 0          # an argument the step only read is left alone

    def failing(x):
        x.add_(1)
        raise KeyError("stop")
    x = dj.tensor(np.arange(5.0, dtype=np.float32))
    with pytest.raises(KeyError):
        dj.compile(failing, dynamic={"x": {0: [8]}})(x)
    assert x.numpy().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]   # as compile without dynamic=: nothing changed


def test_bucket_reuse_never_runs_different_true_sizes_at_one_padded_size():
    """A call whose own sizes wait for a compile may run at sizes an earlier call compiled, but not at
    sizes where two of its dims of different true size would pad alike."""
    from dynajax.compile.bucketing import _fits
    assert _fits((16, 16), [9, 9]) and _fits((16, 32), [9, 12])
    assert not _fits((16, 16), [9, 12])       # 9 and 12 at one padded size: ambiguous
    assert not _fits((16, 32), [9, 9])        # equal true sizes at different padded sizes


# ---------------------------------------------------------------- serialization and torch
def test_a_pytorch_checkpoint_loads_and_resumes_training_compiled():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2)
    topt = torch.optim.Adam(tm.parameters(), lr=0.01)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)

    def torch_step():
        topt.zero_grad()
        tm(torch.tensor(x)).pow(2).sum().backward()
        topt.step()
    torch_step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "torch.pt")
        torch.save({"model": tm.state_dict(), "opt": topt.state_dict()}, path)
        legacy = os.path.join(d, "legacy.pt")
        torch.save(tm.state_dict(), legacy, _use_new_zipfile_serialization=False)
        with pytest.raises(RuntimeError, match="before 1.6"):   # the pre-zip format is refused, named
            dj.load(legacy)
        buf = io.BytesIO(open(path, "rb").read())   # torch's own file, read without converting
    buf.seek(0)
    ck = dj.load(buf)
    model = nn.Linear(3, 2)
    opt = dj.optim.Adam(model.parameters(), lr=0.01)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])

    @dj.compile
    def step(xb):
        opt.zero_grad()
        model(xb).pow(2).sum().backward()
        opt.step()
    for _ in range(2):
        step(dj.tensor(x))
        torch_step()
    np.testing.assert_allclose(model.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=TOL, atol=1e-6)
    np.testing.assert_allclose(opt.state_dict()["state"][0]["exp_avg_sq"].numpy(),
                               topt.state_dict()["state"][0]["exp_avg_sq"].numpy(), rtol=TOL, atol=1e-9)


def test_load_takes_a_torch_device_as_map_location():
    """``map_location=torch.device("cpu")`` (a ported torch.load call) reached ``Tensor.to``, which read it
    as a dtype: TypeError."""
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    dj.save({"w": dj.arange(3.0), "n": 2}, buf)
    for where in (torch.device("cpu"), dj.device("cpu"), "cpu"):
        buf.seek(0)
        got = dj.load(buf, map_location=where)
        assert got["n"] == 2 and got["w"].device == dj.device("cpu")
        np.testing.assert_array_equal(got["w"].numpy(), [0.0, 1.0, 2.0])


def test_set_compile_cache_rejects_an_empty_folder_name():
    """An empty name meant the working directory (``os.path.abspath("")``): the cache went there."""
    try:
        with pytest.raises(ValueError, match="empty string"):
            dj.set_compile_cache("")
        assert dj.compile_cache_dir() is None
    finally:
        dj.set_compile_cache(None)


def test_unusable_compile_cache_folder_in_the_environment_warns_instead_of_failing_import(monkeypatch, tmp_path):
    """DYNAJAX_COMPILE_CACHE naming a file made ``import dynajax`` raise NotADirectoryError."""
    from dynajax.compile import cache as _compile_cache
    taken = tmp_path / "a_file"
    taken.write_text("")
    monkeypatch.setenv(_compile_cache.ENV, str(taken))
    try:
        with pytest.warns(RuntimeWarning, match="DYNAJAX_COMPILE_CACHE=.*a_file.*stays off"):
            _compile_cache.from_environment()
        assert dj.compile_cache_dir() is None
    finally:
        dj.set_compile_cache(None)


# ---------------------------------------------------------------- 4 simulated devices
def _train(kind, mesh=None, param_sharding=None, steps=3, item_inside=False):
    """Losses and final state of ``steps`` compiled steps of a small model (seed 0), on ``mesh`` or one device."""
    dj.manual_seed(0)
    if kind == "mlp":   # dropout draws its mask on the mesh
        model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 3))
        opt = dj.optim.Adam(model.parameters(), lr=1e-2)
    else:
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Linear(64, 3))
        opt = dj.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen = []

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        if item_inside:
            seen.append(loss.item())
        loss.backward()
        opt.step()
        return loss, out.sum(1)
    compiled = dj.compile(step, mesh=mesh, param_sharding=param_sharding)
    losses, rows = [], []
    for x, y in _batches(kind, steps):
        loss, row = compiled(dj.tensor(x), dj.tensor(y))
        losses.append(loss.item())
        rows.append(dj.distributed.gather(row).tolist())
    state = {k: dj.distributed.gather(v) for k, v in model.state_dict().items()}
    return dict(losses=losses, rows=rows, seen=seen, state=state, model=model, opt=opt, step=compiled)


def _diff(a, b) -> float:
    """Largest difference of losses, returned values and final state between two runs."""
    return max([float(np.max(np.abs(np.subtract(a[k], b[k])))) for k in ("losses", "rows")]
               + [float(np.max(np.abs(a["state"][k] - b["state"][k]))) for k in a["state"]])


def _batches(kind: str, steps: int):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((8, 6) if kind == "mlp" else (8, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, 8))
            for _ in range(steps)]


def _mesh_worker() -> dict:
    import jax
    mesh = dj.distributed.Mesh()
    out = dict(devices=jax.device_count())
    runs = {}
    for kind in ("mlp", "cnn"):
        one = _train(kind)
        runs[kind] = {mode: _train(kind, mesh, None if mode == "dp" else mode) for mode in ("dp", "fsdp")}
        out[kind] = {mode: _diff(one, r) for mode, r in runs[kind].items()}
    one, dist = _train("mlp", item_inside=True), _train("mlp", mesh, item_inside=True)
    out["item"] = dict(diff=_diff(one, dist), seen=float(np.max(np.abs(np.subtract(one["seen"], dist["seen"])))))
    # a 6-row batch on 4 devices: an error naming it, the state left as it was
    try:
        dist["step"](dj.ones(6, 6), dj.zeros(6, dtype=dj.int64))
        out["odd"] = None
    except ValueError as exc:
        out["odd"] = str(exc)
    out["odd_unchanged"] = all(np.array_equal(dist["state"][k], dj.distributed.gather(v))
                               for k, v in dist["model"].state_dict().items())
    # a checkpoint taken between FSDP steps resumes on the mesh as the run that goes on
    part = runs["mlp"]["fsdp"]
    buf = io.BytesIO()
    dj.save({"model": part["model"].state_dict(), "opt": part["opt"].state_dict(), "rng": dj.get_rng_state()}, buf)
    tail = _batches("mlp", 5)[3:]
    went_on = [part["step"](dj.tensor(x), dj.tensor(y))[0].item() for x, y in tail]
    buf.seek(0)
    ck = dj.load(buf)
    resumed = _train("mlp", mesh, "fsdp", steps=0)
    resumed["model"].load_state_dict(ck["model"])
    resumed["opt"].load_state_dict(ck["opt"])
    dj.set_rng_state(ck["rng"])
    again = [resumed["step"](dj.tensor(x), dj.tensor(y))[0].item() for x, y in tail]
    out["resume"] = float(np.max(np.abs(np.subtract(again, went_on))))
    # a bucketed batch of 5 rows padded to 8 and split over the 4 devices
    dj.manual_seed(0)
    lin = nn.Linear(6, 3)

    def loss_of(x, y):
        return F.cross_entropy(lin(x), y), lin(x)
    bucketed = dj.compile(loss_of, mesh=mesh, dynamic={"x": {0: [8]}, "y": {0: [8]}}, pad={"y": -100})
    x, y = dj.tensor(tail[0][0][:5]), dj.tensor(tail[0][1][:5])
    with dj.no_grad():
        want, got = loss_of(x, y), bucketed(x, y)
    out["bucketed"] = dict(shape=list(got[1].shape), diff=max(abs(want[0].item() - got[0].item()),
                                                              float(np.max(np.abs(want[1].numpy() - got[1].numpy())))),
                           versions=[x._version, y._version])   # only read: nothing written back
    try:   # a bucket the devices do not divide: the error says which sizes to declare
        dj.compile(loss_of, mesh=mesh, dynamic={"x": {0: [6]}, "y": {0: [6]}}, pad={"y": -100})(x, y)
    except ValueError as exc:
        out["bucketed"]["odd"] = str(exc)
    return out


_worker: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _start_mesh_worker():
    """Start the 4-device process with the first test of this file, so the tests above overlap it."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    _worker["proc"] = subprocess.Popen([sys.executable, __file__, "mesh"], env=env, stdout=out, stderr=err, text=True)
    _worker["files"] = out, err
    yield
    if _worker["proc"].poll() is None:
        _worker["proc"].kill()
        _worker["proc"].wait()
    out.close()
    err.close()


@pytest.fixture(scope="module")
def mesh4():
    proc, (out, err) = _worker["proc"], _worker["files"]
    try:
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out.seek(0)
    err.seek(0)
    assert code == 0, err.read()[-3000:]
    return json.loads(out.read().strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_mesh_training_matches_one_device(mesh4, kind):
    assert mesh4["devices"] == 4
    for mode, d in mesh4[kind].items():
        assert d < TOL, (mode, d)   # losses, returned per-row values and every parameter/buffer


def test_item_inside_a_mesh_step(mesh4):
    assert mesh4["item"]["diff"] < TOL and mesh4["item"]["seen"] < TOL


def test_mesh_batch_not_divisible_raises_and_leaves_state(mesh4):
    assert mesh4["odd"].startswith("dynajax.compile(mesh=...): argument 0 of shape [6, 6] cannot be split over the "
                                   "4 devices"), mesh4["odd"]
    assert mesh4["odd_unchanged"]


def test_checkpoint_between_fsdp_steps_resumes(mesh4):
    assert mesh4["resume"] < TOL


def test_bucketed_batch_on_a_mesh(mesh4):
    assert mesh4["bucketed"]["shape"] == [5, 3] and mesh4["bucketed"]["diff"] < TOL
    assert mesh4["bucketed"]["versions"] == [0, 0]
    assert mesh4["bucketed"]["odd"].endswith("Declare bucket sizes in dynamic= that are multiples of 4 (this batch "
                                             "ran at its bucket size, 6)."), mesh4["bucketed"]



if __name__ == "__main__" and sys.argv[1:] == ["mesh"]:
    print(json.dumps(_mesh_worker()))


def test_bucketed_batch_norm_counts_only_real_rows():
    """BatchNorm in training mode over a batch padded by dynamic=: outputs, loss, parameters and running
    statistics equal eager training on the unpadded batches."""
    results = []
    for bucketed in (False, True):
        dj.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                              nn.Linear(48, 2))
        opt = dj.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            return loss, out
        fn = dj.compile(step, dynamic={"x": {0: [8]}, "y": {0: [8]}}, pad={"y": -100}) if bucketed else step
        rng = np.random.default_rng(1)
        outs = []
        for b in (5, 7, 8):
            loss, out = fn(dj.tensor(rng.standard_normal((b, 1, 4, 4)).astype(np.float32)),
                           dj.tensor(rng.integers(0, 2, b)))
            outs.append((loss.item(), out.detach().numpy()))
        results.append((outs, {k: v.detach().numpy() for k, v in model.state_dict().items()}))
    (eager, eager_state), (got, got_state) = results
    for (le, oe), (lg, og) in zip(eager, got):
        np.testing.assert_allclose(lg, le, rtol=TOL)
        np.testing.assert_allclose(og, oe, rtol=TOL, atol=1e-6)
    for k in eager_state:
        np.testing.assert_allclose(got_state[k], eager_state[k], rtol=TOL, atol=1e-6)
