"""`memory --cpu-experts all|N` (llama.cpp `--n-cpu-moe N`): routed experts kept in system RAM.

llama.cpp sends `blk.i.ffn_(up|down|gate|gate_up)_(ch|)exps` of every block i < N to the CPU buffer
# source: https://github.com/ggml-org/llama.cpp/blob/001d906a6d86e2490e394361e7cc6f478b100088/common/common.h
(LLM_FFN_EXPS_REGEX, llm_add_n_cpu_ffn_overrides): N counts blocks from 0, dense ones included.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.cli import main

# Qwen3-30B-A3B: 48 layers, all MoE, 128 experts of d_ff 768 (gated: 3 matrices), top 8, d_model 2048.
# source: https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN_LAYER_EXPERTS = 128 * 3 * 2048 * 768
# DeepSeek-V3: 61 layers, the first 3 dense (first_k_dense_replace), 256 experts of 2048, top 8, d_model 7168.
# source: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
DEEPSEEK_LAYER_EXPERTS = 256 * 3 * 7168 * 2048


def memory(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["memory", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("option", ["--n-cpu-moe", "--cpu-experts"])
def test_first_n_layers_experts_leave_the_gpu(option: str) -> None:
    """fp16: 2 bytes per parameter; a token reads 8 of 128 experts of each offloaded layer."""
    whole = memory("qwen3-30b-a3b", "--seq", "4096")
    moved = memory("qwen3-30b-a3b", "--seq", "4096", option, "24")
    cpu = moved["cpu_experts"]
    assert cpu["layers"] == 24 and cpu["weights_bytes"] == 24 * QWEN_LAYER_EXPERTS * 2 == 28_991_029_248
    assert cpu["decode_read_bytes_per_token"] == 24 * QWEN_LAYER_EXPERTS * 2 * 8 // 128
    assert moved["weights"]["total_bytes"] == whole["weights"]["total_bytes"] - cpu["weights_bytes"]
    assert moved["model_weights_bytes"] == whole["model_weights_bytes"]
    assert moved["kv_cache"] == whole["kv_cache"]  # the cache stays on the GPU
    assert moved["weights"]["components"]["router"] == whole["weights"]["components"]["router"]


def test_dense_leading_layers_count_toward_n() -> None:
    """DeepSeek-V3's blocks 0-2 have no routed experts: --n-cpu-moe 3 moves nothing, 4 moves one layer's."""
    assert memory("deepseek-v3", "--seq", "4096", "--n-cpu-moe", "3")["cpu_experts"]["weights_bytes"] == 0
    four = memory("deepseek-v3", "--seq", "4096", "--n-cpu-moe", "4", "--quant", "fp8-block")["cpu_experts"]
    # fp8-block: 8 bits per weight + one fp32 scale per 128 x 128 block, for each of 256 x 3 matrices
    assert four["weights_bytes"] == DEEPSEEK_LAYER_EXPERTS + 256 * 3 * (7168 // 128) * (2048 // 128) * 4


def test_all_moves_every_layer_and_the_budget_sees_the_gpu_share() -> None:
    data = memory("qwen3-30b-a3b", "--cpu-experts", "all", "--budget", "RTX-4090", "--seq", "8192")
    assert data["cpu_experts"]["weights_bytes"] == 48 * QWEN_LAYER_EXPERTS * 2
    assert data["budget"]["weights_bytes"] == data["weights"]["total_bytes"]
    assert data["weights"]["components"]["experts_up"] == 0


def test_text_output_says_where_the_experts_are() -> None:
    result = CliRunner().invoke(main, ["memory", "qwen3-30b-a3b", "--n-cpu-moe", "24", "--seq", "4096"])
    assert result.exit_code == 0
    assert "routed experts of layers 0-23 in system RAM: 27.0 GiB" in " ".join(result.stdout.split())
    assert "from system RAM, 1,811,939,328 B" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["llama-3-8b", "--n-cpu-moe", "4"], "Error: --cpu-experts: llama-3-8b has no routed experts"),
    (["qwen3-30b-a3b", "--n-cpu-moe", "some"], "Error: --cpu-experts 'some': give 'all' or a number"),
    (["qwen3-30b-a3b", "--n-cpu-moe", "4", "--tp", "2"], "Error: --cpu-experts: llama.cpp's expert offload is for one GPU"),
])
def test_offload_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["memory", *args])
    assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr
