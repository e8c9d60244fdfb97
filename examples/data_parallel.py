"""Data-parallel training: the same define-by-run step on one device and on every visible device.

The step is ordinary dynajax code (forward, ``backward()``, ``optimizer.step()``).
``dynajax.compile(step, mesh=mesh)`` splits each batch over the mesh's devices,
keeps the parameters replicated (``--fsdp``: sharded, as FSDP/ZeRO-3 does) and
lets XLA average the gradients inside the one executable. Two copies of the
model, from the same initial weights, train side by side on the same batches:
one on a single device, one on the mesh; the script prints each step's loss
and throughput for both, and checks that the losses agree.

By default the script splits the CPU into 4 JAX devices (``--simulate 4``: it sets
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` before JAX starts), so even a laptop compares 1
device with several. Simulated devices share the same cores, so expect a throughput ratio near or below 1:
the point is that the mesh runs the unchanged step and gets the same losses. ``--simulate 0`` uses the
devices the machine has (GPUs with ``--device cuda``).

    python examples/data_parallel.py [--steps 20] [--batch 256] [--fsdp] [--simulate 4] [--device cpu]
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time

SIMULATE = 4   # CPU devices the default run splits the machine into


def _simulated(argv: list) -> int:
    """The --simulate value on a command line (without parsing the rest, before JAX is imported)."""
    for i, a in enumerate(argv):
        if a == "--simulate" and i + 1 < len(argv):
            return int(argv[i + 1]) if argv[i + 1].isdigit() else SIMULATE
        if a.startswith("--simulate="):
            v = a.partition("=")[2]
            return int(v) if v.isdigit() else SIMULATE
    return SIMULATE


if __name__ == "__main__" and _simulated(sys.argv[1:]) > 1:
    # JAX reads XLA_FLAGS once, when it starts its CPU backend: set before anything imports it (a device
    # count already there gives way to the one asked for)
    _flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count={_simulated(sys.argv[1:])}".strip()

import numpy as np

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

SIZES = (784, 512, 512, 10)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(), nn.Linear(SIZES[1], SIZES[2]), nn.ReLU(),
                         nn.Linear(SIZES[2], SIZES[3]))


def make_trainer(mesh=None, fsdp: bool = False, seed: int = 0):
    """A compiled Adam step of a fresh model (seeded: every trainer starts from the same weights)."""
    dj.manual_seed(seed)
    model = make_model()
    opt = dj.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return dj.compile(step, mesh=mesh, param_sharding="fsdp" if fsdp else None), model


def batches(steps: int, batch: int, seed: int = 0):
    """Synthetic 10-class data: labels from a fixed random linear map of the inputs."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((SIZES[0], SIZES[-1])).astype(np.float32)
    for _ in range(steps):
        x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
        yield x, (x @ w).argmax(1)


def measure(steps: int, batch: int, devices: list, fsdp: bool = False, verbose: bool = True) -> dict:
    """Train a 1-device and an N-device copy side by side; per-step times (s) and losses of both."""
    mesh = dj.distributed.Mesh(devices=devices)
    runs = {"1": make_trainer(), "N": make_trainer(mesh, fsdp)}
    out = {k: {"ms": [], "loss": []} for k in runs}
    for i, (x, y) in enumerate(batches(steps, batch)):
        line = f"step {i + 1:3d}"
        for k, (step, _) in runs.items():
            bx, by = dj.tensor(x), dj.tensor(y)
            t0 = time.perf_counter()
            loss = step(bx, by).item()   # .item() waits for the result
            dt = time.perf_counter() - t0
            out[k]["ms"].append(dt * 1e3)
            out[k]["loss"].append(loss)
            name = "1 device" if k == "1" else f"{len(devices)} devices"
            line += f"   {name}: loss {loss:.4f} {dt * 1e3:8.1f} ms {batch / dt:9.0f} samples/s"
        if verbose:
            print(line + ("   (compiling)" if i == 0 else ""))
    warm = slice(1, None) if steps > 1 else slice(None)   # the first step compiles
    ms = {k: statistics.median(v["ms"][warm]) for k, v in out.items()}
    return {"devices": len(devices), "batch": batch, "ms_1": ms["1"], "ms_n": ms["N"],
            "samples_per_s_1": batch / ms["1"] * 1e3, "samples_per_s_n": batch / ms["N"] * 1e3,
            "speedup": ms["1"] / ms["N"], "losses_1": out["1"]["loss"], "losses_n": out["N"]["loss"],
            "max_loss_diff": float(np.max(np.abs(np.subtract(out["1"]["loss"], out["N"]["loss"]))))}


def main(steps: int = 20, device: str = "cpu", batch: int = 256, fsdp: bool = False, verbose: bool = True) -> dict:
    """Train on 1 and on all visible ``device``-type devices; print and return throughput and losses."""
    devices = dj.distributed.devices(device)
    if batch % len(devices):
        raise SystemExit(f"data_parallel: --batch {batch} must be a multiple of the {len(devices)} devices")
    r = measure(steps, batch, devices, fsdp, verbose)
    if verbose:
        n = r["devices"]
        print(f"median step: 1 device {r['ms_1']:.1f} ms ({r['samples_per_s_1']:.0f} samples/s), {n} devices "
              f"{r['ms_n']:.1f} ms ({r['samples_per_s_n']:.0f} samples/s): throughput ratio {n}/1 = "
              f"{r['speedup']:.2f}; largest loss difference {r['max_loss_diff']:.1e}")
    return r


def parse_args(argv=None):
    """Command-line flags (see _cli.py) plus --batch, --fsdp and --simulate."""
    ap = _cli.parser(__doc__, steps=20)
    ap.add_argument("--batch", type=int, default=256, help="global batch size (default 256)")
    ap.add_argument("--fsdp", action="store_true", help="shard parameters and optimizer state too")
    ap.add_argument("--simulate", type=int, default=SIMULATE, metavar="N",
                    help=f"split the CPU into N JAX devices (default {SIMULATE}; 0: the devices there are)")
    args = _cli.parse(ap, argv)
    if args.simulate < 0:
        sys.exit(f"{ap.prog}: error: --simulate must be 0 or a positive integer, got {args.simulate}")
    if args.device == "cpu" and args.simulate > 1 and len(dj.distributed.devices("cpu")) != args.simulate:
        sys.exit(f"{ap.prog}: error: --simulate {args.simulate}: JAX has already started its devices "
                 f"({len(dj.distributed.devices('cpu'))} CPU devices); run the script directly, which sets "
                 "XLA_FLAGS before JAX starts")
    return args


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.device, args.batch, args.fsdp)
