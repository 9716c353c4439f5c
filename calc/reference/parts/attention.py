"""Multi-head self-attention (MHA/GQA/MQA) with everything the Attention part can switch on.

Q, K, V from separate or fused projections (a fused one ordered Q|K|V, or per KV group as NeoX,
BLOOM and Falcon store it: each group's queries, then its key, then its value), clamped to
±clip_qkv (DBRX); values (as wide as keys, or v_head_dim) optionally times `value_scale`
(MiMo-V2-Flash); QK-norm over each head or the full width, before rotary; rotary on the first
rotary_dim channels; ALiBi; scores scaled by `scale` (1/sqrt(head_dim) unless the spec says
otherwise), soft-capped, masked causally and to a sliding window; gpt-oss's sinks as one extra
logit per head that takes probability mass and is then dropped; the output gate on the heads'
output, sigmoid(x·W_G) per channel (AFMoE's W_G a matrix of its own; Qwen3-Next's inside q_proj, each
head's queries then its gate, as the layout's `q_gate` says) or Laguna's softplus(x·W_G) per head. The
cache holds every key and value after rotary; a sliding-window layer's rolls, keeping the last
`window` positions, and its queries read only the keys they can see. MiniMax-M3's block indexer
(calc.reference.parts.block_indexer) narrows what each head group reads to the key blocks it picks.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from calc.parts.attention import Attention as AttentionSpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import Part
from calc.reference.parts.block_indexer import block_mask
from calc.reference.parts.norm import Norm
from calc.reference.parts.rope import Rotary

__all__ = ["Attention", "alibi_slopes", "attend", "band", "causal_mask", "sink_column", "softmax_with_sinks", "split_heads"]


def causal_mask(positions: torch.Tensor, keys: int, window: int | None, chunk: int | None = None,
                first: int = 0) -> torch.Tensor:
    """[T, keys]: the query at position p sees keys 0..p; with a window only the last `window` of them,
    with chunks (Llama-4) only those of its own chunk of `chunk` positions. The key columns are
    positions first, first + 1, ... (a rolling cache starts after 0)."""
    key_pos = torch.arange(first, first + keys, device=positions.device)[None, :]
    allowed = key_pos <= positions[:, None]
    if window is not None:
        allowed &= key_pos > positions[:, None] - window
    if chunk is not None:
        allowed &= key_pos // chunk == positions[:, None] // chunk
    return allowed


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """BLOOM's (and MPT's, for a power-of-two head count) ALiBi slope per head."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base ** i for i in range(1, closest + 1)]
    if closest != n_heads:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** i for i in range(1, 1 + 2 * (n_heads - closest), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


def merge_heads(t: torch.Tensor, merge: bool, heads: int = 0) -> torch.Tensor:
    """[B, heads, T, hd] -> [B, T, heads * hd] (merge), or back."""
    if merge:
        B, H, T, _ = t.shape
        return t.transpose(1, 2).reshape(B, T, -1)
    return split_heads(t, heads)


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, T, heads * hd] -> [B, heads, T, hd]."""
    B, T, _ = t.shape
    return t.view(B, T, heads, -1).transpose(1, 2)


class Attention(Part):
    ROLES = frozenset({"q", "k", "v", "qkv", "o", "q_norm", "k_norm", "sinks", "attn_gate", "block_idx_q", "block_idx_k",
                       "block_idx_q_norm", "block_idx_k_norm"})

    def __init__(self, spec: AttentionSpec, n_positions: int, qkv_order: str, gate_in_q: bool = False) -> None:
        super().__init__()
        self.spec, self.qkv_order, self.gate_in_q = spec, qkv_order, gate_in_q
        self.rotary = Rotary(spec.rope, n_positions, spec.head_dim) if spec.rope else None
        # Gemma-3n's and Gemma-4's V-norm: an RMSNorm over each head without a scale, the QK-norms' epsilon
        self.v_norm = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False,
                                                    eps=spec.qk_norm.norm.eps), ()) if spec.v_norm else None
        self.roles = {"attn_out": "o"}

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "Attention":
        """The layout says how a fused Q|K|V projection is ordered (concat, or grouped per KV head) and
        whether q_proj also holds the output gate (`q_gate`)."""
        return cls(block.attention, n_positions, lay.get("qkv_order", "concat"),
                   block.attention.output_gate and bool(lay.get("q_gate")))

    def norm_spec(self, role: str) -> Any:
        """The QK-norms' spec, or the block indexer's (MiniMax-M3) for its own."""
        return self.spec.indexer.norm if role.startswith("block_idx") else self.spec.qk_norm.norm

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Q, K and V, each [B, T, heads·hd], clamped to ±clip_qkv when the spec says so (DBRX)."""
        q, k, v = self._qkv(x)
        if (clip := self.spec.clip_qkv) is not None:
            return tuple(None if t is None else t.clamp(-clip, clip) for t in (q, k, v))
        return q, k, v

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Q, K, V; a KV-shared layer's K and V are None (an earlier layer's), k_eq_v's V is K's projection."""
        s, w = self.spec, self.weights
        if s.kv_shared:
            return w["q"](x), None, None
        if not s.fused_qkv:
            k = w["k"](x)
            return w["q"](x), k, k if s.k_eq_v else w["v"](x)
        qkv = w["qkv"](x)
        if self.qkv_order != "grouped":
            return qkv.split([s.q_dim, s.kv_dim, s.v_dim], dim=-1)
        B, T, _ = qkv.shape
        grouped = qkv.view(B, T, s.n_kv_heads, s.group_size + 2, s.head_dim)
        return (grouped[..., :-2, :].reshape(B, T, s.q_dim), grouped[..., -2, :].reshape(B, T, s.kv_dim),
                grouped[..., -1, :].reshape(B, T, s.kv_dim))

    def _qk_norm(self, t: torch.Tensor, role: str, heads: int, after_rope: bool = False) -> torch.Tensor:
        """QK-norm of [B, T, heads*hd] (before rotary, or after it for Llama-4): over the full width, or
        per head (weight [hd] or [heads, hd])."""
        if self.spec.qk_norm is None or self.spec.qk_norm.after_rope != after_rope:
            return t
        norm = self.weights.get(role) or Norm(self.spec.qk_norm.norm, ())  # no parameters: it still normalises
        if self.spec.qk_norm.scope == "full" and (norm is None or norm.weight is None or norm.weight.dim() == 1):
            return norm(t)
        B, T, _ = t.shape
        return norm(t.view(B, T, heads, -1)).reshape(B, T, -1)

    def _gate(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(queries, the output gate when q_proj holds it): Qwen3-Next's q_proj gives each head its hs
        queries and then its hs gate channels (Qwen3NextAttention), [B, T, nh*2hs] -> two [B, T, nh*hs]."""
        if not self.gate_in_q:
            return q, None
        B, T, _ = q.shape
        q, gate = q.view(B, T, self.spec.n_heads, 2 * self.spec.head_dim).chunk(2, dim=-1)
        return q.reshape(B, T, -1), gate.reshape(B, T, -1)

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        s, trace = self.spec, ctx.trace
        q, k, v = self._project(x)  # (B, T, nh*hs), (B, T, nkv*hs), (B, T, nkv*hs)
        q, gate = self._gate(q)
        for name, t in (("q", q), ("k", k), ("v", None if s.k_eq_v else v)):
            if t is not None:  # a KV-shared layer projects only Q; k_eq_v's values are the keys
                trace(name, t)
        q = self._qk_norm(q, "q_norm", s.n_heads)
        k = None if k is None else self._qk_norm(k, "k_norm", s.n_kv_heads)
        if s.qk_norm is not None and s.qk_norm.scope != "head":
            trace("q_norm", q)  # over the full width, before the split: [B, T, h·hd]
            trace("k_norm", k)
        q = split_heads(q, s.n_heads)
        if self.rotary is not None:
            cos, sin = self.rotary.cos_sin(ctx.positions, q.dtype)
            q = self.rotary.apply(q, cos, sin)
            if (factor := self.rotary.query_scale(ctx.positions)) is not None:
                q = q * factor.to(q.dtype)
        if s.kv_shared:  # Gemma-3n/4: the last earlier layer of this kind's keys and values, as it saw them
            new_k, new_v, k, v, first = ctx.shared_kv[s.window]
        else:
            new_k, new_v = self._keys_values(k, v, ctx)
        if s.qk_norm is not None and s.qk_norm.after_rope:
            q = merge_heads(self._qk_norm(merge_heads(q, True), "q_norm", s.n_heads, after_rope=True), False, s.n_heads)
        if s.temperature is not None:
            t = s.temperature
            q = q * (torch.log1p(torch.floor((ctx.positions.float() + 1) / t.floor)) * t.scale + 1)[:, None].to(q.dtype)
        for name, t in (("q_heads", q), ("k_heads", new_k), ("v_heads", new_v)):
            trace(name, t)
        if s.qk_norm is not None and s.qk_norm.scope == "head":  # computed before the split: these are the normed heads
            trace("q_norm", q)
            trace("k_norm", new_k)
        if not s.kv_shared:
            k, v, first = new_k, new_v, 0
            if ctx.cache is not None:
                k, v, first = ctx.cache.append(ctx.layer, k, v, s.window)  # (B, nkv, keys, hs) from position `first`
                trace("k_cache", ctx.cache.keys[ctx.layer])  # as kept: a sliding window's at most `window`
                trace("v_cache", ctx.cache.values[ctx.layer])
            ctx.shared_kv[s.window] = new_k, new_v, k, v, first
        k = k.repeat_interleave(s.group_size, dim=1)  # (B, nh, keys, hs): query head i reads KV head i // g
        v = v.repeat_interleave(s.group_size, dim=1)
        if s.group_size > 1:  # a GQA kernel reads the shared heads in place; here they are copied
            trace("kv_groups", k)
        scores = q @ k.transpose(-2, -1) * (s.scale if s.scale is not None else s.head_dim ** -0.5)
        if s.indexer is not None:  # MiniMax-M3's sparse layers: only the key blocks the indexer picked
            visible = causal_mask(ctx.positions, scores.shape[-1], None)
            scores = scores.masked_fill(~block_mask(self, x, ctx, visible), float("-inf"))
        y = attend(self, scores, v, ctx, s.window, s.chunk, first)
        trace("attn_heads_out", y)
        B, _, T, _ = y.shape
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, nh*hs)
        trace("attn_concat", y)
        if s.output_gate:
            y = self._gated(x, y, gate, trace)
        y = self.weights["o"](y)  # (B, T, d)
        trace("attn_out", y)
        return y

    def _keys_values(self, k: torch.Tensor, v: torch.Tensor, ctx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's keys and values [B, nkv, T, hs] as they are cached, from the (K-normed) projections:
        K scaled and rotated; V scaled, or RMS-normed without a scale (`v_norm`: Gemma-3n's, Gemma-4's)."""
        s = self.spec
        k, v = split_heads(k, s.n_kv_heads), split_heads(v, s.n_kv_heads)
        if self.v_norm is not None:
            v = self.v_norm(v)
        if s.value_scale is not None:  # MiMo-V2-Flash scales the values before they are cached
            v = v * s.value_scale
        if s.key_scale is not None:  # Falcon-H1's key_multiplier, before rotary (which is linear) and the cache
            k = k * s.key_scale
        if self.rotary is not None:
            cos, sin = self.rotary.cos_sin(ctx.positions, k.dtype)
            k = self.rotary.apply(k, cos, sin)
        if s.qk_norm is not None and s.qk_norm.after_rope:
            k = merge_heads(self._qk_norm(merge_heads(k, True), "k_norm", s.n_kv_heads, after_rope=True), False,
                            s.n_kv_heads)
        return k, v

    def _gated(self, x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None, trace: Any) -> torch.Tensor:
        """The heads' output [B, T, h·v] times sigmoid(gate), each channel (AFMoE's x·W_G; Qwen3-Next's
        `gate` from q_proj), or softplus(x·W_G) computed in float32, one per head (Laguna)."""
        s = self.spec
        gate = self.weights["attn_gate"](x) if gate is None else gate  # (B, T, h·v) or (B, T, h)
        trace("attn_gate", gate)
        if s.gate_activation == "sigmoid":
            gate = torch.sigmoid(gate)
        else:
            gate = torch.nn.functional.softplus(gate.float()).to(y.dtype)
        if s.gate_scope == "head":
            B, T, _ = y.shape
            y = (y.view(B, T, s.n_heads, -1) * gate[..., None]).reshape(B, T, -1)
        else:
            y = y * gate
        trace("attn_gated", y)
        return y


def attend(part: Part, scores: torch.Tensor, v: torch.Tensor, ctx: Any, window: int | None,
           chunk: int | None = None, first: int = 0) -> torch.Tensor:
    """Soft-cap, ALiBi, the causal (and window) mask unless the context is not causal, sinks, softmax in
    float32, then the weighted values;
    the key columns are positions `first` on (a rolling cache's oldest kept one)."""
    s, trace = part.spec, ctx.trace
    relative = ctx.positions - first  # each query's own key column
    trace("scores", band(scores, relative, window))  # (B, nh, T, keys)
    if s.softcap:
        scores = torch.tanh(scores / s.softcap) * s.softcap
        trace("attn_softcap", band(scores, relative, window))
    if getattr(s, "alibi", False):
        keys = torch.arange(first, first + scores.shape[-1], device=scores.device, dtype=torch.float32)
        scores = scores + (alibi_slopes(s.n_heads).to(scores.device)[:, None] * keys)[None, :, None, :].to(scores.dtype)
    if ctx.causal:  # an encoder's attention (calc.reference.tower) sees every position
        scores = scores.masked_fill(~causal_mask(ctx.positions, scores.shape[-1], window, chunk, first), float("-inf"))
    sinks = part.weights.tensor("sinks") if getattr(s, "sinks", False) else None
    if sinks is not None:
        trace("attn_sinks", torch.cat((band(scores, relative, window), sink_column(scores, sinks)), dim=-1))
    weights = softmax_with_sinks(scores, sinks).to(v.dtype)
    trace("attn_weights", band(weights, relative, window))
    return weights @ v  # (B, nh, T, hs)


def sink_column(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """[B, H, T, 1]: each head's sink logit beside its scores [B, H, T, keys]."""
    B, H, T, _ = scores.shape
    return sinks.reshape(1, H, 1, 1).expand(B, H, T, 1).to(scores.dtype)


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """The softmax over the keys in float32; with gpt-oss's sinks (DeepSeek-V4's too) one extra logit
    per head takes its share of the mass and is dropped, the row's maximum subtracted first as
    transformers' eager_attention_forward does."""
    if sinks is None:
        return scores.softmax(dim=-1, dtype=torch.float32)
    scores = torch.cat((scores, sink_column(scores, sinks)), dim=-1)
    scores = scores - scores.max(dim=-1, keepdim=True).values
    return scores.softmax(dim=-1, dtype=torch.float32)[..., :-1]


def band(t: torch.Tensor, positions: torch.Tensor, window: int | None) -> torch.Tensor:
    """For tracing: [..., T, keys] -> [..., T, min(keys, window)], each query's last `window` keys
    (`positions`: each query's own key column).
    The reference computes every query against every key and masks the ones out of the window; a
    sliding-window kernel (and `gptcalc shapes`) computes only this band, which these columns are."""
    keys = t.shape[-1]
    if window is None or window >= keys:
        return t
    index = (positions[:, None] - window + 1 + torch.arange(window, device=t.device)).clamp(0, keys - 1)
    return t.gather(-1, index.expand(*t.shape[:-1], window))
