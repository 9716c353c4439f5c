"""DeepSeek-V4 and MiniMax-M3 under --engine trtllm: built, refused at their caches (memory/trtllm_sparse.py).

Sources: NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/_arch_index.py at 065ff9e937 (MODEL_ARCH_TO_MODULE holds
DeepseekV4ForCausalLM, MiniMaxM3SparseForCausalLM and MiniMaxM3SparseForConditionalGeneration, so the class check
passes); tensorrt_llm/_torch/attention_backend/sparse/deepseek_v4/cache_manager.py at 10ce7685b1
(DeepseekV4CacheManager(KVCacheManagerV2), tokens_per_block asserted in [128, 256]) and
sparse/minimax_m3/cache_manager.py at b4a375d83d (MiniMaxM3KVCacheManagerV2(KVCacheManagerV2), Role.INDEX_KEY
buffers). The configs are those under tests/configs/model_types (SOURCES.yaml).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.memory.trtllm_models import TRTLLM_ARCHITECTURES
from calc.cli import main
from calc.spec.load import load_spec

CONFIGS = "tests/configs/model_types"
MANAGERS = [(f"{CONFIGS}/deepseek_v4.json", "DeepseekV4CacheManager", "deepseek_v4/cache_manager.py at 10ce7685b1"),
            ("deepseek-v4-flash", "DeepseekV4CacheManager", "deepseek_v4/cache_manager.py at 10ce7685b1"),
            (f"{CONFIGS}/minimax_m3_vl.json", "MiniMaxM3KVCacheManagerV2",
             "minimax_m3/cache_manager.py at b4a375d83d")]


def _says_where(reason: str, manager: str, where: str) -> None:
    assert reason.startswith("--engine trtllm: ") and "is not modelled yet" in reason, reason
    assert f"TensorRT-LLM builds it and serves it from {manager}, a KVCacheManagerV2" in reason, reason
    assert where in reason and "V2's C++ StorageManager rounds and splits" in reason, reason


@pytest.mark.parametrize("model, manager, where", MANAGERS)
def test_memory_refuses_a_v2_sparse_cache_naming_its_manager(model: str, manager: str, where: str) -> None:
    assert load_spec(model).architecture in TRTLLM_ARCHITECTURES  # TensorRT-LLM builds it: the cache stops it
    result = CliRunner().invoke(main, ["memory", model, "--engine", "trtllm", "--kv-memory", "8GiB"])
    assert result.exit_code == 2 and result.output.startswith("Error: "), result.output
    _says_where(" ".join(result.output.removeprefix("Error: ").split()), manager, where)


@pytest.mark.parametrize("model, manager, where", MANAGERS)
def test_fit_skips_every_layout_of_it_for_the_same_reason(model: str, manager: str, where: str) -> None:
    result = CliRunner().invoke(main, ["fit", model, "--engine", "trtllm", "--seq", "32k", "--gpus", "H200", "--json"])
    data = json.loads(result.output)
    assert data["candidates"] == [] and data["skipped_layouts"], result.output
    for skipped in data["skipped_layouts"]:
        _says_where(skipped.split(": ", 1)[1], manager, where)


def test_deepseek_v4_pages_in_blocks_of_128_there() -> None:
    """DeepseekV4ForCausalLM.get_model_defaults sets tokens_per_block 128; the manager asserts 128 or 256."""
    result = CliRunner().invoke(main, ["memory", "deepseek-v4-flash", "--engine", "trtllm", "--kv-memory", "8GiB"])
    assert "in blocks of 128 tokens (tokens_per_block / ratio rows for compressed ones)" in result.output, result.output
