"""The flat spec: a uniform dense stack in a dozen fields, the form every spec had before layers.

`FlatSpec` is shorthand: `to_layered()` turns it into the `ModelSpec` form (one block kind
repeated n_layers times), and every YAML file written in this form keeps loading with the same
numbers. `flat_view(spec)` goes the other way for the models that are such a stack in the GPT-2 or
Llama tensor layout; the torch reference and the checkpoint name maps still build from it.

The names are the usual ones (d_model, n_heads, d_ff, ... as in Attention Is All You Need). A spec is frozen and validated once:
unknown fields are rejected (a typo such as `n_layer: 12` must not silently fall back to a
default), ints are strict (`d_model: true` is an error, not 1), and cross-field rules name both
fields. Fields that other fields default from (`n_kv_heads`, `head_dim`, `d_ff`, the family's
switches) are filled in *before* validation, so a stored spec always holds concrete values and an
override such as `--set n_heads=16` recomputes them.

"""


from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from calc.errors import GptcalcError
from calc.parts.attention import HeadWidths

__all__ = ["FAMILY_DEFAULTS", "FLAT_FIELDS", "FlatSpec", "flat_view"]

Family = Literal["gpt2", "llama"]

# What each Hugging Face family does when a config says nothing. `family` also fixes the tensor
# names (GPT2LMHeadModel vs LlamaForCausalLM, which Mistral and Qwen2 share).
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {
        "position_embedding": "learned",
        "norm": "layernorm",
        "mlp": "gelu",
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
        "tie_embeddings": True,
    },
    "llama": {
        "position_embedding": "rotary",
        "norm": "rmsnorm",
        "mlp": "swiglu",
        "qkv_bias": False,
        "attn_out_bias": False,
        "mlp_bias": False,
        "tie_embeddings": False,
    },
}

_Count = Field(gt=0)
# Fields that default from other fields: missing only when those are missing or invalid.
_DERIVED = ("n_kv_heads", "head_dim", "d_ff", *FAMILY_DEFAULTS["gpt2"])
BLOCK = "block"  # the one block kind of a flat spec


class FlatSpec(HeadWidths, BaseModel):
    """A uniform dense decoder in the GPT-2 or Llama layout, as one flat set of fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)

    name: str = "custom"
    source: str | None = Field(default=None, description="URL of the config this spec transcribes")
    family: Family = "gpt2"
    architecture: str | None = Field(default=None, description="the class the source config.json names, which "
                                     "an engine's registry builds (ModelSpec.architecture)")

    vocab_size: int = _Count
    n_positions: int = Field(gt=0, description="context length")
    d_model: int = _Count
    n_layers: int = _Count
    n_heads: int = _Count
    n_kv_heads: int = Field(gt=0, description="n_heads: MHA; 1: MQA; otherwise GQA")
    head_dim: int = Field(gt=0, description="per-head size; d_model // n_heads unless set")
    d_ff: int = Field(gt=0, description="MLP hidden size; 4 * d_model unless set")

    position_embedding: Literal["learned", "rotary", "none"]
    norm: Literal["layernorm", "rmsnorm"]
    mlp: Literal["gelu", "swiglu"]
    qkv_bias: bool
    attn_out_bias: bool
    mlp_bias: bool
    tie_embeddings: bool

    norm_eps: float = Field(default=1e-5, gt=0, strict=False)
    rope_theta: float = Field(default=10000.0, gt=0, strict=False)
    # GPT-2's attn_pdrop, resid_pdrop and embd_pdrop (0.1 each in its configs): changes only what training keeps
    dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Fill the fields that default from other fields, before they are validated."""
        if not isinstance(data, dict):
            return data
        family = data.get("family", "gpt2")
        filled = dict(FAMILY_DEFAULTS.get(family, {}) if isinstance(family, str) else {})
        filled.update({key: value for key, value in data.items() if value is not None})
        heads, width = filled.get("n_heads"), filled.get("d_model")
        if _is_int(heads):
            filled.setdefault("n_kv_heads", heads)
        if _is_int(heads) and _is_int(width) and heads > 0 and "head_dim" not in filled:
            if width % heads:
                raise ValueError(
                    f"d_model={width} is not divisible by n_heads={heads} "
                    "(set head_dim for a head size other than d_model / n_heads)"
                )
            filled["head_dim"] = width // heads
        if _is_int(width):
            filled.setdefault("d_ff", 4 * width)
        return filled

    @model_validator(mode="after")
    def _check_heads(self) -> "FlatSpec":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.family == "gpt2" and self.mlp == "swiglu":
            raise ValueError("mlp=swiglu needs family=llama (the GPT-2 layout has no gate projection)")
        if self.position_embedding == "rotary" and self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary position embedding")
        return self

    def to_layered(self) -> dict[str, Any]:
        """The `ModelSpec` fields of this stack: one block kind, `n_layers` times."""
        norm = {"kind": self.norm, "eps": self.norm_eps}
        rope = {"theta": self.rope_theta} if self.position_embedding == "rotary" else None
        attention = {"n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                     "q_bias": self.qkv_bias, "k_bias": self.qkv_bias, "v_bias": self.qkv_bias,
                     "o_bias": self.attn_out_bias, "fused_qkv": self.family == "gpt2", "rope": rope,
                     "dropout": self.dropout, "softmax_fp32": self.family != "gpt2"}  # GPT2Attention: no upcast
        gated = self.mlp == "swiglu"
        # GPT2MLP runs ACT2FN[activation_function], gelu_new in GPT2Config and openai-community/gpt2's config.json
        form = "gelu_new" if self.family == "gpt2" and not gated else "fused"
        mlp = {"d_ff": self.d_ff, "gated": gated, "activation": "silu" if gated else "gelu_tanh", "bias": self.mlp_bias,
               "activation_form": form}
        return {
            "name": self.name, "source": self.source, "model_type": self.family, "architecture": self.architecture,
            "vocab_size": self.vocab_size, "d_model": self.d_model, "n_positions": self.n_positions,
            "embedding": {"positions": "learned" if self.position_embedding == "learned" else "none",
                          "dropout": self.dropout},
            "blocks": {BLOCK: {"attention": attention, "mlp": mlp, "norm": norm, "residual_dropout": self.dropout}},
            "layers": [(self.n_layers, BLOCK)],
            "final_norm": norm, "head": {"tied": self.tie_embeddings},
        }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The layouts the flat form can name: the tensor names of these model_types are GPT-2's or Llama's.
# A spec of one's own ("custom") takes GPT-2's names when its Q/K/V are fused, else Llama's.
FLAT_LAYOUTS = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama", "custom": "llama"}


def _layout(model_type: str, attention: Any) -> str:
    return "gpt2" if model_type == "custom" and attention.fused_qkv else FLAT_LAYOUTS[model_type]
FLAT_FIELDS = tuple(FlatSpec.model_fields)


def flat_view(spec: Any, needed_by: str = "") -> FlatSpec:
    """`spec` (a ModelSpec) as a flat GPT-2/Llama stack, or a GptcalcError naming what does not fit.

    The torch reference and the checkpoint name maps build from this view; a spec with parts
    they do not know yet (MoE, MLA, QK-norm, ...) is refused by name rather than misbuilt.
    A FlatSpec is its own view.
    """
    if isinstance(spec, FlatSpec):
        return spec
    reasons = _not_flat(spec)
    if reasons:
        who = f"{needed_by} cannot build it yet: " if needed_by else ""
        raise GptcalcError(f"{spec.name}: {who}not a uniform GPT-2/Llama-layout stack ({'; '.join(reasons)}); "
                           "count, kvcache, memory and shapes work for every spec")
    (_, block), = spec.runs()[:1]
    a, m, n = block.attention, block.mlp, block.norm
    return FlatSpec.model_validate({
        "name": spec.name, "source": spec.source, "family": _layout(spec.model_type, a),
        "architecture": spec.architecture,
        "vocab_size": spec.vocab_size, "n_positions": spec.n_positions, "d_model": spec.d_model,
        "n_layers": spec.n_layers, "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads, "head_dim": a.head_dim,
        "d_ff": m.d_ff, "position_embedding": "learned" if spec.embedding.positions == "learned" else (
            "rotary" if a.rope else "none"),
        "norm": n.kind, "mlp": "swiglu" if m.gated else "gelu", "qkv_bias": a.q_bias, "attn_out_bias": a.o_bias,
        "mlp_bias": m.bias, "tie_embeddings": spec.head.tied, "norm_eps": n.eps,
        "rope_theta": a.rope.theta if a.rope else 10000.0, "dropout": a.dropout,
    })


def _not_flat(spec: Any) -> list[str]:
    """Every reason `spec` is not a flat stack, in words a user can act on: what its blocks have that a
    flat stack has not, several kinds of layer, tensor names of its own."""
    reasons = [reason for block in spec.blocks.values() for reason in _block_not_flat(spec, block)]
    if len(spec.blocks) != 1:
        reasons.append(f"{len(spec.blocks)} kinds of layer ({', '.join(spec.blocks)})")
    if spec.model_type not in FLAT_LAYOUTS:
        reasons.append(f"model_type {spec.model_type!r} has tensor names of its own")
    return list(dict.fromkeys(reasons))


def _block_not_flat(spec: Any, block: Any) -> list[str]:
    a, m, n, e = block.attention, block.mlp, block.norm, spec.embedding
    if a is None or m is None or a.kind not in ("attention", "mla"):
        return ["a layer without attention or without an MLP" if a is None or m is None else f"a {a.kind} mixer"]
    checks = {
        "MLA attention": a.kind == "mla",
        "a mixture of experts": m.kind == "moe",
        "QK-norm": a.kind == "attention" and a.qk_norm is not None,
        "attention sinks": getattr(a, "sinks", False),
        "ALiBi": getattr(a, "alibi", False),
        "attention logit soft-capping": bool(a.softcap),
        "partial rotary": bool(a.rope and a.rope.rotary_dim != a.head_dim),
        "Q, K and V biases that differ": a.kind == "attention" and len({a.q_bias, a.k_bias, a.v_bias}) > 1,
        f"a {m.activation} MLP": m.kind == "mlp" and m.activation not in (("silu",) if m.gated else ("gelu", "gelu_tanh")),
        "norms placed other than before attention and MLP": block.norms != ("attn_in", "mlp_in") or block.parallel
        or block.post_ln,
        "a norm without the usual scale/bias": not n.weight or n.bias != (n.kind == "layernorm"),
        "an embedding norm, offset, scale or projection": e.norm is not None or e.position_offset or e.scale
        or e.proj_dim,
        "an LM head bias or soft-capping": spec.head.bias or bool(spec.head.softcap),
        "multi-token prediction layers": spec.mtp is not None,
        "a final norm unlike the blocks'": spec.final_norm != n,
        "dropout rates that differ": a.kind == "attention" and len({a.dropout, block.residual_dropout, e.dropout}) > 1,
        "dropout on the MLP's output alone": bool(block.residual_dropout) and block.residual_dropout_on == "mlp",
        "dropout on the attention's output at a rate of its own": bool(block.mixer_dropout),
    }
    return [reason for reason, found in checks.items() if found]
