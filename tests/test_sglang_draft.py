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


def _budget(*args: str) -> dict:
    return _memory(*args, "--budget", "8xH200", "--tp", "8", "--seq", "32k")


def test_the_mtp_draft_weights_come_out_of_the_pool() -> None:
    """SGLang builds the draft worker (its weights loaded) before it profiles the target's pool, which charges every
    loaded weight (_profile_available_bytes, model_runner_kv_cache_mixin.py at 29b719ba3a72: "Loaded weights (target +
    draft)"); the draft keeps its MTP layer, enorm, hnorm, eh_proj and shared_head.norm and takes the target's
    embedding and head (models/deepseek_nextn.py, set_embed_and_head). GLM-4.5 in bf16 (2 B a value) at tp 8, by hand
    from tests/configs/model_types/glm4_moe.json: the MTP layer's attention, Q 5,120 x 96 x 128 with its bias of
    12,288 and O 96 x 128 x 5,120 over 8 GPUs, K and V 5,120 x 8 x 128 with biases of 1,024 one KV head a GPU (over 8),
    q_norm and k_norm 128 each, its two norms 5,120 each and the router 160 x 5,120 whole; 160 routed experts and one
    shared, each 3 x 5,120 x 1,536, over 8; beside it 3 norms of 5,120 and eh_proj 2 x 5,120 x 5,120, whole. It loads
    and frees 151,552 / 8 x 5,120 values of embedding and as many of head."""
    attention = 5_120 * 96 * 128 + 12_288 + 2 * (5_120 * 8 * 128 + 1_024) + 96 * 128 * 5_120
    over8 = (attention + 161 * 3 * 5_120 * 1_536) // 8
    whole = 2 * 128 + 2 * 5_120 + 160 * 5_120 + 3 * 5_120 + 2 * 5_120 * 5_120
    own, shared = 2 * (over8 + whole), 2 * 2 * 151_552 // 8 * 5_120
    assert (own, shared) == (1_090_246_656, 387_973_120)
    plain, drafted = _budget(GLM), _budget(GLM, "--speculative-num-steps", "3")
    terms = {t["key"]: t for t in drafted["engine_budget"]["terms"]}
    assert terms["draft_weights"]["bytes"] == own and terms["draft_weights"]["how"] == "exact"
    kv = drafted["engine_budget"]["kv_memory_bytes"]
    assert kv == plain["engine_budget"]["kv_memory_bytes"] - own
    assert drafted["engine"]["tokens"] == kv // 47_616  # the priced cell: 47,104 x 93 / 92
    free = drafted["engine_budget"]["total_bytes"] - terms["non_torch"]["bytes"] - terms["weights"]["bytes"]
    assert drafted["server_says"][3:5] == [f"Load weight begin. avail mem={free / GIB:.2f} GB",
                                           f"Load weight end. mem usage={(own + shared) / GIB:.2f} GB"]
    assert drafted["server_says"][3:5] == ["Load weight begin. avail mem=55.08 GB",
                                           "Load weight end. mem usage=1.38 GB"]


def test_an_eagle_drafts_weights_are_said_to_be_uncounted() -> None:
    """An EAGLE draft of another checkpoint (--speculative-draft-layers): SGLang loads it before profiling too, but its
    weights are unknown here, so the term says so and takes nothing, and no draft load line is printed."""
    args = ("llama-3.1-8b", "--budget", "H100-80GB", "--seq", "8192")
    plain = _memory(*args)
    drafted = _memory(*args, "--speculative-num-steps", "3", "--speculative-draft-layers", "1")
    term = next(t for t in drafted["engine_budget"]["terms"] if t["key"] == "draft_weights")
    assert (term["bytes"], term["how"]) == (0, "not counted") and "not subtracted" in term["source"]
    assert drafted["engine_budget"]["kv_memory_bytes"] == plain["engine_budget"]["kv_memory_bytes"]
    assert sum(line.startswith("Load weight end") for line in drafted["server_says"]) == 1
