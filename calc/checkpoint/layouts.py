"""Where each model_type keeps its tensors: Hugging Face module paths per part role, as data.

One table per model_type (`LAYOUTS`), read off transformers' own models (each model_type built on
the meta device, `state_dict().keys()`). Model-level roles are full paths; layer-level roles are
relative to `layers.{layer}`; `.weight` / `.bias` are added by `calc.checkpoint.names`. The
tensors a spec implies follow from its parts and these paths, so the torch reference model, the
checkpoint reader and the shape check cannot disagree about a name.

Roles a layout may set (absent: the model_type has no such tensor):
- model: embed, positions, embed_norm, project_in, project_out, final_norm, lm_head, layers
- norms by position: attn_in, attn_out, mlp_in, mlp_out (parallel_norms: a parallel block's two)
- attention: q, k, v, qkv (fused), o, q_norm, k_norm, sinks (a `hub` name too: MiMo-V2-Flash's), attn_gate (an
  output gate); MLA: q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b
- MLP: gate, up, down, gate_up (fused); MoE: router, experts, shared, shared_gate, score_bias; Gemma-4's
  router_scale, router_expert_scale and the norms beside its experts (experts_norm, shared_post_norm,
  experts_post_norm)
- DeepSeek-V4: hc_attn, hc_mlp, hc_head (hyper-connections, `{}` the leaf), kv, kv_norm, o_a, o_b, the
  compressor's comp_kv, comp_gate, comp_bias, comp_norm and its indexer's idx_kv, idx_gate, idx_bias,
  idx_norm, idx_q, idx_weights, hash_table (the router's token-id table); MiniMax-M3's block indexer: block_idx_q,
  block_idx_k, block_idx_q_norm, block_idx_k_norm; `shared_leaves` in a hub table
  names a shared expert's tensors (w1, w3, w2)
- Gemma-3n and Gemma-4: embed_per_layer, per_layer_projection, per_layer_projection_norm (model level),
  ple_gate, ple_proj, ple_norm (each layer's per-layer input); Gemma-3n's altup, laurel (module paths),
  altup_in, altup_out (the model's AltUp projections, `.{i}` per extra stream)

Routed experts are stored the way transformers 5 saves them: two fused 3-D tensors per layer,
`experts.gate_up_proj` and `experts.down_proj` ([E, 2f, d] and [E, d, f]; gpt_oss and llama4 store
[E, d, 2f] and [E, f, d], "in_out"; DBRX its w1, v1, w2 as three [E·f, d] matrices, "stacked_rows", on the
Hub too). Checkpoints on the Hub written before transformers 5 keep one
tensor per expert: `hub` gives those names (`{expert}` the expert index; GraniteMoE's are fused under
other names; Step-3.7's stack gate and up apart, `experts.gate` and `experts.up`), which classification accepts as well. transformers 5's save_pretrained writes that
Hub layout back out (its in-memory state dict is the fused one), and the torch reference loads both. Flags: `base`, the prefix a base-model checkpoint leaves out (GPT-2's `wte.weight`
for `transformer.wte.weight`); `conv1d`, GPT-2's [in, out] linear weights; `qkv`, how a fused
Q/K/V is ordered ("concat": Q|K|V, "grouped": per KV group, queries then key then value, as
NeoX, BLOOM and Falcon store it); `rope`, "half" (rotate halves) or "interleaved" (GPT-J's pairs);
`qk_norm_heads`, a full-width QK-norm stored as [heads, head_dim] (Cohere); `q_gate`, an attention output
gate stored inside q_proj, each head's queries then its gate (Qwen3-Next, Qwen3.5); `score_bias_2d`, the router's
score correction bias stored [1, E] (ERNIE-4.5); `buffers`, names that
are stored but no parameters; `aliases`, older names of the same tensor; `mtp_prefix`, where a checkpoint
keeps its MTP layers apart from the stack (DeepSeek-V4's `mtp.0.`), `mtp_block`, where inside such a layer its
block's tensors sit (MiniMax-M3's `transformer_layer.`), and `mtp_names`, the names of what an MTP layer adds to
its block where they are not DeepSeek-V3's (`head`: where it keeps its own head); `mtp_outside`, those stored
outside the MTP layers, read as the first one's (Qwen3-Next's and Qwen3.5's mtp.fc, one for its one MTP layer).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LAYOUTS", "ROTARY_BUFFERS", "in_memory", "layout", "layout_name", "with_base"]

# Rotary frequency tables and attention masks: buffers wherever they appear in a name (and llama.cpp's table of
# Llama-3 rope factors, which its converter computes into a GGUF as rope_freqs: conversion/llama.py
# generate_extra_tensors).
ROTARY_BUFFERS = ("rotary_emb.inv_freq", "rotary_emb.original_inv_freq", "embed_positions", "attn.masked_bias",
                  "attention.masked_bias", "embed_tokens.embed_scale", "rope_freqs.weight")

_PER_EXPERT = {"expert_gate": "mlp.experts.{expert}.gate_proj", "expert_up": "mlp.experts.{expert}.up_proj",
               "expert_down": "mlp.experts.{expert}.down_proj"}

LLAMA: dict[str, Any] = {
    "base": "model.", "embed": "model.embed_tokens", "positions": "wpe", "final_norm": "model.norm", "lm_head": "lm_head",
    "layers": "model.layers",
    "attn_in": "input_layernorm", "mlp_in": "post_attention_layernorm",
    "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "qkv": "self_attn.qkv_proj",
    "o": "self_attn.o_proj", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm", "sinks": "self_attn.sinks",
    "attn_gate": "self_attn.gate_proj",
    "q_a": "self_attn.q_a_proj", "q_a_norm": "self_attn.q_a_layernorm", "q_b": "self_attn.q_b_proj",
    "kv_a": "self_attn.kv_a_proj_with_mqa", "kv_a_norm": "self_attn.kv_a_layernorm", "kv_b": "self_attn.kv_b_proj",
    "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj", "gate_up": "mlp.gate_up_proj",
    "router": "mlp.gate", "experts": "mlp.experts", "shared": "mlp.shared_experts",
    "shared_gate": "mlp.shared_expert_gate", "score_bias": "mlp.gate.e_score_correction_bias",
    "hub": _PER_EXPERT, "buffers": ("model.layers.{layer}.self_attn.rotary_emb.inv_freq",),
}
_SANDWICH = {"attn_out": "post_attention_layernorm", "mlp_in": "pre_feedforward_layernorm",
             "mlp_out": "post_feedforward_layernorm"}
# Gemma-3n's and Gemma-4's per-layer embeddings: the table and projection at the bottom, a sublayer in each layer.
_GEMMA_PLE = {"embed_per_layer": "model.embed_tokens_per_layer", "per_layer_projection": "model.per_layer_model_projection",
              "per_layer_projection_norm": "model.per_layer_projection_norm", "ple_gate": "per_layer_input_gate",
              "ple_proj": "per_layer_projection", "ple_norm": "post_per_layer_input_norm"}
_GPT = {"base": "transformer.", "embed": "transformer.wte", "positions": "transformer.wpe",
        "final_norm": "transformer.ln_f", "lm_head": "lm_head", "layers": "transformer.h",
        "attn_in": "ln_1", "mlp_in": "ln_2", "qkv": "attn.c_attn", "o": "attn.c_proj",
        "up": "mlp.c_fc", "down": "mlp.c_proj", "qkv_order": "concat",
        "buffers": ("transformer.h.{layer}.attn.bias", "transformer.h.{layer}.attn.masked_bias", "transformer.bias")}
_BLOOM_LIKE = {"base": "transformer.", "embed": "transformer.word_embeddings", "final_norm": "transformer.ln_f",
               "lm_head": "lm_head", "layers": "transformer.h", "attn_in": "input_layernorm",
               "mlp_in": "post_attention_layernorm", "qkv": "self_attention.query_key_value",
               "o": "self_attention.dense", "up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h",
               "qkv_order": "grouped"}
_MIXTRAL_HUB = {"router": "block_sparse_moe.gate", "expert_gate": "block_sparse_moe.experts.{expert}.w1",
                "expert_up": "block_sparse_moe.experts.{expert}.w3",
                "expert_down": "block_sparse_moe.experts.{expert}.w2"}

def _mamba2(path: str) -> dict[str, str]:
    """transformers' Mamba2 mixer tensors under `path` (mixer, mamba)."""
    return {"ssm_in": f"{path}.in_proj", "ssm_conv": f"{path}.conv1d", "ssm_dt_bias": f"{path}.dt_bias",
            "ssm_a_log": f"{path}.A_log", "ssm_d": f"{path}.D", "ssm_norm": f"{path}.norm", "ssm_out": f"{path}.out_proj"}


def _mamba(path: str) -> dict[str, str]:
    """transformers' Mamba (v1) mixer tensors under `path`, with Jamba's dt, B and C norms."""
    return {**_mamba2(path), "ssm_x_proj": f"{path}.x_proj", "ssm_dt_proj": f"{path}.dt_proj",
            "ssm_dt_norm": f"{path}.dt_layernorm", "ssm_b_norm": f"{path}.b_layernorm",
            "ssm_c_norm": f"{path}.c_layernorm"}


_BACKBONE = {"base": "backbone.", "embed": "backbone.embeddings", "final_norm": "backbone.norm_f", "lm_head": "lm_head",
             "layers": "backbone.layers", "attn_in": "norm"}

_DELTANET = {"gdn_conv": "linear_attn.conv1d", "gdn_dt_bias": "linear_attn.dt_bias", "gdn_a_log": "linear_attn.A_log",
             "gdn_norm": "linear_attn.norm", "gdn_out": "linear_attn.out_proj"}
_QWEN3_5 = {**LLAMA, **_DELTANET, "gdn_qkv": "linear_attn.in_proj_qkv", "gdn_z": "linear_attn.in_proj_z",
            "gdn_b": "linear_attn.in_proj_b", "gdn_a": "linear_attn.in_proj_a", "shared": "mlp.shared_expert",
            "q_gate": True,
            # the MTP layers as the Hub stores them (mtp.layers.N.*), the 2d -> d projection and the norms around it
            # outside them (conversion/qwen.py:318-340 maps them to the first MTP layer's eh_proj, enorm, hnorm,
            # shared_head.norm)
            "mtp_prefix": "mtp.layers.", "mtp_outside": {"eh_proj": "mtp.fc", "enorm": "mtp.pre_fc_norm_embedding",
                                                         "hnorm": "mtp.pre_fc_norm_hidden",
                                                         "shared_head.norm": "mtp.norm"}}
# Nemotron-H: one norm and one mixer per layer, whatever the mixer is (attention, Mamba2, MLP or MoE).
# Checkpoints (the Hub's and save_pretrained's) name the stack `backbone.`; transformers 5 holds it
# under `model.` in memory (conversion_mapping.py renames it on load and back on save): `memory_base`.
_NEMOTRON_H = {**{role: f"mixer.{path.split('.', 1)[1]}" for role, path in LLAMA.items()
                  if isinstance(path, str) and path.startswith(("self_attn.", "mlp."))},
               **_mamba2("mixer"), "base": "backbone.", "embed": "backbone.embeddings", "final_norm": "backbone.norm_f",
               "memory_base": "model.", "lm_head": "lm_head", "layers": "backbone.layers", "attn_in": "norm",
               "mlp_in": "norm", "router": "mixer.gate", "experts": "mixer.experts", "shared": "mixer.shared_experts",
               "score_bias": "mixer.gate.e_score_correction_bias",
               "hub": {"expert_gate": "mixer.experts.{expert}.gate_proj", "expert_up": "mixer.experts.{expert}.up_proj",
                       "expert_down": "mixer.experts.{expert}.down_proj"}}
_LFM2 = {**LLAMA, "final_norm": "model.embedding_norm", "attn_in": "operator_norm", "mlp_in": "ffn_norm",
         "o": "self_attn.out_proj", "q_norm": "self_attn.q_layernorm", "k_norm": "self_attn.k_layernorm",
         "gate": "feed_forward.w1", "up": "feed_forward.w3", "down": "feed_forward.w2", "router": "feed_forward.gate",
         "experts": "feed_forward.experts", "score_bias": "feed_forward.expert_bias", "conv_in": "conv.in_proj",
         "conv": "conv.conv", "conv_out": "conv.out_proj",
         "hub": {"expert_gate": "feed_forward.experts.{expert}.w1", "expert_up": "feed_forward.experts.{expert}.w3",
                 "expert_down": "feed_forward.experts.{expert}.w2"}}

# DeepSeek-V3.2's and GLM-5's lightning indexer, inside self_attn.
_INDEXER = {"idx_q": "self_attn.indexer.wq_b", "idx_k": "self_attn.indexer.wk", "idx_k_norm": "self_attn.indexer.k_norm",
            "idx_weights": "self_attn.indexer.weights_proj"}

# DeepSeek-V4: transformers' names in memory, and the Hub's (DeepSeek's own inference names, which
# conversion_mapping.py's "deepseek_v4" renames on load and save_pretrained writes back under `model.`):
# `{}` in a path is the tensor's own leaf (a hyper-connection's fn, base, scale).
_DSV4_ATTN = {"q_a": "q_a_proj", "q_a_norm": "q_a_norm", "q_b": "q_b_proj", "kv": "kv_proj", "kv_norm": "kv_norm",
              "o_a": "o_a_proj", "o_b": "o_b_proj", "sinks": "sinks", "comp_kv": "compressor.kv_proj",
              "comp_gate": "compressor.gate_proj", "comp_bias": "compressor.position_bias",
              "comp_norm": "compressor.kv_norm", "idx_kv": "compressor.indexer.kv_proj",
              "idx_gate": "compressor.indexer.gate_proj", "idx_bias": "compressor.indexer.position_bias",
              "idx_norm": "compressor.indexer.kv_norm", "idx_q": "compressor.indexer.q_b_proj",
              "idx_weights": "compressor.indexer.scorer.weights_proj"}
_DSV4_HUB_ATTN = {"q_a": "wq_a", "q_a_norm": "q_norm", "q_b": "wq_b", "kv": "wkv", "kv_norm": "norm", "o_a": "wo_a",
                  "o_b": "wo_b", "sinks": "attn_sink", "comp_kv": "compressor.wkv", "comp_gate": "compressor.wgate",
                  "comp_bias": "compressor.ape", "comp_norm": "compressor.norm", "idx_kv": "indexer.compressor.wkv",
                  "idx_gate": "indexer.compressor.wgate", "idx_bias": "indexer.compressor.ape",
                  "idx_norm": "indexer.compressor.norm", "idx_q": "indexer.wq_b", "idx_weights": "indexer.weights_proj"}
_DSV4 = {**LLAMA, **{role: f"self_attn.{path}" for role, path in _DSV4_ATTN.items()},
         "hc_attn": "attn_hc.{}", "hc_mlp": "ffn_hc.{}", "hc_head": "model.hc_head.hc_{}", "hash_table": "mlp.gate.tid2eid",
         "rope": "interleaved",
         "aliases": {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
                     "norm.weight": "model.norm.weight", **{f"hc_head_{leaf}": f"model.hc_head.hc_{leaf}"
                                                            for leaf in ("fn", "base", "scale")}},
         # the MTP layers as the Hub stores them, mtp.{i}.* (transformers builds none): `mtp_prefix` for
         # `layers.{n_layers + i}`, and the names of what an MTP layer adds to its block
         "mtp_prefix": "mtp.", "mtp_names": {"shared_head.norm": "norm", "eh_proj": ("e_proj", "h_proj"),
                                             "hc_head": "hc_head_{}"},
         "hub": {**{role: f"attn.{path}" for role, path in _DSV4_HUB_ATTN.items()},
                 "attn_in": "attn_norm", "mlp_in": "ffn_norm", "hc_attn": "hc_attn_{}", "hc_mlp": "hc_ffn_{}",
                 "router": "ffn.gate", "score_bias": "ffn.gate.bias", "hash_table": "ffn.gate.tid2eid",
                 "expert_gate": "ffn.experts.{expert}.w1", "expert_up": "ffn.experts.{expert}.w3",
                 "expert_down": "ffn.experts.{expert}.w2", "shared": "ffn.shared_experts",
                 "shared_leaves": {"gate": "w1", "up": "w3", "down": "w2"}}}

# Kimi Linear: KDA's tensors inside self_attn (its forget gate in a submodule, its q, k, v convs one conv1d);
# the Hub's checkpoints (and save_pretrained: conversion_mapping.py's "kimi_linear") keep the forget
# gate beside the rest, three convs, Mixtral's block_sparse_moe names for every MLP, dense ones included.
_KDA = {"kda_q": "self_attn.q_proj", "kda_k": "self_attn.k_proj", "kda_v": "self_attn.v_proj", "kda_conv": "self_attn.conv1d",
        "kda_f_a": "self_attn.forget_gate.f_a_proj", "kda_f_b": "self_attn.forget_gate.f_b_proj",
        "kda_dt_bias": "self_attn.forget_gate.dt_bias", "kda_a_log": "self_attn.forget_gate.A_log",
        "kda_b": "self_attn.b_proj", "kda_g_a": "self_attn.g_a_proj", "kda_g_b": "self_attn.g_b_proj",
        "kda_norm": "self_attn.o_norm", "kda_out": "self_attn.o_proj"}
_KIMI_LINEAR_HUB = {**_MIXTRAL_HUB, "shared": "block_sparse_moe.shared_experts",
                    "score_bias": "block_sparse_moe.gate.e_score_correction_bias", "mlp": "block_sparse_moe",
                    "kda_f_a": "self_attn.f_a_proj", "kda_f_b": "self_attn.f_b_proj", "kda_dt_bias": "self_attn.dt_bias",
                    "kda_a_log": "self_attn.A_log", "kda_conv_split": ("self_attn.q_conv1d", "self_attn.k_conv1d",
                                                                       "self_attn.v_conv1d")}
# OLMo-Hybrid's checkpoints (OLMo-core's names; conversion_mapping.py's "olmo_hybrid"): other norm names,
# q, k and v convs apart.
_OLMO_HYBRID_HUB = {"attn_in": "attention_layer_norm", "mlp_in": "feedforward_layer_norm",
                    "attn_out": "feedforward_layer_norm",
                    "gdn_conv_split": ("linear_attn.q_conv1d", "linear_attn.k_conv1d", "linear_attn.v_conv1d")}

# MiniMax's lightning attention inside self_attn; its per-head decays (slope_rate and the block decay
# tables) are buffers save_pretrained writes.
_MINIMAX = {**LLAMA, "la_qkv": "self_attn.qkv_proj", "la_norm": "self_attn.norm", "la_gate": "self_attn.output_gate",
            "la_out": "self_attn.out_proj", "hub": _MIXTRAL_HUB,
            "buffers": (*LLAMA["buffers"], *(f"model.layers.{{layer}}.self_attn.{name}" for name in
                                             ("slope_rate", "query_decay", "key_decay", "diagonal_decay")))}

LAYOUTS: dict[str, dict[str, Any]] = {
    "gpt2": {**_GPT, "conv1d": True},
    "gpt_bigcode": _GPT,
    "gpt_neox": {"base": "gpt_neox.", "embed": "gpt_neox.embed_in", "final_norm": "gpt_neox.final_layer_norm",
                 "lm_head": "lm_head", "layers": "gpt_neox.layers", "attn_in": "input_layernorm",
                 "mlp_in": "post_attention_layernorm", "qkv": "attention.query_key_value", "o": "attention.dense",
                 "up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h", "qkv_order": "grouped",
                 "aliases": {"embed_out.weight": "lm_head.weight"},
                 "buffers": ("gpt_neox.layers.{layer}.attention.bias",
                             "gpt_neox.layers.{layer}.attention.rotary_emb.inv_freq")},
    "gptj": {"base": "transformer.", "embed": "transformer.wte", "final_norm": "transformer.ln_f",
             "lm_head": "lm_head", "layers": "transformer.h", "attn_in": "ln_1", "q": "attn.q_proj",
             "k": "attn.k_proj", "v": "attn.v_proj", "o": "attn.out_proj", "up": "mlp.fc_in", "down": "mlp.fc_out",
             "rope": "interleaved", "buffers": ("transformer.h.{layer}.attn.bias",)},
    "opt": {"base": "model.", "embed": "model.decoder.embed_tokens", "positions": "model.decoder.embed_positions",
            "project_in": "model.decoder.project_in", "project_out": "model.decoder.project_out",
            "final_norm": "model.decoder.final_layer_norm", "lm_head": "lm_head", "layers": "model.decoder.layers",
            "attn_in": "self_attn_layer_norm", "mlp_in": "final_layer_norm", "q": "self_attn.q_proj",
            "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.out_proj", "up": "fc1", "down": "fc2"},
    "bloom": {**_BLOOM_LIKE, "embed_norm": "transformer.word_embeddings_layernorm"},
    "falcon": {**_BLOOM_LIKE, "parallel_norms": {"attn_in": "ln_attn", "mlp_in": "ln_mlp"},
               "buffers": ("transformer.rotary_emb.inv_freq",)},
    "mpt": {"base": "transformer.", "embed": "transformer.wte", "final_norm": "transformer.norm_f",
            "lm_head": "lm_head", "layers": "transformer.blocks", "attn_in": "norm_1", "mlp_in": "norm_2",
            "qkv": "attn.Wqkv", "o": "attn.out_proj", "up": "ffn.up_proj", "down": "ffn.down_proj",
            "qkv_order": "concat"},
    **{t: LLAMA for t in ("llama", "mistral", "ministral3", "qwen2", "qwen3", "granite", "smollm3", "gemma", "olmo",
                          "stablelm", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4_moe_lite", "qwen3_moe",
                          "olmoe", "internlm3", "cohere2", "seed_oss", "ernie4_5", "arcee", "dots1")},
    "gemma2": {**LLAMA, **_SANDWICH},
    "gemma3_text": {**LLAMA, **_SANDWICH},
    # Step-3.7's language model as transformers holds it (Step3p7TextModel); its Hub checkpoints use other names
    # Step-3.7's Hub checkpoints (conversion_mapping.py's "step3p7", which save_pretrained writes back): the
    # router and its correction bias under moe., each expert projection stacked [E, f, d] apart, the shared
    # expert as share_expert. Its MTP layers (model.layers.45-47, which transformers skips on load) keep their
    # output norm and their own head under `transformer.shared_head` (vLLM's step3p5_mtp.py reads both there).
    "step3p5": {**LLAMA, "attn_gate": "self_attn.g_proj",
                "mtp_names": {"shared_head.norm": "transformer.shared_head.norm",
                              "head": "transformer.shared_head.output"},
                "hub": {"router": "moe.gate", "score_bias": "moe.router_bias", "experts.gate": "moe.gate_proj.weight",
                        "experts.up": "moe.up_proj.weight", "experts.down": "moe.down_proj.weight",
                        "shared": "share_expert"}},
    "gemma3n_text": {**LLAMA, **_SANDWICH, **_GEMMA_PLE, "altup": "altup", "laurel": "laurel",
                     "altup_in": "model.altup_projections", "altup_out": "model.altup_unembed_projections"},
    "gemma4_text": {**LLAMA, **_SANDWICH, **_GEMMA_PLE, "router": "router.proj", "router_scale": "router.scale",
                    "router_expert_scale": "router.per_expert_scale", "experts": "experts", "shared": "mlp",
                    "experts_norm": "pre_feedforward_layernorm_2", "shared_post_norm": "post_feedforward_layernorm_1",
                    "experts_post_norm": "post_feedforward_layernorm_2", "hub": {}, "layer_scalar": "layer_scalar"},
    **{t: {**LLAMA, "attn_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm"}
       for t in ("olmo2", "olmo3", "exaone4")},
    "glm4": {**LLAMA, "attn_out": "post_self_attn_layernorm", "mlp_in": "post_attention_layernorm",
             "mlp_out": "post_mlp_layernorm"},
    "cohere": {**LLAMA, "qk_norm_heads": True},
    "hunyuan_v1_dense": {**LLAMA, "q_norm": "self_attn.query_layernorm", "k_norm": "self_attn.key_layernorm"},
    "apertus": {**LLAMA, "attn_in": "attention_layernorm", "mlp_in": "feedforward_layernorm"},
    "phi": {**LLAMA, "o": "self_attn.dense", "up": "mlp.fc1", "down": "mlp.fc2", "final_norm": "model.final_layernorm",
            "q_norm": "self_attn.q_layernorm", "k_norm": "self_attn.k_layernorm"},
    "phi3": {**LLAMA, "qkv_order": "concat"},
    "starcoder2": {**LLAMA, "up": "mlp.c_fc", "down": "mlp.c_proj"},
    "mixtral": {**LLAMA, "hub": _MIXTRAL_HUB},
    "phimoe": {**LLAMA, "router": "mlp.router", "hub": {**_MIXTRAL_HUB, "router": "block_sparse_moe.gate"}},
    "granitemoe": {**LLAMA, "router": "block_sparse_moe.router", "experts": "block_sparse_moe.experts",
                   "hub": {"router": "block_sparse_moe.router.layer", "experts.gate_up": "block_sparse_moe.input_linear.weight",
                           "experts.down": "block_sparse_moe.output_linear.weight"}},
    "qwen2_moe": {**LLAMA, "shared": "mlp.shared_expert"},
    # the Hub's MiMo-V2-Flash names its sinks attention_sink_bias (transformers' conversion_mapping renames them)
    "mimo_v2_flash": {**LLAMA, "hub": {**_PER_EXPERT, "sinks": "self_attn.attention_sink_bias"}},
    # Laguna's gate is g_proj; its Hub checkpoints put the shared expert under mlp.shared_expert and the
    # correction bias under mlp.experts (conversion_mapping)
    "laguna": {**LLAMA, "attn_gate": "self_attn.g_proj",
               "hub": {**_PER_EXPERT, "shared": "mlp.shared_expert", "score_bias": "mlp.experts.e_score_correction_bias"}},
    "minimax_m2": {**LLAMA, "score_bias": "mlp.e_score_correction_bias",
                   "hub": {**_MIXTRAL_HUB, "score_bias": "block_sparse_moe.e_score_correction_bias"}},
    "flex_olmo": {**LLAMA, "attn_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm"},
    "ernie4_5_moe": {**LLAMA, "score_bias": "mlp.gate.moe_statics.e_score_correction_bias", "score_bias_2d": True,
                     "hub": {**_PER_EXPERT, "score_bias": "mlp.moe_statics.e_score_correction_bias"}},
    "hunyuan_v1_moe": {**LLAMA, "q_norm": "self_attn.query_layernorm", "k_norm": "self_attn.key_layernorm",
                       "router": "mlp.gate.wg", "shared": "mlp.shared_mlp"},
    "dbrx": {"base": "transformer.", "embed": "transformer.wte", "final_norm": "transformer.norm_f",
             "lm_head": "lm_head", "layers": "transformer.blocks", "attn_in": "norm_attn_norm.norm_1", "mlp_in": "norm_attn_norm.norm_2",
             "qkv": "norm_attn_norm.attn.Wqkv", "o": "norm_attn_norm.attn.out_proj", "qkv_order": "concat",
             "router": "ffn.router.layer", "experts": "ffn.experts.mlp", "experts_order": "stacked_rows", "hub": {}},
    "afmoe": {**LLAMA, "attn_out": "post_attention_layernorm", "mlp_in": "pre_mlp_layernorm",
              "mlp_out": "post_mlp_layernorm", "router": "mlp.router.gate", "score_bias": "mlp.expert_bias"},
    "exaone_moe": {**LLAMA, "hub": {**_PER_EXPERT, "score_bias": "mlp.e_score_correction_bias"}},
    "gpt_oss": {**LLAMA, "router": "mlp.router", "experts_order": "in_out_interleaved", "hub": {}},
    "llama4_text": {**LLAMA, "gate": "feed_forward.gate_proj", "up": "feed_forward.up_proj",
                    "down": "feed_forward.down_proj", "router": "feed_forward.router",
                    "experts": "feed_forward.experts", "shared": "feed_forward.shared_expert",
                    "experts_order": "in_out", "hub": {}},
    "qwen3_next": {**_QWEN3_5, "gdn_qkvz": "linear_attn.in_proj_qkvz", "gdn_ba": "linear_attn.in_proj_ba"},
    "qwen3_5_text": _QWEN3_5,
    "deepseek_v32": {**LLAMA, **_INDEXER},
    "deepseek_v4": _DSV4,
    "glm_moe_dsa": {**LLAMA, **_INDEXER},
    "qwen3_5_moe_text": _QWEN3_5,
    "mamba2": {**_mamba2("mixer"), **_BACKBONE},
    "kimi_linear": {**LLAMA, **_KDA, "hub": _KIMI_LINEAR_HUB},
    "olmo_hybrid": {**LLAMA, **_DELTANET, "attn_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm",
                    "gdn_q": "linear_attn.q_proj", "gdn_k": "linear_attn.k_proj", "gdn_v": "linear_attn.v_proj",
                    "gdn_z": "linear_attn.g_proj", "gdn_b": "linear_attn.b_proj", "gdn_a": "linear_attn.a_proj",
                    "gdn_norm": "linear_attn.o_norm", "gdn_out": "linear_attn.o_proj", "hub": _OLMO_HYBRID_HUB},
    "minimax": _MINIMAX,
    "minimax_m1": _MINIMAX,
    # MiniMax-M3's language model as transformers 5 holds it (fused gate_up everywhere, the indexer a module); its
    # release's names (conversion_mapping.py "minimax_m3_vl"): block_sparse_moe with w1, w3, w2 per expert,
    # self_attn.index_*, every gate_proj and up_proj apart (`gate_up_split`, the shared expert's too: concatenated
    # into gate_up_proj on load)
    "minimax_m3_vl_text": {**LLAMA, "block_idx_q": "self_attn.indexer.q_proj", "block_idx_k": "self_attn.indexer.k_proj",
                           "block_idx_q_norm": "self_attn.indexer.q_norm", "block_idx_k_norm": "self_attn.indexer.k_norm",
                           "shared.gate_up": "mlp.shared_experts.gate_up_proj",
                           # its MTP modules as vLLM's minimax_m3_mtp loads them from a checkpoint that bundles them
                           # (language_model.model.mtp.layers.N.*: nvidia/mtp.py _map_checkpoint_name)
                           "mtp_prefix": "model.mtp.layers.", "mtp_block": "transformer_layer.",
                           "mtp_names": {"shared_head.norm": "final_layernorm"},
                           "hub": {**_MIXTRAL_HUB, "score_bias": "block_sparse_moe.e_score_correction_bias",
                                   "shared": "block_sparse_moe.shared_experts",
                                   "gate_up_split": ("mlp.gate_proj", "mlp.up_proj"),
                                   "shared.gate_up_split": ("block_sparse_moe.shared_experts.gate_proj",
                                                            "block_sparse_moe.shared_experts.up_proj"),
                                   "block_idx_q": "self_attn.index_q_proj", "block_idx_k": "self_attn.index_k_proj",
                                   "block_idx_q_norm": "self_attn.index_q_norm",
                                   "block_idx_k_norm": "self_attn.index_k_norm"}},
    "mamba": {**_mamba("mixer"), **_BACKBONE},
    "falcon_mamba": {**_mamba("mixer"), **_BACKBONE},
    "jamba": {**LLAMA, **_mamba("mamba"), "final_norm": "model.final_layernorm", "mlp_in": "pre_ff_layernorm",
              "gate": "feed_forward.gate_proj", "up": "feed_forward.up_proj", "down": "feed_forward.down_proj",
              "router": "feed_forward.router", "experts": "feed_forward.experts",
              "hub": {"router": "feed_forward.router", "expert_gate": "feed_forward.experts.{expert}.gate_proj",
                      "expert_up": "feed_forward.experts.{expert}.up_proj",
                      "expert_down": "feed_forward.experts.{expert}.down_proj"}},
    "nemotron_h": _NEMOTRON_H,
    "bamba": {**LLAMA, **_mamba2("mamba"), "final_norm": "model.final_layernorm", "mlp_in": "pre_ff_layernorm",
              "gate": "feed_forward.gate_proj", "up": "feed_forward.up_proj", "down": "feed_forward.down_proj"},
    "falcon_h1": {**LLAMA, **_mamba2("mamba"), "final_norm": "model.final_layernorm", "mlp_in": "pre_ff_layernorm",
                  "gate": "feed_forward.gate_proj", "up": "feed_forward.up_proj", "down": "feed_forward.down_proj"},
    "longcat_flash": {**LLAMA, "attn_in": "input_layernorm.{sub}", "mlp_in": "post_attention_layernorm.{sub}",
                      **{role: path.replace("self_attn.", "self_attn.{sub}.") for role, path in LLAMA.items()
                         if role in ("q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "kv_b", "o")},
                      "gate": "mlps.{sub}.gate_proj", "up": "mlps.{sub}.up_proj", "down": "mlps.{sub}.down_proj",
                      "router": "mlp.router.classifier", "score_bias": "mlp.router.e_score_correction_bias",
                      "rope": "interleaved"},
    "granitemoehybrid": {**LLAMA, **_mamba2("mamba"), "router": "block_sparse_moe.router",
                         "experts": "block_sparse_moe.experts", "shared": "shared_mlp",
                         "gate_up": "shared_mlp.input_linear", "down": "shared_mlp.output_linear",
                         "hub": {"router": "block_sparse_moe.router.layer",
                                 "experts.gate_up": "block_sparse_moe.input_linear.weight",
                                 "experts.down": "block_sparse_moe.output_linear.weight"}},
    "lfm2": _LFM2,
    "lfm2_moe": _LFM2,
    # Zamba2: a hybrid layer's own tensors (`applied`: its Mamba under mamba_decoder., its linear); a
    # shared block's (`shared_block`) under the first hybrid layer applying it, with every application's
    # adapters, `.{i}.0` and `.{i}.1` by the application's index among the hybrid layers
    "zamba2": {**LLAMA, **_mamba2("mamba"), "final_norm": "model.final_layernorm",
               "applied": {"attn_in": "mamba_decoder.input_layernorm", **_mamba2("mamba_decoder.mamba"),
                           "shared_proj": "linear"},
               "shared_block": {"attn_in": "shared_transformer.input_layernorm",
                                **{role: f"shared_transformer.self_attn.{role}_proj" for role in ("q", "k", "v", "o")},
                                "mlp_in": "shared_transformer.pre_ff_layernorm",
                                "gate_up": "shared_transformer.feed_forward.gate_up_proj",
                                "down": "shared_transformer.feed_forward.down_proj",
                                **{f"{key}_adapter": f"shared_transformer.self_attn.linear_{key}_adapter_list"
                                   for key in ("q", "k", "v")},
                                "mlp_adapter": "shared_transformer.feed_forward.gate_up_proj_adapter_list"}},
}
# A spec of one's own (model_type "custom", or any other this table does not know) takes Llama's
# names, with Gemma-2's for output norms and Phi-3's for fused projections.
LAYOUTS["custom"] = {**LLAMA, "attn_out": "post_attention_output_layernorm", "mlp_out": "post_feedforward_layernorm",
                     "qkv_order": "concat", "embed_norm": "model.embed_layernorm", "project_in": "model.project_in",
                     "project_out": "model.project_out"}


def layout(spec: Any) -> dict[str, Any]:
    """The layout table of a spec's model_type."""
    return LAYOUTS[layout_name(spec)]


def layout_name(spec: Any) -> str:
    return spec.model_type if spec.model_type in LAYOUTS else "custom"


def with_base(name: str, lay: dict[str, Any], model_level: set[str] | dict[str, Any]) -> str:
    """`name` as save_pretrained writes it: a base model's checkpoint (GPT-2's `wte.weight`, BLOOM's
    `h.0...`) leaves out the `transformer.` / `model.` prefix that the causal-LM model puts in front;
    a model that transformers holds under another prefix in memory (`memory_base`) gets its own back."""
    base, memory = lay.get("base", ""), lay.get("memory_base")
    if memory and name.startswith(memory):  # transformers' in-memory name of a checkpoint's `base` tensor
        return base + name[len(memory):]
    if name in model_level or not base or name.startswith(base):
        return name
    prefixed = base + name
    return prefixed if prefixed in model_level or prefixed.startswith(lay["layers"] + ".") else name


def in_memory(name: str, lay: dict[str, Any]) -> str:
    """A checkpoint name as transformers holds it in memory: under `memory_base` instead of `base`
    where the layout has one (Nemotron-H's `model.` for `backbone.`), else unchanged."""
    base, memory = lay.get("base", ""), lay.get("memory_base")
    return memory + name[len(base):] if memory and name.startswith(base) else name


ROLE_ORDER = ("embed", "positions", "embed_norm", "project_in", "embed_per_layer", "per_layer_projection",
              "per_layer_projection_norm", "altup_in", "layers", "altup", "attn_in", "q", "k", "v", "qkv", "q_norm",
              "k_norm", "sinks", "attn_gate", "q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "kv_b", "o", "laurel",
              "attn_out", "mlp_in", "gate", "up", "gate_up", "down", "router_scale", "router_expert_scale", "router",
              "score_bias", "experts_norm", "experts", "shared", "shared_gate", "shared_post_norm", "experts_post_norm",
              "mlp_out", "ple_gate", "ple_proj", "ple_norm", "parallel_norms", "altup_out", "final_norm", "project_out",
              "lm_head", "hc_attn", "hc_mlp", "hc_head", *_DSV4_ATTN, "hash_table")


def markdown() -> str:
    """The layouts as a table for docs/checkpoints.md (docs/regenerate.py writes it): Llama's paths in
    full, every other model_type as what it changes; layer roles are under `layers.{layer}.`."""
    def cell(value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}: `{v}`" for k, v in value.items()) or "—"
        return f"`{value}`"

    lines = ["| model_type | paths (`.weight` / `.bias` added; layer roles under `layers.{layer}.`) | "
             "Hub expert layout |", "|---|---|---|"]
    for name in sorted(set(LAYOUTS), key=lambda n: (n != "llama", n)):
        lay = LAYOUTS[name]
        base = {} if name == "llama" else LLAMA
        changed = {role: lay[role] for role in ROLE_ORDER if role in lay and lay[role] != base.get(role)}
        flags = [f"{flag}: {lay[flag]}" for flag in ("base", "memory_base", "conv1d", "qkv_order", "experts_order",
                                                      "qk_norm_heads", "score_bias_2d", "q_gate")
                 if flag in lay and lay[flag] != base.get(flag)]
        paths = "; ".join(f"{role} {cell(path)}" for role, path in changed.items()) or "Llama's"
        hub = lay.get("hub") if lay.get("hub") != base.get("hub") else None
        lines.append(f"| `{name}` | {paths}{' (' + ', '.join(flags) + ')' if flags else ''} | "
                     f"{cell(hub) if hub is not None else ('Llama' + chr(39) + 's' if 'experts' in lay else '—')} |")
    return "\n".join(lines) + "\n"
