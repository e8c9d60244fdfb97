"""The package is built in floors, read bottom-up; a module imports only from its own floor or lower ones.

Floors (docs/design.md draws them):

    8 top        dynajax (the public namespace), demo, run
    7 libraries  nn, optim, distributions, utils, amp, serialization, linalg/fft/special namespaces
    6 compile    compile/ (capture, backward, replay, speculate, bucketing, rolling, vjpcheck, cache), distributed
    5 tools      lower, viz, func, testing, nn.Module and Parameter (the classes compile wraps)
    4 autograd   the tape engine and custom Functions (they call the ops)
    3 ops        the op families, autocast, random
    2 tensor     _tensor (its methods reach higher floors only through ``_tensor.upcalls``)
    1 registry   ops.registry
    0 base       dtypes, devices, grad modes, graph nodes, the dispatch mode (ops.dispatch), small caches

The checks read the source (``ast``), so a function-level import is held to the same rule as a
module-level one; module-level imports must also form no cycle, so the package loads bottom-up.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "dynajax"

FLOORS = {
    0: ["dynajax._dtype", "dynajax._epoch", "dynajax._lru", "dynajax._kernel_cache", "dynajax._rows", "dynajax._exe_store", "dynajax._format", "dynajax._device",
        "dynajax._sizes", "dynajax._deferred", "dynajax.autograd.grad_mode", "dynajax.autograd.graph", "dynajax.ops.dispatch"],
    1: ["dynajax.ops.registry"],
    2: ["dynajax._tensor"],
    3: ["dynajax.random", "dynajax.ops"],
    4: ["dynajax.autograd"],
    5: ["dynajax.lower", "dynajax.viz", "dynajax.func", "dynajax.testing", "dynajax.nn.parameter",
        "dynajax.nn.modules.module"],
    6: ["dynajax.compile", "dynajax.distributed"],
    7: ["dynajax.nn", "dynajax.optim", "dynajax.distributions", "dynajax.utils", "dynajax.amp",
        "dynajax._grad_scaler", "dynajax.serialization", "dynajax._torch_pickle", "dynajax._tensortype", "dynajax.linalg", "dynajax.fft", "dynajax.special", "dynajax.signal",
        "dynajax.accelerator", "dynajax.backends", "dynajax.onnx", "dynajax.masked"],
    8: ["dynajax", "dynajax.demo", "dynajax.run", "dynajax._torch_alias", "dynajax._surface"],
}


def _modules() -> dict:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def floor_of(module: str) -> int | None:
    """The floor of the longest entry of FLOORS that is ``module`` or a package holding it."""
    best, best_len = None, -1
    for floor, names in FLOORS.items():
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = floor, len(name)
    return best


def _imports(module: str, path: pathlib.Path, modules: dict):
    """(target module, line, inside a function?) for each import of a dynajax module in ``path``."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                for alias in child.names:
                    target = f"{source}.{alias.name}"
                    target = target if target in modules else source
                    if target in modules:
                        yield target, child.lineno, in_function
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in modules:
                        yield alias.name, child.lineno, in_function
            yield from walk(child, inner)

    yield from walk(tree, False)


# Module-level import cycles still to break, each with its reason; the test fails when one is gone (remove it here)
# or a new one appears. None is left (the last, nn._losses <-> nn.functional, went when the activations both use
# moved to nn._activations), so any cycle found is a new one.
KNOWN_CYCLES = set()

MODULES = _modules()
EDGES = [(m, t, line, inner) for m, p in MODULES.items() for t, line, inner in _imports(m, p, MODULES) if t != m]


def test_every_module_has_a_floor():
    assert [m for m in MODULES if floor_of(m) is None] == []


def test_no_module_imports_from_a_higher_floor():
    upward = [f"{m}:{line} imports {t} (floor {floor_of(m)} -> {floor_of(t)})"
              for m, t, line, _ in EDGES if floor_of(t) > floor_of(m)]
    assert upward == []


def test_module_level_imports_have_no_cycle():
    graph = {m: set() for m in MODULES}
    for m, t, _, inner in EDGES:
        # a package's own __init__ importing its submodules is how a package is assembled, not a cycle
        if not inner and not t.startswith(m + "."):
            graph[m].add(t)
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    found = {tuple(sorted(set(c))) for c in cycles}
    assert found == KNOWN_CYCLES


def test_the_checker_sees_an_upward_import(tmp_path):
    """The floor check is live: an ops module importing the compiler, or a function-level import, is found."""
    mod = tmp_path / "dynajax" / "ops" / "fake.py"
    mod.parent.mkdir(parents=True)
    mod.write_text("from ..compile import capture\n\ndef f():\n    from ..nn import functional\n")
    mods = dict(MODULES, **{"dynajax.ops.fake": mod})
    found = [(t, inner) for t, _, inner in _imports("dynajax.ops.fake", mod, mods)]
    assert found == [("dynajax.compile.capture", False), ("dynajax.nn.functional", True)]
    assert floor_of("dynajax.ops.fake") == 3 and floor_of("dynajax.compile.capture") == 6
