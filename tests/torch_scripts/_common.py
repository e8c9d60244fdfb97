"""Shared by the scripts in this folder: argument parsing, numpy-made initial weights, loss lines.

The scripts run unchanged under PyTorch and under ``python -m dynajax.run``; everything random they
need (weights, data, noise) comes from numpy, seeded, so both runs see the same numbers."""
import argparse
import math
import zlib

import numpy as np
import torch


def parser(description: str, steps: int = 20) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps, help="training steps to run")
    p.add_argument("--seed", type=int, default=1, help="seed of the numpy data and initial weights")
    return p


def numpy_init(model: torch.nn.Module, seed: int, scale: float = 1.0) -> None:
    """Overwrite every parameter with seeded numpy draws of the size PyTorch's default init has
    (uniform within 1/sqrt(fan_in); 1-D weights near one, as norm layers start)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            rng = np.random.RandomState((seed * 1000003 + zlib.crc32(name.encode())) % 2**32)
            shape = tuple(p.shape)
            if len(shape) >= 2:
                bound = scale / math.sqrt(math.prod(shape[1:]))
                value = rng.uniform(-bound, bound, shape)
            elif name.endswith("weight"):
                value = 1.0 + rng.uniform(-0.1, 0.1, shape)
            else:
                value = rng.uniform(-0.1, 0.1, shape)
            p.copy_(torch.from_numpy(value.astype(np.float64)).to(p.dtype))


def report(step: int, loss) -> None:
    print(f"step {step} loss {float(loss)!r}", flush=True)
