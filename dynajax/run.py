"""Run an unmodified PyTorch script on dynajax: ``python -m dynajax.run script.py args...``.

The script's ``import torch`` (and ``torch.nn``, ``torch.optim``, ...) resolves to dynajax
(``dynajax._torch_alias``); the script runs as ``__main__`` with ``sys.argv`` set to the script and its
arguments and its folder first on ``sys.path``, as ``python script.py args...`` would run it.
``python -m dynajax.run -m package.module args...`` runs a module the way ``python -m`` does.
"""
from __future__ import annotations

import os
import runpy
import sys

from . import _torch_alias

USAGE = ("usage: python -m dynajax.run script.py [args...]\n"
         "       python -m dynajax.run -m module [args...]\n"
         "Runs a PyTorch program with `import torch` resolved to dynajax.")


def main(argv: list | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(2 if not argv else 0)
    _torch_alias.install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            raise SystemExit(2)
        sys.argv = argv[1:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    path = argv[0]
    if not os.path.exists(path):
        print(f"python -m dynajax.run: can't open file {path!r}: no such file", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))   # as `python script.py` puts the script's folder
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
