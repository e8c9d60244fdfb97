"""Run every benchmark in benchmarks/ and write benchmarks/RESULTS.md.

Each benchmark runs in a fresh process. A script feeds the results table by
exposing ``run() -> list[dict]``, one dict per row:

    {"workload": "MLP 784-512-512-10, batch 128, Adam", "unit": "ms/step",
     "dynajax_eager": 9.1, "dynajax_compiled": 3.0, "jax": 2.9, "torch": 3.3,
     "notes": "first call 900 ms"}

times being medians measured side by side in that one process (None where a
contender does not apply). A script without ``run()`` is run as a program: its
table lines "<contender>  <ms>  ..." are read into a row where they can be, and
its output is always kept verbatim at the end of the report. The demo's
workload (``python -m dynajax.demo``) is measured too.

    python benchmarks/run_all.py [--only compile_step op_overhead demo] [--out benchmarks/RESULTS.md]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import json
import os
import pathlib
import platform
import re
import runpy
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
COLUMNS = [("dynajax_eager", "dynajax eager"), ("dynajax_compiled", "dynajax compiled"),
           ("jax", "hand-written JAX"), ("torch", "PyTorch eager")]
RATIOS = [("dynajax_compiled", "jax"), ("dynajax_eager", "jax"), ("dynajax_compiled", "torch"),
          ("dynajax_eager", "torch")]
LOADED = 1.5          # load average above which the report says the machine was busy
_MARK = "@@run_all-json@@"
# contender names as benchmark scripts print them -> row keys
_CONTENDERS = [(re.compile(r"^dynajax compiled\b"), "dynajax_compiled"),
               (re.compile(r"^dynajax eager\b"), "dynajax_eager"),
               (re.compile(r"^(hand-written )?jax(\.jit)?\b", re.I), "jax"),
               (re.compile(r"^(PyTorch|torch) eager\b"), "torch")]
_TIME = re.compile(r"\s{2,}(\d+(?:\.\d+)?)(?:\s*(s|ms|us)\b)?")   # a time, and its unit where printed


def benchmarks() -> list[str]:
    """Names of the benchmark scripts (every benchmarks/*.py but this one), plus ``demo``."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem != "run_all" and not p.stem.startswith("_")) + ["demo"]


def _warm_median_ms(step, batches: list) -> float:
    """Median ms of ``step(tokens, labels)`` over the batches whose length was met before."""
    seen, times = set(), []
    for tokens, labels in batches:
        t0 = time.perf_counter()
        step(tokens, labels)
        if tokens.shape[1] in seen:
            times.append(time.perf_counter() - t0)
        seen.add(tokens.shape[1])
    return statistics.median(times) * 1e3


def _torch_demo_ms(batches: list, hidden: int = 32, deep_from: int = 6) -> float:
    """The demo's model and step written in PyTorch, run eagerly."""
    import torch
    torch.manual_seed(0)
    embed, cell = torch.nn.Embedding(4, 16), torch.nn.GRUCell(16, hidden)
    extra, head = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, 2)
    opt = torch.optim.Adam([p for m in (embed, cell, extra, head) for p in m.parameters()], lr=1e-2)

    def step(tokens, labels):
        opt.zero_grad()
        h = torch.zeros(tokens.shape[0], hidden)
        for x in embed(tokens).unbind(1):
            h = cell(x, h)
        if tokens.shape[1] >= deep_from:
            h = h + torch.tanh(extra(h))
        loss = torch.nn.functional.cross_entropy(head(h), labels)
        loss.backward()
        opt.step()
        return loss.item()
    return _warm_median_ms(step, [(torch.from_numpy(t), torch.from_numpy(y)) for t, y in batches])


def _jax_demo_ms(batches: list, hidden: int = 32, deep_from: int = 6) -> float:
    """The demo's model and step hand-written in JAX: value_and_grad + Adam, one jax.jit per length."""
    import jax
    import jax.numpy as jnp
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    shapes = {"embed": (4, 16), "w_ih": (16, 3 * hidden), "w_hh": (hidden, 3 * hidden), "b_ih": (3 * hidden,),
              "b_hh": (3 * hidden,), "extra_w": (hidden, hidden), "extra_b": (hidden,), "head_w": (hidden, 2),
              "head_b": (2,)}
    params = {k: 0.1 * jax.random.normal(keys[i % 5], s, jnp.float32) for i, (k, s) in enumerate(shapes.items())}

    def loss_fn(p, tokens, labels):
        xs = p["embed"][tokens]
        h = jnp.zeros((tokens.shape[0], hidden), jnp.float32)
        for t in range(tokens.shape[1]):   # unrolled: tokens.shape is static under jit
            ir, iz, i_n = jnp.split(xs[:, t] @ p["w_ih"] + p["b_ih"], 3, axis=1)
            hr, hz, h_n = jnp.split(h @ p["w_hh"] + p["b_hh"], 3, axis=1)
            r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
            h = (1 - z) * jnp.tanh(i_n + r * h_n) + z * h
        if tokens.shape[1] >= deep_from:
            h = h + jnp.tanh(h @ p["extra_w"] + p["extra_b"])
        logp = jax.nn.log_softmax(h @ p["head_w"] + p["head_b"])
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))

    @jax.jit
    def update(state, tokens, labels):
        p, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, labels)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        step_size, c2 = 1e-2 / (1 - 0.9 ** t), jnp.sqrt(1 - 0.999 ** t)
        p = jax.tree_util.tree_map(lambda p, m, v: p - step_size * m / (jnp.sqrt(v) / c2 + 1e-8), p, m, v)
        return loss, (p, m, v, t)

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [(params, zeros, zeros, jnp.zeros((), jnp.float32))]

    def step(tokens, labels):
        loss, state[0] = update(state[0], tokens, labels)
        return float(loss)
    return _warm_median_ms(step, [(jnp.asarray(t), jnp.asarray(y)) for t, y in batches])


def _demo_rows() -> list[dict]:
    from dynajax import demo
    r = demo.run(steps=100, out=io.StringIO())
    batches = demo.make_batches(100, 32, demo.LENGTHS, 0)   # the batches demo.run trained on
    eager, compiled = r["eager"], r["compiled"]
    row = {"workload": "demo: GRU classifier, lengths 3-7 (5 graphs), batch 32, Adam", "unit": "ms/step",
           "dynajax_eager": 1e3 / eager.steady_steps_per_s, "jax": _jax_demo_ms(batches),
           "dynajax_compiled": 1e3 / compiled.steady_steps_per_s if compiled else None}
    with contextlib.suppress(ImportError):
        row["torch"] = _torch_demo_ms(batches)
    row["notes"] = "medians over steps whose graph (sequence length) was met before, so compiles are excluded"
    if compiled:
        st = compiled.stats
        row["notes"] += (f"; dynajax.compile: {st.compiles} compiles in {st.compile_time:.1f} s, "
                         f"{st.graph_breaks / len(compiled.times):.1f} graph breaks/step")
    return [row]


def _worker(name: str) -> None:
    """Run one benchmark in this process; print its rows as JSON after a marker line."""
    if name == "demo":
        rows, text = _demo_rows(), ""
    else:
        path = HERE / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(HERE))
        spec.loader.exec_module(module)
        if hasattr(module, "run"):
            rows, text = module.run(), ""
        else:
            buf = io.StringIO()
            sys.argv = [str(path)]
            with contextlib.redirect_stdout(buf):
                runpy.run_path(str(path), run_name="__main__")
            text = buf.getvalue()
            rows = parse_table(text)
    print(_MARK + json.dumps({"rows": rows, "text": text}))


def parse_table(text: str) -> list[dict]:
    """Rows from a printed side-by-side table: a title line, then one "<contender>  <time> ..." line each."""
    rows, title, row = [], None, None
    for line in text.splitlines():
        key = next((k for pat, k in _CONTENDERS if pat.match(line.strip())), None)
        t = _TIME.search(line)
        if key and t:
            if row is None:
                row = {"workload": (title or "?").split(";")[0].strip(), "unit": t.group(2) or "ms/step"}
                rows.append(row)
            row.setdefault(key, float(t.group(1)))
        else:
            row = None
            if line.strip() and not line[0].isspace():   # a title; column headers are indented
                title = line
    return rows


def machine() -> list[str]:
    """Lines describing this machine and the software measured."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    import jax
    import jaxlib
    versions = f"Python {platform.python_version()}, jax {jax.__version__}, jaxlib {jaxlib.__version__}"
    with contextlib.suppress(ImportError):
        import torch
        versions += f", torch {torch.__version__}"
    devices = ", ".join(sorted({f"{d.platform} ({d.device_kind})" for d in jax.devices()}))
    return [f"- CPU: {cpu}, {cores} cores usable{mem}; {platform.system()} {platform.release()}",
            f"- JAX devices: {devices}", f"- {versions}"]


def _fmt(x) -> str:
    return "-" if x is None else (f"{x:.3g}" if x < 100 else f"{x:.0f}")


def _ratio(row: dict, a: str, b: str) -> str:
    x, y = row.get(a), row.get(b)
    return f"{x / y:.2f}x" if x is not None and y else "-"


def report(results: dict, load: tuple, started: str, seconds: float) -> str:
    """RESULTS.md text from ``{benchmark: {"rows": [...], "text": str, "error": str}}``."""
    lines = ["# Benchmark results", "",
             f"Generated by `python benchmarks/run_all.py` on {started} UTC in {seconds:.0f} s. Times are medians "
             "measured side by side in one process per benchmark; ratios are time ratios (below 1.00x: "
             "the first one is faster). Compare ratios, not absolute times, across runs.", "",
             "## Machine", ""] + machine()
    lines.append(f"- Load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f}")
    if max(load) > LOADED:
        lines += ["", f"**Measured on a loaded machine** (load average above {LOADED} on "
                      f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} "
                      "cores: other jobs were running), so absolute times are inflated and noisy; the ratios, "
                      "measured side by side, are more trustworthy than the times."]
    head = ["benchmark", "workload", "unit"] + [c for _, c in COLUMNS] + [
        f"{dict(COLUMNS)[a].replace('dynajax ', '')} / {dict(COLUMNS)[b]}" for a, b in RATIOS]
    lines += ["", "## Results", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for name, res in results.items():
        for row in res.get("rows", []):
            cells = [name, row["workload"], row.get("unit", "")] + [_fmt(row.get(k)) for k, _ in COLUMNS]
            cells += [_ratio(row, a, b) for a, b in RATIOS]
            lines.append("| " + " | ".join(cells) + " |")
            if row.get("notes"):
                notes.append(f"- {name}, {row['workload']}: {row['notes']}")
        if res.get("error"):
            notes.append(f"- {name}: FAILED: {res['error']}")
    if notes:
        lines += ["", "Notes:", ""] + notes
    raw = [(n, r["text"]) for n, r in results.items() if r.get("text")]
    if raw:
        lines += ["", "## Raw output of benchmarks without `run()`", ""]
        for name, text in raw:
            lines += [f"### {name}", "", "```", text.rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    """Run the benchmarks in subprocesses and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"a subset of {benchmarks()}")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"), help="report path (default benchmarks/RESULTS.md)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per benchmark (default 900)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return 0
    names = args.only or benchmarks()
    unknown = sorted(set(names) - set(benchmarks()))
    if unknown:
        print(f"run_all.py: error: unknown benchmark(s) {unknown}; available: {benchmarks()}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    results = {}
    for name in names:
        print(f"running {name} ...", flush=True)
        try:
            proc = subprocess.run([sys.executable, __file__, "--worker", name], capture_output=True, text=True,
                                  timeout=args.timeout, cwd=HERE.parent)
        except subprocess.TimeoutExpired:
            results[name] = {"error": f"timed out after {args.timeout:.0f} s"}
            continue
        payload = next((ln[len(_MARK):] for ln in proc.stdout.splitlines() if ln.startswith(_MARK)), None)
        if proc.returncode or payload is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            results[name] = {"error": f"exit code {proc.returncode}: {tail}"}
        else:
            results[name] = json.loads(payload)
        for row in results[name].get("rows", []):
            print("   ", row)
    text = report(results, (load0, os.getloadavg()[0]), started, time.perf_counter() - t0)
    pathlib.Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
