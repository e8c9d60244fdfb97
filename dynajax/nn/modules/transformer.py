"""Attention layers: ``MultiheadAttention`` and the Transformer encoder/decoder layers."""
from __future__ import annotations

import copy
import math

from ... import _dtype
from ...autograd.engine import _sz
from ...ops.creation import empty, ones, zeros
from ...ops.join import cat
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .container import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module


class NonDynamicallyQuantizableLinear(Linear):
    """The output projection of MultiheadAttention (a Linear, named as in PyTorch)."""


def _float_mask(mask, dtype, name: str = "attn_mask"):
    """PyTorch's attention mask convention: bool True = masked out -> -inf; float masks are added."""
    if mask is None:
        return None
    if mask.dtype != _dtype.bool_ and not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if mask.dtype == _dtype.bool_:
        return zeros(mask.shape, dtype=dtype).masked_fill(mask, -math.inf)
    return mask.to(dtype)


class MultiheadAttention(Module):
    """Multi-head attention ``softmax(QK^T/sqrt(d)) V`` over ``num_heads`` heads, then an output projection.

    As PyTorch's: keys and values of other sizes (``kdim``/``vdim``) get their own projection weights
    (``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` instead of ``in_proj_weight``); ``add_bias_kv``
    appends a learned key and value to the source sequence, ``add_zero_attn`` a zero one after that."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        f = {"device": device, "dtype": dtype}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **f))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **f))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **f))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **f))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **f))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **f)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, **f))
            self.bias_v = Parameter(empty(1, 1, embed_dim, **f))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _projections(self) -> tuple:
        """The query, key and value projection weights, whichever way they are stored."""
        if self._qkv_same_embed_dim:
            return self.in_proj_weight.chunk(3)
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """Returns ``(attn_output, attn_weights or None)``; masks follow PyTorch (bool True = ignore).
        ``is_causal`` is PyTorch's hint that ``attn_mask`` is the causal mask: the mask is required, and
        without ``need_weights`` or ``key_padding_mask`` the causal mask over every key (those that
        ``add_bias_kv``/``add_zero_attn`` append included) is applied in its place, as PyTorch's fused path
        does. Without ``need_weights`` a row whose every key is masked gives 0 (PyTorch's fused
        attention); with it, NaN (its explicit softmax)."""
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, self.num_heads)
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
        if E != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {E}")
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key shape {_sz(key.shape)} does not match value shape {_sz(value.shape)}")
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        wq, wk, wv = self._projections()
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        # PyTorch's fused path: where no weights are returned and no padding mask is given, the hint
        # replaces the mask by the causal one over every key, the appended ones included
        causal = is_causal and key_padding_mask is None and not need_weights
        mask = None if causal else _float_mask(attn_mask, q.dtype)
        if mask is not None:
            want = (L, S) if mask.dim() == 2 else (N * H, L, S)
            if tuple(mask.shape) != want:
                raise RuntimeError(f"The shape of the {mask.dim()}D attn_mask is {_sz(mask.shape)}, but should be "
                                   f"{want}.")
        kpm = _float_mask(key_padding_mask, q.dtype, "key_padding_mask")
        if kpm is not None:
            for i, want in enumerate((N, S)):
                if kpm.shape[i] != want:
                    raise AssertionError(f"Expected key_padded_mask.shape[{i}] to be {want}, but got "
                                         f"{kpm.shape[i]}")
        extra = 0   # source positions appended: the learned bias key/value, then the zero one
        if self.bias_k is not None:
            k = cat([k, self.bias_k.expand(1, N, E)])
            v = cat([v, self.bias_v.expand(1, N, E)])
            extra += 1
        k = k.reshape(S + extra, N * H, hd).transpose(0, 1)
        v = v.reshape(S + extra, N * H, hd).transpose(0, 1)
        if self.add_zero_attn:
            k = cat([k, zeros(N * H, 1, hd, dtype=k.dtype, device=k.device)], 1)
            v = cat([v, zeros(N * H, 1, hd, dtype=v.dtype, device=v.device)], 1)
            extra += 1
        if extra:   # the appended positions are not masked (but by the causal hint)
            mask = None if mask is None else F.pad(mask, (0, extra))
            kpm = None if kpm is None else F.pad(kpm, (0, extra))
        S += extra
        if causal:
            mask = _float_mask(ones(L, S, dtype=_dtype.bool_).triu(1), q.dtype)
        q = q.reshape(L, N * H, hd).transpose(0, 1)
        if mask is not None and mask.dim() == 3:
            mask = mask.reshape(N, H, L, S)
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
        scores = scores.reshape(N, H, L, S)
        if mask is not None:
            scores = scores + mask
        if kpm is not None:
            scores = scores + kpm.reshape(N, 1, 1, S)
        if need_weights or (mask is None and kpm is None):
            attn = F.softmax(scores, -1)
        else:
            attn = F._safe_softmax(scores)
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


def _check_mha_shapes(query, key, value, key_padding_mask, attn_mask, num_heads: int) -> None:
    """PyTorch's checks of the ranks of ``MultiheadAttention``'s inputs (before any reshape can fail on
    them with a message about a reshape)."""
    q, k, v = query.dim(), key.dim(), value.dim()
    kind = {3: "batched (3-D)", 2: "unbatched (2-D)"}.get(q)
    if kind is None:
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {q}-D query tensor")
    if k != q or v != q:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {q}-D but found {k}-D and "
                             f"{v}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != q - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or {q - 1}-D but found "
                             f"{key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                             f"{attn_mask.dim()}-D tensor instead")
    if q == 2 and attn_mask is not None and attn_mask.dim() == 3:
        want = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != want:
            raise AssertionError(f"Expected `attn_mask` shape to be {want} but got {_sz(attn_mask.shape)}")


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

    def _mha_block(self, x, mem, mask, kpm, is_causal=False):
        return self.dropout2(self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm,
                                                 need_weights=False, is_causal=is_causal)[0])

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
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
                      bool(tgt_is_causal), memory_is_causal)
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
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **f))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **f))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        batch = 0 if self.batch_first else 1
        if src.dim() == 3 and src.shape[batch] != tgt.shape[batch]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
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
