"""Recorded graph: one ``Node`` per op application that needs a gradient.

A Node holds the op, its static params, the edges to its inputs' producers
(another Node's output, or a leaf Tensor) and the tensors its VJP rule reads,
each with the version it had when saved.
"""
from __future__ import annotations

import itertools

_seq = itertools.count()

FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


class Node:
    """A recorded op application (PyTorch's ``grad_fn``)."""

    __slots__ = ("op", "params", "edges", "saved", "consts", "in_meta", "out_saved", "out_meta",
                 "seq", "pre_hooks", "freed", "__weakref__")

    def __init__(self, op, params, edges, saved, consts, in_meta, out_saved, out_meta):
        self.op = op
        self.params = params
        self.edges = edges          # per input: (Node, out_idx) | (leaf Tensor, -1) | None
        self.saved = saved          # per input: (Tensor, version) | raw non-tensor value | None
        self.consts = consts        # per input: array of a tensor input that needs no grad, else None
        self.in_meta = in_meta      # per input: (shape, np dtype) for tensors, else None
        self.out_saved = out_saved  # (value or tuple of values, version counter, version) | None
        self.out_meta = out_meta    # tuple of (shape, np dtype) per output
        self.seq = next(_seq)
        self.pre_hooks = None       # {out_idx: [hook, ...]} from Tensor.register_hook / retain_grad
        self.freed = False

    def name(self) -> str:
        return self.op.backward_name

    def __repr__(self) -> str:
        return f"<{self.op.backward_name} object at {id(self):#x}>"

    @property
    def next_functions(self) -> tuple:
        out = []
        for e in self.edges:
            if e is None:
                out.append((None, 0))
            elif e[1] < 0:
                out.append((AccumulateGrad(e[0]), 0))
            else:
                out.append(e)
        return tuple(out)

    def register_hook(self, hook):
        raise NotImplementedError("hooks on grad_fn nodes are not supported; use Tensor.register_hook")


class AccumulateGrad:
    """The sink of a leaf tensor's gradient, as listed in ``next_functions``."""

    __slots__ = ("variable",)

    def __init__(self, variable) -> None:
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, AccumulateGrad) and other.variable is self.variable

    def __hash__(self) -> int:
        return id(self.variable)

    next_functions = ()
