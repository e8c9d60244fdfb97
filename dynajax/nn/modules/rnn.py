"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` (multi-layer, bidirectional, batch_first,
inter-layer dropout, initial states) and the single-step cells, with PyTorch's
parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse`` ...) and initialization."""
from __future__ import annotations

import math

from ...compile.bucketing import sequence_mask
from ...ops.creation import empty, zeros
from .. import functional as F
from .. import init
from .._ops import linear, whole_program
from .._rnn_scan import cell_step, run_layer
from ..parameter import Parameter
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _proj(x, w, b):
    return linear(x, w, b)


def _hidden(state, mode):
    return state[0] if mode == "LSTM" else state


class RNNBase(Module):
    """Shared machinery of ``RNN``, ``LSTM`` and ``GRU``."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        super().__init__()
        if proj_size:
            raise NotImplementedError("dynajax: LSTM proj_size is not supported yet")
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate = _GATES[mode] * hidden_size
        f = {"device": device, "dtype": dtype}
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(2 if bidirectional else 1):
                n_in = input_size if layer == 0 else hidden_size * (2 if bidirectional else 1)
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                names = [("weight_ih" + sfx, (gate, n_in)), ("weight_hh" + sfx, (gate, hidden_size))]
                if bias:
                    names += [("bias_ih" + sfx, (gate,)), ("bias_hh" + sfx, (gate,))]
                for name, shape in names:
                    setattr(self, name, Parameter(empty(*shape, **f)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    @property
    def all_weights(self) -> list:
        return [[getattr(self, n) for n in self._flat_weights_names if n.endswith(sfx)]
                for sfx in self._suffixes()]

    def _suffixes(self) -> list:
        return [f"_l{layer}" + ("_reverse" if d else "") for layer in range(self.num_layers)
                for d in range(2 if self.bidirectional else 1)]

    def _weights(self, sfx: str):
        g = lambda n: getattr(self, n + sfx) if self.bias or n.startswith("weight") else None  # noqa: E731
        return g("weight_ih"), g("weight_hh"), g("bias_ih"), g("bias_hh")

    def forward(self, input, hx=None):
        from ..utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
        if isinstance(input, PackedSequence):
            padded, lengths = pad_packed_sequence(input)
            out, hidden = self._run(padded, hx, lengths.tolist())
            lens = lengths.tolist()
            if input.sorted_indices is None:
                return pack_padded_sequence(out, lens), hidden
            return pack_padded_sequence(out, lens, enforce_sorted=False), hidden
        return self._run(input, hx, None)

    def _run(self, input, hx, lengths):
        from ...ops.join import stack, cat
        from ...ops.creation import tensor
        batched = input.dim() == 3 or lengths is not None
        if input.dim() not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        x = input if batched else input.unsqueeze(1)
        first = None   # batch-first input, whose first projection is transposed after it (see below)
        if batched and self.batch_first and lengths is None:
            if whole_program():
                # project, then transpose: the same values, and a projection of an embedding lookup is
                # then recorded as a lookup in the projected table (nn._ops.linear)
                first = x
            x = x.transpose(0, 1)
        n = x.shape[1]
        import numpy as np
        mask = sequence_mask(x.shape[0]) if lengths is None else tensor(
            np.arange(x.shape[0]).reshape(-1, 1, 1) < np.asarray(lengths).reshape(1, -1, 1))
        D = 2 if self.bidirectional else 1
        is_lstm = self.mode == "LSTM"
        if hx is None:
            z = zeros(self.num_layers * D, n, self.hidden_size, dtype=x.dtype)
            hx = (z, z) if is_lstm else z
        elif not batched:
            hx = tuple(h.unsqueeze(1) for h in hx) if is_lstm else hx.unsqueeze(1)
        self._check_hidden(hx, n, D, is_lstm)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(D):
                k = layer * D + d
                w_ih, w_hh, b_ih, b_hh = self._weights(f"_l{layer}" + ("_reverse" if d else ""))
                state = (hx[0][k], hx[1][k]) if is_lstm else hx[k]
                gi = _proj(x, w_ih, b_ih) if first is None or layer else _proj(first, w_ih, b_ih).transpose(0, 1)
                ys, state = run_layer(self.mode, gi, state, w_hh, b_hh, mask, d == 1)
                outs.append(ys)
                h_n.append(_hidden(state, self.mode))
                if is_lstm:
                    c_n.append(state[1])
            x = outs[0] if D == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        out = x
        if batched and self.batch_first and lengths is None:
            out = out.transpose(0, 1)
        h = stack(h_n, 0)
        hidden = (h, stack(c_n, 0)) if is_lstm else h
        if not batched:
            out = out.squeeze(1)
            hidden = tuple(t.squeeze(1) for t in hidden) if is_lstm else hidden.squeeze(1)
        return out, hidden

    def _check_hidden(self, hx, n: int, D: int, is_lstm: bool) -> None:
        expected = (self.num_layers * D, n, self.hidden_size)
        for h, what in ((hx[0], "hidden"), (hx[1], "cell")) if is_lstm else ((hx, "hidden"),):
            if tuple(h.shape) != expected:
                raise RuntimeError(f"Expected {what} size {expected}, got {list(h.shape)}")

    def flatten_parameters(self) -> None:
        """PyTorch packs the weights into one cuDNN buffer here; dynajax's scans read them as they are."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory; ``forward(x, (h0, c0))`` returns ``(output, (h_n, c_n))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         device, dtype)


class _CellBase(Module):
    _mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gate = _GATES[self._mode] * hidden_size
        f = {"device": device, "dtype": dtype}
        self.weight_ih = Parameter(empty(gate, input_size, **f))
        self.weight_hh = Parameter(empty(gate, hidden_size, **f))
        self.bias_ih = Parameter(empty(gate, **f)) if bias else None
        self.bias_hh = Parameter(empty(gate, **f)) if bias else None
        stdv = 1.0 / math.sqrt(hidden_size)
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def forward(self, input, hx=None):
        if input.dim() not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            z = zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
            hx = (z, z) if self._mode == "LSTM" else z
        elif not batched:
            hx = tuple(h.unsqueeze(0) for h in hx) if self._mode == "LSTM" else hx.unsqueeze(0)
        out = cell_step(self._mode, x, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if not batched:
            out = tuple(o.squeeze(0) for o in out) if self._mode == "LSTM" else out.squeeze(0)
        return out

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(_CellBase):
    """One step of an Elman RNN."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        self._mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device, dtype)


class LSTMCell(_CellBase):
    """One LSTM step: ``(h, c) = cell(x, (h, c))``."""
    _mode = "LSTM"


class GRUCell(_CellBase):
    """One GRU step."""
    _mode = "GRU"
