"""Training-step time, side by side in one process: dynajax eager, dynajax.compile (default, with
``speculate=True``, ``replay=True``, and default settled: a second default instance timed only after the calls its
speculation needs to decide, as deep into a long run), hand-written jax.jit, PyTorch eager (on the GPU
when JAX runs on one), on five workloads:

- MLP 784-512-512-10, batch 128, Adam, cross-entropy;
- CNN on 28x28x1, batch 64: conv 1->16 3x3 + BatchNorm2d + ReLU + MaxPool2d(2), conv 16->32 3x3 + ReLU +
  MaxPool2d(2), Dropout(0.25), Linear 1568->10; cross-entropy, SGD momentum 0.9;
- LSTM language model: vocab 100, embedding 64, LSTM hidden 128, batch 32, seq 35, Linear to vocab;
  cross-entropy over every position, Adam;
- the same with a GRU written as a Python loop over ``GRUCell`` (the define-by-run way); PyTorch runs
  the same loop over ``torch.nn.GRUCell``, hand-written JAX a ``lax.scan``;
- a tiny MLP (16-16-16-4, batch 8, Adam) whose executable costs next to nothing, as a small model's does
  on an accelerator: its times are each contender's per-call overhead.

The hand-written JAX steps are value_and_grad + the same optimizer update written by hand under one
jax.jit (NHWC convolutions, max-pool by reshape-and-max, the LSTM by lax.scan). Prints medians (ms/step)
and ratios to the hand-written jax.jit step and to PyTorch eager; also dynajax.compile's first-call time
(capture + trace + XLA compile + run), the capture (re-running the Python step) cost per call and per
recorded op, and graph breaks per step. Rounds interleave the contenders, in a fresh random order each
round and after a few untimed steps each, so machine drift and what one contender leaves running for the
next (PyTorch's spinning OpenMP threads) reach all of them alike. ``run()`` returns the rows for
benchmarks/run_all.py.

    python benchmarks/compile_step.py [--steps 10] [--rounds 5] [--no-donate] [--only mlp cnn lstm cell tiny]
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

SIZES = (784, 512, 512, 10)
BATCH = 128
TINY = (16, 16, 16, 4)
LR = 1e-3
CNN_BATCH, CNN_LR, CNN_MOMENTUM, CNN_DROP = 64, 1e-2, 0.9, 0.25
VOCAB, EMBED, HIDDEN, LM_BATCH, SEQ = 100, 64, 128, 32, 35
WARM = 3   # untimed steps before each contender's timed block


# ---------------------------------------------------------------- shared pieces

def _adam_update(params, m, v, t, g, lr=LR):
    """One Adam step (PyTorch's defaults), written by hand over a pytree."""
    t = t + 1
    m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
    v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
    step_size = lr / (1 - 0.9 ** t)
    c2 = jnp.sqrt(1 - 0.999 ** t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - step_size * m / (jnp.sqrt(v) / c2 + 1e-8), params, m, v)
    return params, m, v, t


def _xent(logits, y):
    """Mean cross-entropy of integer labels ``y`` against the last axis of ``logits``."""
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1))


def _uniform(key, shape, fan_in):
    bound = 1 / np.sqrt(fan_in)
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def _stateful(step, state, *args):
    """A no-argument runner of a jitted ``step(state, *args) -> (loss, state)`` that keeps the state."""
    def run():
        nonlocal state
        loss, state = step(state, *args)
        return loss
    return run


def _dynajax_runner(model, opt, loss_fn, x, y, compiled: bool, donate: bool, **opts):
    """(runner returning the loss's jax array, the step function) for one dynajax training step; ``opts``:
    more options of dynajax.compile (speculate, replay)."""
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    fn = dj.compile(step, donate=donate, **opts) if compiled else step
    x, y = dj.tensor(x), dj.tensor(y)

    def run():
        return fn(x, y)._value
    run.args = (x, y)   # (capture_cold.py records the step on them without running it)
    return run, fn


def _torch_device() -> str:
    """Where PyTorch eager runs: on the GPU when JAX runs there too and torch sees one, so the PyTorch column
    compares like with like on an accelerator; else the CPU."""
    import torch
    return "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"


def _torch_runner(model, opt, loss_fn, x, y):
    """A runner of one PyTorch training step returning the loss (blocking on it reads ``.item()``, which
    waits for the GPU too). ``Module.to`` moves the parameters in place, so ``opt`` still holds them."""
    dev = _torch_device()
    model.to(dev)
    x, y = x.to(dev), y.to(dev)

    def run():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    model.train()
    return run


# ---------------------------------------------------------------- MLP

def _data(sizes=SIZES, batch=BATCH):
    rng = np.random.default_rng(0)
    return rng.standard_normal((batch, sizes[0])).astype(np.float32), rng.integers(0, sizes[-1], batch)


def _mlp(ns, sizes):
    """Linear + ReLU layers of the given widths, from a torch-like namespace (dynajax.nn or torch.nn)."""
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [ns.Linear(a, b), ns.ReLU()]
    return ns.Sequential(*layers[:-1])


def dynajax_step(compiled: bool, donate: bool = True, *, sizes=SIZES, batch=BATCH, **opts):
    """MLP step in dynajax: (runner, step function)."""
    dj.manual_seed(0)
    model = _mlp(nn, sizes)
    opt = dj.optim.Adam(model.parameters(), lr=LR)
    return _dynajax_runner(model, opt, F.cross_entropy, *_data(sizes, batch), compiled, donate, **opts)


def jax_step(sizes=SIZES, batch=BATCH):
    """MLP step hand-written in JAX."""
    key = jax.random.PRNGKey(0)
    params = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        params.append((_uniform(k1, (a, b), a), _uniform(k2, (b,), a)))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.zeros((), jnp.float32))

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return _xent(h, y)

    @jax.jit
    def step(state, x, y):
        params, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        return loss, _adam_update(params, m, v, t, g)
    xn, yn = _data(sizes, batch)
    return _stateful(step, state, jnp.asarray(xn), jnp.asarray(yn))


def torch_step(sizes=SIZES, batch=BATCH):
    """MLP step in PyTorch (raises ImportError without torch)."""
    import torch
    torch.manual_seed(0)
    model = _mlp(torch.nn, sizes)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    xn, yn = _data(sizes, batch)
    return _torch_runner(model, opt, torch.nn.functional.cross_entropy, torch.from_numpy(xn), torch.from_numpy(yn))


# ---------------------------------------------------------------- CNN

def _cnn_data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((CNN_BATCH, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, CNN_BATCH)


def _cnn_layers(ns):
    """The CNN built from a torch-like namespace (dynajax.nn or torch.nn)."""
    return ns.Sequential(ns.Conv2d(1, 16, 3, padding=1), ns.BatchNorm2d(16), ns.ReLU(), ns.MaxPool2d(2),
                         ns.Conv2d(16, 32, 3, padding=1), ns.ReLU(), ns.MaxPool2d(2), ns.Dropout(CNN_DROP),
                         ns.Flatten(), ns.Linear(32 * 7 * 7, 10))


def cnn_dynajax_step(compiled: bool, donate: bool = True, **opts):
    """CNN step in dynajax: (runner, step function)."""
    dj.manual_seed(0)
    model = _cnn_layers(nn)
    model.train()
    opt = dj.optim.SGD(model.parameters(), lr=CNN_LR, momentum=CNN_MOMENTUM)
    return _dynajax_runner(model, opt, F.cross_entropy, *_cnn_data(), compiled, donate, **opts)


def cnn_jax_step():
    """CNN step hand-written in JAX: NHWC, train-mode BatchNorm with running stats, dropout, SGD momentum."""
    ks = jax.random.split(jax.random.PRNGKey(0), 7)
    params = {"c1w": _uniform(ks[0], (3, 3, 1, 16), 9), "c1b": _uniform(ks[1], (16,), 9),
              "bng": jnp.ones(16, jnp.float32), "bnb": jnp.zeros(16, jnp.float32),
              "c2w": _uniform(ks[2], (3, 3, 16, 32), 144), "c2b": _uniform(ks[3], (32,), 144),
              "fw": _uniform(ks[4], (32 * 7 * 7, 10), 32 * 7 * 7), "fb": _uniform(ks[5], (10,), 32 * 7 * 7)}
    running = (jnp.zeros(16, jnp.float32), jnp.ones(16, jnp.float32))
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, w, b):
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn) + b

    def pool(x):
        n, h, w, c = x.shape
        return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))

    def loss_fn(p, x, y, key):
        h = conv(x, p["c1w"], p["c1b"])
        mean, var = h.mean((0, 1, 2)), h.var((0, 1, 2))
        h = (h - mean) * jax.lax.rsqrt(var + 1e-5) * p["bng"] + p["bnb"]
        h = pool(jax.nn.relu(h))
        h = pool(jax.nn.relu(conv(h, p["c2w"], p["c2b"])))
        keep = jax.random.bernoulli(key, 1 - CNN_DROP, h.shape)
        h = jnp.where(keep, h / (1 - CNN_DROP), 0)
        h = h.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)   # flatten in PyTorch's (C, H, W) order
        return _xent(h @ p["fw"] + p["fb"], y), (mean, var)

    @jax.jit
    def step(state, x, y):
        p, buf, (rm, rv), key = state
        key, sub = jax.random.split(key)
        (loss, (mean, var)), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y, sub)
        n = x.shape[0] * x.shape[1] * x.shape[2]
        rm, rv = 0.9 * rm + 0.1 * mean, 0.9 * rv + 0.1 * var * n / (n - 1)
        buf = jax.tree_util.tree_map(lambda b, g: CNN_MOMENTUM * b + g, buf, g)
        p = jax.tree_util.tree_map(lambda p, b: p - CNN_LR * b, p, buf)
        return loss, (p, buf, (rm, rv), key)
    xn, yn = _cnn_data()
    state = (params, jax.tree_util.tree_map(jnp.zeros_like, params), running, ks[6])
    return _stateful(step, state, jnp.asarray(xn.transpose(0, 2, 3, 1)), jnp.asarray(yn))


def cnn_torch_step():
    """CNN step in PyTorch (raises ImportError without torch)."""
    import torch
    torch.manual_seed(0)
    model = _cnn_layers(torch.nn)
    opt = torch.optim.SGD(model.parameters(), lr=CNN_LR, momentum=CNN_MOMENTUM)
    xn, yn = _cnn_data()
    return _torch_runner(model, opt, torch.nn.functional.cross_entropy, torch.from_numpy(xn), torch.from_numpy(yn))


# ---------------------------------------------------------------- LSTM language model

def _lm_data():
    rng = np.random.default_rng(2)
    seq = rng.integers(0, VOCAB, (LM_BATCH, SEQ + 1))
    return seq[:, :-1], seq[:, 1:]


def _lm_model(ns):
    """Embedding -> LSTM (batch first) -> Linear, from a torch-like namespace (dynajax.nn or torch.nn)."""
    class LM(ns.Module):
        def __init__(self):
            super().__init__()
            self.embed = ns.Embedding(VOCAB, EMBED)
            self.lstm = ns.LSTM(EMBED, HIDDEN, batch_first=True)
            self.head = ns.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            return self.head(self.lstm(self.embed(tokens))[0])
    return LM()


def _lm_loss(f):
    return lambda logits, y: f.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def lstm_dynajax_step(compiled: bool, donate: bool = True, **opts):
    """LSTM LM step in dynajax: (runner, step function)."""
    dj.manual_seed(0)
    model = _lm_model(nn)
    opt = dj.optim.Adam(model.parameters(), lr=LR)
    return _dynajax_runner(model, opt, _lm_loss(F), *_lm_data(), compiled, donate, **opts)


def _lm_jax_runner(params, loss_fn):
    """The runner of a hand-written language-model step: jax.jit of value_and_grad + Adam on the LM data."""
    @jax.jit
    def step(state, tokens, y):
        p, m, v, t = state
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, y)
        return loss, _adam_update(p, m, v, t, g)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    tn, yn = _lm_data()
    return _stateful(step, (params, zeros, zeros, jnp.zeros((), jnp.float32)), jnp.asarray(tn), jnp.asarray(yn))


def lstm_jax_step():
    """LSTM LM step hand-written in JAX: PyTorch's gate order (i, f, g, o), lax.scan over time, Adam."""
    ks = jax.random.split(jax.random.PRNGKey(0), 7)
    params = {"embed": jax.random.normal(ks[0], (VOCAB, EMBED), jnp.float32),
              "w_ih": _uniform(ks[1], (EMBED, 4 * HIDDEN), HIDDEN), "w_hh": _uniform(ks[2], (HIDDEN, 4 * HIDDEN), HIDDEN),
              "b_ih": _uniform(ks[3], (4 * HIDDEN,), HIDDEN), "b_hh": _uniform(ks[4], (4 * HIDDEN,), HIDDEN),
              "hw": _uniform(ks[5], (HIDDEN, VOCAB), HIDDEN), "hb": _uniform(ks[6], (VOCAB,), HIDDEN)}

    def loss_fn(p, tokens, y):
        xs = (p["embed"][tokens] @ p["w_ih"] + p["b_ih"]).swapaxes(0, 1)   # (T, B, 4H)

        def cell(carry, xw):
            h, c = carry
            i, f, g, o = jnp.split(xw + h @ p["w_hh"] + p["b_hh"], 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        z = jnp.zeros((tokens.shape[0], HIDDEN), jnp.float32)
        _, hs = jax.lax.scan(cell, (z, z), xs)
        return _xent(hs.swapaxes(0, 1) @ p["hw"] + p["hb"], y)
    return _lm_jax_runner(params, loss_fn)


def lstm_torch_step():
    """LSTM LM step in PyTorch (raises ImportError without torch)."""
    import torch
    torch.manual_seed(0)
    model = _lm_model(torch.nn)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    tn, yn = _lm_data()
    return _torch_runner(model, opt, _lm_loss(torch.nn.functional), torch.from_numpy(tn), torch.from_numpy(yn))


# ---------------------------------------------------------------- GRU cell loop language model

def _cell_lm(ns, lib):
    """Embedding -> a Python loop over ``GRUCell`` (batch first) -> Linear, from a torch-like namespace and
    its library (dynajax or torch): the define-by-run way to write an RNN."""
    class CellLM(ns.Module):
        def __init__(self):
            super().__init__()
            self.embed = ns.Embedding(VOCAB, EMBED)
            self.cell = ns.GRUCell(EMBED, HIDDEN)
            self.head = ns.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            h, hs = lib.zeros(tokens.shape[0], HIDDEN, device=tokens.device), []
            for x in self.embed(tokens).unbind(1):
                h = self.cell(x, h)
                hs.append(h)
            return self.head(lib.stack(hs, 1))
    return CellLM()


def cell_dynajax_step(compiled: bool, donate: bool = True, **opts):
    """GRUCell-loop LM step in dynajax: (runner, step function)."""
    dj.manual_seed(0)
    model = _cell_lm(nn, dj)
    opt = dj.optim.Adam(model.parameters(), lr=LR)
    return _dynajax_runner(model, opt, _lm_loss(F), *_lm_data(), compiled, donate, **opts)


def cell_jax_step():
    """The same model hand-written in JAX: PyTorch's GRU gates (r, z, n), the loop as lax.scan, Adam."""
    ks = jax.random.split(jax.random.PRNGKey(0), 7)
    params = {"embed": jax.random.normal(ks[0], (VOCAB, EMBED), jnp.float32),
              "w_ih": _uniform(ks[1], (EMBED, 3 * HIDDEN), HIDDEN), "w_hh": _uniform(ks[2], (HIDDEN, 3 * HIDDEN), HIDDEN),
              "b_ih": _uniform(ks[3], (3 * HIDDEN,), HIDDEN), "b_hh": _uniform(ks[4], (3 * HIDDEN,), HIDDEN),
              "hw": _uniform(ks[5], (HIDDEN, VOCAB), HIDDEN), "hb": _uniform(ks[6], (VOCAB,), HIDDEN)}

    def loss_fn(p, tokens, y):
        def cell(h, x):
            ir, iz, in_ = jnp.split(x @ p["w_ih"] + p["b_ih"], 3, -1)
            hr, hz, hn = jnp.split(h @ p["w_hh"] + p["b_hh"], 3, -1)
            r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
            h = (1 - z) * jnp.tanh(in_ + r * hn) + z * h
            return h, h
        _, hs = jax.lax.scan(cell, jnp.zeros((tokens.shape[0], HIDDEN), jnp.float32),
                             p["embed"][tokens].swapaxes(0, 1))
        return _xent(hs.swapaxes(0, 1) @ p["hw"] + p["hb"], y)
    return _lm_jax_runner(params, loss_fn)


def cell_torch_step():
    """GRUCell-loop LM step in PyTorch (raises ImportError without torch)."""
    import torch
    torch.manual_seed(0)
    model = _cell_lm(torch.nn, torch)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    tn, yn = _lm_data()
    return _torch_runner(model, opt, _lm_loss(torch.nn.functional), torch.from_numpy(tn), torch.from_numpy(yn))


# ---------------------------------------------------------------- measuring

class Workload(NamedTuple):
    """One model: its title and the step builders of each contender."""

    key: str
    title: str
    dynajax: Callable      # (compiled, donate, **compile options) -> (runner, step fn)
    jax: Callable          # () -> runner
    torch: Callable        # () -> runner; ImportError without torch
    eager_div: int = 3     # dynajax eager runs steps // eager_div steps a round (it is the slow one)


WORKLOADS = [
    Workload("mlp", "MLP 784-512-512-10, batch 128, Adam", dynajax_step, jax_step, torch_step),
    Workload("cnn", "CNN 28x28x1 conv16+BN+pool, conv32+pool, dropout, fc10; batch 64, SGD momentum",
             cnn_dynajax_step, cnn_jax_step, cnn_torch_step),
    Workload("lstm", "LSTM LM vocab 100, embed 64, hidden 128, batch 32, seq 35, Adam",
             lstm_dynajax_step, lstm_jax_step, lstm_torch_step, eager_div=6),
    Workload("cell", "GRUCell loop LM (a Python loop over nn.GRUCell) vocab 100, embed 64, hidden 128, batch 32, "
             "seq 35, Adam", cell_dynajax_step, cell_jax_step, cell_torch_step, eager_div=6),
    # an executable that costs next to nothing, as a small model's does on an accelerator: what is left is each
    # contender's per-call overhead (dispatch, and dynajax.compile's recording unless replayed)
    Workload("tiny", "tiny MLP 16-16-16-4, batch 8, Adam (per-call overhead)",
             functools.partial(dynajax_step, sizes=TINY, batch=8), functools.partial(jax_step, TINY, 8),
             functools.partial(torch_step, TINY, 8)),
]
NAMES = {"dynajax_eager": "dynajax eager", "dynajax_compiled": "dynajax compiled",
         "dynajax_speculative": "dynajax compiled, speculate=True",
         "dynajax_replay": "dynajax compiled, replay=True",
         "dynajax_settled": "dynajax compiled, default settled",
         "jax": "jax.jit (hand-written)", "torch": "PyTorch eager"}


def _settle(comp, run, block, limit_s: float = 60.0) -> tuple:
    """Run a default-compiled step (``speculate=None``) until its speculation is decided: the twin bought
    once the capture time the idle device waited through adds up to the compile's, and the trial (plain
    and speculated calls alternated) over, as in a long training run. Returns (calls, seconds, the
    verdict: True speculating, False not, None undecided within ``limit_s``). Reads the speculator's state
    (``Compiled._speculator``): nothing public tells a decided trial apart."""
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < limit_s:
        block(run())
        calls += 1
        if comp.stats.replayed >= 3:   # the default mode's guards let calls skip the Python: nothing to settle
            return calls, time.perf_counter() - t0, None
        states = list(comp._speculator.keys.values())
        if states and all(ks.verdict is not None for ks in states):
            return calls, time.perf_counter() - t0, all(ks.verdict for ks in states)
    return calls, time.perf_counter() - t0, None


def _time(run, steps: int, block, warm: int = 0) -> float:
    """Median wall time of one step (ms), each step run to completion, after ``warm`` untimed steps."""
    for _ in range(warm):
        block(run())
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        block(run())
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _time_pipelined(run, steps: int, block) -> float:
    """Mean wall time of one step (ms) over ``steps`` steps with one wait at the end, as a training loop
    that does not read the loss every step runs: JAX dispatches asynchronously, so dynajax.compile's
    Python capture of the next step overlaps the executable of the previous one."""
    t0 = time.perf_counter()
    for _ in range(steps):
        out = run()
    block(out)
    return (time.perf_counter() - t0) / steps * 1e3


def measure(w: Workload, steps: int = 10, rounds: int = 5, donate: bool = True) -> dict:
    """Median ms/step of each contender on one workload, plus dynajax.compile's first call and stats."""
    jax_block = jax.block_until_ready
    contenders = {}
    t0 = time.perf_counter()
    comp_run, comp = w.dynajax(True, donate)
    t1 = time.perf_counter()
    jax_block(comp_run())
    first_call, build = time.perf_counter() - t1, t1 - t0
    contenders["dynajax_compiled"] = (comp_run, jax_block)
    contenders["dynajax_speculative"] = (w.dynajax(True, donate, speculate=True)[0], jax_block)
    settled_run, settled = w.dynajax(True, donate)
    settle = _settle(settled, settled_run, jax_block)
    contenders["dynajax_settled"] = (settled_run, jax_block)
    replay_run, replayed = w.dynajax(True, donate, replay=True)
    contenders["dynajax_replay"] = (replay_run, jax_block)
    contenders["jax"] = (w.jax(), jax_block)
    contenders["dynajax_eager"] = (w.dynajax(False, donate)[0], jax_block)
    try:
        contenders["torch"] = (w.torch(), lambda r: r.item())
    except ImportError:
        pass
    for run, block in contenders.values():   # warm up (compiles, allocator)
        for _ in range(3):
            block(run())
    st = comp.stats
    calls0, cap0, breaks0, rep0 = st.calls, st.capture_time, st.graph_breaks, st.replayed
    results = {k: [] for k in contenders}
    piped = {k: [] for k in contenders}
    order = list(contenders)
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        # the contenders in a fresh order each round, and WARM untimed steps before each block: a step timed
        # right after another contender's is slower (after a PyTorch step, whose OpenMP threads keep
        # spinning, the next jax.jit MLP step took 1.8x its steady time here), and so is one after the
        # machine idled; both fade within ~3 steps
        for i in rng.permutation(len(order)):
            name = order[i]
            run, block = contenders[name]
            n = max(3, steps // w.eager_div) if name == "dynajax_eager" else steps
            results[name].append(_time(run, n, block, WARM))
            piped[name].append(_time_pipelined(run, n, block))
    n = st.calls - calls0
    cap = (st.capture_time - cap0) / n
    return {"ms": {k: statistics.median(r) for k, r in results.items()},
            "pipelined_ms": {k: statistics.median(r) for k, r in piped.items()},
            "first_call_ms": first_call * 1e3, "build_ms": build * 1e3,
            "compiles": st.compiles, "cache_hits": st.cache_hits, "compile_time_ms": st.compile_time * 1e3,
            "capture_ms": cap * 1e3, "recorded_ops": st.recorded_ops, "settle": settle,
            "capture_us_per_op": cap / st.recorded_ops * 1e6 if st.recorded_ops else float("nan"),
            "graph_breaks_per_step": (st.graph_breaks - breaks0) / n, "default_replayed": (st.replayed - rep0, n),
            "replayed": (replayed.stats.replayed, replayed.stats.calls)}


def _selected(only) -> list[Workload]:
    return [w for w in WORKLOADS if not only or w.key in only]


def run(steps: int = 10, rounds: int = 5, donate: bool = True, only=None) -> list[dict]:
    """One run_all.py row per workload: median ms/step of the four contenders and dynajax.compile's costs."""
    rows = []
    for w in _selected(only):
        r = measure(w, steps, rounds, donate)
        rows.append({"workload": w.title, "unit": "ms/step", "dynajax_eager": r["ms"]["dynajax_eager"],
                     "dynajax_compiled": r["ms"]["dynajax_compiled"], "jax": r["ms"]["jax"],
                     "torch": r["ms"].get("torch"),
                     "notes": f"model + optimizer built in {r['build_ms']:.0f} ms; dynajax.compile first call "
                              f"{r['first_call_ms']:.0f} ms; {r['compiles']} compile(s) "
                              f"(trace + XLA) took {r['compile_time_ms']:.0f} ms in all; {r['default_replayed'][0]} of "
                              f"{r['default_replayed'][1]} measured calls replayed without their Python (guards); "
                              f"capture {r['capture_ms']:.2f} ms/step = "
                              f"{r['capture_us_per_op']:.1f} us/op averaged over {r['recorded_ops']} recorded ops "
                              "(mostly fixed per-call work; op_overhead.py measures one more op); "
                              f"{r['graph_breaks_per_step']:.1f} graph breaks/step; {rounds} rounds x {steps} steps "
                              f"(after {WARM} untimed), contenders in random order"})
        rows.append({"workload": w.title + " (speculate=True: the executable runs while Python records)",
                     "unit": "ms/step", "dynajax_eager": None, "dynajax_compiled": r["ms"]["dynajax_speculative"],
                     "jax": r["ms"]["jax"], "torch": r["ms"].get("torch"),
                     "notes": "dynajax.compile(speculate=True): each call dispatches the last call's executable "
                              "before its capture and keeps the results when the capture matches; the default "
                              "(speculate=None) turns this on once the idle capture time pays for the extra compile"})
        rows.append({"workload": w.title + " (replay=True: the step's Python skipped on repeat calls)",
                     "unit": "ms/step", "dynajax_eager": None, "dynajax_compiled": r["ms"]["dynajax_replay"],
                     "jax": r["ms"]["jax"], "torch": r["ms"].get("torch"),
                     "notes": "dynajax.compile(replay=True), opt-in for steps whose graph depends only on their "
                              "arguments' shapes and state: {} of {} calls ran the executable without the step's "
                              "Python (every 100th is recorded as a check)".format(*r["replayed"])})
        calls, secs, verdict = r["settle"]
        rows.append({"workload": w.title + " (default, settled: after the warm-up a long run has)", "unit": "ms/step",
                     "dynajax_eager": None, "dynajax_compiled": r["ms"]["dynajax_settled"], "jax": r["ms"]["jax"],
                     "torch": r["ms"].get("torch"),
                     "notes": f"dynajax.compile() with its defaults, timed after {calls} untimed calls ({secs:.1f} s): "
                              + {True: "the speculative twin was bought and its trial found speculating faster",
                                 False: "the speculative twin was bought and its trial found speculating slower",
                                 None: "its speculation was still undecided"}[verdict]})
        p = r["pipelined_ms"]
        rows.append({"workload": w.title + " (throughput: steps back to back, one wait at the end)",
                     "unit": "ms/step", "dynajax_eager": p["dynajax_eager"], "dynajax_compiled": p["dynajax_compiled"],
                     "jax": p["jax"], "torch": p.get("torch"),
                     "notes": "no per-step wait: dynajax.compile's capture of step n+1 overlaps step n's executable"})
    return rows


def report(w: Workload, r: dict, steps: int, rounds: int, donate: bool) -> None:
    """Print one workload's table."""
    ms = r["ms"]
    ref, tref = ms["jax"], ms.get("torch")
    print(f"{w.title}; median of {rounds} rounds x {steps} steps (after {WARM} untimed steps, contenders in "
          f"random order; donate={donate})")
    print(f"  {'':32s}{'ms/step':>10s}{'vs jax.jit':>12s}{'vs torch':>10s}{'steps/s':>10s}")
    for k, m in ms.items():
        vt = f"{m / tref:9.2f}x" if tref else f"{'-':>10s}"
        print(f"{NAMES[k]:34s}{m:10.3f}{m / ref:11.2f}x{vt}{1e3 / m:10.1f}")
    p = r["pipelined_ms"]
    print(f"  throughput, {steps} steps back to back and one wait (ms/step): " + ", ".join(
        f"{NAMES[k]} {m:.3f} ({m / p['jax']:.2f}x jax" + (f", {m / p['torch']:.2f}x torch)" if p.get("torch") else ")")
        for k, m in p.items()))
    print(f"  model + optimizer built (parameters initialised eagerly) in {r['build_ms']:.0f} ms; "
          f"first call (capture + trace + XLA compile + run): {r['first_call_ms']:.0f} ms "
          f"(trace + XLA compile, all compiles: {r['compile_time_ms']:.0f} ms); compiles: {r['compiles']}, "
          f"cache hits: {r['cache_hits']}")
    calls, secs, verdict = r["settle"]
    print(f"  default settled: timed after {calls} untimed calls ({secs:.1f} s), speculating: {verdict}; "
          "replay=True: {} of {} calls replayed".format(*r["replayed"]))
    print(f"  capture: {r['capture_ms']:.3f} ms/call, {r['recorded_ops']} recorded ops, "
          f"{r['capture_us_per_op']:.1f} us/op averaged (mostly fixed per-call work); graph breaks/step: "
          f"{r['graph_breaks_per_step']:.1f}")
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-donate", action="store_true")
    ap.add_argument("--only", nargs="+", choices=[w.key for w in WORKLOADS])
    a = ap.parse_args()
    try:
        where = f"PyTorch eager on {_torch_device()}"
    except ImportError:
        where = "no PyTorch"
    print(f"JAX on {jax.devices()[0].device_kind} ({jax.default_backend()}), {where}\n")
    for w in _selected(a.only):
        report(w, measure(w, a.steps, a.rounds, not a.no_donate), a.steps, a.rounds, not a.no_donate)


if __name__ == "__main__":
    main()
