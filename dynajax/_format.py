"""``repr`` of tensors in PyTorch's format (precision 4, summarised past 1000 elements)."""
from __future__ import annotations

import math

import numpy as np

PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool) -> None:
        self.floating = floating
        self.int_mode, self.sci_mode, self.max_width = True, False, 1
        flat = values.ravel()
        if not floating:
            self.max_width = max((len(_plain(v)) for v in flat), default=1)
            return
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size == 0:
            return
        a = np.abs(finite).astype(np.float64)
        lo, hi = a.min(), a.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        self.max_width = max(len(self._fmt(v)) for v in finite)

    def _fmt(self, v) -> str:
        v = float(v)
        if self.sci_mode:
            return f"{v:.{PRECISION}e}"
        if self.int_mode:
            s = f"{v:.0f}"
            return s if (math.isinf(v) or math.isnan(v)) else s + "."
        return f"{v:.{PRECISION}f}"

    def format(self, v) -> str:
        s = self._fmt(v) if self.floating else _plain(v)
        return " " * (self.max_width - len(s)) + s


class _ComplexFormatter:
    """PyTorch's complex format: the real parts and the imaginary parts each formatted as one real tensor."""

    def __init__(self, values: np.ndarray) -> None:
        self.re = _Formatter(values.real.astype(np.float64), True)
        self.im = _Formatter(values.imag.astype(np.float64), True)
        self.max_width = self.re.max_width + self.im.max_width + 1

    def format(self, v) -> str:
        imag = (self.im.format(v.imag) + "j").lstrip()
        return self.re.format(v.real) + (imag if imag[0] in "+-" else "+" + imag)


def _plain(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    return str(v.item() if hasattr(v, "item") else v)


def _summarize(a: np.ndarray) -> np.ndarray:
    """The elements that are shown when printing is summarised (for the formatter's widths)."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        parts = [a[:EDGEITEMS], a[-EDGEITEMS:]]
    else:
        parts = [a]
    return np.concatenate([np.stack([_summarize(x) for x in p]).reshape(-1) if p.size else p.reshape(-1)
                           for p in parts])


def _str(a: np.ndarray, fmt: _Formatter, indent: int, summarize: bool) -> str:
    if a.ndim == 0:
        return fmt.format(a[()])
    n = a.shape[0]
    cut = summarize and n > 2 * EDGEITEMS
    if a.ndim == 1:
        vals = list(a[:EDGEITEMS]) + [None] + list(a[-EDGEITEMS:]) if cut else list(a)
        items = [" ..." if v is None else fmt.format(v) for v in vals]
        per_line = max(1, math.floor((LINEWIDTH - indent) / (fmt.max_width + 2)))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"
    idx = list(range(EDGEITEMS)) + [None] + list(range(n - EDGEITEMS, n)) if cut else range(n)
    slices = ["..." if i is None else _str(a[i], fmt, indent + 1, summarize) for i in idx]
    sep = "," + "\n" * (a.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join(slices) + "]"


def tensor_repr(t, prefix: str = "tensor(") -> str:
    from . import _dtype
    v = t._value
    npv = np.asarray(v)
    d = _dtype.from_np(v.dtype)
    floating = d.is_floating_point
    if floating:
        npv = npv.astype(np.float64)
    indent = len(prefix)
    suffixes = []
    summarize = npv.size > THRESHOLD
    if npv.size == 0:
        body = "[]"
        if npv.ndim != 1:
            suffixes.append(f"size={tuple(npv.shape)}")
        if d is not _dtype.get_default_dtype():
            suffixes.append(f"dtype={d!r}")
    else:
        shown = _summarize(npv) if summarize else npv
        fmt = _ComplexFormatter(shown) if d.is_complex else _Formatter(shown, floating)
        body = _str(npv, fmt, indent, summarize)
        default_complex = _dtype.complex128 if _dtype.get_default_dtype() is _dtype.float64 else _dtype.complex64
        if d not in (_dtype.get_default_dtype(), _dtype.int64, _dtype.bool_, default_complex):
            suffixes.append(f"dtype={d!r}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    out = prefix + body
    for s in suffixes:
        last = out.rsplit("\n", 1)[-1]
        out += ",\n" + " " * indent + s if len(last) + len(s) + 2 > LINEWIDTH else ", " + s
    return out + ")"
