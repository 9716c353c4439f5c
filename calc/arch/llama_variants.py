"""Dense models that are a Llama but for one or two things, each kept as data here: Seed-OSS
(model_type seed_oss), ERNIE-4.5 dense (ernie4_5), Hunyuan dense (hunyuan_v1_dense), AFM (arcee) and
Apertus (apertus).

Every one: pre-norm RMSNorm blocks (attention norm, MLP norm), GQA attention with rotary, an MLP,
a final RMSNorm, the head untied unless `tie_word_embeddings`. What each changes:
- seed_oss: `attention_bias` on Q, K and V only; the output projection's bias is `attention_out_bias`
  (SeedOssAttention); the SwiGLU reads `mlp_bias`; head_dim 128 unless set; `attention_dropout` on P
  and `residual_dropout` on each sublayer's output (0.1 each by default) change only what training keeps.
- ernie4_5: one `use_bias` on Q, K, V, O and the SwiGLU's three matrices; rotary pairs interleaved
  channels (apply_rotary_pos_emb repeats each frequency twice); head tied, head_dim 128 by default.
- hunyuan_v1_dense: a head_dim-wide RMSNorm on queries and on keys *after* rotary (query_layernorm,
  key_layernorm); a "dynamic" rope_scaling with an `alpha` is NTK-alpha, a fixed base of
  rope_theta · alpha^(head_dim / (head_dim - 2)) (HunYuanDenseV1RotaryEmbedding), so the base is
  stretched here and no scaling remains; a bias-free SwiGLU whatever the config says.
- arcee: an MLP of two matrices, up and down, with `hidden_act` (relu2, squared ReLU) between them
  and `mlp_bias`.
- apertus: two matrices, up and down, with xIELU between them, whose two learned scalars per layer
  (alpha_p, alpha_n) are parameters and beta and eps stored buffers (XIELUActivation); QK-norm over
  each head before rotary; the norms are named attention_layernorm and feedforward_layernorm. Without
  rope_scaling or rope_parameters ApertusConfig uses Llama-3 scaling with a base of 12,000,000
  (whatever rope_theta says).
"""

from __future__ import annotations

from typing import Any, Callable

from calc.arch.common import (LLAMA_CLASS, TRANSFORMERS_BACKEND, attention, gated_mlp, mlp_activation, norm,
                               uniform, with_defaults)
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

_LLAMA_LIKE = {"max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
               "attention_bias": False, "rope_theta": 10000.0}

# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here;
# a rope_theta a class leaves out is its `default_theta`.
DEFAULTS: dict[str, dict[str, Any]] = {
    "seed_oss": {**_LLAMA_LIKE, "vocab_size": 155136, "hidden_size": 4096, "intermediate_size": 27648,
                 "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128,
                 "max_position_embeddings": 524288, "rms_norm_eps": 1e-6, "attention_bias": True,
                 "attention_out_bias": False, "mlp_bias": False, "attention_dropout": 0.1, "residual_dropout": 0.1},
    "ernie4_5": {"vocab_size": 103424, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
                 "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128,
                 "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
                 "use_bias": False, "rope_theta": 500000.0},
    "hunyuan_v1_dense": {**_LLAMA_LIKE, "vocab_size": 290943, "hidden_size": 4096, "intermediate_size": 11008,
                         "num_hidden_layers": 32, "num_attention_heads": 32},
    "arcee": {**_LLAMA_LIKE, "vocab_size": 32000, "hidden_size": 2560, "intermediate_size": 18432,
              "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_act": "relu2",
              "max_position_embeddings": 4096, "mlp_bias": False},
    "apertus": {**_LLAMA_LIKE, "vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 14336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_act": "xielu",
                "max_position_embeddings": 65536, "rope_theta": 12_000_000.0},
}
# vLLM 0.32 runs these through its Transformers backend (vllm/model_executor/models/registry.py L711, L717, L726:
# ArceeForCausalLM, HunYuanDenseV1ForCausalLM, SeedOssForCausalLM); Ernie4_5 and Apertus are its own.
VLLM = {"arcee": TRANSFORMERS_BACKEND, "hunyuan_v1_dense": TRANSFORMERS_BACKEND, "seed_oss": TRANSFORMERS_BACKEND}
# ApertusConfig's rotary when the config gives none (its __post_init__).
APERTUS_ROPE = {"rope_type": "llama3", "rope_theta": 12_000_000.0, "factor": 8.0,
                "original_max_position_embeddings": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    if model_type == "apertus" and not (cfg.has("rope_scaling") or cfg.has("rope_parameters")):
        cfg = with_defaults(cfg, {"rope_parameters": APERTUS_ROPE})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    block = {"attention": attention(cfg), "mlp": gated_mlp(cfg), "norm": rms}
    return uniform(cfg, model_type, CHANGES[model_type](cfg, block), rms, cfg.bool("tie_word_embeddings"),
                   **VLLM.get(model_type, {}), **(LLAMA_CLASS if model_type == "apertus" else {}))


def _seed_oss(cfg: Config, block: dict[str, Any]) -> dict[str, Any]:
    """SeedOssAttention's output bias of its own, P's dropout, and dropout on the attention's and the
    MLP's output (SeedOssAttention, SeedOssMLP: residual_dropout)."""
    attn = {**block["attention"], "o_bias": cfg.bool("attention_out_bias"), "dropout": cfg.float("attention_dropout")}
    return {**block, "attention": attn, "residual_dropout": cfg.float("residual_dropout")}


def _ernie4_5(cfg: Config, block: dict[str, Any]) -> dict[str, Any]:
    bias = cfg.bool("use_bias")
    # Ernie4_5Attention sets attention_dropout = 0.0 whatever the config says (modeling_ernie4_5.py)
    attn = {**block["attention"], "q_bias": bias, "k_bias": bias, "v_bias": bias, "o_bias": bias, "dropout": 0.0}
    attn["rope"] = {**attn["rope"], "interleaved": True, "tables_per_call": 1}  # repeat_interleave per call
    return {**block, "attention": attn, "mlp": gated_mlp(cfg, bias=bias)}


def _hunyuan(cfg: Config, block: dict[str, Any]) -> dict[str, Any]:
    attn = {**block["attention"], "qk_norm": {"norm": block["norm"], "scope": "head", "after_rope": True}}
    rope, head_dim = attn["rope"], attn["head_dim"]
    scaling = rope["scaling"] or {}
    if scaling.get("rope_type", scaling.get("type")) == "dynamic" and scaling.get("alpha"):
        if head_dim <= 2:
            raise cfg.error("rope_scaling", f"NTK-alpha needs a head_dim above 2 (it divides by head_dim - 2), "
                                            f"got {head_dim}")
        theta = rope["theta"] * scaling["alpha"] ** (head_dim / (head_dim - 2))
        attn["rope"] = {**rope, "theta": theta, "scaling": None}
    return {**block, "attention": attn, "mlp": gated_mlp(cfg, bias=False)}


def _plain_mlp(cfg: Config, block: dict[str, Any]) -> dict[str, Any]:
    """Up, the activation, down: no gate."""
    mlp = {"d_ff": cfg.int("intermediate_size"), "gated": False, **mlp_activation(cfg, "hidden_act"),
           "bias": cfg.bool("mlp_bias", default=False)}
    return {**block, "mlp": mlp}


def _apertus(cfg: Config, block: dict[str, Any]) -> dict[str, Any]:
    block = _plain_mlp(cfg.replace({**cfg.data, "mlp_bias": False}), block)
    return {**block, "attention": {**block["attention"], "qk_norm": {"norm": block["norm"], "scope": "head"}}}


CHANGES: dict[str, Callable[[Config, dict[str, Any]], dict[str, Any]]] = {
    "seed_oss": _seed_oss, "ernie4_5": _ernie4_5, "hunyuan_v1_dense": _hunyuan, "arcee": _plain_mlp,
    "apertus": _apertus,
}
