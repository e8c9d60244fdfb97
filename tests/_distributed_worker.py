"""Runs in its own process for tests/test_distributed.py: JAX must start with several (simulated) devices,
which the test process, already running JAX on one CPU device, cannot do.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/_distributed_worker.py mesh
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python tests/_distributed_worker.py host RANK PORT

Prints one JSON line of measurements (last line of stdout); the test asserts on them.
"""
from __future__ import annotations

import json
import sys

import numpy as np

import dynajax as dj

if sys.argv[1] == "host":   # before anything starts JAX's backend
    dj.distributed.initialize(f"127.0.0.1:{sys.argv[3]}", num_processes=2, process_id=int(sys.argv[2]))

import dynajax.nn as nn  # noqa: E402
import dynajax.nn.functional as F  # noqa: E402
from dynajax.distributed import PartitionSpec as P  # noqa: E402
from helpers import train_step  # noqa: E402  (tests/, this script's directory, is first on sys.path)

STEPS, BATCH = 10, 16


def mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(8 * 4 * 4, 8))


def data(kind: str, steps: int = STEPS, batch: int = BATCH):
    rng = np.random.default_rng(0)
    shape = (16,) if kind == "mlp" else (1, 8, 8)
    return (rng.standard_normal((steps, batch) + shape).astype(np.float32),
            rng.integers(0, 8, (steps, batch)))


def setup(kind: str, place=None):
    """Model and optimizer from seed 0 (``place(model)`` may lay parameters out first)."""
    dj.manual_seed(0)
    model = mlp() if kind == "mlp" else cnn()
    model.train()
    if place is not None:
        place(model)
    opt = (dj.optim.Adam(model.parameters(), lr=1e-2) if kind == "mlp"
           else dj.optim.SGD(model.parameters(), lr=0.05))
    return model, opt


def train(kind: str, mesh=None, param_sharding=None, place=None, steps: int = STEPS, batch=dj.tensor):
    """Losses of ``steps`` compiled steps, the final state as numpy, and the live model/optimizer/step
    (``batch(rows)`` makes the batch tensors)."""
    model, opt = setup(kind, place)
    compiled = dj.compile(train_step(model, opt, F.cross_entropy), mesh=mesh, param_sharding=param_sharding)
    xs, ys = data(kind, steps)
    losses = []
    for x, y in zip(xs, ys):
        bx = batch(x)
        losses.append(compiled(bx, batch(y)).item())
    state = {k: dj.distributed.gather(v) for k, v in model.state_dict().items()}
    return dict(losses=losses, state=state, model=model, opt=opt, step=compiled, last_x=bx)


def diff(a: dict, b: dict) -> dict:
    """Largest loss and state differences between two runs."""
    return dict(loss=float(np.max(np.abs(np.subtract(a["losses"], b["losses"])))),
                state=max(float(np.max(np.abs(a["state"][k] - b["state"][k]))) for k in a["state"]))


def opt_state(opt) -> list:
    return [v for s in opt.state.values() for v in s.values() if isinstance(v, dj.Tensor)]


def max_bytes(tensors) -> int:
    return max(dj.distributed.per_device_bytes(tensors).values())


def spec(t) -> str:
    return str(t._value.sharding.spec)


def mesh_case() -> dict:
    import jax
    mesh = dj.distributed.Mesh()
    out = dict(devices=jax.device_count())
    for kind in ("mlp", "cnn"):
        one, dp, fsdp = train(kind), train(kind, mesh), train(kind, mesh, "fsdp")
        rec = dict(dp=diff(one, dp), fsdp=diff(one, fsdp), losses=one["losses"])
        rec["batch_spec"] = spec(dp["last_x"])
        rec["dp_param_specs"] = sorted({spec(p) for p in dp["model"].parameters()})
        rec["fsdp_param_specs"] = {n: spec(p) for n, p in fsdp["model"].named_parameters()}
        rec["compiles"] = [one["step"].stats.compiles, dp["step"].stats.compiles, fsdp["step"].stats.compiles]
        rec["layouts"] = [len(dp["step"].layout._exes), len(fsdp["step"].layout._exes)]
        params = (list(dp["model"].parameters()), list(fsdp["model"].parameters()))
        rec["param_bytes"] = [max_bytes(params[0]), max_bytes(params[1])]
        rec["state_bytes"] = [max_bytes(params[0] + opt_state(dp["opt"])),
                              max_bytes(params[1] + opt_state(fsdp["opt"]))]
        out[kind] = rec
        if kind == "mlp":
            out["odd_batch"] = odd_batch(dp)
            out["model_parallel"] = model_parallel_case(one)
    out["shard"] = shard_case(mesh)
    out["held"] = held_case(mesh)
    return out


def held_case(mesh) -> dict:
    """Arrays the user still holds when a step first lays the state out on the mesh (the parameters' arrays,
    through a deepcopy of the model) keep their values: the replicated copies the step donates are new
    buffers."""
    model, opt = setup("mlp")
    import copy
    twin = copy.deepcopy(model)   # its parameters hold the same arrays (arrays are immutable: shared)
    held = [p.detach() for p in twin.parameters()]
    assert all(h._value is p._value for h, p in zip(held, model.parameters()))
    before = [h.numpy().copy() for h in held]
    step = dj.compile(train_step(model, opt, F.cross_entropy), mesh=mesh)
    x, y = data("mlp", 2)
    for i in range(2):
        step(dj.tensor(x[i]), dj.tensor(y[i])).item()
    try:
        intact = all(np.array_equal(h.numpy(), b) for h, b in zip(held, before))
    except Exception as exc:   # (a donated buffer: deleted under its holder)
        intact = f"{type(exc).__name__}: {exc}"
    moved = not np.array_equal(next(model.parameters()).detach().numpy(), before[0])
    return dict(intact=intact, moved=moved)


def odd_batch(run: dict) -> dict:
    """A batch of 12 rows on 8 devices: an error naming the shapes, and the state left as it was."""
    before = {k: v.detach().numpy() for k, v in run["model"].state_dict().items()}
    x, y = data("mlp", 1, 12)
    try:
        run["step"](dj.tensor(x[0]), dj.tensor(y[0]))
        err = None
    except ValueError as exc:
        err = str(exc)
    after = {k: v.detach().numpy() for k, v in run["model"].state_dict().items()}
    x, y = data("mlp", 1, 16)
    loss = run["step"](dj.tensor(x[0]), dj.tensor(y[0])).item()
    return dict(error=err, unchanged=all(np.array_equal(before[k], after[k]) for k in before),
                loss_after=loss)


def shard_case(mesh) -> dict:
    """Eager ops on sharded tensors: correct values on the mesh, or an error; never one device silently."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 4)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    x = dj.tensor(a).shard(mesh, P("data"))
    y = x * 2.0 + dj.tensor(b)                        # b is not placed: JAX puts it on the mesh
    w = dj.tensor(b, requires_grad=True)
    (w.shard(mesh, P("data", None)) * x).sum().backward()
    pinned = dj.tensor(b, device="cpu")                # committed to device 0
    try:
        x + pinned
        mixed = None
    except ValueError as exc:
        mixed = str(exc)
    try:
        dj.tensor(a[:10]).shard(mesh, P("data"))
        bad = None
    except ValueError as exc:
        bad = str(exc)
    return dict(x_spec=spec(x), y_spec=spec(y), y_err=float(np.max(np.abs(y.numpy() - (2 * a + b)))),
                y_devices=len(y._value.sharding.device_set), grad_err=float(np.max(np.abs(w.grad.numpy() - a))),
                mixed_error=mixed, indivisible_error=bad)


def model_parallel_case(one: dict) -> dict:
    """A 4x2 mesh: batch over "data", the first layer's weight split over "model" by the user; compile
    keeps that layout and matches one device."""
    mesh = dj.distributed.Mesh((4, 2), ("data", "model"))

    def place(model):
        with dj.no_grad():
            model[0].weight.data = model[0].weight.shard(mesh, P("model", None))
    mp = train("mlp", mesh, place=place)
    return dict(diff=diff(one, mp), weight_spec=spec(mp["model"][0].weight),
                weight_grad_spec=spec(mp["model"][0].weight.grad), other_spec=spec(mp["model"][2].weight))


def host_case() -> dict:
    """Two processes x 2 CPU devices: one mesh of 4 devices; every process must see single-device losses."""
    import jax
    mesh = dj.distributed.Mesh()
    dist = train("mlp", mesh, steps=4)
    dist_fsdp = train("mlp", mesh, "fsdp", steps=4)
    rank, half = jax.process_index(), BATCH // 2

    def local_rows(rows):   # this process's half of the global batch
        return dj.distributed.global_batch(rows[rank * half:(rank + 1) * half], mesh)
    dist_local = train("mlp", mesh, steps=4, batch=local_rows)
    one = train("mlp", steps=4)
    return dict(process=rank, processes=jax.process_count(), devices=jax.device_count(),
                local_devices=jax.local_device_count(), dp=diff(one, dist), fsdp=diff(one, dist_fsdp),
                local_batches=diff(one, dist_local), losses=dist["losses"])


if __name__ == "__main__":
    result = mesh_case() if sys.argv[1] == "mesh" else host_case()
    if sys.argv[1] == "host":
        dj.distributed.shutdown()
    print(json.dumps(result))
