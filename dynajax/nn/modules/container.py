"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``, and
the shape-only layers ``Identity``, ``Flatten``, ``Unflatten``."""
from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable

from ... import _epoch
from ..parameter import Parameter
from .module import Module, _addindent


def _index(idx: int, n: int) -> int:
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range")
    return idx % n


class _ListAccess:
    """Positional access shared by Sequential and ModuleList (children keyed "0", "1", ... in order)."""

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, list(self._modules)[_index(idx, len(self))], module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys))]]):
            del self._modules[k]
        self._renumber(list(self._modules.values()))

    def _renumber(self, mods: list) -> None:
        self.__dict__["_modules"] = OrderedDict((str(i), m) for i, m in enumerate(mods))
        _epoch.bump()   # (children changed hands, as Module.__delattr__ says)

    def pop(self, key):
        """Remove the module (or, for a slice, the container of modules) at ``key`` and return it."""
        v = self[key]
        del self[key]
        return v

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]):
        for m in modules:
            self.append(m)
        return self

    def _insert(self, index: int, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        mods = list(self._modules.values())
        mods.insert(operator.index(index), module)
        self._renumber(mods)


class Sequential(_ListAccess, Module):
    """Apply modules in order: ``Sequential(nn.Linear(4, 8), nn.ReLU())`` or from an OrderedDict."""

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self))]

    def insert(self, index: int, module: Module) -> "Sequential":
        """Insert ``module`` before position ``index`` (``-len(self) <= index <= len(self)``); returns self."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        self._insert(index, module)
        return self

    def _check_seq(self, other) -> None:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")

    def _check_factor(self, other) -> None:
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")

    def __add__(self, other: "Sequential") -> "Sequential":
        self._check_seq(other)
        return Sequential(*self, *other)

    def __iadd__(self, other: "Sequential") -> "Sequential":
        self._check_seq(other)
        return self.extend(list(other))

    def __mul__(self, other: int) -> "Sequential":
        self._check_factor(other)
        return Sequential(*(list(self) * other))

    __rmul__ = __mul__

    def __imul__(self, other: int) -> "Sequential":
        self._check_factor(other)
        return self.extend(list(self) * (other - 1))

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(_ListAccess, Module):
    """A list of modules whose parameters are registered: ``ModuleList([nn.Linear(2, 2)] * 3)``."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self)))]

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Append the modules of an iterable; returns self."""
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        return super().extend(modules)

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index`` (returns None, as PyTorch's)."""
        self._insert(index, module)

    def __iadd__(self, modules) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other) -> "ModuleList":
        return ModuleList([*self, *other])

    def _child_lines(self) -> list:
        """Runs of identical children are shown once, as PyTorch does: ``(0-2): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self._modules.values()]
        lines, i = [], 0
        while i < len(reprs):
            j = i
            while j + 1 < len(reprs) and reprs[j + 1] == reprs[i]:
                j += 1
            if j > i:
                lines.append(f"({i}-{j}): {j - i + 1} x " + _addindent(reprs[i], 2))
            else:
                lines.append(f"({i}): " + _addindent(reprs[i], 2))
            i = j + 1
        return lines


class _DictAccess:
    """Mapping methods over the registry named by ``_store`` ("_modules" or "_parameters")."""

    _store = "_modules"

    def _d(self) -> dict:
        return self.__dict__[self._store]

    def __getitem__(self, key: str):
        return self._d()[key]

    def __delitem__(self, key: str) -> None:
        del self._d()[key]
        _epoch.bump()

    def __len__(self) -> int:
        return len(self._d())

    def __iter__(self):
        return iter(self._d())

    def __contains__(self, key: str) -> bool:
        return key in self._d()

    def keys(self):
        return self._d().keys()

    def values(self):
        return self._d().values()

    def items(self):
        return self._d().items()

    def pop(self, key: str):
        """Remove ``key`` and return its value (no default, as PyTorch's)."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        self._d().clear()
        _epoch.bump()

    def update(self, values) -> None:
        for k, v in (values.items() if hasattr(values, "items") else values):
            self[k] = v


class ModuleDict(_DictAccess, Module):
    """A dict of modules whose parameters are registered."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)


class ParameterList(Module):
    """A list of Parameters registered under "0", "1", ..."""

    def __init__(self, values=None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def __getitem__(self, idx: int) -> Parameter:
        return self._parameters[str(_index(idx, len(self)))]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def append(self, value) -> "ParameterList":
        self.register_parameter(str(len(self)), value if isinstance(value, Parameter) else Parameter(value))
        return self

    def extend(self, values) -> "ParameterList":
        for v in values:
            self.append(v)
        return self


class ParameterDict(_DictAccess, Module):
    """A dict of Parameters."""

    _store = "_parameters"

    def __init__(self, parameters=None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))


class Identity(Module):
    """Returns its input unchanged (constructor arguments are ignored)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expand dim ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
