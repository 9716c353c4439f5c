"""The reference decoder: a real, runnable torch model built from any `ModelSpec`.

Every tensor is created from `calc.checkpoint.names.tensor_table(spec)`, so parameters carry the
model_type's Hugging Face names (`model.layers.3.self_attn.q_proj.weight`, GPT-2's
`transformer.h.3.attn.c_attn.weight`, transformers 5's fused `mlp.experts.gate_up_proj`) and a
checkpoint saved by transformers loads with `load_state_dict(strict=True)`. The computation lives
with each part kind (`calc.reference.parts`: attention, mla, compressed and compressor,
mamba2, gated_deltanet, kda, lightning, short_conv, mlp, moe, norm, rope, hyper, block, and shared:
Zamba2's blocks stored once, whose tensors are built after the layers they sit under); this module
adds the embedding (scaled by √d for Gemma, by a multiplier for Granite, learned positions offset
by 2 for OPT, BLOOM's embedding norm, OPT-350m's projections), the stack of layers (DeepSeek-V4's
on n copies of the stream, collapsed by its hyper-connection head), the final norm and the head
(its bias, Cohere's and Granite's logit scale, Gemma-2's soft-cap).

Loading (`Decoder._accept_hf_names`, a load_state_dict pre-hook) adds the prefix a base-model
checkpoint leaves out (GPT-2's `wte.weight`), renames older aliases (NeoX's `embed_out`), drops
what the name table knows as a buffer (causal masks, `rotary_emb.inv_freq`) and, in a tied model, a
stored `lm_head.weight`, and stacks one-tensor-per-expert checkpoints (the Hub's layout before
transformers 5) into the fused expert tensors. Anything else unexpected or missing fails.

Cost: building allocates the tensors and nothing else. On the meta device that is free at any
size (DeepSeek-V3's 671B: no memory, no initialisation, no rotary tables, which are computed on
first use). Each layer is its own set of modules (every parameter keeps its own Hugging Face name;
no layer is shared between identical ones): about 2 ms per layer on a loaded 2-core machine, so
DeepSeek-V3's 61 layers build in about 0.3 s and a 1,000-layer spec in under 2 s. The causal mask
is computed from positions each forward pass, never stored; a sliding-window layer's KV cache
rolls (`KVCache`: at most `window` positions kept), a Mamba2, DeltaNet, KDA, lightning or short-conv
layer keeps fixed-size states instead, and a Gemma KV-shared layer keeps nothing.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.names import Slot, TensorTable, tensor_table
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts import augment, hyper, shared
from calc.reference.parts.base import Trace, build_weights, initialise, no_trace, place
from calc.reference.parts.block import Layer, make_norm
from calc.reference.parts.norm import Norm
from calc.spec.model import ModelSpec

__all__ = ["Decoder", "KVCache", "Trace", "build"]


class KVCache:
    """What each layer keeps of the positions seen so far, for token-by-token decoding.

    Attention: `keys[i]` and `values[i]` are layer i's [B, n_kv_heads, kept, head_dim] keys and values
    after rotary; MLA's compressed latent [B, 1, kept, kv_lora_rank] and shared rotary key
    [B, 1, kept, qk_rope_head_dim]. They grow by concatenation, never preallocated. A full attention
    (or MLA) layer keeps all T positions; a sliding-window layer a rolling buffer of the last
    min(T, window), as `gptcalc kvcache` counts it; so `nbytes` is the real cost of each.
    A Mamba2, gated DeltaNet, KDA or short-conv layer keeps `states[i]` instead: its conv window (the
    last kernel - 1 inputs) and its recurrent state (lightning attention: the state alone), replaced at every step and the same size
    whatever T (the mixer's `CacheSpec.states`); a Zamba2 hybrid layer keeps both, its shared block's
    keys and values beside its Mamba2's states. A layer without a token mixer keeps nothing.
    Every dict is keyed by layer index.
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.states: dict[int, dict[str, torch.Tensor]] = {}
        self.seen: dict[int, int] = {}  # positions each layer has been given (a rolling layer keeps fewer)

    @property
    def length(self) -> int:
        """Positions seen (0 when empty); the next token's position."""
        return next(iter(self.seen.values()), 0)

    @property
    def nbytes(self) -> int:
        return sum(self.layer_nbytes(layer) for layer in self.seen)

    def layer_nbytes(self, layer: int) -> int:
        kept = (self.keys.get(layer), self.values.get(layer), *self.states.get(layer, {}).values())
        return sum(t.nbytes for t in kept if t is not None)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor,
               window: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Add this step's keys/values [B, heads, T, dim] for `layer`. Returns the keys and values its
        queries can see (a window's: from the first new position's window on) and the position of the
        first of them; keeps all of them, or with a window only the last `window` (a copy, so the
        dropped rows are freed)."""
        if layer not in self.keys:
            self.keys[layer], self.values[layer], self.seen[layer] = k[:, :, :0], v[:, :, :0], 0
        past = self.seen[layer]
        first = past - self.keys[layer].shape[2]  # the position of the oldest kept row
        keys, values = torch.cat((self.keys[layer], k), dim=2), torch.cat((self.values[layer], v), dim=2)
        self.seen[layer] = past + k.shape[2]
        if window is None or keys.shape[2] <= window:
            self.keys[layer], self.values[layer] = keys, values
            return keys, values, first
        self.keys[layer], self.values[layer] = keys[:, :, -window:].clone(), values[:, :, -window:].clone()
        start = max(first, past - window + 1)  # the oldest key the first new query sees
        return keys[:, :, start - first:], values[:, :, start - first:], start

    def state(self, layer: int, name: str) -> torch.Tensor | None:
        """Layer `layer`'s state `name` ("conv", "recurrent") as its last step left it; None before its first."""
        return self.states.get(layer, {}).get(name)

    def keep(self, layer: int, positions: int, **states: torch.Tensor) -> None:
        """Replace the layer's states with the ones after a step of `positions` new tokens."""
        self.states.setdefault(layer, {}).update(states)
        if layer not in self.keys:  # a layer that also appends keys (a parallel group's attention) counts there
            self.seen[layer] = self.seen.get(layer, 0) + positions


@dataclass
class Context:
    """What every layer of one forward pass reads besides its input."""

    positions: torch.Tensor  # (T,)
    cache: KVCache | None
    trace: Trace
    layer: int = 0
    n_layers: int = 1  # the stack's depth: MiniMax's lightning decays depend on layer / (n_layers - 1)
    selected: torch.Tensor | None = None  # the last DSA indexer's choice [B, T, keys], for GLM-5's shared layers
    # each attention kind's (by window) last new and visible keys and values and the first visible position:
    # what Gemma-3n's and Gemma-4's KV-shared layers attend to
    shared_kv: dict = field(default_factory=dict)
    per_layer: torch.Tensor | None = None  # Gemma's per-layer inputs [B, T, n_layers, p]; layer i reads [:, :, i]
    residual: torch.Tensor | None = None  # the stream before the MLP's norm (Gemma-4's router and experts read it)
    causal: bool = True  # False: every position sees every other (a vision encoder's layers)
    embeddings: torch.Tensor | None = None  # the embedding output [B, T, d]: what Zamba2's shared blocks read beside x
    ids: torch.Tensor | None = None  # the token ids [B, T]: DeepSeek-V4's hash-routed layers pick experts by them


class Decoder(nn.Module):
    """The whole model: embeddings, the layers, final norm, head (absent when tied)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        table: TensorTable = tensor_table(spec)
        self.table, lay = table, table.lay
        model = {r: s for r, s in table.model.items() if not r.startswith(shared.ROLE)}
        self.weights = build_weights(self, model, make_norm(lambda role: _model_norm(spec, role)),
                                     conv1d=False)  # GPT-2's Conv1D is only inside its layers
        layers = nn.ModuleList(Layer(spec.blocks[spec.block_at(i)], table.blocks[spec.block_at(i)], lay, spec.n_positions)
                               for i in range(spec.n_layers))
        place(self, lay["layers"], layers)
        self.tied = shared.attach(self, {r: s for r, s in table.model.items() if r not in model}, layers, table.layers,
                                  spec.n_positions)
        if spec.final_norm is not None:  # OLMo-1's has no parameters and still normalises
            self.weights.setdefault("final_norm", Norm(spec.final_norm, ()))
        self.roles = {"token_embedding": "embed", "position_embedding": "positions", "final_norm": "final_norm"}
        self.layers = [layers]  # a plain list: the ModuleList is registered once, at its Hugging Face path
        n = spec.embedding.altup_inputs or 1  # Gemma-3n's AltUp: projections into and out of n - 1 streams
        self.altup = ([self.weights[f"altup_in.{i}"] for i in range(1, n)],
                      [self.weights[f"altup_out.{i}"] for i in range(1, n)]) if n > 1 else None
        if "lm_head" not in self.weights and "lm_head" not in self._modules:
            self.lm_head = None
        if not self.lm_head_weight().is_meta:
            self._initialise()
        self._register_load_state_dict_pre_hook(self._accept_hf_names)

    def _initialise(self) -> None:
        initialise(self, self.table.model)
        for i, layer in enumerate(self.layers[0]):
            prefix = f"{self.table.layers}.{i}."
            initialise(self, {r: _prefixed(s, prefix) for r, s in self.table.blocks[self.spec.block_at(i)].items()})

    def part(self, role: str) -> nn.Module:
        if role == "blocks":
            return self.layers[0]
        return self.weights[self.roles.get(role, role)]

    def lm_head_weight(self) -> torch.Tensor:
        """The [vocab, width] output matrix: the token embedding's own when tied."""
        return (self.weights.get("lm_head") or self.weights["embed"]).weight

    def new_cache(self) -> KVCache:
        return KVCache()

    def embed(self, ids: torch.Tensor, positions: torch.Tensor, trace: Trace) -> torch.Tensor:
        s, e, w = self.spec, self.spec.embedding, self.weights
        x = w["embed"](ids)  # (B, T, width)
        trace("token_embedding", x)
        if "project_in" in w:
            x = w["project_in"](x)
            trace("project_in", x)
        if e.scale:
            x = x * torch.tensor(math.sqrt(s.d_model), dtype=x.dtype)
        if e.multiplier is not None:
            x = x * e.multiplier
        if "positions" in w:
            pos = w["positions"](positions + e.position_offset).expand(ids.shape[0], -1, -1)  # (B, T, d)
            trace("position_embedding", pos)
            x = x + pos
        trace("embeddings", x)
        if "embed_norm" in w:
            x = w["embed_norm"](x)
            trace("embedding_norm", x)
        return x

    def per_layer_inputs(self, ids: torch.Tensor, x: torch.Tensor, trace: Trace) -> torch.Tensor | None:
        """Gemma's per-layer inputs [B, T, L, p] (Gemma4TextModel.get_per_layer_inputs and
        project_per_layer_inputs): the per-layer table's rows times √p, plus the embeddings x projected
        into the same L slices times d^-1/2 and RMS-normed per slice, the sum times 1/√2. None without."""
        p = self.spec.embedding.per_layer
        if p is None:
            return None
        w, (B, T) = self.weights, ids.shape
        ids = torch.where(ids < p.vocab_size, ids, 0)  # Gemma-3n: ids past its table read row 0
        rows = w["embed_per_layer"](ids) * torch.tensor(math.sqrt(p.width), dtype=x.dtype)  # (B, T, L·p)
        trace("per_layer_embedding", rows)
        projected = w["per_layer_projection"](x) * self.spec.d_model ** -0.5
        projected = w["per_layer_projection_norm"](projected.view(B, T, p.n_layers, p.width))
        trace("per_layer_projection", projected.view(B, T, -1))
        return (projected + rows.view(B, T, p.n_layers, p.width)) * 2 ** -0.5

    def head(self, x: torch.Tensor, trace: Trace) -> torch.Tensor:
        s, w = self.spec, self.weights
        if s.head.hyper is not None:  # DeepSeek-V4: the residual copies collapsed into one before the final norm
            x = hyper.head(w, s.head.hyper, x, s.final_norm.eps)
            trace("hc_head", x)
        if "final_norm" in w:
            x = w["final_norm"](x)
            trace("final_norm", x)
        trace("last_position", x[:, -1])  # (B, d)
        if "project_out" in w:
            x = w["project_out"](x)
            trace("project_out", x[:, -1])  # (B, d_embed)
        bias = w.tensor("lm_head.bias") if "lm_head.bias" in w else getattr(w.get("lm_head"), "bias", None)
        logits = F.linear(x, self.lm_head_weight(), bias)  # (B, T, vocab)
        if s.head.logit_scale is not None:
            logits = logits * s.head.logit_scale
        trace("logits", logits[:, -1])  # (B, vocab)
        if s.head.softcap:
            logits = torch.tanh(logits / s.head.softcap) * s.head.softcap
            trace("logit_softcap", logits[:, -1])
        trace("next_token", logits[:, -1].argmax(dim=-1))  # (B,)
        return logits

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, trace: Trace | None = None) -> torch.Tensor:
        """Logits [B, T, vocab] for token ids [B, T]; with a cache, positions continue from its length."""
        trace = trace or no_trace
        T = input_ids.shape[1]
        past = cache.length if cache is not None else 0
        if past + T > self.spec.n_positions:
            raise ValueError(f"{past + T} positions exceed n_positions={self.spec.n_positions}")
        ctx = Context(torch.arange(past, past + T, device=input_ids.device), cache, trace,
                      n_layers=self.spec.n_layers, ids=input_ids)
        trace("token_ids", input_ids)
        x = ctx.embeddings = self.embed(input_ids, ctx.positions, trace)
        ctx.per_layer = self.per_layer_inputs(input_ids, x, trace)
        if self.altup:  # Gemma-3n: the stream as n streams [n, B, T, d] through the stack
            x = augment.streams_in(x, self.altup[0])
            trace("altup_in", x)
        if self.spec.head.hyper is not None:  # DeepSeek-V4: n copies of the stream [B, T, n, d] through the stack
            x = x.unsqueeze(2).expand(-1, -1, self.spec.head.hyper.streams, -1).contiguous()
        for ctx.layer, layer in enumerate(self.layers[0]):
            x = layer(x, ctx)  # (B, T, d)
        if self.altup:
            x = augment.streams_out(x, self.altup[1])
            trace("altup_out", x)
        return self.head(x, trace)

    def _accept_hf_names(self, state_dict: dict, prefix: str, *_: object) -> None:
        """Rename/skip/stack, in place, what a Hugging Face checkpoint holds beyond our parameters."""
        ours = set(self.state_dict())
        experts: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
        pieces: dict[str, dict[int, torch.Tensor]] = {}
        for key in list(state_dict):
            if key[len(prefix):] in self.tied:  # a shared block listed again under a later layer applying it
                state_dict.setdefault(prefix + self.tied[key[len(prefix):]], state_dict.pop(key))
                continue
            piece = self.table.piece(key[len(prefix):])
            if piece is not None:  # q_conv1d, k_conv1d, v_conv1d: concatenated below, as transformers loads them
                pieces.setdefault(piece[0], {})[piece[1]] = state_dict.pop(key)
                continue
            meaning = self.table.classify(key[len(prefix):])
            if meaning is not None and meaning.expert is not None and isinstance(meaning.target, str):
                experts.setdefault((meaning.layer, meaning.target), {})[meaning.expert] = state_dict.pop(key)
            elif meaning is not None and meaning.name not in ours and meaning.target in ("experts_gate", "experts_up"):
                # gate and up each stacked [E, f, d] apart (Step-3.7's Hub files): fused below as per-expert ones
                experts[(meaning.layer, meaning.target)] = dict(enumerate(state_dict.pop(key).unbind(0)))
            elif meaning is not None and meaning.name in ours:
                state_dict[prefix + meaning.name] = state_dict.pop(key)
            elif meaning is not None and meaning.is_buffer:
                del state_dict[key]
            elif key[len(prefix):] in ("lm_head.weight", "embed_out.weight") and "lm_head" not in self.weights:
                del state_dict[key]  # tied: the same matrix as the token embedding
        state_dict.update({prefix + k: v for k, v in _fused_experts(self.table, experts).items()})
        state_dict.update({prefix + name: torch.cat([parts[i] for i in sorted(parts)]) for name, parts in pieces.items()})


def _fused_experts(table: TensorTable, experts: dict[tuple[int, str], dict[int, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One-tensor-per-expert weights (Mixtral's w1/w3/w2, gate_proj/up_proj/down_proj) stacked into
    transformers 5's fused gate_up_proj [E, 2f, d] (gate rows first) and down_proj [E, d, f]."""
    stacked = {key: torch.stack([tensors[e] for e in sorted(tensors)]) for key, tensors in experts.items()}
    fused = {}
    for layer in sorted({layer for layer, _ in stacked}):
        slots = table.blocks[table.spec.block_at(layer)]
        parts = {target: t for (at, target), t in stacked.items() if at == layer}
        up = parts.get("experts_up")
        if "experts_gate" in parts and up is not None:
            up = torch.cat((parts["experts_gate"], up), dim=1)
        for role, tensor in (("experts.gate_up", up), ("experts.down", parts.get("experts_down"))):
            # the layer's experts slot, also under a prefix (LongCat-Flash's shortcut.experts.gate_up)
            slot = next((s for r, s in slots.items() if r == role or r.endswith(f".{role}")), None)
            if tensor is not None and slot is not None:
                fused[f"{table.layers}.{layer}.{slot.name}"] = tensor
    return fused


def _model_norm(spec: ModelSpec, role: str) -> NormSpec | None:
    return spec.embedding.norm if role == "embed_norm" else spec.final_norm


def _prefixed(slot: Slot, prefix: str) -> Slot:
    return replace(slot, name=prefix + slot.name)


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Decoder:
    """The spec as a torch model in eval mode; `device="meta"` allocates nothing (any size).
    A part option the reference does not implement is a GptcalcError naming it."""
    with torch.device(device), _default_dtype(dtype):
        return Decoder(spec).eval()
