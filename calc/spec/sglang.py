"""How SGLang builds a model: facts of SGLang's code for an architecture, which no config key states.

SGLang captures prefill CUDA graphs by default on CUDA (the "breakable" backend) and turns them off for
a multimodal architecture unless its configs/model_config.py lists it as validated for that backend
(arg_groups/cuda_graph_hook.py disable_breakable_cudagraph_if_incompatible, rule "multimodal model";
the "tc_piecewise" backend has an allowlist of its own, _disable_tc_piecewise_cudagraph_if_incompatible).
Which lists an architecture is on is the reader's to state (calc/towers/*.py), as calc/spec/vllm.py's
facts are the adapters'; the memory budget asks the spec, never the model_type.
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
