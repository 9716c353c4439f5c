"""LongCat-Flash: each layer is two MLA + SwiGLU pairs in sequence and a shortcut-connected MoE with
zero-computation experts (LongcatFlashDecoderLayer).

    x = x + attn_0(input_layernorm_0(x))
    h = post_attention_layernorm_0(x);  s = moe(h);  x = x + mlps_0(h)
    x = x + attn_1(input_layernorm_1(x))
    x = x + mlps_1(post_attention_layernorm_1(x)) + s

One block with `pairs: 2` and the MoE as its `shortcut`. The attention is DeepSeek-V3's MLA with a
query LoRA (interleaved rotary), its query and latent scaled by sqrt(d / rank) (`q_scale`,
`latent_scale`), which changes no count. The MoE's router (`router.classifier`, no bias, softmax scores, the top `moe_topk` chosen
with an e_score_correction_bias buffer, weights times routed_scaling_factor, not renormalised)
scores `n_routed_experts` SwiGLU experts of `expert_ffn_hidden_size` and `zero_expert_num`
identity experts that hold no weights.

transformers 5 builds the fused `experts.gate_up_proj` with n_routed_experts + zero_expert_num
rows (its down_proj has n_routed_experts): the zero experts' rows are never read (LongcatFlashExperts
sends a zero expert's tokens to nn.Identity) and are not in the published checkpoint, whose total
is the 560B of the model card. gptcalc counts the checkpoint; tests/test_arch.py states the
difference from transformers' meta model. The official repository also ships a multi-token-
prediction layer (`model.mtp.*`, which transformers ignores on load); it is not modelled.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import NO_LLAMACPP, decoder, gated_mlp, norm, with_defaults
from calc.arch.config import Config
from calc.arch.deepseek import mla

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' LongcatFlashConfig defaults (configuration_longcat_flash.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "longcat_flash": {"vocab_size": 131072, "hidden_size": 6144, "num_layers": 28, "num_attention_heads": 64,
                      "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                      "tie_word_embeddings": False, "attention_bias": False, "ffn_hidden_size": 12288,
                      "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                      "v_head_dim": 128, "moe_topk": 12, "n_routed_experts": 512, "zero_expert_num": 256,
                      "expert_ffn_hidden_size": 2048, "routed_scaling_factor": 6.0, "rope_theta": 10000000.0},
}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS["longcat_flash"])
    if cfg.raw("hidden_act") != "silu":
        raise cfg.error("hidden_act", f"{cfg.raw('hidden_act')!r}: LongCat-Flash's MLPs and experts are modelled with silu")
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    shortcut = {"kind": "moe", "n_experts": cfg.int("n_routed_experts"), "zero_experts": cfg.int("zero_expert_num"),
                "top_k": cfg.int("moe_topk"), "d_ff": cfg.int("expert_ffn_hidden_size"), "gated": True,
                "activation": "silu", "fused_gate_up": True, "score_bias": True, "scoring": "softmax",
                "norm_topk": False, "routed_scale": cfg.float("routed_scaling_factor")}
    d = cfg.int("hidden_size")
    attention = {**mla(cfg), "q_scale": (d / cfg.int("q_lora_rank")) ** 0.5,
                 "latent_scale": (d / cfg.int("kv_lora_rank")) ** 0.5}
    block = {"attention": attention, "mlp": gated_mlp(cfg, "ffn_hidden_size", bias=False), "norm": rms, "pairs": 2,
             "shortcut": shortcut}
    # SGLang's LongcatFlashForCausalLM.post_load_weights makes both MLA layers' w_kc / w_vc as deepseek_v2.py's
    # loader does (models/longcat_flash.py at sgl-project/sglang@01f67c34: calc.analysis.memory.sglang_mla)
    return decoder(cfg, "longcat_flash", {"layer": block}, [(_layers(cfg), "layer")], rms,
                   cfg.bool("tie_word_embeddings"), **NO_LLAMACPP, sglang={"mla_kv_b_copy": True},
                   notes=("longcat_flash: each layer holds two attention + MLP pairs; transformers counts "
                          "2 x num_layers cache layers",))


def _layers(cfg: Config) -> int:
    """`num_layers`; a config giving only `num_hidden_layers` (two per layer) halves it, as the config class does."""
    if cfg.has("num_layers") and "num_layers" not in cfg.defaulted:
        return cfg.int("num_layers")
    return cfg.int("num_hidden_layers") // 2 if cfg.has("num_hidden_layers") else cfg.int("num_layers")
