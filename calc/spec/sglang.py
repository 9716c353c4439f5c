"""How SGLang builds a model: facts of SGLang's code for an architecture, which no config key states.

SGLang captures prefill CUDA graphs by default on CUDA (the "breakable" backend) and turns them off for
a multimodal architecture unless its configs/model_config.py lists it as validated for that backend
(arg_groups/cuda_graph_hook.py disable_breakable_cudagraph_if_incompatible, rule "multimodal model";
the "tc_piecewise" backend has an allowlist of its own, _disable_tc_piecewise_cudagraph_if_incompatible).
Which lists an architecture is on is the reader's to state (calc/towers/*.py), as calc/spec/vllm.py's
facts are the adapters'; the memory budget asks the spec, never the model_type. How SGLang keeps a
hybrid's SSM states (configs/mamba_utils.py mamba2_state_dtype) is the text adapter's to state: whether
its SGLang config class reads the config's `mamba_ssm_dtype`, and Kimi-Linear's bf16 default on SM100.
"""


from typing import Literal

from calc.parts.base import Field, Part

__all__ = ["SglangBuild"]


class SglangBuild(Part):
    """`prefill_graph_allowlists`: the prefill CUDA graph backends SGLang keeps for this multimodal
    architecture: "breakable" where it is on multimodal_breakable_cuda_graph_supported_model_archs
    (Qwen3.5 and Qwen3.5-MoE, added by sgl-project/sglang#30872, merge c9947b087bf9), "tc_piecewise" where
    it is on multimodal_piecewise_cuda_graph_supported_model_archs (Cohere2-Vision, Kimi-K2.5 and MiniMax-M3,
    configs/model_config.py). Empty: a multimodal architecture on neither, or a text-only one."""

    prefill_graph_allowlists: tuple[Literal["breakable", "tc_piecewise"], ...] = Field(default=(), strict=False)
    # The SSM state dtype SGLang's config class hands mamba2_state_dtype: the config's mamba_ssm_dtype where the
    # class passes itself (NemotronH, FalconH1, Qwen3-Next, Qwen3.5, GraniteMoeHybrid, and Bamba, whose adapter
    # Granite shares: calc.arch.common.sglang_ssm_dtype; sgl-project/sglang@02e208de); float32, its default, where
    # the key is absent or the class passes nothing (KimiLinearConfig.mamba2_cache_params at @008b79d2).
    ssm_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # Kimi-Linear's KDA heads where their head_dim is 128: on SM100 SGLang defaults --mamba-ssm-dtype to bfloat16
    # when the TP size divides them (arg_groups/kimi_k3_hook.py apply_kimi_k3_linear_attn_defaults, in a version
    # newer than @9aab5589, whose hook has no such default).
    sm100_bf16_ssm_heads: int | None = None
    # The SGLang model file (models/<name>.py) that builds it, where gptcalc has read its layout under DP attention
    # (--enable-dp-attention): which weights split over the attention-TP group, which over the whole TP group, which
    # stay whole (calc.analysis.memory.sglang_dp, which holds each file's facts). "": a layout not read, refused.
    dp_attention: Literal["", "deepseek_v2", "glm4_moe_lite", "glm4_moe", "qwen2_moe", "qwen3_moe", "gpt_oss",
                          "deepseek_v4"] = ""
    # SGLang keeps an MLA layer's kv_b_proj and copies it once more into the w_kc / w_vc its absorbed decode multiplies
    # by (DeepseekV2WeightLoaderMixin.post_load_weights and LongCat-Flash's own copy of it:
    # calc.analysis.memory.sglang_mla). False: no such copy read.
    mla_kv_b_copy: bool = False
    # The copy is of kv_b_proj's weight as loaded, neither dequantised nor requantised (Kimi-Linear's
    # post_load_weights): an FP8 kv_b is copied in FP8.
    mla_kv_b_as_stored: bool = False
    # Components the model file allocates in fp32 and whole on every GPU, whatever the checkpoint's dtype and the
    # tensor-parallel size (DeepSeek-V4's attn_sink, hyper-connections, compressor position biases and norms:
    # calc.analysis.memory.sglang_fp32). Empty: none read.
    fp32_whole: tuple[str, ...] = Field(default=(), strict=False)
    # The model file keeps complex64 freqs_cis tables of max_position_embeddings rows beside get_rope's cos/sin ones
    # (DeepSeek-V4's MQALayer: calc.analysis.memory.rope_cache.sglang_freqs_cis). False: none read.
    freqs_cis: bool = False
