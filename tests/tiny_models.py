"""Tiny configs of every supported model_type, for transformers to build and save as a test oracle.

Each is a few layers of width 32 with 4 query heads (2 KV heads where the model_type has GQA),
4 experts for a MoE: small enough that building, saving and running one takes a fraction of a
second, but with every part its model_type has switched on (a sliding window shorter than the
test's sequences, partial rotary, shared experts, MLA's latents, ...).
"""

from __future__ import annotations

import re
from typing import Any

VOCAB = 97
_IDS = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
_COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, **_IDS}
_MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 16}
_DEEPSEEK = {**_COMMON, **_MOE, "num_hidden_layers": 3, "num_key_value_heads": 4, "kv_lora_rank": 16,
             "q_lora_rank": 24, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
             "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 2,
             "topk_group": 1, "rope_theta": 5000.0}
# DeepSeek-V3's release config (deepseek-ai/DeepSeek-V3 config.json): 256 experts in 8 groups, the best 4
# groups kept, sigmoid scores renormalised and scaled by 2.5; YaRN rope of factor 40 over an original
# 4096 positions, here 8, shorter than the tests' sequences.
_DEEPSEEK_V3_ROUTING = {"n_routed_experts": 8, "n_group": 4, "topk_group": 2, "scoring_func": "sigmoid",
                        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 2.5}
_V3_YARN = {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 8,
            "beta_fast": 32, "beta_slow": 1}

_DELTANET = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
             "linear_value_head_dim": 8}

_INDEXER = {"index_n_heads": 2, "index_head_dim": 8, "index_topk": 4}

TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, **_IDS},
    "gpt_bigcode": {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
                    "multi_query": True, **_IDS},
    "gpt_neox": {**_COMMON, "num_key_value_heads": 4, "rotary_pct": 0.5},
    "gptj": {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "rotary_dim": 4,
             **_IDS},
    "opt": {**_COMMON, "ffn_dim": 48, "word_embed_proj_dim": 16},
    "bloom": {"vocab_size": VOCAB, "hidden_size": 32, "n_layer": 2, "n_head": 4, **_IDS},
    "falcon": {**{k: v for k, v in _COMMON.items() if k != "num_key_value_heads"}, "multi_query": True, "parallel_attn": True,
               "new_decoder_architecture": False, "bias": False},
    "mpt": {"vocab_size": VOCAB, "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 64, **_IDS},
    "llama": {**_COMMON, "rope_theta": 5000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16}},
    "mistral": {**_COMMON, "sliding_window": 5},
    "ministral3": {**_COMMON, "head_dim": 8},
    "qwen2": {**_COMMON, "tie_word_embeddings": True, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen3": {**_COMMON, "head_dim": 8},
    "granite": {**_COMMON},
    "internlm3": {**_COMMON, "head_dim": 8, "qkv_bias": True, "bias": True,
                  "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "smollm3": {**_COMMON, "no_rope_layer_interval": 2},
    "gemma": {**_COMMON, "head_dim": 8},
    "gemma2": {**_COMMON, "head_dim": 8, "sliding_window": 5},
    "gemma3_text": {**_COMMON, "head_dim": 8, "sliding_window": 5, "num_hidden_layers": 3,
                    "sliding_window_pattern": 3,
                    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                    "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
    # Gemma-3n: AltUp over 3 streams, LAuReL, a per-layer embedding narrower than the vocabulary, the last
    # two layers reading the K and V of layers 0 and 1, a sparse first MLP, per-layer MLP widths.
    "gemma3n_text": {**_COMMON, "head_dim": 8, "num_hidden_layers": 4, "sliding_window": 5,
                     "layer_types": ["sliding_attention", "full_attention"] * 2, "num_kv_shared_layers": 2,
                     "intermediate_size": [48, 48, 32, 32], "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0],
                     "altup_num_inputs": 3, "laurel_rank": 4, "hidden_size_per_layer_input": 8,
                     "vocab_size_per_layer_input": 50},
    # Gemma-4: wider global heads with one KV head and V = K there, a MoE beside every dense MLP, the last two
    # layers sharing K and V with double-wide MLPs, per-layer embeddings.
    "gemma4_text": {**_COMMON, "head_dim": 8, "global_head_dim": 16, "num_hidden_layers": 4, "sliding_window": 5,
                    "layer_types": ["sliding_attention", "full_attention"] * 2, "num_kv_shared_layers": 2,
                    "attention_k_eq_v": True, "num_global_key_value_heads": 1, "enable_moe_block": True,
                    "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16, "use_double_wide_mlp": True,
                    "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": VOCAB},
    # Step-3.7's language model: fewer query heads on the sliding layers, half-rotary full layers, a dense
    # first layer, clamped SwiGLU on the last layers' experts and shared experts (the Hub config's per-layer lists).
    "step3p5": {**_COMMON, **_MOE, "head_dim": 8, "num_hidden_layers": 4, "sliding_window": 5,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "num_sliding_attention_heads": 2, "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
                "n_routed_experts": 4, "share_expert_dim": 24, "moe_router_scaling_factor": 1.5,
                "rope_theta": [5000.0, 10000.0, 10000.0, 5000.0], "partial_rotary_factors": [0.5, 1.0, 1.0, 0.5],
                "swiglu_limits": [0, 0, 0, 0.5], "swiglu_limits_shared": [0, 0, 0.5, 0.5]},
    "phi": {**_COMMON, "num_key_value_heads": 4, "partial_rotary_factor": 0.5},
    "phi3": {**_COMMON, "partial_rotary_factor": 0.5, "original_max_position_embeddings": 32,
             "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 4.0]}},
    "cohere": {**_COMMON, "use_qk_norm": True},
    "cohere2": {**_COMMON, "num_hidden_layers": 4, "sliding_window": 5, "attention_bias": True, "logit_scale": 0.5,
                "tie_word_embeddings": False},
    "olmo": {**_COMMON},
    "olmo2": {**_COMMON},
    "olmo3": {**_COMMON, "num_hidden_layers": 4, "sliding_window": 5,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},
    "exaone4": {**_COMMON, "num_hidden_layers": 4, "sliding_window": 5, "sliding_window_pattern": 4},
    "glm4": {**_COMMON, "head_dim": 8},
    "seed_oss": {**_COMMON, "head_dim": 8, "attention_out_bias": True, "mlp_bias": True},
    "ernie4_5": {**_COMMON, "head_dim": 8, "use_bias": True, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "hunyuan_v1_dense": {**_COMMON, "head_dim": 8, "attention_bias": True,
                         "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32}},
    "arcee": {**_COMMON, "mlp_bias": True, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                            "original_max_position_embeddings": 16}},
    "apertus": {**_COMMON, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
    "stablelm": {**_COMMON, "use_qkv_bias": True},
    "starcoder2": {**_COMMON, "sliding_window": 5, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "mixtral": {**_COMMON, "num_local_experts": 4, "num_experts_per_tok": 2},
    "phimoe": {**_COMMON, "num_local_experts": 4, "num_experts_per_tok": 2,
               "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5],
                                "long_factor": [2.0, 3.0, 4.0, 5.0], "short_mscale": 1.1, "long_mscale": 1.3,
                                "original_max_position_embeddings": 8}},
    "granitemoe": {**_COMMON, "num_local_experts": 4, "num_experts_per_tok": 2},
    "olmoe": {**_COMMON, "num_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {**_COMMON, **_MOE, "num_experts": 4, "shared_expert_intermediate_size": 24},
    "qwen3_moe": {**_COMMON, **_MOE, "num_experts": 4, "head_dim": 8, "norm_topk_prob": True},
    "deepseek_v2": {**_DEEPSEEK, "q_lora_rank": None, "topk_method": "group_limited_greedy"},
    "deepseek_v3": {**_DEEPSEEK, **_DEEPSEEK_V3_ROUTING, "num_nextn_predict_layers": 0, "rope_scaling": _V3_YARN},
    # DSA: MLA with the lightning indexer (GLM-5's middle layer reuses the first one's selection)
    "deepseek_v32": {**_DEEPSEEK, **_DEEPSEEK_V3_ROUTING, **_INDEXER, "num_nextn_predict_layers": 0},
    "glm_moe_dsa": {**_DEEPSEEK, **_INDEXER, "n_group": 1, "topk_group": 1, "num_nextn_predict_layers": 0,
                    "indexer_types": ["full", "shared", "full"]},
    # MiniMax-M3's language model in its release config's own keys (tests/configs/model_types/minimax_m3_vl.json):
    # a dense full-attention layer, then sparse ones whose indexer picks the top 2 of 3 blocks of 4 keys (the
    # query's own forced in) in a 12-token sequence
    "minimax_m3_vl_text": {**_COMMON, "num_hidden_layers": 3, "head_dim": 16, "num_local_experts": 4,
                           "num_experts_per_tok": 2, "intermediate_size": 16, "dense_intermediate_size": 48,
                           "shared_intermediate_size": 24, "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
                           "moe_layer_freq": [0, 1, 1],
                           "sparse_attention_config": {"sparse_attention_freq": [0, 1, 1], "sparse_num_index_heads": 2,
                                                       "sparse_index_dim": 8, "sparse_block_size": 4,
                                                       "sparse_topk_blocks": 2, "sparse_local_block": 1}},
    # Kimi-K2's config.json (moonshotai/Kimi-K2-Instruct): DeepSeek-V3 named as its architecture, one group,
    # x2.827, YaRN factor 32 with beta_fast = beta_slow = 1, rope_theta 50000
    "kimi_k2": {**_DEEPSEEK, **_DEEPSEEK_V3_ROUTING, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827,
                "architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 0, "rope_theta": 50000.0,
                "rope_scaling": {**_V3_YARN, "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0}},
    # GLM-4.7-Flash: first_k_dense_replace is not read; mlp_layer_types (left out: dense, then sparse) is
    "glm4_moe_lite": {**_DEEPSEEK, **_DEEPSEEK_V3_ROUTING, "first_k_dense_replace": 2, "routed_scaling_factor": 1.8},
    "glm4_moe": {**_COMMON, **_MOE, "num_hidden_layers": 3, "n_routed_experts": 4, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "head_dim": 8, "use_qk_norm": True,
                 "num_nextn_predict_layers": 0},
    # MiMo-V2-Flash: 12-wide query/key heads, 8-wide values scaled by 0.707, sliding layers with twice the KV
    # heads and sinks (window sliding_window_size + 1 = 5), rotary on int(12 x 0.334) = 4 channels
    "mimo_v2_flash": {**_COMMON, **_MOE, "num_hidden_layers": 4, "num_key_value_heads": 1, "head_dim": 12,
                      "v_head_dim": 8, "sliding_window_size": 4, "attention_bias": True, "n_routed_experts": 4,
                      "n_group": 2, "topk_group": 1, "routed_scaling_factor": None,
                      "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]},
    # Laguna: query heads per layer, sliding and full layers (rotary on half of the full ones' heads), a softplus
    # output gate per head, per-head QK-norm, a soft-capped sigmoid router with a shared expert
    "laguna": {**_COMMON, **_MOE, "num_hidden_layers": 4, "head_dim": 8, "num_experts": 4, "sliding_window": 5,
               "shared_expert_intermediate_size": 24, "attention_bias": True, "num_attention_heads_per_layer": [4, 8, 4, 2],
               "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
               "moe_router_logit_softcapping": 1.5, "moe_routed_scaling_factor": 2.5},
    "minimax_m2": {**_COMMON, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 4},
    "flex_olmo": {**_COMMON, "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True},
    "ernie4_5_moe": {**_COMMON, "num_hidden_layers": 3, "moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 16,
                     "moe_num_shared_experts": 2, "use_bias": True, "tie_word_embeddings": False},
    "hunyuan_v1_moe": {**_COMMON, "head_dim": 8, "num_experts": 4, "moe_topk": [2, 1], "attention_bias": True,
                       "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}},
    "dots1": {**_COMMON, **_MOE, "num_hidden_layers": 3, "n_routed_experts": 4, "n_shared_experts": 1,
              "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "head_dim": 8, "sliding_window": 5,
              "max_window_layers": 2, "norm_topk_prob": True, "routed_scaling_factor": 2.5, "attention_bias": True},
    "exaone_moe": {**_COMMON, **_MOE, "num_hidden_layers": 4, "num_experts": 4, "first_k_dense_replace": 1,
                   "sliding_window": 5, "sliding_window_pattern": 2, "n_group": 2, "topk_group": 1},
    "dbrx": {"vocab_size": VOCAB, "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 64, **_IDS,
             "attn_config": {"kv_n_heads": 2, "clip_qkv": 0.05, "rope_theta": 10000.0},
             "ffn_config": {"ffn_hidden_size": 16, "moe_num_experts": 4, "moe_top_k": 2}},
    "afmoe": {**_COMMON, **_MOE, "num_hidden_layers": 4, "head_dim": 8, "num_experts": 4, "num_shared_experts": 1,
              "num_dense_layers": 1, "global_attn_every_n_layers": 2, "sliding_window": 5, "route_scale": 2.5,
              "mup_enabled": True, "attention_bias": True},
    "gpt_oss": {**_COMMON, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 5,
                "intermediate_size": 16},
    "llama4_text": {**_COMMON, "head_dim": 8, "intermediate_size_mlp": 48, "num_local_experts": 4,
                    "num_experts_per_tok": 1, "num_hidden_layers": 4, "interleave_moe_layer_step": 2,
                    "no_rope_layer_interval": 2, "attention_chunk_size": 5, "floor_scale": 4,
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
    # hybrids: gated DeltaNet, Mamba2 and short-conv layers beside attention
    "qwen3_next": {**_COMMON, **_DELTANET, "num_hidden_layers": 4, "head_dim": 8, "moe_intermediate_size": 16,
                   "shared_expert_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                   "mlp_only_layers": [1], "full_attention_interval": 2},
    "qwen3_5_text": {**_COMMON, **_DELTANET, "num_hidden_layers": 4, "head_dim": 8,
                     "layer_types": ["linear_attention", "full_attention"] * 2},
    "qwen3_5_moe_text": {**_COMMON, **_DELTANET, "head_dim": 8, "moe_intermediate_size": 16,
                         "shared_expert_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                         "layer_types": ["linear_attention", "full_attention"]},
    "mamba2": {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 8,
               "state_size": 16, "n_groups": 2, **_IDS},
    "nemotron_h": {**_COMMON, "hybrid_override_pattern": "M-*E", "head_dim": 8, "mamba_num_heads": 8,
                   "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "n_routed_experts": 4,
                   "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 24, "num_experts_per_tok": 2},
    "bamba": {**_COMMON, "num_hidden_layers": 3, "attn_layer_indices": [1], "mamba_n_heads": 8, "mamba_d_state": 16,
              "mamba_n_groups": 2},
    # Falcon-H1: attention and Mamba2 in parallel in every layer, every muP multiplier away from 1, the
    # gated norm on (normed before the gate), out_proj's bias apart from in_proj's
    "falcon_h1": {**_COMMON, "head_dim": 8, "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": "auto",
                  "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_chunk_size": 4, "mamba_rms_norm": True,
                  "mamba_norm_before_gate": True, "projectors_bias": True, "attention_bias": True,
                  "embedding_multiplier": 2.0, "lm_head_multiplier": 0.5, "key_multiplier": 0.8,
                  "attention_in_multiplier": 1.2, "attention_out_multiplier": 0.7, "ssm_in_multiplier": 1.1,
                  "ssm_out_multiplier": 0.6, "mlp_multipliers": [1.5, 0.5],
                  "ssm_multipliers": [0.9, 1.1, 0.8, 1.2, 1.3]},
    # LongCat-Flash: two MLA + SwiGLU pairs per layer and a shortcut MoE with zero-computation experts
    "longcat_flash": {"vocab_size": VOCAB, "hidden_size": 32, "ffn_hidden_size": 48, "expert_ffn_hidden_size": 16,
                      "num_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 24,
                      "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
                      "zero_expert_num": 2, "moe_topk": 2, "routed_scaling_factor": 2.0, "max_position_embeddings": 64,
                      **_IDS},
    "granitemoehybrid": {**_COMMON, "layer_types": ["linear_attention", "full_attention"], "intermediate_size": 16,
                         "shared_intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2,
                         "mamba_n_heads": 8, "mamba_d_state": 16, "position_embedding_type": "rope"},
    "mamba": {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "state_size": 8, "time_step_rank": 4,
              **_IDS},
    "falcon_mamba": {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "state_size": 8, **_IDS},
    "jamba": {**_COMMON, "num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
              "expert_layer_offset": 0, "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 8},
    # linear_attn_config's 1-indexed lists (MLA on layer 2), its conv kernel 3; two groups of experts,
    # shared experts twice moe_intermediate_size, under the names Kimi-Linear-48B-A3B's config.json uses.
    "kimi_linear": {**_COMMON, "num_hidden_layers": 4, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "moe_intermediate_size": 16,
                    "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 2, "num_expert_group": 2,
                    "topk_group": 1, "first_k_dense_replace": 1,
                    "linear_attn_config": {"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 3,
                                           "full_attn_layers": [2], "kda_layers": [1, 3, 4]}},
    # lightning attention on layers 1 and 3, softmax attention (half-rotary) on 2; blocks of 4 positions,
    # shorter than the tests' sequences; residual factors other than 1, each its own (a swap changes the logits).
    "minimax": {**_COMMON, "num_hidden_layers": 3, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                "intermediate_size": 16, "block_size": 4,
                "layer_types": ["linear_attention", "full_attention", "linear_attention"],
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                "full_attn_alpha_factor": 1.5, "linear_attn_alpha_factor": 1.25, "mlp_alpha_factor": 1.75,
                "full_attn_beta_factor": 0.75, "linear_attn_beta_factor": 0.5, "mlp_beta_factor": 1.25},
    # MiniMax-M1's own keys (attn_type_list, rotary_dim, layernorm_*_alpha), as its config.json writes them.
    "minimax_m1": {**_COMMON, "num_hidden_layers": 3, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                   "intermediate_size": 16, "attn_type_list": [0, 1, 0], "rotary_dim": 4, "rope_theta": 10000.0,
                   "layernorm_full_attention_alpha": 1.5, "layernorm_linear_attention_alpha": 1.25,
                   "layernorm_mlp_alpha": 1.75, "layernorm_full_attention_beta": 0.75,
                   "layernorm_linear_attention_beta": 0.5, "layernorm_mlp_beta": 1.25, "shared_intermediate_size": 0,
                   "postnorm": True},
    # OLMo-3's attention on layer 2 (QK-norm, output norms), gated DeltaNet under input norms on 1 and 3,
    # beta doubled (linear_allow_neg_eigval), the gated norm's eps 1e-5 beside rms_norm_eps 1e-6. Values as
    # wide as keys in all (4 heads of 4): transformers' save_pretrained cuts the q, k, v conv into three equal
    # parts (conversion_mapping.py's Concatenate reversed), which is right only then.
    "olmo_hybrid": {**_COMMON, **_DELTANET, "linear_value_head_dim": 4, "num_hidden_layers": 3, "rope_theta": 5000.0,
                    "layer_types": ["linear_attention", "full_attention", "linear_attention"]},
    # DeepSeek-V4: a sliding layer, CSA (one entry per 4 tokens, with the indexer), HCA (here one per 8) and CSA;
    # the first layer routes by token id; two residual copies (hyper-connections); YaRN on the compressed layers;
    # swiglu_limit 0.05, below the gate and up pre-activations' spread here (~0.1), so that the clamps act
    "deepseek_v4": {**_COMMON, "swiglu_limit": 0.05, "num_hidden_layers": 4, "head_dim": 16, "qk_rope_head_dim": 8, "q_lora_rank": 12,
                    "o_groups": 2, "o_lora_rank": 8, "sliding_window": 16,
                    "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                                    "compressed_sparse_attention"],
                    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
                    "index_n_heads": 2, "index_head_dim": 8, "index_topk": 2, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 16, "num_hash_layers": 1, "hc_mult": 2,
                    "hc_sinkhorn_iters": 3, "rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
                                                             "original_max_position_embeddings": 16}},
    "lfm2": {**_COMMON, "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"], "conv_bias": True},
    "lfm2_moe": {**_COMMON, "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"],
                 "moe_intermediate_size": 16, "num_dense_layers": 1, "num_experts": 4, "num_experts_per_tok": 2},
    # Zamba2: Mamba2 layers, and two shared blocks (A, B) applied in turn by three hybrid layers, with
    # Q/K/V adapters beside the MLP's, rotary, biases on in_proj, out_proj and the MLP, two groups of B and C
    "zamba2": {**_COMMON, "num_hidden_layers": 5, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
               "num_key_value_heads": 4, "mamba_d_state": 8, "n_mamba_heads": 4, "mamba_ngroups": 2, "num_mem_blocks": 2,
               "use_shared_attention_adapter": True, "adapter_rank": 4, "use_mem_rope": True, "chunk_size": 4,
               "add_bias_linear": True},
}


# Tiny multimodal models: a two-layer decoder of width 32 and a two- or three-layer vision tower of width 16
# with every switch its kind has (Qwen2.5-VL's full-attention layer, Qwen3-VL's DeepStack taps, InternViT's
# biases and layer scales, Llama 4's pixel shuffle), for transformers' whole ForConditionalGeneration class
# to build and save. The decoder's head is tied or not the same way at both levels (InternVL's and
# Mistral 3's outer classes default to tied, their text configs to untied).
_TEXT = _COMMON
_MROPE = {"rope_type": "default", "mrope_section": [1, 1, 2]}
_VIT = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
        "image_size": 56, "patch_size": 14}
_QWEN_VIT = {"depth": 2, "hidden_size": 16, "intermediate_size": 24, "num_heads": 2, "out_hidden_size": 32}
_SIGLIP = {"model_type": "siglip_vision_model", **_VIT, "vision_use_head": False}
TINY_MULTIMODAL: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {"architectures": ["Qwen2_5_VLForConditionalGeneration"],
                   "text_config": {**_TEXT, "model_type": "qwen2_5_vl_text", "rope_scaling": _MROPE},
                   "vision_config": {**_QWEN_VIT, "patch_size": 14, "fullatt_block_indexes": [1], "window_size": 56}},
    "qwen3_vl": {"architectures": ["Qwen3VLForConditionalGeneration"],
                 "text_config": {**_TEXT, "model_type": "qwen3_vl_text", "head_dim": 8,
                                 "rope_scaling": {**_MROPE, "mrope_interleaved": True}},
                 "vision_config": {**_QWEN_VIT, "depth": 3, "num_position_embeddings": 16,
                                   "deepstack_visual_indexes": [0, 1]}},
    "qwen3_5": {"architectures": ["Qwen3_5ForConditionalGeneration"],
                "text_config": {**_TEXT, **_DELTANET, "model_type": "qwen3_5_text", "head_dim": 16,
                                "layer_types": ["linear_attention", "full_attention"],
                                "rope_parameters": {**_MROPE, "mrope_interleaved": True, "partial_rotary_factor": 0.5,
                                                    "rope_theta": 10000.0}},
                "vision_config": {**_QWEN_VIT, "num_position_embeddings": 16}},
    "gemma3": {"architectures": ["Gemma3ForConditionalGeneration"], "mm_tokens_per_image": 4,
               "text_config": {**_TEXT, "model_type": "gemma3_text", "head_dim": 8, "sliding_window": 5},
               "vision_config": _SIGLIP},
    "mistral3": {"architectures": ["Mistral3ForConditionalGeneration"], "tie_word_embeddings": False,
                 "text_config": {**_TEXT, "model_type": "mistral", "head_dim": 8},
                 "vision_config": {"model_type": "pixtral", **_VIT, "head_dim": 8}},
    "llama4": {"architectures": ["Llama4ForConditionalGeneration"],
               "text_config": {**_TEXT, "model_type": "llama4_text", "head_dim": 8, "num_local_experts": 2,
                               "intermediate_size_mlp": 48, "interleave_moe_layer_step": 1},
               "vision_config": {**_VIT, "projector_input_dim": 32, "projector_output_dim": 32,
                                 "vision_output_dim": 32, "pixel_shuffle_ratio": 0.5}},
    "llava_onevision": {"architectures": ["LlavaOnevisionForConditionalGeneration"],
                        "text_config": {**_TEXT, "model_type": "qwen2"}, "vision_config": _SIGLIP},
    # Gemma 4: the tiny gemma4_text decoder (PLE, KV sharing, MoE) under a sandwich-norm tower with its
    # two-axis position table (8 rows an axis), and a two-layer Conformer audio tower (clipped linears)
    "gemma4": {"architectures": ["Gemma4ForConditionalGeneration"],
               "audio_config": {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                                "subsampling_conv_channels": [8, 4], "output_proj_dims": 24},
               "text_config": {**TINY["gemma4_text"], "model_type": "gemma4_text"},
               "vision_config": {**_VIT, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 8,
                                 "patch_size": 4}},
    # Kimi-K2.5: a DeepSeek-V3 decoder (MLA, one dense layer, then MoE) under MoonViT with a 4 x 6 position
    # grid and its 2 x 2 patch-merger projector
    "kimi_k25": {"architectures": ["Kimi_K25ForConditionalGeneration"], "tie_word_embeddings": False,
                 "projection_hidden_size": 16,
                 "text_config": {**TINY["deepseek_v3"], "model_type": "deepseek_v3"},
                 "vision_config": {**_VIT, "pos_emb_height": 4, "pos_emb_width": 6, "patch_size": 4}},
    # MiniMax-M3: the tiny minimax_m3_vl_text decoder under CLIP layers of 2 heads of 8 (3-D rotary on 6 of them),
    # a 24-wide two-stage projector
    "minimax_m3_vl": {"architectures": ["MiniMaxM3SparseForConditionalGeneration"], "projector_hidden_size": 24,
                      "text_config": {**TINY["minimax_m3_vl_text"], "model_type": "minimax_m3_vl_text"},
                      "vision_config": _VIT},
    "internvl": {"architectures": ["InternVLForConditionalGeneration"], "tie_word_embeddings": False,
                 "text_config": {**_TEXT, "model_type": "qwen2"},
                 "vision_config": {"model_type": "internvl_vision", **_VIT, "image_size": [56, 56],
                                   "patch_size": [14, 14], "attention_bias": True}},
    # Step-3.7: its language model (a step3p5 text config) under a ViT with layer scales, two conv downsamplers
    # (d -> 2d -> 4d) and a biased projector; the tower's intermediate_size is recomputed from mlp_ratio
    "step3p7": {"architectures": ["Step3p7ForConditionalGeneration"], "projector_bias": True,
                "text_config": {**TINY["step3p5"], "model_type": "step3p5"}, "vision_config": _VIT},
    # Phi-4-multimodal: Phi-3's decoder keys at the top level, its towers inside the decoder's embedding: SigLIP
    # with its pooling head and separators, a Conformer of width 16 after three stride-2 subsampling steps
    "phi4_multimodal": {"architectures": ["Phi4MultimodalForCausalLM"], **_TEXT, "partial_rotary_factor": 0.5,
                        "tie_word_embeddings": False, "vision_config": {**_VIT, "image_size": 28},
                        "audio_config": {"hidden_size": 16, "intermediate_size": 24, "num_blocks": 2,
                                         "num_attention_heads": 2, "ext_pw_out_channel": 16,
                                         "depthwise_separable_out_channel": 16, "nemo_conv_channels": 8,
                                         "input_size": 16, "time_reduction": 8, "bias_max_distance": 10}},
}


def tiny_config(model_type: str) -> dict[str, Any]:
    """A config.json mapping of a tiny `model_type` model (a fresh copy)."""
    return {"model_type": model_type, **TINY[model_type]}


# Model types transformers builds no causal LM for: their language model and head are compared inside the
# multimodal model around them (tests/test_step3p7.py; tests/oracle.py WRAPPED for counts).
NO_CAUSAL_LM = {"step3p5"}


# Model types whose transformers model holds rows its published checkpoints do not (never read by its forward).
UNREAD_ROWS = {"longcat_flash"}
# Model types whose routed experts' rows depend on the data: a pick of a zero-computation expert runs no
# matmul, so the real experts' steps trace fewer than the B·T·k rows `shapes` prints (the most a token costs).
DATA_DEPENDENT_ROWS = {"longcat_flash"}


def as_published(model_type: str, tensors: dict[str, Any]) -> dict[str, Any]:
    """transformers' tensors (its state dict, or what save_pretrained wrote) without what the model_type's
    published checkpoints do not hold: LongCat-Flash's zero-computation experts' gate and up rows, which
    LongcatFlashExperts allocates and never reads (tests/test_arch.py's zero_expert_rows). Others: as given."""
    if model_type not in UNREAD_ROWS:
        return tensors
    routed = TINY[model_type]["n_routed_experts"]
    kept = {name: t for name, t in tensors.items()
            if not (match := re.search(r"\.experts\.(\d+)\.", name)) or int(match.group(1)) < routed}
    return {name: t[:routed] if name.endswith("experts.gate_up_proj") else t for name, t in kept.items()}
