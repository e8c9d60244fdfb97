"""``Optimizer``: parameter groups with per-group options, per-parameter state, and
(de)serialization in PyTorch's layout. Updates run under ``no_grad`` and write
parameters and state in place, so versions bump as in PyTorch."""
from __future__ import annotations

import copy
import warnings
from collections import defaultdict

import numpy as np

from .. import _dtype, _epoch
from .._tensor import Tensor, _make
from ..autograd import grad_mode
from ..autograd.engine import reset_grad
from ..ops.dispatch import current
from ..ops.views import write


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def set_(t: Tensor, value: Tensor) -> Tensor:
    """Write ``value`` into ``t`` in place (no graph; bumps ``t``'s version)."""
    return write(t, value)


class Optimizer:
    """Base class: ``Optimizer(params_or_groups, defaults)``; subclasses implement ``_update``.

    >>> opt = dynajax.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> loss.backward(); opt.step(); opt.zero_grad()
    """

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = defaults
        self.state: dict = defaultdict(dict)
        self._host_steps: dict = {}  # id(0-d state tensor) -> (tensor, its version, its value then)
        self.param_groups: list = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__name__}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self) -> str:
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for k in sorted(group):
                if k != "params":
                    s += f"\n    {k}: {group[k]}"
        return s + "\n)"

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters (tensors, or ``(name, tensor)`` pairs) with its own options (missing options
        take the defaults). As PyTorch, ``param_group`` itself becomes the group, and a parameter listed twice
        in it warns and is updated twice per step."""
        _epoch.bump()
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        param_group["params"] = params
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not self.defaults.get("differentiable", None) and not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in self.defaults.items():
            if v is required and k not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            param_group.setdefault(k, v)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
            self._update_group = self._update_in_rounds
        seen = set()
        for g in self.param_groups:
            seen.update(id(p) for p in g["params"])
            if ("param_names" in param_group) != ("param_names" in g):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. cannot add param group "
                                 f"{which} to the optimizer")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized parameters (to None by default)."""
        cap = current()   # (a compiled step that raises gives each .grad back: ``Capture.note_grad``)
        for g in self.param_groups:
            for p in g["params"]:
                if cap is not None:
                    cap.note_grad(p)
                reset_grad(p, set_to_none)

    @grad_mode.no_grad()
    def step(self, closure=None):
        """Update every parameter that has a gradient; ``closure`` re-evaluates and returns the loss."""
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        state = self.state
        for group in self.param_groups:
            items = []
            maximize = group.get("maximize", False)
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g._rg or g._base is not None:   # (a grad with a graph, or a view: read through an alias)
                    g = g.detach()
                if maximize:
                    g = -g
                items.append((p, g, state[p]))
            self._update_group(items, group)
        return loss

    def _update_group(self, items: list, group: dict) -> None:
        """Update one group's parameters, ``items`` a list of ``(param, grad, state)``: one ``_update``
        each, unless the optimizer fuses them into one op for the group (``algorithms._update_fused``)."""
        for p, g, state in items:
            self._update(p, g, state, group)

    def _update_in_rounds(self, items: list, group: dict) -> None:
        """``_update_group`` of an optimizer with a parameter listed twice in a group (set on the instance, so
        others pay nothing): a parameter listed twice is updated twice in a row, as by PyTorch's loop."""
        for r in _rounds(items):
            type(self)._update_group(self, r, group)

    def _init_state(self, p: Tensor, state: dict, group: dict) -> None:
        """Make ``p``'s state on its first update (a fused update reads it before any ``_update`` runs)."""

    def _update(self, p: Tensor, grad: Tensor, state: dict, group: dict) -> None:
        raise NotImplementedError

    def _step(self, state: dict) -> float:
        """Increment ``state['step']`` (a float32 tensor, as in PyTorch) and return its value.

        The value is also tracked on the host (synced once per step tensor, then
        advanced by the tensor's version counter), so a step needs no device read:
        under ``dynajax.compile`` that read would be a graph break every step.
        """
        t, value = self._next_step(state)
        t.add_(1)
        return value

    def _next_step(self, state: dict) -> tuple:
        """``(state['step'], the value it will have)`` for an update that writes the incremented step
        itself, exactly once (a fused update op): the host count follows the version counter."""
        t = state.get("step")
        if t is None:
            t = state["step"] = new_step()
        known = self._mirror(t)
        return t, known[2] + (t._version - known[1]) + 1

    def _mirror(self, t, same_version: bool = False) -> tuple:
        """``(t, version, value)``: the host's copy of 0-d state tensor ``t`` at some version of it, read
        from the device only the first time (or, with ``same_version``, whenever ``t`` was written since)."""
        known = self._host_steps.get(id(t))
        if known is None or known[0] is not t or (same_version and known[1] != t._version):
            known = self._host_steps[id(t)] = (t, t._version, float(t.item()))
        return known

    def _scale_scalar(self, t, factor: float) -> float:
        """``t.mul_(factor)`` for a 0-d state tensor (NAdam's momentum product), returning the new value
        from a host mirror: read from the device once, then computed on the host in ``t``'s dtype as
        the device computes it, while ``t``'s version counter shows only these writes. Reading it back
        every step would be a graph break every step under ``dynajax.compile``."""
        known = self._mirror(t, same_version=True)
        t.mul_(factor)
        kind = np.dtype(t._v.dtype).type
        value = float(kind(known[2]) * kind(factor))
        self._host_steps[id(t)] = (t, t._version, value)
        return value

    # ---------------------------------------------------------------- state dict
    def state_dict(self) -> dict:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}`` as PyTorch."""
        index, groups, start = {}, [], 0
        for g in self.param_groups:   # (PyTorch's numbering, a parameter listed twice in a group included)
            packed = {k: v for k, v in g.items() if k != "params"}
            index.update({id(p): i for i, p in enumerate(g["params"], start) if id(p) not in index})
            packed["params"] = [index[id(p)] for p in g["params"]]
            start += len(packed["params"])
            groups.append(packed)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index and s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore options and state saved by :meth:`state_dict` (dynajax's or PyTorch's), as PyTorch does:
        the group and parameter counts must match (ValueError); each group becomes the saved group with this
        optimizer's parameters (options missing from it stay missing, so ``SGD`` given ``Adam``'s state dict
        lacks ``momentum`` at ``step``, as in PyTorch, while the flags PyTorch's ``__setstate__`` fills in
        take their defaults); state tensors are cast to their parameter's dtype and device, ``step`` kept."""
        _epoch.bump()
        state_dict = state_dict.copy()
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = {i: (p, s) for g, s in zip(groups, saved_groups) for i, p in zip(s["params"], g["params"])}
        state: dict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                p, s = id_map[k]
                state[p] = _cast_state(v, p, s, None)
            else:
                state[k] = v   # (state of no parameter is kept as is, as PyTorch keeps it)
        for g, s in zip(groups, saved_groups):
            params, names = g["params"], g.get("param_names")
            g.clear()   # (the group dict itself stays: it may be the one given to add_param_group)
            g.update(s)
            g["params"] = params
            if names is not None and "param_names" not in s:
                g["param_names"] = names
            for k in _FLAG_OPTIONS:
                if k in self.defaults:
                    g.setdefault(k, self.defaults[k])
            _share_steps([state[p] for p in params if p in state])
        self.state = state


_STEP_ZEROS: dict = {}   # (dtype, devices) -> the array every new step counter there holds (``new_step``)


def new_step() -> Tensor:
    """A new step counter: a 0-d zero of the default dtype, as PyTorch's ``state['step']``. Counters made on
    one device hold one array (immutable, and copied rather than donated while this table holds it:
    ``compile._unshare``), so a group's counters start out sharing it, as its fused updates keep them
    (``_fused._fused_apply``: one step array for the update to read and write); each is its own tensor."""
    from ..ops.creation import tensor
    t = tensor(0.0)
    v = t._v
    first = _STEP_ZEROS.setdefault((v.dtype, frozenset(v.devices())), v)
    return t if first is v else _make(first)


def _share_steps(states: list) -> None:
    """Loaded step counters of one group that are equal 0-d tensors of one dtype and device are made to hold
    one array, as the group's own updates keep them (``_fused._fused_apply``: one step array for a fused
    update to read and write); each is still its own tensor."""
    steps = [s.get("step") for s in states]
    if len(steps) < 2 or not all(isinstance(t, Tensor) and t._base is None and t._v.shape == () for t in steps):
        return
    first = steps[0]._v
    if any(t._v.dtype != first.dtype or t._v.devices() != first.devices() for t in steps):
        return
    values = np.asarray([np.asarray(t._v) for t in steps])   # (a load reads its values anyway)
    if (values == values[0]).all():
        for s in states:
            s["step"] = _make(first)


# options a PyTorch optimizer's __setstate__ fills in for state dicts saved before they existed
_FLAG_OPTIONS = ("foreach", "maximize", "differentiable", "capturable", "fused", "decoupled_weight_decay",
                 "nesterov", "centered", "amsgrad")


def _rounds(items: list) -> list:
    """``items`` (``(param, grad, state)``) split into rounds without a repeated parameter: round k holds the
    k-th listing of each parameter, in order."""
    rounds: list = []
    count: dict = {}
    for item in items:
        k = count[id(item[0])] = count.get(id(item[0]), -1) + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(item)
    return rounds


def _cast_state(v, p: Tensor, group: dict, key):
    """A copy of state value ``v`` for parameter ``p`` as PyTorch casts it: tensors to ``p``'s device, and to
    its dtype when ``p`` is floating point, but ``step`` only to float32 under ``capturable``/``fused``;
    dicts, lists and tuples item by item."""
    from ..nn.parameter import _value_of
    if isinstance(v, dict):
        return {k: _cast_state(x, p, group, k) for k, x in v.items()}
    if type(v) in (list, tuple):
        return type(v)(_cast_state(x, p, group, None) for x in v)
    if key == "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
        v = np.asarray(float(v), np.float32)   # (an old checkpoint's count: PyTorch's __setstate__ makes a tensor)
    if isinstance(v, Tensor) or hasattr(v, "shape") and hasattr(v, "dtype"):
        t = _make(_value_of(v))
        if key == "step":
            if group.get("capturable") or group.get("fused"):
                t = t.to(device=p.device, dtype=_dtype.float32)
        elif p.is_floating_point():
            t = t.to(device=p.device, dtype=p.dtype)
        else:
            t = t.to(device=p.device)
        return t.clone()
    return copy.deepcopy(v)
