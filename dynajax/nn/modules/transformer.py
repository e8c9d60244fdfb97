"""Attention layers: ``MultiheadAttention`` and the Transformer encoder/decoder layers."""
from __future__ import annotations

import copy
import math

from ... import _dtype
from ...ops.creation import empty
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .container import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module


class NonDynamicallyQuantizableLinear(Linear):
    """The output projection of MultiheadAttention (a Linear, named as in PyTorch)."""


def _float_mask(mask, dtype):
    """PyTorch's attention mask convention: bool True = masked out -> -inf; float masks are added."""
    if mask is None:
        return None
    if mask.dtype == _dtype.bool_:
        from ...ops.creation import zeros
        return zeros(mask.shape, dtype=dtype).masked_fill(mask, -math.inf)
    return mask.to(dtype)


class MultiheadAttention(Module):
    """Multi-head attention ``softmax(QK^T/sqrt(d)) V`` over ``num_heads`` heads, then an output projection."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if (kdim not in (None, embed_dim)) or (vdim not in (None, embed_dim)) or add_bias_kv or add_zero_attn:
            raise NotImplementedError("dynajax: MultiheadAttention supports kdim == vdim == embed_dim without "
                                      "add_bias_kv/add_zero_attn")
        self.embed_dim, self.kdim, self.vdim = embed_dim, embed_dim, embed_dim
        self._qkv_same_embed_dim = True
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        f = {"device": device, "dtype": dtype}
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **f))
        self.in_proj_bias = Parameter(empty(3 * embed_dim, **f)) if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **f)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """Returns ``(attn_output, attn_weights or None)``; masks follow PyTorch (bool True = ignore)."""
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        L, N, E = query.shape
        S = key.shape[0]
        H, hd = self.num_heads, self.head_dim
        w = self.in_proj_weight
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        wq, wk, wv = w.chunk(3)
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        q = q.reshape(L, N * H, hd).transpose(0, 1)
        k = k.reshape(S, N * H, hd).transpose(0, 1)
        v = v.reshape(S, N * H, hd).transpose(0, 1)
        if is_causal and attn_mask is None:
            from ...ops.creation import ones
            attn_mask = ones(L, S, dtype=_dtype.bool_).triu(1)
        mask = _float_mask(attn_mask, q.dtype)
        if mask is not None and mask.dim() == 3:
            mask = mask.reshape(N, H, L, S)
        kpm = _float_mask(key_padding_mask, q.dtype)
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
        scores = scores.reshape(N, H, L, S)
        if mask is not None:
            scores = scores + mask
        if kpm is not None:
            scores = scores + kpm.reshape(N, 1, 1, S)
        attn = F.softmax(scores, -1)
        if self.dropout > 0.0 and self.training:
            attn = F.dropout(attn, self.dropout, True)
        out = (attn.reshape(N * H, L, S) @ v).transpose(0, 1).reshape(L * N, E)
        out = self.out_proj(out).reshape(L, N, E)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        weights = attn.mean(1) if average_attn_weights else attn
        return out, (weights if batched else weights.squeeze(0))


def _activation_fn(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _build_layer(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                 norm_first, bias, f, cross: bool) -> None:
    """Create the submodules of an encoder (or, with ``cross``, decoder) layer in PyTorch's order."""
    self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **f)
    if cross:
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **f)
    self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **f)
    self.dropout = Dropout(dropout)
    self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **f)
    self.norm_first = norm_first
    for i in range(1, 4 if cross else 3):
        setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **f))
    for i in range(1, 4 if cross else 3):
        setattr(self, f"dropout{i}", Dropout(dropout))
    self.activation = _activation_fn(activation)


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with residual, dropout and LayerNorm (post- or pre-norm)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _build_layer(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                     norm_first, bias, {"device": device, "dtype": dtype}, cross=False)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory``, then a feed-forward block."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _build_layer(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                     norm_first, bias, {"device": device, "dtype": dtype}, cross=True)

    def _sa_block(self, x, mask, kpm, is_causal=False):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm, need_weights=False,
                                            is_causal=is_causal)[0])

    def _mha_block(self, x, mem, mask, kpm):
        return self.dropout2(self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm,
                                                 need_weights=False)[0])

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask))
        return self.norm3(x + self._ff_block(x))


class TransformerEncoder(Module):
    """A stack of ``num_layers`` copies of ``encoder_layer`` (plus an optional final norm)."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm=None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """A stack of ``num_layers`` copies of ``decoder_layer`` (plus an optional final norm)."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm=None) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                      bool(tgt_is_causal))
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """Encoder-decoder Transformer (``encoder``/``decoder`` stacks with final LayerNorms), as ``torch.nn.Transformer``."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu",
                 custom_encoder=None, custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        f = {"device": device, "dtype": dtype}
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias, **f)
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **f))
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **f))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """A float mask with -inf above the diagonal (positions may attend only to earlier ones)."""
        from ...ops.creation import full
        return full((sz, sz), -math.inf, dtype=dtype, device=device).triu(1)
