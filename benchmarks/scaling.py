"""Data-parallel scaling: step time of dynajax.compile on 1 device vs on N devices (data parallel, and FSDP).

The workload is examples/data_parallel.py's (MLP 784-512-512-10, Adam, cross-entropy), whose ``measure``
trains a 1-device and an N-device copy side by side on the same batches (interleaved, so machine noise
hits both alike) and checks their losses agree. The ratio printed is throughput on N devices / on one.

With several GPUs (or TPUs) visible it measures those. Otherwise it re-runs itself on N simulated CPU
devices (``--xla_force_host_platform_device_count``): they share the same cores, so the ratio is expected
near 1 or below -- the point there is that the sharded executable runs and agrees, not speed.

    python benchmarks/scaling.py [--devices 8] [--steps 30] [--batch 512]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _example():
    sys.path.insert(0, str(ROOT / "examples"))   # the example imports its _cli.py, as when run as a script
    spec = importlib.util.spec_from_file_location("data_parallel", ROOT / "examples" / "data_parallel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(steps: int, batch: int, simulated: bool) -> None:
    import jax
    import dynajax as dj
    example = _example()
    devices = dj.distributed.devices()
    kind = "simulated CPU devices (one machine's cores, shared)" if simulated else f"{devices[0].platform} devices"
    print(f"scaling: MLP {'-'.join(map(str, example.SIZES))}, Adam, global batch {batch}, {steps} steps "
          f"(median after the compiling one), {len(devices)} {kind}; jax {jax.__version__}")
    for fsdp in (False, True):
        r = example.measure(steps, batch, devices, fsdp=fsdp, verbose=False)
        name = f"{r['devices']} devices, {'FSDP' if fsdp else 'data parallel'}"
        print(f"  1 device                  {r['ms_1']:8.2f} ms/step  {r['samples_per_s_1']:9.0f} samples/s")
        print(f"  {name:<26}{r['ms_n']:8.2f} ms/step  {r['samples_per_s_n']:9.0f} samples/s  "
              f"throughput ratio {r['speedup']:.2f}  (largest loss difference {r['max_loss_diff']:.1e})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8, help="simulated CPU devices when fewer than 2 are visible")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--simulated", action="store_true", help=argparse.SUPPRESS)   # set by the re-run
    args = ap.parse_args(argv)
    if not args.simulated:
        import jax
        if jax.device_count() < 2:
            env = dict(os.environ, JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
            cmd = [sys.executable, __file__, "--simulated", "--steps", str(args.steps), "--batch", str(args.batch)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            print(proc.stdout, end="")   # through this process's stdout (run_all.py captures it)
            print(proc.stderr, end="", file=sys.stderr)
            if proc.returncode:
                sys.exit(proc.returncode)
            return
    report(args.steps, args.batch, args.simulated)


if __name__ == "__main__":
    main()
