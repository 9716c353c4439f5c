"""What torch.compile's AOTAutograd saves for backward in one Llama layer, measured on the CPU.

A compiled layer is one autograd Function (AOTAutograd's CompiledFunction), whose forward calls
`ctx.save_for_backward` on what the min-cut partitioner chose to keep; saved_tensors_hooks see those
tensors as they see an eager op's (the weights and the shared rotary tables among them, left out here;
the layer's input is kept). The layer is compiled as each framework compiles it:

- torchtitan (models/llama3/parallelize.py, apply_compile: `torch.compile(transformer_block,
  fullgraph=True)` per block, after apply_ac's checkpoint_wrapper): nn.RMSNorm (F.rms_norm), K and V
  repeated to every query head before F.scaled_dot_product_attention (repeat_kv), w2(silu(w1 x) · w3 x);
  recompute none, full or torchtitan's per-op policy (tests/training_forward.op_sac_context);
- torchtune (training/_compile.py, compile_model: `m.compile()` on each TransformerSelfAttentionLayer,
  after set_activation_checkpointing): its RMSNorm upcasting to fp32 (modules/rms_norm.py), its rotary
  in fp32 on interleaved pairs (modules/position_embeddings.py), K and V expanded to every head
  (modules/attention.py); recompute none or full;
- gqa: torchtitan's layer with K and V left at the kv heads (SDPA's enable_gqa).

CPU against CUDA: the partitioner's choice is made on the traced graph, before lowering, so it is the
same on both, save for the attention op the graph holds. On the CPU SDPA dispatches to
`_scaled_dot_product_flash_attention_for_cpu`, which returns and saves what CUDA's FlashAttention op
does (the output, laid out [B, T, h, d_head], and an fp32 log-sum-exp per row and head); the per-op
policy lists it beside CUDA's flash and efficient ops so that it is saved as on a GPU. Inductor's
generated kernels and their scratch buffers are what differ, and they are not saved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from training_forward import op_sac_context, rotate

DTYPE = torch.bfloat16
FORMS = {"torchtitan": ("none", "full", "op"), "torchtune": ("none", "full"), "gqa": ("none", "op")}


@dataclass(frozen=True)
class Shape:
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    batch: int
    seq: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


SHAPES = (Shape(64, 4, 2, 176, 2, 32), Shape(96, 6, 2, 256, 1, 48), Shape(128, 8, 8, 344, 2, 16))


class RMSNorm(nn.Module):
    """nn.RMSNorm's F.rms_norm (torchtitan), or torchtune's: x.float() · rsqrt(mean(x²) + ε), cast back, · w."""

    def __init__(self, width: int, upcast: bool) -> None:
        super().__init__()
        self.weight, self.upcast = nn.Parameter(torch.ones(width)), upcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.upcast:
            return F.rms_norm(x, x.shape[-1:], self.weight, 1e-6)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * self.weight


def interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """torchtune's RotaryPositionalEmbeddings: pairs (x0, x1) rotated in fp32, cast back."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    c, s = cos[..., : cos.shape[-1] // 2].float(), sin[..., : sin.shape[-1] // 2].float()
    out = torch.stack([pairs[..., 0] * c - pairs[..., 1] * s, pairs[..., 1] * c + pairs[..., 0] * s], -1)
    return out.flatten(-2).type_as(x)


class Layer(nn.Module):
    def __init__(self, shape: Shape, form: str) -> None:
        super().__init__()
        d, hd = shape.d_model, shape.head_dim
        self.shape, self.form = shape, form
        self.wq, self.wo = nn.Linear(d, shape.n_heads * hd, bias=False), nn.Linear(shape.n_heads * hd, d, bias=False)
        self.wk, self.wv = (nn.Linear(d, shape.n_kv_heads * hd, bias=False) for _ in "kv")
        self.w1, self.w3 = (nn.Linear(d, shape.d_ff, bias=False) for _ in "13")
        self.w2 = nn.Linear(shape.d_ff, d, bias=False)
        self.attention_norm, self.ffn_norm = (RMSNorm(d, form == "torchtune") for _ in "af")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        sh, (B, T, _) = self.shape, x.shape
        y = self.attention_norm(x)
        q = self.wq(y).view(B, T, sh.n_heads, sh.head_dim)
        k = self.wk(y).view(B, T, sh.n_kv_heads, sh.head_dim)
        v = self.wv(y).view(B, T, sh.n_kv_heads, sh.head_dim)
        turn = interleaved if self.form == "torchtune" else rotate
        q, k = turn(q, cos, sin), turn(k, cos, sin)
        if self.form != "gqa":  # repeat_kv: every query head gets its own copy of its group's K and V
            k, v = (t.repeat_interleave(sh.n_heads // sh.n_kv_heads, dim=2) for t in (k, v))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.form == "gqa")
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, -1))
        z = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(z)) * self.w3(z))


def _op_context():  # noqa: ANN202
    """A fresh count per call, as torchtitan's context_fn makes one (dynamo traces a plain function, not a closure)."""
    return op_sac_context({})


class Checkpointed(nn.Module):
    """The frameworks' checkpoint_wrapper: non-reentrant, preserve_rng_state=False (torchtitan's apply_ac)."""

    def __init__(self, layer: Layer, recompute: str) -> None:
        super().__init__()
        self.layer, self.recompute = layer, recompute

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        if self.recompute == "none":
            return self.layer(*args)
        context = {"context_fn": _op_context} if self.recompute == "op" else {}
        return checkpoint(self.layer, *args, use_reentrant=False, preserve_rng_state=False, **context)


def tables(shape: Shape) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos and sin, [1, T, 1, d_head] in the activations' dtype (shared by every layer)."""
    angles = torch.arange(shape.seq)[:, None] / 10000 ** (torch.arange(0, shape.head_dim, 2) / shape.head_dim)
    angles = torch.cat([angles, angles], -1)[None, :, None]
    return angles.cos().to(DTYPE), angles.sin().to(DTYPE)


def measure(shape: Shape, form: str, recompute: str) -> dict:
    """The saved tensors of one compiled layer's forward: [shape, dtype, bytes] each (distinct storages,
    the layer's input included, weights and rotary tables left out), and their total."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(Checkpointed(Layer(shape, form).to(DTYPE), recompute), fullgraph=True)
    cos, sin = tables(shape)
    x = torch.randn(shape.batch, shape.seq, shape.d_model, dtype=DTYPE, requires_grad=True)
    shared = {t.untyped_storage().data_ptr() for t in (*model.parameters(), cos, sin)}
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in shared:
            saved.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, cos, sin)
    out.float().sum().backward()  # the graph was complete and usable
    rows = [[list(t.shape), str(t.dtype).removeprefix("torch."), t.untyped_storage().nbytes()] for t in saved.values()]
    return {"form": form, "recompute": recompute, "shape": asdict(shape), "saved": rows,
            "total": sum(r[2] for r in rows)}


def measure_all() -> list[dict]:
    return [measure(shape, form, recompute) for shape in SHAPES for form, modes in FORMS.items() for recompute in modes]


if __name__ == "__main__":  # re-record tests/data/compiled_saves.json
    import json
    import sys
    from pathlib import Path

    out = Path(__file__).parent / "data" / "compiled_saves.json"
    entries = measure_all()
    out.write_text(json.dumps({"torch": torch.__version__, "entries": entries}, indent=1) + "\n")
    sys.stdout.write(f"{len(entries)} entries to {out}\n")
