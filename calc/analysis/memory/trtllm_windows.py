"""Why TensorRT-LLM's V1 pool prices a sliding-window layer at a whole token, as it does a full-attention layer.

V1 (the C++ KVCacheManager behind the lines gptcalc prints for --engine trtllm) gives a layer a window of its own
only from kv_cache_config.max_attention_window, which KvCacheConfig leaves unset (Field(default=None) in
tensorrt_llm/llmapi/llm_args.py, read in a version whose commit the index did not name). Unset, the Python wrapper
makes it one window of max_seq_len for every layer (tensorrt_llm/_torch/pyexecutor/resource_manager.py
KVCacheManager.__init__ at 001541bad8: "Use max_seq_len as default max_attention_window"), so there is one window
size, is_vswa is false and the pool is carved at every layer's bytes a token, sliding ones included: what
calc.analysis.memory.engines already prices. Nothing fills the setting in from the config for V1: at 0004396720
tensorrt_llm/_torch/pyexecutor/_util.py _create_kv_cache_manager derives per-layer windows from layer_types
(_derive_layer_type_attention_windows: sliding_window for the sliding layers, max_seq_len for the others, when at
least two distinct windows result) only where the manager class is KVCacheManagerV2, "otherwise every layer lands in
one full-context pool and the bounded layers keep blocks they can never read". Gemma 3 and gpt-oss prefer V2 under
"auto" (calc.analysis.memory.trtllm_manager), which is not sized.

Set by hand (for Gemma 3's variable sliding window attention a Dynamo fork's
components/backends/trtllm/engine_configs/gemma3/vswa_agg.yaml lists max_attention_window [512, 512, 512, 512, 512,
32768]), V1 sizes one pool per window size (KVCacheManager.calculate_max_num_blocks_for_vswa at 001541bad8): each
window size gets 1 / (window sizes) of the budget unless TRTLLM_WINDOW_SIZE_SHARES says otherwise, int(budget x
share / its layers' bytes a token // tokens_per_block) blocks, after adjust_window_sizes_for_vswa shrinks windows
one sequence cannot fill. The budget there is max_gpu_total_bytes, which _util.py sets at another commit, and the
C++ "Allocated ... for max tokens" line counts the block manager's primary blocks, every window's added up
(BlockManager::getNumPrimaryBlocks in kvCacheManager.h; kvCacheManager.cpp's share of each window differs between
the versions read, b35ac1b643 and 002ba6a7cc), so that split is described here, not sized.
"""

from __future__ import annotations

from calc.analysis.memory.kv import kv_layers
from calc.spec.model import ModelSpec

__all__ = ["TRTLLM_WINDOWS", "windowed_layers", "window_note"]

TRTLLM_WINDOWS = ("tensorrt_llm/_torch/pyexecutor/_util.py _create_kv_cache_manager at 0004396720 derives windows "
                  "from layer_types for KVCacheManagerV2 only; resource_manager.py KVCacheManager.__init__ at "
                  "001541bad8 makes an unset max_attention_window one window of max_seq_len")
_VSWA = "resource_manager.py KVCacheManager.calculate_max_num_blocks_for_vswa at 001541bad8"


def windowed_layers(spec: ModelSpec) -> dict[str, int]:
    """Layers whose attention is bounded, by what bounds it ("sliding-window", "chunked-attention"): the ones a
    reader might expect TensorRT-LLM to cache for their window only. Counted once per block, whatever rows it keeps."""
    bounded: dict[str, dict[str, int]] = {}
    for kind in kv_layers(spec):
        what = "sliding-window" if kind.window else "chunked-attention" if kind.chunk else None
        if what:
            bounded.setdefault(what, {})[kind.block] = kind.n_layers
    return {what: sum(blocks.values()) for what, blocks in bounded.items()}


def window_note(spec: ModelSpec) -> str | None:
    """What V1 does with a model's bounded layers, for the note after the engine's lines; None without any."""
    bounded = windowed_layers(spec)
    if not bounded:
        return None
    layers = " and ".join(f"{n} {what}" for what, n in bounded.items())
    return (f"V1 caches {spec.name}'s {layers} layers for the whole context, a whole token each as for full "
            "attention: it takes a layer's window only from kv_cache_config.max_attention_window, unset by default "
            f"({TRTLLM_WINDOWS}); a max_attention_window you set (VSWA) splits V1's pool equally among its window "
            f"sizes ({_VSWA}), which is not sized here")
