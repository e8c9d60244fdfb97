"""Pictures of recorded graphs: ``draw(tensor_or_lowered, path)`` via Graphviz."""
from __future__ import annotations

import os
import shutil
import subprocess

from ._tensor import Tensor
from .lower import Lowered, lower_graph

__all__ = ["draw", "to_dot"]

_INSTALL = ("Graphviz's `dot` program was not found on PATH, so {path!r} cannot be rendered. Install Graphviz "
            "(apt-get install graphviz, brew install graphviz or conda install graphviz), or write DOT text "
            "instead: draw(x, 'graph.dot') or lowered.to_dot() need no Graphviz.")


def _as_lowered(obj) -> Lowered:
    if isinstance(obj, Lowered):
        return obj
    if isinstance(obj, Tensor):
        if obj.grad_fn is None:
            raise ValueError("draw: this tensor has no recorded graph (grad_fn is None); compute it from tensors "
                             "with requires_grad=True, or pass dynajax.lower(fn, *args)")
        return lower_graph(obj)
    raise TypeError(f"draw expects a Tensor with a recorded graph or a Lowered, got {type(obj).__name__}")


def to_dot(obj) -> str:
    """Graphviz DOT text for a tensor's recorded graph or a :class:`~dynajax.lower.Lowered`."""
    return _as_lowered(obj).to_dot()


def draw(obj, path: str) -> str:
    """Render the graph of ``obj`` (a tensor's recorded graph or a Lowered) to ``path``.

    The format comes from the suffix (``.svg``, ``.png``, ``.pdf``; ``.dot``
    writes the DOT text and needs no Graphviz). Returns ``path``.

    >>> loss = (x * w).sum(); dynajax.viz.draw(loss, "loss.svg")
    """
    dot = to_dot(obj)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "svg"
    if fmt in ("dot", "gv"):
        with open(path, "w") as f:
            f.write(dot)
        return path
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(_INSTALL.format(path=path))
    proc = subprocess.run([exe, f"-T{fmt}", "-o", path], input=dot.encode(), capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"Graphviz failed to render {path!r}: {proc.stderr.decode().strip()}")
    return path
