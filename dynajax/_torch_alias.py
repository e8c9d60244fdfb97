"""``import torch`` answered by dynajax: an import hook that runs unmodified PyTorch programs.

``python -m dynajax.run script.py args...`` (or :func:`install` in a notebook, before anything imports
PyTorch) puts a finder first on ``sys.meta_path`` that maps every ``torch.X.Y`` to ``dynajax.X.Y``.
Each ``torch...`` module is an alias module over its dynajax counterpart: attribute reads go to the
dynajax object (``torch.nn.Linear is dynajax.nn.Linear``), writes too (``torch.backends.cudnn.benchmark =
True`` sets dynajax's flag). What dynajax lacks fails where the program uses it: reading a missing
attribute raises :class:`MissingTorchAPI` (an ``AttributeError``, so ``hasattr`` probes answer False)
naming the full torch path, and importing a missing submodule raises ``ModuleNotFoundError`` naming it.

A few names exist only under the alias, where PyTorch's meaning differs from dynajax's own:
``torch.compile`` returns the model or function unchanged (``dynajax.compile`` compiles a whole
training step, with other semantics), and ``torch.__version__`` is PyTorch's version the API follows.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

__all__ = ["install", "uninstall", "installed", "MissingTorchAPI"]

TORCH_VERSION = "2.13.0+dynajax"   # the PyTorch release whose API dynajax follows; "+dynajax" marks the alias

# torch modules that dynajax implements as an object that is not a module (a class or namespace of
# functions); everything else must be a dynajax module of the same dotted path
_NAMESPACES = {"torch.cuda", "torch.cuda.amp", "torch.backends.cudnn", "torch.backends.cuda",
               "torch.backends.mps", "torch.backends.cpu", "torch.backends.mkldnn", "torch.backends.opt_einsum",
               "torch.version"}

# why a missing API is missing, where one reason covers a family of names
_HINTS = {
    "torch.sparse": "sparse tensors are not supported",
    "torch.sparse_coo_tensor": "sparse tensors are not supported",
    "torch.sparse_csr_tensor": "sparse tensors are not supported",
    "torch.jit": "TorchScript does not apply: dynajax.compile compiles a whole training step",
    "torch.fx": "there is no FX graph: dynajax.lower(fn, *args) gives the recorded graph as a JAX function",
    "torch._dynamo": "torch.compile runs the model unchanged under dynajax",
    "torch.special": "torch.special is not implemented yet",
}


class MissingTorchAPI(AttributeError):
    """A PyTorch API dynajax does not have, read through the torch alias."""


def _why(torch_name: str) -> str:
    parts = torch_name.split(".")
    for i in range(len(parts), 0, -1):
        hint = _HINTS.get(".".join(parts[:i]))
        if hint:
            return hint
    return "it is not implemented"


def missing_message(torch_name: str) -> str:
    return (f"dynajax has no {torch_name} (this program's `import torch` is dynajax, through dynajax.run or "
            f"dynajax.install_torch_alias()); {_why(torch_name)}")


_COMPILE_NOTED: list = []


def _torch_compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="inductor", mode=None,
                   options=None, disable: bool = False):
    """``torch.compile`` under the alias: the model or function itself, run eagerly (told once on stderr).
    ``dynajax.compile(step)`` is dynajax's way to compile, and it takes a whole training step."""
    if model is None:   # @torch.compile(mode=...)
        return lambda fn: _torch_compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                         options=options, disable=disable)
    if not callable(model):
        raise RuntimeError("torch.compile: the model or function to compile must be callable, got "
                           f"{type(model).__name__}")
    if not _COMPILE_NOTED:
        _COMPILE_NOTED.append(True)
        print("dynajax: torch.compile returns the model unchanged (it runs eagerly); dynajax.compile(step) "
              "compiles a whole training step", file=sys.stderr)
    return model


def _dynajax():
    """The dynajax package (this module is part of it and loads last, from its ``__init__``; a module-level
    ``import dynajax`` here would be an import cycle)."""
    return sys.modules["dynajax"]


class _VariableMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _dynajax().Tensor)

    def __call__(cls, data, requires_grad: bool = False, volatile: bool = False):
        return data.detach().requires_grad_(requires_grad)


class Variable(metaclass=_VariableMeta):
    """``torch.autograd.Variable`` (deprecated in PyTorch): ``Variable(t, requires_grad)`` is a new leaf
    sharing ``t``'s data; every tensor is a Variable."""


def _extras() -> dict:
    """Names that exist only under the alias, by torch module."""
    dynajax = _dynajax()
    return {
        "torch": {"compile": _torch_compile, "__version__": TORCH_VERSION,
                  "version": types.SimpleNamespace(__version__=TORCH_VERSION, cuda=None, hip=None, git_version="")},
        "torch.nn.modules.activation": {"MultiheadAttention": dynajax.nn.MultiheadAttention},
        "torch.cuda": {"empty_cache": lambda: None},
        "torch.autograd": {"Variable": Variable},
    }


class AliasModule(types.ModuleType):
    """``torch.<path>``: reads and writes go to the dynajax object it stands for."""

    def __init__(self, name: str, target, extras: dict) -> None:
        super().__init__(name, getattr(target, "__doc__", None))
        d = self.__dict__
        d["_dynajax_target"] = target
        d["__path__"] = []   # every alias may have submodules (the finder resolves them)
        d.update(extras)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name not in ("__all__", "__version__"):
            raise AttributeError(name)
        target = self.__dict__["_dynajax_target"]
        sub = f"{self.__name__}.{name}"
        if sub in sys.modules:
            return sys.modules[sub]
        try:
            value = getattr(target, name)
        except AttributeError:
            if name == "__all__":
                return [n for n in dir(target) if not n.startswith("_")]
            raise MissingTorchAPI(missing_message(sub)) from None
        if sub in _NAMESPACES or (isinstance(value, types.ModuleType)
                                   and value.__name__ == f"{getattr(target, '__name__', '')}.{name}"):
            return importlib.import_module(sub)   # the submodule's own alias, so its misses name torch too
        return value

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, AliasModule) or (name.startswith("__") and name.endswith("__")) or name in self.__dict__:
            self.__dict__[name] = value   # the import system's bookkeeping, submodules, alias-only names
        else:
            setattr(self.__dict__["_dynajax_target"], name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__:
            del self.__dict__[name]
        else:
            delattr(self.__dict__["_dynajax_target"], name)

    def __dir__(self) -> list:
        return sorted(set(dir(self.__dict__["_dynajax_target"])) | set(self.__dict__) - {"_dynajax_target"})

    def __repr__(self) -> str:
        return f"<module '{self.__name__}' (dynajax alias of {getattr(self._dynajax_target, '__name__', '?')})>"


def _resolve(torch_name: str):
    """The dynajax object ``torch_name`` stands for; ModuleNotFoundError naming it when there is none."""
    if torch_name == "torch":
        return _dynajax()
    parent_name, leaf = torch_name.rsplit(".", 1)
    parent = sys.modules.get(parent_name)
    if not isinstance(parent, AliasModule):
        parent = importlib.import_module(parent_name)
    extra = parent.__dict__.get(leaf)
    if torch_name in _NAMESPACES and extra is not None:
        return extra
    target = parent.__dict__["_dynajax_target"]
    if isinstance(target, types.ModuleType) and hasattr(target, "__path__"):
        dj_name = f"{target.__name__}.{leaf}"
        if importlib.util.find_spec(dj_name) is not None:
            return importlib.import_module(dj_name)
    value = getattr(target, leaf, None)
    if value is not None and (isinstance(value, types.ModuleType) or torch_name in _NAMESPACES):
        return value
    err = ModuleNotFoundError(f"No module named '{torch_name}': {missing_message(torch_name)}")
    err.name = torch_name
    raise err


class _Loader(importlib.abc.Loader):
    def __init__(self, target) -> None:
        self.target = target

    def create_module(self, spec):
        return AliasModule(spec.name, self.target, _EXTRAS.get(spec.name, {}))

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(_resolve(fullname)), is_package=True)
        spec.submodule_search_locations = []
        return spec


_FINDER = _Finder()
_EXTRAS: dict = {}


def installed() -> bool:
    return _FINDER in sys.meta_path


def _real_torch_modules() -> list:
    return [n for n, m in sys.modules.items()
            if (n == "torch" or n.startswith("torch.")) and m is not None and not isinstance(m, AliasModule)]


def install() -> None:
    """Make ``import torch`` (and every ``torch.X.Y``) resolve to dynajax in this process, from now on.

    Refuses (``RuntimeError``) when PyTorch itself is already imported: objects made by it would meet
    dynajax's under one name. Call it before anything imports torch (in a notebook: the first cell)."""
    if installed():
        return
    real = _real_torch_modules()
    if real:
        raise RuntimeError("dynajax.install_torch_alias(): PyTorch itself is already imported in this process "
                           f"({real[0]!r} in sys.modules), so `import torch` cannot become dynajax now; call it "
                           "before anything imports torch (a notebook's first cell, after restarting its kernel), "
                           "or run the script with `python -m dynajax.run script.py`")
    _EXTRAS.clear()
    _EXTRAS.update(_extras())
    sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Undo :func:`install`: drop the finder and the ``torch`` alias modules from ``sys.modules``."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n, m in sys.modules.items() if isinstance(m, AliasModule)]:
        del sys.modules[name]
