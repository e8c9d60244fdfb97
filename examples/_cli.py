"""Command-line flags shared by the examples: ``--steps``, ``--device``, ``--help``; bad values exit with one line."""
from __future__ import annotations

import argparse
import sys

import dynajax as dj


def parser(doc: str, steps: int | None = None, steps_help: str = "optimizer steps") -> argparse.ArgumentParser:
    """A parser described by the script's docstring, with ``--device`` and (if ``steps``) ``--steps``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if steps is not None:
        ap.add_argument("--steps", type=int, default=steps, help=f"{steps_help} (default {steps})")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or tpu (default cpu)")
    return ap


def parse(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parse ``argv``; a non-positive ``--steps`` or a device JAX does not see exits with a one-line message."""
    args = ap.parse_args(argv)
    if getattr(args, "steps", 1) < 1:
        sys.exit(f"{ap.prog}: error: --steps must be a positive integer, got {args.steps}")
    try:
        dj.device(args.device).jax_device()
    except RuntimeError as exc:   # names the devices JAX sees
        sys.exit(f"{ap.prog}: error: {exc}")
    return args
