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
- `budget`: weights + cache on the busiest GPU, and the longest context or largest batch that fits a budget.

No torch anywhere here: tests/test_memory_torch.py checks the cache against real tensors.
"""

from __future__ import annotations

from calc.analysis.memory.budget import (Budget, BudgetSpec, GPUShare, Inference, budget_for, inference, layout_for,
                                         logits_bytes, parse_budget, solve_budget)
from calc.analysis.memory.engines import ENGINES, KVPool, engine_lines, kv_pool, padded_context
from calc.analysis.memory.formats import FORMATS, KV_FORMATS, WEIGHT_FORMATS, Format, bits_to_bytes, find_format
from calc.analysis.memory.gpus import GPU, GPUS, find_gpu
from calc.analysis.memory.kv import KVCache, KVLayers, kv_cache, kv_layers, kv_variants
from calc.analysis.memory.offload import Offload, offload, parse_cpu_experts
from calc.analysis.memory.parallel import Layout, pp_partitions, stages
from calc.analysis.memory.schemes import SCHEMES, Scheme, find_scheme, scheme_bits
from calc.analysis.memory.stored import StoredWeights, stored_weights
from calc.analysis.memory.weights import SCALE_BITS, Weights, weights

__all__ = [
    "ENGINES", "KVPool", "engine_lines", "kv_pool", "padded_context", "FORMATS", "GPU", "GPUS", "KV_FORMATS", "SCALE_BITS", "SCHEMES", "Scheme", "find_scheme", "scheme_bits", "StoredWeights", "stored_weights", "Offload", "offload", "parse_cpu_experts", "WEIGHT_FORMATS", "Budget", "BudgetSpec", "Format", "GPUShare",
    "Inference", "KVCache", "KVLayers", "Layout", "Weights", "bits_to_bytes", "budget_for", "find_format", "find_gpu",
    "inference", "kv_cache", "kv_layers", "kv_variants", "layout_for", "logits_bytes", "parse_budget",
    "pp_partitions", "solve_budget", "stages", "weights",
]
