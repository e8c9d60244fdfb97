"""Variable sequence length: total wall time of a GRU language-model training run whose batches have
lengths drawn uniformly from 10..50, compiles included, side by side in one process.

Model: embedding 64, GRU hidden 128, vocab 100, batch 32, Linear to vocab, cross-entropy over every
position (padded positions ignored), Adam. The same sequence of batches runs through:

- dynajax.compile + buckets: ``nn.GRU`` (one fused scan op per layer), ``dynamic=`` pads the length to a
  multiple of 16 (targets with ``ignore_index``): one executable per bucket;
- dynajax.compile + one bucket: the same with one bucket, the longest length (50): one executable. The
  scan skips the padded steps (no matmul), so padding costs only the per-position matmuls around it;
- dynajax.compile + one bucket, second run: the same as a script run a second time with
  ``dynajax.set_compile_cache(folder)``: the executables come from the folder the first run filled
  (JAX's in-memory caches cleared in between, as in a new process);
- dynajax.compile, no buckets: the same step, one executable per distinct length;
- dynajax.compile, GRUCell loop: the step written as a Python loop over ``nn.GRUCell``, padded to
  buckets; loop rolling compiles the time loop and its backward as two scans;
- dynajax eager and PyTorch eager (``torch.nn.GRU``; default threads and one thread: on a loaded
  machine PyTorch's thread pool can be many times slower than one thread, so both are shown and the
  target compares with the faster);
- hand-written JAX, unrolled: ``jax.jit`` of value_and_grad of a Python-unrolled GRU step + Adam,
  retraced and recompiled for every new length (what tracing a define-by-run step gives);
- hand-written JAX, scan: the time loop as ``lax.scan``, lengths padded to the same buckets (what a
  JAX expert writes; the reference for what XLA gives on this machine).

Prints total seconds per contender, the number of executables and the time spent compiling, and the
ratios the issue asks for. ``run()`` returns rows for benchmarks/run_all.py.

    python benchmarks/variable_length.py [--steps 200] [--jax-steps N] [--skip cell]
    python benchmarks/variable_length.py --repeat 5     # one bucket vs PyTorch only, 5 cold pairs

``--jax-steps N`` measures hand-written JAX on the first N steps only and extrapolates its total
(printed as such).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_step import _adam_update, _uniform  # noqa: E402

VOCAB, EMBED, HIDDEN, BATCH = 100, 64, 128, 32
LO, HI = 10, 50
BUCKET = 16
LR = 1e-3
IGNORE = -100


def batches(steps: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        T = int(rng.integers(LO, HI + 1))
        seq = rng.integers(0, VOCAB, (T + 1, BATCH))
        out.append((seq[:-1].astype(np.int64), seq[1:].astype(np.int64)))
    return out


# ---------------------------------------------------------------- dynajax
def dynajax_step(cell_loop: bool = False):
    dj.manual_seed(0)
    emb, head = nn.Embedding(VOCAB, EMBED), nn.Linear(HIDDEN, VOCAB)
    rnn = nn.GRUCell(EMBED, HIDDEN) if cell_loop else nn.GRU(EMBED, HIDDEN)
    params = [*emb.parameters(), *rnn.parameters(), *head.parameters()]
    opt = dj.optim.Adam(params, lr=LR)

    def step(tokens, targets):
        opt.zero_grad()
        x = emb(tokens)
        if cell_loop:
            h, hs = dj.zeros(BATCH, HIDDEN), []
            for xt in x.unbind(0):
                h = rnn(xt, h)
                hs.append(h)
            out = dj.stack(hs)
        else:
            out, _ = rnn(x)
        loss = F.cross_entropy(head(out).reshape(-1, VOCAB), targets.reshape(-1), ignore_index=IGNORE)
        loss.backward()
        opt.step()
        return loss
    return step


def bucketed(step, sizes=BUCKET):
    spec = {0: sizes}
    return dj.compile(step, dynamic={"tokens": spec, "targets": spec}, pad={"targets": IGNORE})


def time_dynajax(step, data) -> tuple:
    losses = []
    t0 = time.perf_counter()
    for tok, tgt in data:
        losses.append(step(dj.tensor(tok), dj.tensor(tgt)))
    losses = [float(v) for v in losses]   # waits for the last step
    return time.perf_counter() - t0, losses


def _second_run(data) -> dict:
    """The one-bucket run as a second run of the same script: with ``dynajax.set_compile_cache`` on a new
    folder, one run fills it (its time also reported: it pays the writes), then JAX's in-memory caches
    are cleared, as in a new process, and the timed run loads its executables from disk."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        dj.set_compile_cache(folder)
        try:
            fill, _ = time_dynajax(bucketed(dynajax_step(), [HI]), data)
            jax.clear_caches()
            step = bucketed(dynajax_step(), [HI])
            secs, losses = time_dynajax(step, data)
        finally:
            dj.set_compile_cache(None)
    st = step.stats
    return {"seconds": secs, "first_run_seconds": fill, "first_loss": losses[0], "last_loss": losses[-1],
            "executables": st.compiles, "compile_seconds": st.compile_time, "capture_seconds": st.capture_time,
            "rolled_loops": st.rolled_loops, "bucket_hits": st.bucket_hits, "cache_loads": st.cache_loads}


# ---------------------------------------------------------------- PyTorch
def time_torch(data, threads: int | None = None) -> tuple:
    import torch
    default = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _time_torch(torch, data)
    finally:
        torch.set_num_threads(default)


def _time_torch(torch, data) -> tuple:
    torch.manual_seed(0)
    emb, gru, head = torch.nn.Embedding(VOCAB, EMBED), torch.nn.GRU(EMBED, HIDDEN), torch.nn.Linear(HIDDEN, VOCAB)
    params = [*emb.parameters(), *gru.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=LR)
    losses = []
    t0 = time.perf_counter()
    for tok, tgt in data:
        opt.zero_grad()
        out, _ = gru(emb(torch.from_numpy(tok)))
        loss = torch.nn.functional.cross_entropy(head(out).reshape(-1, VOCAB), torch.from_numpy(tgt).reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return time.perf_counter() - t0, losses


# ---------------------------------------------------------------- hand-written JAX (unrolled)
def jax_init():
    ks = jax.random.split(jax.random.PRNGKey(0), 7)
    return {"emb": jax.random.normal(ks[0], (VOCAB, EMBED)),
            "w_ih": _uniform(ks[1], (EMBED, 3 * HIDDEN), HIDDEN), "w_hh": _uniform(ks[2], (HIDDEN, 3 * HIDDEN), HIDDEN),
            "b_ih": _uniform(ks[3], (3 * HIDDEN,), HIDDEN), "b_hh": _uniform(ks[4], (3 * HIDDEN,), HIDDEN),
            "hw": _uniform(ks[5], (HIDDEN, VOCAB), HIDDEN), "hb": _uniform(ks[6], (VOCAB,), HIDDEN)}


def _jax_loss(p, tokens, targets):
    x = p["emb"][tokens]
    h = jnp.zeros((tokens.shape[1], HIDDEN))
    hs = []
    for t in range(tokens.shape[0]):   # a define-by-run step traced by jax.jit: the loop is unrolled
        gi = x[t] @ p["w_ih"] + p["b_ih"]
        gh = h @ p["w_hh"] + p["b_hh"]
        ir, iz, in_ = jnp.split(gi, 3, -1)
        hr, hz, hn = jnp.split(gh, 3, -1)
        r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
        h = (1 - z) * jnp.tanh(in_ + r * hn) + z * h
        hs.append(h)
    logits = jnp.stack(hs) @ p["hw"] + p["hb"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))


def _jax_train_step(loss_fn):
    """jax.jit of one Adam step on ``loss_fn``: ``(state, tokens, targets) -> (loss, state)``."""
    @jax.jit
    def step(state, tokens, targets):
        params, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(params, tokens, targets)
        return loss, _adam_update(params, m, v, t, g, LR)
    return step


def _jax_state():
    p = jax_init()
    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    return (p, zeros, zeros, 0)


_jax_step = _jax_train_step(_jax_loss)


def time_jax(data) -> tuple:
    """(total seconds, losses, seconds of the steps with a new length, seconds of the other steps)."""
    state = _jax_state()
    losses, seen, new_s, old_s = [], set(), 0.0, 0.0
    t0 = time.perf_counter()
    for tok, tgt in data:
        t = time.perf_counter()
        loss, state = _jax_step(state, tok, tgt)
        losses.append(float(loss))
        if tok.shape[0] in seen:
            old_s += time.perf_counter() - t
        else:
            new_s += time.perf_counter() - t
            seen.add(tok.shape[0])
    return time.perf_counter() - t0, losses, new_s, old_s


def _jax_scan_loss(p, tokens, targets):
    """The same loss with the time loop as one lax.scan; targets equal to IGNORE (padding) count nothing."""
    gi = p["emb"][tokens] @ p["w_ih"] + p["b_ih"]

    def cell(h, g):
        ir, iz, in_ = jnp.split(g, 3, -1)
        hr, hz, hn = jnp.split(h @ p["w_hh"] + p["b_hh"], 3, -1)
        r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
        h = (1 - z) * jnp.tanh(in_ + r * hn) + z * h
        return h, h
    _, hs = jax.lax.scan(cell, jnp.zeros((tokens.shape[1], HIDDEN)), gi)
    logp = jax.nn.log_softmax(hs @ p["hw"] + p["hb"])
    keep = targets != IGNORE
    nll = -jnp.take_along_axis(logp, jnp.where(keep, targets, 0)[..., None], -1)[..., 0]
    return jnp.sum(nll * keep) / jnp.sum(keep)


_jax_scan_step = _jax_train_step(_jax_scan_loss)


def time_jax_scan(data) -> tuple:
    """Hand-written JAX as a JAX expert writes it: lax.scan over time, lengths padded to multiples of
    BUCKET (padding targets ignored), one jax.jit executable per bucket. (total seconds, losses, buckets)"""
    state, losses, seen = _jax_state(), [], set()
    t0 = time.perf_counter()
    for tok, tgt in data:
        n = tok.shape[0]
        b = -(-n // BUCKET) * BUCKET
        seen.add(b)
        tok = np.pad(tok, ((0, b - n), (0, 0)))
        tgt = np.pad(tgt, ((0, b - n), (0, 0)), constant_values=IGNORE)
        loss, state = _jax_scan_step(state, tok, tgt)
        losses.append(loss)
    losses = [float(v) for v in losses]
    return time.perf_counter() - t0, losses, len(seen)


# ---------------------------------------------------------------- driver
def measure(steps: int = 200, jax_steps: int | None = None, skip=()) -> dict:
    data = batches(steps)
    lengths = [tok.shape[0] for tok, _ in data]
    res = {"steps": steps, "distinct_lengths": len(set(lengths))}
    variants = [("buckets", "dynajax_compiled_buckets", lambda: bucketed(dynajax_step())),
                ("one_bucket", "dynajax_compiled_one_bucket", lambda: bucketed(dynajax_step(), [HI])),
                ("per_length", "dynajax_compiled_per_length", lambda: dj.compile(dynajax_step())),
                ("cell", "dynajax_compiled_cell_loop", lambda: bucketed(dynajax_step(cell_loop=True))),
                ("eager", "dynajax_eager", dynajax_step)]
    for short, name, make in variants:
        if short in skip:
            continue
        step = make()
        secs, losses = time_dynajax(step, data)
        st = getattr(step, "stats", None)
        res[name] = {"seconds": secs, "first_loss": losses[0], "last_loss": losses[-1]}
        if st is not None:
            res[name].update(executables=st.compiles, compile_seconds=st.compile_time,
                             capture_seconds=st.capture_time, rolled_loops=st.rolled_loops, bucket_hits=st.bucket_hits,
                             bucket_reuses=st.bucket_reuses)
    if "cached" not in skip:
        res["dynajax_compiled_one_bucket_cached"] = _second_run(data)
    if "torch" not in skip:
        for name, threads in (("torch_eager", None), ("torch_eager_1_thread", 1)):
            secs, losses = time_torch(data, threads)
            res[name] = {"seconds": secs, "first_loss": losses[0], "last_loss": losses[-1]}
    if "jax_scan" not in skip:
        secs, losses, nb = time_jax_scan(data)
        res["jax_scan_buckets"] = {"seconds": secs, "executables": nb, "first_loss": losses[0],
                                   "last_loss": losses[-1]}
    if "jax" not in skip:
        n = min(jax_steps or steps, steps)
        secs, losses, new_s, old_s = time_jax(data[:n])
        d_n, d_all = len(set(lengths[:n])), len(set(lengths))
        # extrapolation: each new length costs what a new length cost here (trace + compile + run),
        # every other step what a repeated one did
        est = secs if n == steps else (new_s / d_n * d_all + old_s / max(n - d_n, 1) * (steps - d_all))
        res["jax_unrolled"] = {"seconds": est, "measured_steps": n, "measured_seconds": secs,
                               "executables": d_all, "first_loss": losses[0]}
    return res


def report(res: dict) -> None:
    print(f"GRU LM (vocab {VOCAB}, embedding {EMBED}, hidden {HIDDEN}, batch {BATCH}), {res['steps']} steps, "
          f"lengths uniform in {LO}..{HI} ({res['distinct_lengths']} distinct), total wall time incl. compiles")
    for name in ("dynajax_compiled_buckets", "dynajax_compiled_one_bucket", "dynajax_compiled_one_bucket_cached",
                 "dynajax_compiled_per_length", "dynajax_compiled_cell_loop",
                 "dynajax_eager", "torch_eager", "torch_eager_1_thread", "jax_scan_buckets", "jax_unrolled"):
        r = res.get(name)
        if r is None:
            continue
        extra = ""
        if "compile_seconds" in r:
            extra = (f"  ({r['executables']} executables, {r['compile_seconds']:.1f} s compiling, "
                     f"{r['capture_seconds']:.1f} s capturing, {r['rolled_loops']} rolled loops, "
                     f"{r['bucket_hits']} bucket hits, {r.get('bucket_reuses', 0)} in a larger bucket)")
        if "cache_loads" in r:
            extra += (f"  SECOND RUN: {r['cache_loads']} executable(s) loaded from set_compile_cache's folder, "
                      f"which the first run ({r['first_run_seconds']:.1f} s) filled")
        if name.startswith("jax_"):
            extra = f"  ({r['executables']} executables)"
            if r.get("measured_steps", res["steps"]) != res["steps"]:
                extra += (f"  EXTRAPOLATED from {r['measured_seconds']:.1f} s measured on the first "
                          f"{r['measured_steps']} steps (per new length and per repeated length)")
        print(f"  {name:36s} {r['seconds']:8.1f} s{extra}")
    c, j = (res.get(k, {}).get("seconds") for k in ("dynajax_compiled_buckets", "jax_unrolled"))
    ts = [res[k]["seconds"] for k in ("torch_eager", "torch_eager_1_thread") if k in res]
    if c and ts:
        print(f"  dynajax compiled (buckets) / PyTorch eager (its faster thread setting): {c / min(ts):.2f}x  "
              "(target < 1)")
    o = res.get("dynajax_compiled_one_bucket", {}).get("seconds")
    if o and ts:
        print(f"  dynajax compiled (one bucket) / PyTorch eager (its faster thread setting): {o / min(ts):.2f}x  "
              "(target < 1)")
    w = res.get("dynajax_compiled_one_bucket_cached", {}).get("seconds")
    if w and ts:
        print(f"  dynajax compiled (one bucket), second run from the compile cache / PyTorch eager: {w / min(ts):.2f}x")
    if o and j:
        print(f"  unrolled jax.jit / dynajax compiled (one bucket): {j / o:.1f}x  (target >= 10)")
    if c and j:
        print(f"  unrolled jax.jit / dynajax compiled (buckets): {j / c:.1f}x  (target >= 10)")
    s = res.get("jax_scan_buckets", {}).get("seconds")
    if c and s:
        print(f"  dynajax compiled (buckets) / hand-written lax.scan JAX (buckets): {c / s:.2f}x")
    if s and ts:
        print(f"  hand-written lax.scan JAX (buckets) / PyTorch eager: {s / min(ts):.2f}x")


def repeated(steps: int, n: int) -> list[tuple]:
    """``n`` cold runs of dynajax compiled (one bucket) each followed by PyTorch eager (both thread settings),
    each dynajax run after JAX's and dynajax's in-memory caches are cleared, as in a fresh process: per
    pair (dynajax seconds, PyTorch seconds at its faster setting). One total of each is at the mercy of
    the machine's load for its ~3 s; pairs taken back to back share it."""
    from dynajax.compile import capture as _capture
    data = batches(steps)
    pairs = []
    for _ in range(n):
        jax.clear_caches()
        _capture._SHAPES.clear()   # dynajax's op shape memo (a fresh process starts without it)
        secs, _ = time_dynajax(bucketed(dynajax_step(), [HI]), data)
        ts = min(time_torch(data, threads)[0] for threads in (None, 1))
        pairs.append((secs, ts))
    return pairs


def ratio_summary(pairs: list) -> str:
    """"median Mx, range A-Bx" of the dynajax / PyTorch ratios of ``repeated``'s pairs."""
    ratios = sorted(d / t for d, t in pairs)
    return f"median {statistics.median(ratios):.2f}x, range {ratios[0]:.2f}-{ratios[-1]:.2f}x"


def report_repeated(pairs: list) -> None:
    print(f"dynajax compiled (one bucket) / PyTorch eager (its faster thread setting), {len(pairs)} cold runs "
          f"back to back: {ratio_summary(pairs)}  (target < 1)")
    for d, t in pairs:
        print(f"  dynajax {d:.2f} s   PyTorch {t:.2f} s   {d / t:.2f}x")


def run(steps: int = 200, jax_steps: int | None = None, repeat: int = 3) -> list[dict]:
    """Rows for run_all.py, in its columns: the one-bucket run (against unrolled ``jax.jit``) and the
    buckets-of-16 run (against ``lax.scan`` in the same buckets), both against PyTorch eager at its faster
    thread setting; then ``repeat`` more cold one-bucket runs, each followed by PyTorch, in the notes (one
    total is at the mercy of the machine's load for its few seconds)."""
    res = measure(steps, jax_steps)
    report(res)
    secs = {k: v["seconds"] for k, v in res.items() if isinstance(v, dict) and "seconds" in v}
    ts = [secs[k] for k in ("torch_eager", "torch_eager_1_thread") if k in secs]
    torch_s = min(ts) if ts else None
    base = f"GRU LM, {steps} steps, lengths {LO}..{HI} (total s, compiles incl.)"
    one = {"workload": f"{base}, one bucket; hand-written JAX: jax.jit of the unrolled step, per length",
           "unit": "s", "dynajax_compiled": secs.get("dynajax_compiled_one_bucket"),
           "dynajax_eager": secs.get("dynajax_eager"), "jax": secs.get("jax_unrolled"), "torch": torch_s}
    notes = [f"PyTorch eager: its faster of {secs['torch_eager']:.2f} s (default threads) and "
             f"{secs['torch_eager_1_thread']:.2f} s (1 thread)"] if len(ts) == 2 else []
    st = res.get("dynajax_compiled_one_bucket", {})
    if "compile_seconds" in st:
        notes.append(f"one bucket: {st['executables']} executable, {st['compile_seconds']:.2f} s compiling, "
                     f"{st['capture_seconds']:.2f} s capturing")
    cached = res.get("dynajax_compiled_one_bucket_cached")
    if cached and torch_s:
        notes.append(f"the script's second run (set_compile_cache): {cached['seconds']:.2f} s, "
                     f"{cached['seconds'] / torch_s:.2f}x PyTorch")
    if repeat and torch_s:
        notes.append(f"{repeat} more cold one-bucket runs, each followed by PyTorch (dynajax / PyTorch): "
                     f"{ratio_summary(repeated(steps, repeat))}")
    one["notes"] = "; ".join(notes)
    rows = [one]
    if "dynajax_compiled_buckets" in secs:
        bk = res["dynajax_compiled_buckets"]
        rows.append({"workload": f"{base}, buckets of {BUCKET}; hand-written JAX: lax.scan in the same buckets",
                     "unit": "s", "dynajax_compiled": secs["dynajax_compiled_buckets"],
                     "jax": secs.get("jax_scan_buckets"), "torch": torch_s,
                     "notes": f"{bk['executables']} executables, {bk['compile_seconds']:.2f} s compiling; "
                              f"GRUCell loop, buckets: {secs.get('dynajax_compiled_cell_loop', float('nan')):.2f} s; "
                              f"no buckets (one executable per length): "
                              f"{secs.get('dynajax_compiled_per_length', float('nan')):.2f} s"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--jax-steps", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=0,
                    help="instead: N cold one-bucket runs, each followed by PyTorch eager; prints the ratios")
    ap.add_argument("--skip", nargs="*", default=(),
                    choices=["buckets", "one_bucket", "cached", "per_length", "cell", "eager", "torch", "jax_scan",
                             "jax"])
    a = ap.parse_args()
    if a.repeat:
        report_repeated(repeated(a.steps, a.repeat))
        return
    report(measure(a.steps, a.jax_steps, tuple(a.skip)))


if __name__ == "__main__":
    main()
