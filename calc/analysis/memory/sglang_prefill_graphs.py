"""The room SGLang's default mem_fraction_static leaves for prefill CUDA graphs (sgl-project/sglang at
a82da8da159e, python/sglang/srt/arg_groups/memory_hook.py reserve_for_graph_mb, and
arg_groups/cuda_graph_hook.py).

Prefill CUDA graphs are on by default on CUDA ("Breakable is the CUDA default",
apply_cuda_graph_compatibility), and the memory settings are worked out after that resolution
(arg_groups/pipeline.py runs handle_cuda_graph_config before handle_gpu_memory_settings), so the
reserve counts them only where they survived it. SGLang turns them off for pipeline parallelism,
DeepSeek-V4 ("heavy capture-pool memory pressure"), Kimi's KDA linear attention and multimodal
models that are on neither of its allowlists (disable_breakable_cudagraph_if_incompatible). Where
they stay on it reserves, in MiB,

    MLA models      1.5 x 1024                           ("MLA backend overhead is much higher")
    others          8 x len(capture sizes)               ("only non-torch memory is counted")

with one capture size per bucket up to max_bs = chunked_prefill_size (2048 under MLA):
4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1024 by 64, 1280..4096 by 256, 4608.. by 512
(generate_prefill_cuda_graph_batch_sizes): 58 sizes, 464 MiB, at the 8,192 tokens of an H100 or H200.

Which multimodal architectures keep them is a list of names in SGLang's configs/model_config.py, one per
backend: at the breakable default, multimodal_breakable_cuda_graph_supported_model_archs (Qwen3.5 and
Qwen3.5-MoE, sgl-project/sglang#30872); Cohere2-Vision, Kimi-K2.5 and MiniMax-M3 are on the tc_piecewise
backend's list only, so at the default they lose them like any other multimodal model. Each tower reader
states its architecture's lists in the spec (ModelSpec.sglang, calc/spec/sglang.py).
"""

from __future__ import annotations

from calc.analysis.memory.kv import kv_layers, state_layers
from calc.spec.model import ModelSpec

__all__ = ["MLA_RESERVE", "SOURCE", "capture_sizes", "prefill_graph_reserve"]

SOURCE = ("https://github.com/sgl-project/sglang/blob/a82da8da159ec67038d9357c172fba89ad8af6a3/python/sglang/srt/"
          "arg_groups/memory_hook.py (reserve_for_graph_mb)")
MLA_RESERVE = 1536  # MiB
PER_GRAPH = 8  # MiB of non-torch memory per captured prefill size
MLA_MAX_BS = 2048  # prefill max_bs under an MLA backend


def capture_sizes(max_bs: int) -> list[int]:
    """generate_prefill_cuda_graph_batch_sizes(max_bs)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return [s for s in sizes if s <= max_bs]


def prefill_graph_reserve(spec: ModelSpec, chunked_prefill: int, pp: int) -> tuple[int, str]:
    """(MiB, why) SGLang reserves for prefill CUDA graphs for `spec`. It asks the architecture whether it is
    multimodal (is_multimodal), whether or not the towers are loaded: a spec with towers, counted or not."""
    layers = kv_layers(spec)
    if pp > 1:
        return 0, "prefill CUDA graphs off under pipeline parallelism"
    if any(kind.ratio > 1 for kind in layers):
        return 0, "prefill CUDA graphs off for DeepSeek-V4's compressed attention"
    if any(state.mixer == "kda" for state in state_layers(spec)):
        return 0, "prefill CUDA graphs off for KDA linear attention"
    if (spec.towers or spec.uncounted) and "breakable" not in spec.sglang.prefill_graph_allowlists:
        listed = " (listed for tc_piecewise only)" if spec.sglang.prefill_graph_allowlists else ""
        return 0, f"prefill CUDA graphs off for a multimodal model not on SGLang's breakable allowlist{listed}"
    if any(kind.kind == "MLA" for kind in layers):
        return MLA_RESERVE, f"{MLA_RESERVE:,} MiB for MLA prefill CUDA graphs"
    n = len(capture_sizes(chunked_prefill))
    return PER_GRAPH * n, f"{PER_GRAPH * n:,} MiB for {n} prefill CUDA graph sizes up to {chunked_prefill:,} tokens"
