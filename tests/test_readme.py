"""The README runs as written: every ```python block runs in a fresh interpreter, a ``print(...)  # text``
line prints ``text``, the set-up commands are the ones CI runs, the surface table is the generator's
output, and every relative link (with its #anchor) points at something in the repository."""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
# a block that splits the CPU into devices must be first in its process (JAX starts its devices once)
ALONE = [i for i, b in enumerate(BLOCKS) if "simulate_cpu_devices" in b or "XLA_FLAGS" in b]
SHARED = [i for i in range(len(BLOCKS)) if i not in ALONE]

# Runs each block of a JSON list in a fresh namespace of one process, stdout captured; prints one JSON line
_RUNNER = r"""
import contextlib, io, json, sys, traceback
results = []
for src in json.loads(sys.stdin.read()):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(src, "<README block>", "exec"), {"__name__": "__readme__"})
        results.append({"ok": True, "out": out.getvalue()})
    except BaseException:
        results.append({"ok": False, "out": out.getvalue(), "err": traceback.format_exc()})
print("RESULTS " + json.dumps(results))
"""


def _run(sources: list, env=None) -> list:
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(sources), capture_output=True,
                          text=True, cwd=ROOT, timeout=240, env={**os.environ, **(env or {})})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, f"the README runner died (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(line[len("RESULTS "):])


@pytest.fixture(scope="module")
def shared_results():
    return dict(zip(SHARED, _run([BLOCKS[i] for i in SHARED])))


def _expected(block: str) -> list:
    """The outputs a block's ``print(...)  # text`` lines promise, in order."""
    return [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.+)$", block, flags=re.M)]


def _check(i: int, r: dict) -> None:
    assert r["ok"], f"README python block {i + 1} failed:\n{BLOCKS[i]}\n{r.get('err')}"
    lines = [ln.strip() for ln in r["out"].splitlines()]
    pos = 0
    for want in _expected(BLOCKS[i]):
        assert want in lines[pos:], f"README block {i + 1} should print {want!r}; it printed:\n{r['out']}"
        pos = lines.index(want, pos) + 1


def test_readme_has_blocks_that_promise_outputs():
    assert len(BLOCKS) >= 6 and ALONE, "the README lost its code blocks or its several-devices block"
    assert sum(len(_expected(b)) for b in BLOCKS) >= 5


@pytest.mark.parametrize("i", SHARED)
def test_block_runs_as_written(i, shared_results):
    _check(i, shared_results[i])


@pytest.mark.parametrize("i", ALONE)
def test_device_block_runs_as_written(i):
    """The several-devices block runs alone in its process and really splits the batch: a 2x2 mesh of
    4 devices, and its step's loss goes down."""
    probe = BLOCKS[i] + "\nprint('DEVICES', len(mesh.devices.flat), sorted(mesh.axis_names))\n"
    r = _run([probe])[0]
    _check(i, r)
    lines = r["out"].splitlines()
    assert lines[-1] == "DEVICES 4 ['data', 'model']"
    losses = [float(x) for x in lines[:3]]
    assert losses[2] < losses[0]


def test_setup_commands_are_the_ones_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run adds --quiet to pip; the commands are otherwise the README's
    commands = [ln.replace(" --quiet", "") for ln in ci.splitlines() if ln.startswith("pip install")]
    assert commands == ["pip install -e . && python -m dynajax.demo",
                        'pip install -e ".[test]" && python -m pytest -x -q -n 2 --dist loadfile']
    bash = re.findall(r"^```bash\n(.*?)^```", README, flags=re.S | re.M)
    assert bash and bash[0].strip().splitlines() == commands


def test_surface_table_is_generated():
    # generated in a fresh interpreter: this process holds ops and attributes that other tests registered
    from dynajax import _surface
    start = README.index(_surface.BEGIN) + len(_surface.BEGIN)
    written = README[start:README.index(_surface.END)].strip()
    fresh = subprocess.run([sys.executable, "-m", "dynajax._surface"], capture_output=True, text=True, cwd=ROOT,
                           timeout=240, check=True).stdout.strip()
    assert written == fresh, "the README's surface table is stale: python -m dynajax._surface --write README.md"


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


@pytest.mark.parametrize("doc", ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
def test_links_point_inside_the_repository(doc):
    text = (ROOT / doc).read_text()
    base = (ROOT / doc).parent
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (base / path).resolve() if path else ROOT / doc
        if ROOT not in dest.parents and dest != ROOT or not dest.exists():
            bad.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), flags=re.M)}
            if anchor not in anchors:
                bad.append(f"{target}: no heading with that anchor")
    assert "../shared" not in text
    assert bad == []
