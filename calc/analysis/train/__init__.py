"""Training memory per GPU: model states under ZeRO, activations, logits — for full training or LoRA.

`train(spec, Setup(...))` returns a `Training` whose rows add up to the per-GPU total:

- weights, gradients, fp32 master weights, optimizer states (`states`: mixed precision, ZeRO 0-3
  over the data-parallel GPUs, gpus ÷ (tp·pp); FSDP's full sharding is ZeRO-3);
- activations kept for backward (`activations`: per layer × the layers on the busiest stage × the
  micro-batches a 1F1B pipeline keeps in flight on its first stage, p of them; then what lies outside
  the layers), with Korthikanti et al.'s formula beside ours where its GPT-3 layer applies;
- the logits, fp32, held until the loss is computed.

Under LoRA the trained parameters are the adapters, kept in fp32 (as PEFT does): 4-byte weights
and gradients, no separate master copy; the base is frozen at 16 bits (QLoRA: its layers' matrices
in NF4) and has no gradients or optimizer states.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.parallel import check_tp
from calc.analysis.shapes import journey
from calc.analysis.train.activations import RECOMPUTE, Term, activation_terms, korthikanti, layer_terms
from calc.analysis.train.params import LORA_TARGETS, Held, held, nf4_bytes
from calc.analysis.train.states import OPTIMIZERS, StateRow, model_states, optimizer_bytes
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["OPTIMIZERS", "RECOMPUTE", "Setup", "Training", "train"]

ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class Setup:
    seq: int
    micro_batch: int
    gpus: int = 1
    zero: int = 0
    tp: int = 1
    pp: int = 1
    sp: bool = False
    recompute: str = "none"
    optimizer: str = "adamw"
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = tuple(LORA_TARGETS)
    qlora: bool = False
    attention: str = "flash"  # "flash": a fused kernel keeps no P; "eager": explicit QKᵀ, softmax, P·V

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


@dataclass(frozen=True)
class Training:
    model: str
    setup: Setup
    held: Held
    states: tuple[StateRow, ...]
    layers: tuple[tuple[str, int, tuple[Term, ...]], ...]  # block kind, layers kept (× in flight), its terms
    outside: tuple[Term, ...]
    logits: int  # bytes
    korthikanti: int | None  # bytes, GPT-3-shaped layers only

    def layer_bytes(self, terms: tuple[Term, ...]) -> int:
        return sum(t.bytes(self.setup.tp, self.setup.sp) for t in terms)

    @property
    def activations(self) -> int:
        return sum(n * self.layer_bytes(terms) for _, n, terms in self.layers) + self.layer_bytes(self.outside)

    @property
    def model_states(self) -> int:
        return sum(row.per_gpu for row in self.states)

    @property
    def total(self) -> int:
        return self.model_states + self.activations + self.logits

    def to_json(self) -> dict[str, object]:
        s = self.setup
        return {
            "model": self.model, "setup": {**s.__dict__, "lora_targets": list(s.lora_targets), "dp": s.dp},
            "params_on_gpu": self.held.params, "trained_params": self.held.adapter_params or self.held.params,
            "states": [{"key": r.key, "label": r.label, "bytes_unsharded": r.full, "shards": r.shards,
                        "bytes": r.per_gpu} for r in self.states],
            "activations": {"layers": [{"block": kind, "layers": n, "per_layer": self.layer_bytes(terms),
                                        "terms": {t.label: t.bytes(s.tp, s.sp) for t in terms}}
                                       for kind, n, terms in self.layers],
                            "outside": {t.label: t.bytes(s.tp, s.sp) for t in self.outside},
                            "total": self.activations},
            "logits": self.logits, "korthikanti": self.korthikanti, "total": self.total,
        }


def _check(spec: ModelSpec, s: Setup) -> None:
    if s.zero not in (0, 1, 2, 3):
        raise GptcalcError(f"--zero: {s.zero} is not a ZeRO stage (0, 1, 2, 3)")
    if s.gpus % (s.tp * s.pp):
        raise GptcalcError(f"--gpus: {s.gpus} GPUs do not split into tp={s.tp} × pp={s.pp} groups")
    check_tp(spec, s.tp, kv_heads=True)
    if s.optimizer not in OPTIMIZERS:
        raise GptcalcError(f"--optimizer: unknown {s.optimizer!r} (choose from {', '.join(OPTIMIZERS)})")
    if s.recompute not in RECOMPUTE:
        raise GptcalcError(f"--recompute: unknown {s.recompute!r} (choose from {', '.join(RECOMPUTE)})")
    if s.attention not in ("flash", "eager"):
        raise GptcalcError(f"--attention: unknown {s.attention!r} (choose from flash, eager)")
    if s.qlora and not s.lora_rank:
        raise GptcalcError("--qlora: needs --lora-rank (QLoRA trains LoRA adapters on a 4-bit base)")
    if s.seq > spec.n_positions:
        raise GptcalcError(f"--seq: {s.seq} exceeds {spec.name}'s context length n_positions={spec.n_positions}")


def _states(h: Held, s: Setup) -> list[StateRow]:
    if not s.lora_rank:
        return model_states(h.params, optimizer_bytes(s.optimizer, h.tensors), s.zero, s.dp)
    base = nf4_bytes(h.layer_matrices) + 2 * (h.params - h.layer_matrices) if s.qlora else 2 * h.params
    return model_states(h.adapter_params, optimizer_bytes(s.optimizer, h.adapters), s.zero, s.dp,
                        weight_bytes=4, grad_bytes=4, master_bytes=0, frozen_weights=base)


def _lora_terms(spec: ModelSpec, kind: str, s: Setup) -> list[Term]:
    """Each adapter keeps A's output, r wide, for B's backward (its input is the frozen layer's, kept already)."""
    wanted = {i for t in s.lora_targets for i in LORA_TARGETS[t]}
    rows = s.micro_batch * s.seq
    adapted = [st for st in journey(spec, 1).steps if st.block == kind and st.id in wanted]
    per_token = sum(spec.blocks[kind].moe.top_k if st.id.startswith("experts") else 1 for st in adapted)
    return [Term("LoRA: A's outputs", rows * per_token * s.lora_rank, 4, "")] if adapted else []


def train(spec: ModelSpec, s: Setup) -> Training:
    _check(spec, s)
    h = held(spec, s.tp, s.pp, s.lora_rank, s.lora_targets if s.lora_rank else ())
    b, t = s.micro_batch, s.seq
    kinds = spec.layer_counts()
    per_stage = -(-spec.n_layers // s.pp)
    first_stage = spec.layer_counts(0, min(per_stage, spec.n_layers))
    layers = []
    for kind in kinds:
        terms = layer_terms(spec.blocks[kind], spec.d_model, b, t, ACT_BYTES, s.recompute, s.attention == "flash")
        if s.lora_rank and s.recompute != "full":
            terms += _lora_terms(spec, kind, s)
        kept = first_stage.get(kind, 0) * s.pp  # 1F1B: the first stage keeps p micro-batches in flight
        if kept:
            layers.append((kind, kept, tuple(terms)))
    outside = tuple(activation_terms(spec, b, t, ACT_BYTES, s.recompute))
    logits = -(-b * t * spec.vocab_size // s.tp) * 4
    return Training(spec.name, s, h, tuple(_states(h, s)), tuple(layers), outside, logits, _korthikanti(spec, s))


def _korthikanti(spec: ModelSpec, s: Setup) -> int | None:
    """The formula for the layer it describes, GPT-3's: MHA with h·d_head = d_model, a plain 4·d_model MLP."""
    if len(spec.blocks) != 1:
        return None
    (block,) = spec.blocks.values()
    a, m = block.attention, block.mlp
    if a is None or a.kind != "attention" or a.q_dim != spec.d_model or a.n_kv_heads != a.n_heads:
        return None
    if m is None or m.kind != "mlp" or m.gated or m.d_ff != 4 * spec.d_model:
        return None
    per_stage = -(-spec.n_layers // s.pp)
    return korthikanti(s.seq, s.micro_batch, spec.d_model, a.n_heads, per_stage * s.pp, s.tp, s.sp, s.recompute)
