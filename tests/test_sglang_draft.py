"""SGLang's EAGLE / MTP draft worker in its pool (calc/analysis/memory/sglang_draft.py), each figure worked out here
by hand from SGLang's source:

- sgl-project/sglang at 29b719ba3a72, model_runner_components/pool_configurator.py DefaultPoolConfigurator.__init__:
  the target's cell x (1 + eagle_draft_num_layers / num_layers), truncated; the draft worker's pool has as many
  tokens (draft_runner_cache_size), over its own layers;
- model_runner.py at the same commit: eagle_draft_num_layers is the draft config's num_nextn_predict_layers;
- arg_groups/speculative_hook.py at 004c82e07d87 _handle_eagle_family: max_running_requests 48 unless given, and
  model_runner_kv_cache_mixin.py at 29b719ba3a72 _resolve_max_num_reqs: min(48 // dp_size, tokens // 2).

The cells: DeepSeek-V3's MLA latent is kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values a layer (its
config.json), bf16; GLM-4.5's 8 KV heads of 128 (tests/configs/model_types/glm4_moe.json) are one a GPU at tp 8;
Llama-3.1-8B's 8 KV heads of 128 over 32 layers. Each of DeepSeek-V3's and GLM-4.5's configs has
num_nextn_predict_layers 1."""

from __future__ import annotations

import json

import pytest

from cli_checks import check_run

GIB = 2**30
GLM = "tests/configs/model_types/glm4_moe.json"


def _memory(*args: str) -> dict:
    result = check_run(["memory", *args, "--engine", "sglang", "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(("model", "layers", "cell"), [
    ("deepseek-v3", 61, 61 * 576 * 2),  # one latent a layer, whole on every GPU
    (GLM, 92, 92 * 2 * 1 * 128 * 2),  # K and V, one KV head a GPU
])
def test_an_mtp_draft_prices_its_layer_into_the_target_cell(model: str, layers: int, cell: int) -> None:
    data = _memory(model, "--tp", "8", "--kv-memory", "40GiB", "--seq", "32k", "--speculative-num-steps", "3")
    priced = cell * (layers + 1) // layers  # exact here: 70,272 x 62 / 61 = 71,424; 47,104 x 93 / 92 = 47,616
    assert priced in (71_424, 47_616)
    engine = data["engine"]
    assert engine["bytes_per_token"] == priced and engine["sglang_draft"]["draft_cell_bytes"] == cell // layers
    tokens = 40 * GIB // priced
    assert engine["tokens"] == tokens
    assert engine["max_running_requests"] == 48 and engine["requests"] == min(tokens // 32768, 48)


def test_the_draft_worker_logs_its_own_pool_of_the_same_tokens() -> None:
    """DeepSeek-V3: the target's 61 latent layers and the draft's one, each buffer a page (1 token) more."""
    data = _memory("deepseek-v3", "--tp", "8", "--kv-memory", "40GiB", "--seq", "32k", "--speculative-num-steps", "1")
    tokens = 40 * GIB // 71_424
    assert data["server_says"][-2:] == [
        f"KV Cache is allocated. #tokens: {tokens}, KV size: {(tokens + 1) * 70_272 / GIB:.2f} GB",
        f"KV Cache is allocated. #tokens: {tokens}, KV size: {(tokens + 1) * 1_152 / GIB:.2f} GB"]


def test_an_eagle_draft_takes_its_layers_from_the_option() -> None:
    """Llama-3.1-8B with a one-layer EAGLE draft: 131,072 B x 33 / 32 = 135,168 B; K and V apart."""
    data = _memory("llama-3.1-8b", "--kv-memory", "20GiB", "--seq", "8192", "--speculative-num-steps", "3",
                   "--speculative-draft-layers", "1")
    tokens = 20 * GIB // 135_168
    assert data["engine"]["tokens"] == tokens
    rows = tokens + 1
    assert data["server_says"][-2:] == [
        f"KV Cache is allocated. #tokens: {tokens}, K size: {rows * 65_536 / GIB:.2f} GB, V size: "
        f"{rows * 65_536 / GIB:.2f} GB",
        f"KV Cache is allocated. #tokens: {tokens}, K size: {rows * 2_048 / GIB:.2f} GB, V size: "
        f"{rows * 2_048 / GIB:.2f} GB"]


@pytest.mark.parametrize(("args", "message"), [
    (["llama-3.1-8b", "--speculative-num-steps", "3"], "has no MTP layers"),
    (["tests/configs/model_types/qwen3_next.json", "--speculative-num-steps", "3"], "keeps Mamba states"),
    (["gemma-2-9b", "--speculative-num-steps", "3", "--speculative-draft-layers", "1"], "sliding-window layers"),
    (["deepseek-v3", "--tp", "4", "--pp", "2", "--speculative-num-steps", "3"], "PP is not compatible"),
    (["llama-3.1-8b", "--speculative-draft-layers", "1"], "with --speculative-num-steps"),
    (["deepseek-v4-flash", "--tp", "8", "--speculative-num-steps", "3", "--speculative-draft-layers", "2"],
     "DeepSeek-V4's pools price"),
])
def test_drafts_it_does_not_model_are_refused(args: list[str], message: str) -> None:
    result = check_run(["memory", *args, "--engine", "sglang", "--kv-memory", "20GiB"])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_fit_prices_the_draft_per_candidate() -> None:
    result = check_run(["fit", "deepseek-v3", "--seq", "32k", "--engine", "sglang", "--gpus", "H200", "--top", "1",
                        "--speculative-num-steps", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    best = json.loads(result.stdout)["candidates"][0]
    assert best["tokens"] == best["kv_memory_bytes"] // 71_424


def test_the_running_request_cap_keeps_under_half_the_slots() -> None:
    """_resolve_max_num_reqs (model_runner_kv_cache_mixin.py at 29b719ba3a72): min(clamp(int(tokens / context x 512),
    2048, 4096), tokens // 2), after every configurator, DeepSeek-V4's too. Llama-3.1-8B's 131,072 B a token in
    300 MiB: 2,400 slots, 1,200 running at most (the clamp alone gives 2,048). DeepSeek-V4-Flash at tp 8 on 100 GiB
    holds 6,754,048 full slots (tests/test_sglang_pools.py), 6,754,048 / 65,536 x 512 = 52,766 -> 4,096 running;
    with a draft, 48."""
    tiny = _memory("llama-3.1-8b", "--kv-memory", "300MiB", "--seq", "1")
    assert tiny["engine"]["tokens"] == 2_400 and tiny["engine"]["max_running_requests"] == 1_200
    flash = _memory("deepseek-v4-flash", "--tp", "8", "--kv-memory", "100GiB", "--seq", "64k")
    assert flash["engine"]["tokens"] == 6_754_048 and flash["engine"]["max_running_requests"] == 4_096
    drafted = _memory("deepseek-v4-flash", "--tp", "8", "--kv-memory", "100GiB", "--seq", "64k",
                      "--speculative-num-steps", "1")
    assert drafted["engine"]["max_running_requests"] == 48
