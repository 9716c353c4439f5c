"""A tiny training forward, written with plain torch ops, for measuring what autograd keeps.

calc/reference/model.py is an inference model (eval mode, a causal mask built per layer, rotary
tables per call, GQA by repeat_interleave); this one is the training forward that
calc/analysis/train/activations.py describes, op for op: RMSNorm as transformers writes it
(x·rsqrt(mean(x²)+ε)·w) or F.layer_norm, separate Q/K/V/O linears, rotary tables and an additive
causal mask built once per forward, GQA by expanding K and V to every head inside attention, explicit QKᵀ,
softmax and P·V, GELU or SiLU-gated MLPs, the LM head and F.cross_entropy. No dropout.

`attention`: "eager" (explicit, keeps P) or "flash" (F.scaled_dot_product_attention, causal, GQA
native: keeps Q, K, V, its output and the log-sum-exp). `recompute`: "selective" checkpoints QKᵀ, softmax and P·V (keeping Q, K, V); "full" checkpoints
every layer (keeping its input). Both use torch.utils.checkpoint's reentrant form, which saves its
inputs with save_for_backward, where saved_tensors_hooks sees them. "op" is torchtitan's per-op
selective checkpointing of each layer (non-reentrant, with its policy, `op_sac_context`): what it
keeps is measured with the live-storage tracker, since its cache is invisible to saved_tensors_hooks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from calc.spec.flat import FlatSpec


class Norm(nn.Module):
    def __init__(self, spec: FlatSpec) -> None:
        super().__init__()
        self.rms, self.eps = spec.norm == "rmsnorm", spec.norm_eps
        self.weight = nn.Parameter(torch.ones(spec.d_model))
        self.bias = None if self.rms else nn.Parameter(torch.zeros(spec.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.rms:
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√d + mask)·V for Q [B, h, T, d_head] and K, V [B, kv, T, d_head]: every query head
    reads its group's K and V, expanded here (so a checkpoint of `core` keeps them at kv heads)."""
    B, h, T, d = q.shape
    groups = h // k.shape[1]
    if groups > 1:
        k, v = (t[:, :, None].expand(B, t.shape[1], groups, T, d).reshape(B, h, T, d) for t in (k, v))
    return (q @ k.transpose(-2, -1) / math.sqrt(d) + mask).softmax(-1) @ v


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """torch's fused kernel (on the CPU, its FlashAttention port): K and V stay at kv heads."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


# torchtitan's _save_list (torchtitan/parallelisms/parallelize_llama.py @ 9dec370, lines 214-223), with torch's CPU
# FlashAttention kernel beside the CUDA ones it lists, so that the policy runs here as it does on a GPU
_SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
         torch.ops.aten.abs.default, torch.ops.aten.max.default}


def op_sac_context(meta: dict[str, int]):
    """torchtitan's _custom_policy: save the listed ops' outputs except every second matmul, counting
    matmuls in `meta`, which lives as long as the layer (so the count carries over to the next step)."""
    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] = meta.get(key, 0) + 1
        save = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


class Layer(nn.Module):
    def __init__(self, spec: FlatSpec) -> None:
        super().__init__()
        s, d = spec, spec.d_model
        self.spec = s
        self.norm1, self.norm2 = Norm(s), Norm(s)
        self.q = nn.Linear(d, s.q_dim, bias=s.qkv_bias)
        self.k = nn.Linear(d, s.kv_dim, bias=s.qkv_bias)
        self.v = nn.Linear(d, s.kv_dim, bias=s.qkv_bias)
        self.o = nn.Linear(s.q_dim, d, bias=s.attn_out_bias)
        self.gated = s.mlp == "swiglu"
        self.gate = nn.Linear(d, s.d_ff, bias=s.mlp_bias) if self.gated else None
        self.up = nn.Linear(d, s.d_ff, bias=s.mlp_bias)
        self.down = nn.Linear(s.d_ff, d, bias=s.mlp_bias)

    def forward(self, x: torch.Tensor, tables: tuple, selective: bool, attend=core) -> torch.Tensor:
        s, (B, T, _) = self.spec, x.shape
        h = self.norm1(x)
        q = self.q(h).view(B, T, s.n_heads, s.head_dim).transpose(1, 2)
        k = self.k(h).view(B, T, s.n_kv_heads, s.head_dim).transpose(1, 2)
        v = self.v(h).view(B, T, s.n_kv_heads, s.head_dim).transpose(1, 2)
        mask, rope = tables
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if selective:  # the mask is read through the closure, so only Q, K and V are the checkpoint's inputs
            y = checkpoint(lambda q, k, v: attend(q, k, v, mask), q, k, v, use_reentrant=True,
                           preserve_rng_state=False)
        else:
            y = attend(q, k, v, mask)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, s.q_dim))
        h = self.norm2(x)
        a = F.silu(self.gate(h)) * self.up(h) if self.gated else F.gelu(self.up(h), approximate="tanh")
        return x + self.down(a)


class TrainingForward(nn.Module):
    def __init__(self, spec: FlatSpec) -> None:
        super().__init__()
        self.spec = spec
        self.wte = nn.Parameter(torch.randn(spec.vocab_size, spec.d_model) * 0.02)
        learned = spec.position_embedding == "learned"
        self.wpe = nn.Parameter(torch.randn(spec.n_positions, spec.d_model) * 0.02) if learned else None
        self.layers = nn.ModuleList(Layer(spec) for _ in range(spec.n_layers))
        self.norm = Norm(spec)
        self.head = None if spec.tie_embeddings else nn.Parameter(torch.randn(spec.vocab_size, spec.d_model) * 0.02)
        self.mm_counts: list[dict[str, int]] = [{} for _ in range(spec.n_layers)]  # "op": the policy's per-layer meta

    def _tables(self, T: int) -> tuple:
        mask = torch.full((T, T), float("-inf")).triu(1)
        if self.spec.position_embedding != "rotary":
            return mask, None
        half = torch.arange(0, self.spec.head_dim, 2, dtype=torch.float32) / self.spec.head_dim
        angles = torch.outer(torch.arange(T, dtype=torch.float32), 1.0 / self.spec.rope_theta**half)
        angles = torch.cat((angles, angles), dim=-1)
        return mask, (angles.cos(), angles.sin())

    def forward(self, ids: torch.Tensor, recompute: str = "none", attention: str = "eager") -> torch.Tensor:
        """The mean cross-entropy of predicting `ids` (memory is what matters here, not the shift)."""
        T = ids.shape[1]
        x = F.embedding(ids, self.wte)
        if self.wpe is not None:
            x = x + F.embedding(torch.arange(T), self.wpe)
        tables, attend = self._tables(T), fused if attention == "flash" else core
        for layer, meta in zip(self.layers, self.mm_counts):
            if recompute == "op":
                x = checkpoint(lambda x, layer=layer: layer(x, tables, False, attend), x, use_reentrant=False,
                               context_fn=lambda meta=meta: op_sac_context(meta), preserve_rng_state=False)
            elif recompute == "full":
                x = checkpoint(lambda x, layer=layer: layer(x, tables, False, attend), x, use_reentrant=True,
                               preserve_rng_state=False)
            else:
                x = layer(x, tables, recompute == "selective", attend)
        logits = F.linear(self.norm(x), self.wte if self.head is None else self.head)
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())
