"""Memory from a spec: the KV cache by layer kind, weights at a storage format, GPUs, and what fits.

One module per question, pure integers, readable beside docs/memory.md:

- `formats`: bits per value of every storage format, scales included (fp16, fp8, llama.cpp's q8_0 ...);
- `kv`: the KV cache per layer kind (full, sliding window, MLA latent), per GPU under tensor parallelism;
- `weights`: parameter bytes per component at a format;
- `schemes`: named quantisation schemes (GPTQ, AWQ, bitsandbytes, FP8, MXFP4, NVFP4) and what they keep 16-bit;
- `stored`: the bytes a checkpoint stores, by component, read from its headers;
- `gpus`: the GPU catalog, each figure with its source;
- `offload`: routed experts kept in system RAM (llama.cpp's --n-cpu-moe);
- `parallel`: what each GPU holds under tensor, pipeline and expert parallelism;
- `engines`: the pool vLLM, SGLang, TensorRT-LLM and llama.cpp carve from their KV memory, and what they print;
- `llamacpp`: the caches llama.cpp allocates (full, SWA, recurrent-state), and its lines about them;
- `budget`: weights + cache on the busiest GPU, and the longest context or largest batch that fits a budget.

No torch anywhere here: tests/test_memory_torch.py checks the cache against real tensors.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it. A name is imported when first used, so `gptcalc kvcache`
# loads the KV cache module, not budgets, engines and quantisation schemes (start-up time).
_HOMES = {
    "budget": ("Budget", "BudgetSpec", "GPUShare", "Inference", "budget_for", "inference", "layout_for", "logits_bytes",
               "parse_budget", "solve_budget"),
    "engines": ("ENGINES", "KVPool", "engine_lines", "kv_pool", "padded_context"),
    "formats": ("FORMATS", "KV_FORMATS", "WEIGHT_FORMATS", "Format", "bits_to_bytes", "find_format"),
    "gpus": ("GPU", "GPUS", "find_gpu", "gpu_suggestion"),
    "llamacpp": ("LlamaCppContext", "llamacpp_caches", "llamacpp_lines"),
    "kv": ("KVCache", "KVLayers", "kv_cache", "kv_layers", "kv_variants"),
    "offload": ("Offload", "parse_cpu_experts"),
    "parallel": ("Layout", "pp_partitions", "stages"),
    "schemes": ("AS_STORED", "SCHEMES", "Scheme", "find_scheme", "scheme_bits", "stored_scheme", "weight_choice"),
    "stored": ("StoredWeights", "stored_weights"),
    "weights": ("SCALE_BITS", "Weights"),
}  # `weights()` and `offload()` share their module's name, which the package attribute is: import them from it
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
