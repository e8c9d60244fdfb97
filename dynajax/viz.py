"""Readable graphs: the one-line-per-op listing of a lowered graph, Graphviz DOT
text, and ``draw(tensor_or_lowered, path)`` to render it with Graphviz."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np

from ._tensor import Tensor
from .lower import Eqn, Lowered, Var, _short_dtype, _where_str, lower_graph

__all__ = ["draw", "listing", "to_dot"]

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


def _constants(low: Lowered) -> list:
    """Baked constants in order of first use."""
    consts, seen = [], set()
    for x in [x for e in low.eqns for x in e.ins] + list(low._out_leaves):
        if isinstance(x, Var) and x.kind == "const" and id(x) not in seen:
            seen.add(id(x))
            consts.append(x)
    return consts


def _const_str(a) -> str:
    a = np.asarray(a)
    if a.size <= 4:
        return np.array2string(a, precision=4, separator=", ").replace("\n", "")
    return f"<{_short_dtype(a.dtype)}[{','.join(map(str, a.shape))}] constant>"


def _redundant(e: Eqn, k: str, v) -> bool:
    """Static params the listing leaves out: a dtype equal to the result's, a shape equal to the input's."""
    try:
        if k == "dtype":
            return np.dtype(v) == e.outs[0].dtype
        if k in ("shape", "in_shape"):
            first = next((x for x in e.ins if isinstance(x, Var)), None)
            return first is not None and tuple(v) == first.shape
    except TypeError:
        return False
    return False


def _param_str(v) -> str:
    if isinstance(v, np.dtype) or isinstance(v, type) and issubclass(v, np.generic):
        return _short_dtype(v)
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def listing(low: Lowered) -> str:
    """One line per op: ``t3: f32[2,3] = mul(x, w)    # model.py:12  h = x * w``.

    The header names the inputs and parameters with their types; baked
    constants follow; the last line says which values are returned.
    """
    ins = [v for v in low._in_leaves if isinstance(v, Var)]
    lines = [f"lowered {low.name}({', '.join(map(repr, ins))})"]
    if low._param_vars:
        lines.append(f"  params: {', '.join(map(repr, low._param_vars))}")
    for c in _constants(low):
        lines.append(f"  {c!r} = {_const_str(c.value)}" + (f"    # {_where_str(c.where)}" if c.where else ""))
    body = []
    for e in low.eqns:
        args = [x.name if isinstance(x, Var) else repr(x.value) for x in e.ins]
        args += [f"{k}={_param_str(v)}" for k, v in e.params.items() if not _redundant(e, k, v)]
        body.append((f"  {', '.join(map(repr, e.outs))} = {e.label}({', '.join(args)})", _where_str(e.where)))
    width = min(max([len(code) for code, _ in body] + [0]), 80)
    lines += [f"{code:<{width}}    # {where}" if where else code for code, where in body]
    lines.append(f"  return {', '.join(x.name if isinstance(x, Var) else repr(x.value) for x in low._out_leaves)}")
    return "\n".join(lines)


def _q(s) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(obj) -> str:
    """Graphviz DOT text for a tensor's recorded graph or a :class:`~dynajax.lower.Lowered`:
    inputs (blue), parameters (orange), constants (grey), ops (boxes, source line as tooltip), outputs (green)."""
    low = _as_lowered(obj)
    out = ["digraph lowered {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10];']
    for v, color in [(v, "lightblue") for v in low._in_leaves if isinstance(v, Var)] + \
                    [(v, "orange") for v in low._param_vars]:
        out.append(f"  {_q(v.name)} [shape=ellipse, style=filled, fillcolor={color}, "
                   f"label={_q(f'{v.name}: {v.type_str()}')}];")
    for v in _constants(low):
        out.append(f"  {_q(v.name)} [shape=ellipse, style=filled, fillcolor=lightgrey, "
                   f"label={_q(f'{v.name} = {_const_str(v.value)}')}];")
    producer = {}
    for k, e in enumerate(low.eqns):
        res = ", ".join(v.type_str() for v in e.outs)
        out.append(f"  op{k} [shape=box, style=rounded, label={_q(f'{e.label} -> {res}')}, "
                   f"tooltip={_q(_where_str(e.where))}];")
        for x in e.ins:
            if isinstance(x, Var):
                out.append(f"  {producer.get(id(x), _q(x.name))} -> op{k};")
        for v in e.outs:
            producer[id(v)] = f"op{k}"
    for j, x in enumerate(low._out_leaves):
        if isinstance(x, Var):
            out.append(f"  out{j} [shape=doubleoctagon, style=filled, fillcolor=palegreen, "
                       f"label={_q(f'output {j}: {x.type_str()}')}];")
            out.append(f"  {producer.get(id(x), _q(x.name))} -> out{j};")
    out.append("}")
    return "\n".join(out)


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
