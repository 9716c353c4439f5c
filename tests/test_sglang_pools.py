"""SGLang's pools for DeepSeek-V4 (calc/analysis/memory/sglang_dsv4.py) and MiniMax-M3 (engines.py), each
figure worked out here by hand from SGLang's source:

- DeepSeek-V4: sgl-project/sglang at 29b719ba3a72, python/sglang/srt/model_executor/model_runner_components/pool_configurator.py
  DSV4PoolConfigurator._get_bytes_per_full_token and _compute_dsv4_sizes; defaults page_size 256 and
  swa_full_tokens_ratio 0.1 (arg_groups/model_overrides/deepseek_v4.py at 01a4a9915), ring sizes 8 and 128
  (mem_cache/deepseek_v4_memory_pool.py get_compress_state_ring_size, not speculative, online off);
  compress_ratios[start_layer:end_layer] (DSV4PoolConfigurator at 29b719ba3a72, "PP-local slice"): the stage's layers
  as make_layers splits config.num_hidden_layers, so never the MTP layer's trailing entry; under --pp the stages take
  the least full (_apply_token_constraints: all_reduce MIN) and SGLang's get_pp_indices gives the extra layers to the
  last stages (python/sglang/srt/distributed/utils.py at 1107be112815).
- MiniMax-M3: DefaultPoolConfigurator._compute_cell_size's MiniMax branch: (dense + sparse) x 2 x KV
  heads x head_dim x cache bytes + K-only sparse layers x sparse_index_dim x model bytes, pages of 128
  (arg_groups/model_overrides/minimax_m3.py at 1ee3fb2aa1).
- The prefill CUDA graphs' reserve in the default mem_fraction_static: memory_hook.py reserve_for_graph_mb and
  cuda_graph_hook.py at a82da8da159e."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from calc.analysis.memory.engines import engine_lines, kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.sglang_prefill_graphs import capture_sizes, prefill_graph_reserve
from calc.analysis.memory.startup import sglang_fraction
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from cli_checks import check_run

GIB = 2**30
M3 = "tests/configs/model_types/minimax_m3_vl.json"


def by_hand(layers: int, c4: int, c128: int, ring4: int = 8, ring128: int = 128) -> Fraction:
    """bytes_per_full_token with r = 1/10, 584-B rows, 132-B indexer keys, fp32 states of head_dim 512
    (index 128), rings of 8 (CSA) and 128 (HCA) over a window of 128 (16 and 256 under speculative decoding)."""
    r = Fraction(1, 10)
    return (r * 584 * layers + Fraction(584, 4) * c4 + Fraction(584, 128) * c128 + Fraction(132, 4) * c4
            + r * Fraction(ring4, 128) * (2 * 2 * 512 * 4) * c4 + r * Fraction(ring128, 128) * (2 * 512 * 4) * c128
            + r * Fraction(ring4, 128) * (2 * 2 * 128 * 4) * c4)


@pytest.mark.parametrize(("model", "layers", "c4", "c128"), [
    # DeepSeek-V4-Flash config.json: 44 compress_ratios (43 layers + MTP's trailing 0); the 43 layers' hold 2 zeros,
    # 21 fours, 20 x 128
    ("deepseek-v4-flash", 43, 21, 20),
    # DeepSeek-V4-Pro (tests/configs/model_types/deepseek_v4-pro.json): 62 entries; its 61 layers' hold no zero,
    # 30 fours, 31 x 128
    ("tests/configs/model_types/deepseek_v4-pro.json", 61, 30, 31),
])
def test_dsv4_sizes_follow_the_configurator(model: str, layers: int, c4: int, c128: int) -> None:
    kv = kv_cache(load_spec(model), 1, tp=8)
    memory = 100 * GIB
    pool = kv_pool(kv, "sglang", memory, 1_048_576)
    per = by_hand(layers, c4, c128)
    assert pool.compressed is not None and pool.compressed.bytes_per_full_token == per
    full = int(memory / per) // 256 * 256
    swa = int(full * Fraction(1, 10)) // 256 * 256
    assert pool.compressed.sizes() == {"full": full, "swa": swa, "c4": full // 4, "c128": full // 128,
                                       "c4_state": swa // 128 * 8, "c128_state": swa // 128 * 128}
    assert pool.tokens == full and pool.block == 256 and pool.requests == full // 1_048_576


def test_dsv4_flash_per_token_and_log_lines() -> None:
    """15,897.45 B a full token: 2,511.2 window rows (0.1 x 584 x 43) + 3,066 CSA rows + 91.25 HCA rows + 693
    indexer keys + 1,075.2 CSA state + 8,192 HCA state + 268.8 indexer state."""
    kv = kv_cache(load_spec("deepseek-v4-flash"), 1, tp=8)
    assert by_hand(43, 21, 20) == Fraction(1589745, 100)
    pool = kv_pool(kv, "sglang", 100 * GIB, 1_048_576)
    # 107,374,182,400 / 15,897.45 = 6,754,179.6: 26,383 pages of 256; swa: 675,404 down to 675,328
    assert engine_lines(pool, kv, "sglang") == [
        "DSV4 memory calculation: bytes_per_full_token=15897.45, available_bytes=100.00 GB, full_token=6754048",
        "DSV4 pool sizes: full=6754048, swa=675328, c4=1688512, c128=52766, c4_state=42208, c128_state=675328"]


def test_dsv4_speculative_rings_and_draft_share() -> None:
    """--speculative-num-steps: rings of 16 and 256 (mem_cache/deepseek_v4_memory_pool.py
    get_compress_state_ring_size, is_speculative) and bytes_per_full_token x (43 + 1) / 43 for the one-layer MTP
    draft (model_runner_components/pool_configurator.py at 29b719ba3a72, DSV4PoolConfigurator.__init__):
    (2,511.2 + 3,066 + 91.25 + 693 + 2 x (1,075.2 + 8,192 + 268.8)) x 44 / 43 = 25,433.45 x 44 / 43 = 5,595,359 / 215 B."""
    kv = kv_cache(load_spec("deepseek-v4-flash"), 1, tp=8)
    per = by_hand(43, 21, 20, 16, 256) * Fraction(44, 43)
    assert per == Fraction(2543345, 100) * Fraction(44, 43) == Fraction(5595359, 215)
    pool = kv_pool(kv, "sglang", 100 * GIB, 1_048_576, speculative_steps=3)
    assert pool.compressed is not None and pool.compressed.bytes_per_full_token == per
    full = int(100 * GIB / per) // 256 * 256
    swa = int(full * Fraction(1, 10)) // 256 * 256
    assert pool.compressed.sizes() == {"full": full, "swa": swa, "c4": full // 4, "c128": full // 128,
                                       "c4_state": swa // 128 * 16, "c128_state": swa // 128 * 256}
    with pytest.raises(GptcalcError, match="SGLang and TensorRT-LLM only"):
        kv_pool(kv_cache(load_spec("llama-3.1-8b"), 1), "vllm", GIB, 4096, speculative_steps=3)
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "100GiB", "--tp", "8",
                        "--seq", "1m", "--speculative-num-steps", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["engine"]["sglang_dsv4_pools"]["full"] == full


def test_dsv4_refusals() -> None:
    kv = kv_cache(load_spec("deepseek-v4-flash"), 1, tp=8)
    with pytest.raises(GptcalcError, match="multiple of 128"):
        kv_pool(kv, "sglang", GIB, 4096, 64)
    with pytest.raises(GptcalcError, match="sized per stage"):
        kv_pool(kv, "sglang", GIB, 4096, pp=2)


def test_dsv4_cli_answers_with_the_engine_lines() -> None:
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--budget", "8xH200", "--seq", "1m",
                        "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    pools = data["engine"]["sglang_dsv4_pools"]
    assert pools["bytes_per_full_token"] == "317949/20" and data["engine"]["tokens"] == pools["full"]
    assert any(line.startswith("DSV4 pool sizes: full=") for line in data["server_says"])


def test_minimax_m3_cell_and_pages() -> None:
    """tp 8: 4 KV heads of 128 become one per GPU; 60 layers x 2 x 128 x 2 B + 57 index keys x 128 x 2 B."""
    kv = kv_cache(load_spec(M3), 1, tp=8, dtype="bf16")
    cell = 60 * 2 * 1 * 128 * 2 + 57 * 128 * 2
    assert cell == 45_312
    memory = 4_397_407_160
    pool = kv_pool(kv, "sglang", memory, 131_072)
    assert (pool.block, pool.bytes_per_token, pool.tokens) == (128, cell, memory // cell // 128 * 128)
    # its buffers hold one page more than the pool; K is the main K and the index keys, V the main V
    rows = pool.tokens + 128
    k, v = rows * (60 * 256 + 57 * 256), rows * 60 * 256
    assert engine_lines(pool, kv, "sglang") == [
        f"KV Cache is allocated. #tokens: {pool.tokens}, K size: {k / GIB:.2f} GB, V size: {v / GIB:.2f} GB"]


@pytest.mark.parametrize(("capability", "index_bytes", "page"), [
    ((10, 0), 1, 128),  # B200: fp8_e4m3 + trtllm_mha (SGLang's pick there) on SM100: fp8 index keys
    ((9, 0), 2, 128),  # H100/H200: fa3, no fp8 attention GEMMs: the model's bf16
    ((12, 0), 2, 1),  # RTX PRO 6000 / RTX 5090: not datacenter Blackwell, no page override
])
def test_minimax_m3_fp8_cache_index_keys_by_card(capability: tuple[int, int], index_bytes: int, page: int) -> None:
    """--kv-dtype fp8 (fp8_e4m3): the main K and V in 1 B a value; the index keys fp8 only where SGLang's fp8
    attention GEMMs run (m3_fp8_attn_gemm_enabled: fp8_e4m3, trtllm_mha, SM100; model_overrides/minimax_m3.py
    at 1ee3fb2aa1 picks trtllm_mha on SM100 for an fp8_e4m3 cache), in bf16 elsewhere."""
    kv = kv_cache(load_spec(M3), 1, tp=8, dtype="fp8")
    cell = 60 * 2 * 1 * 128 * 1 + 57 * 128 * index_bytes
    pool = kv_pool(kv, "sglang", 40 * GIB, 131_072, capability=capability)
    assert (pool.bytes_per_token, pool.tokens) == (cell, 40 * GIB // cell // page * page)
    rows = pool.tokens + page
    k, v = rows * (60 * 128 + 57 * 128 * index_bytes), rows * 60 * 128
    assert engine_lines(pool, kv, "sglang") == [
        f"KV Cache is allocated. #tokens: {pool.tokens}, K size: {k / GIB:.2f} GB, V size: {v / GIB:.2f} GB"]
    # fp8_e5m2 never runs them in fp8; without a card the choice is refused
    e5m2 = kv_cache(load_spec(M3), 1, tp=8, dtype="fp8_e5m2")
    assert kv_pool(e5m2, "sglang", 40 * GIB, 131_072, capability=(10, 0)).bytes_per_token == 60 * 2 * 128 + 57 * 128 * 2
    with pytest.raises(GptcalcError, match="compute capability"):
        kv_pool(kv, "sglang", 40 * GIB, 131_072)


def test_minimax_m3_page_by_card() -> None:
    """SGLang sets --page-size 128 for MiniMax-M3 on SM90 (fa3) and SM100 (fa4, trtllm_mha) only
    (model_overrides/minimax_m3.py at 1ee3fb2aa1); an A100 (SM80) keeps its default page of 1 token."""
    kv = kv_cache(load_spec(M3), 1, tp=8, dtype="bf16")
    cell = 60 * 2 * 1 * 128 * 2 + 57 * 128 * 2
    memory = 4_397_407_160
    assert kv_pool(kv, "sglang", memory, 131_072, capability=(8, 0)).tokens == memory // cell
    for capability in ((9, 0), (10, 0)):
        assert kv_pool(kv, "sglang", memory, 131_072, capability=capability).tokens == memory // cell // 128 * 128


def test_minimax_m3_cli_answers() -> None:
    result = check_run(["memory", M3, "--engine", "sglang", "--kv-memory", "40GiB", "--seq", "128k", "--tp", "8"])
    assert result.exit_code == 0, result.stderr
    assert "#tokens: 947840," in result.stdout  # 42,949,672,960 // 45,312 = 947,865: 7,405 pages of 128


def test_prefill_graph_capture_sizes() -> None:
    """generate_prefill_cuda_graph_batch_sizes (sglang a82da8da arg_groups/cuda_graph_hook.py): 4..32 by 4 (8),
    48..256 by 16 (14), 288..512 by 32 (8), 576..1024 by 64 (8), 1280..4096 by 256 (12), 4608.. by 512."""
    assert len(capture_sizes(8192)) == 8 + 14 + 8 + 8 + 12 + 8 == 58
    assert len(capture_sizes(16384)) == 50 + 24 and len(capture_sizes(2048)) == 8 + 14 + 8 + 8 + 4


@pytest.mark.parametrize(("model", "pp", "mib"), [
    ("llama-3.1-8b", 1, 58 * 8),  # breakable prefill graphs on: 8 MiB of non-torch memory per size
    ("deepseek-v3", 1, 1536),  # MLA: 1.5 GiB ("MLA backend overhead is much higher than expected with fa3")
    ("deepseek-v4-flash", 1, 0),  # disable_breakable_cudagraph_if_incompatible: DeepSeek-V4
    ("llama-3.1-8b", 2, 0),  # apply_cuda_graph_compatibility: off under pipeline parallelism by default
    ("gemma-3-27b", 1, 0),  # multimodal and on neither allowlist
    # Qwen3.5 is on multimodal_breakable_cuda_graph_supported_model_archs (sgl-project/sglang#30872): 58 x 8 MiB
    ("tests/configs/model_types/qwen3_5.json", 1, 58 * 8),
    ("qwen3.5-397b-a17b", 1, 58 * 8),
    # MiniMax-M3 is on the tc_piecewise list only; the breakable default turns them off ("multimodal model")
    (M3, 1, 0),
])
def test_prefill_graph_reserve(model: str, pp: int, mib: int) -> None:
    spec = load_spec(model)
    assert prefill_graph_reserve(spec, 8192, pp)[0] == mib


def test_prefill_graph_allowlists_are_the_readers() -> None:
    """The allowlists are what each tower reader states (ModelSpec.sglang), none for a text-only model."""
    assert load_spec("tests/configs/model_types/qwen3_5_moe.json").sglang.prefill_graph_allowlists == ("breakable",)
    assert load_spec(M3).sglang.prefill_graph_allowlists == ("tc_piecewise",)
    assert load_spec("tests/configs/model_types/mamba2.json").sglang.prefill_graph_allowlists == ()
    reason = prefill_graph_reserve(load_spec(M3), 8192, 1)[1]
    assert "listed for tc_piecewise only" in reason
    # a multimodal config whose towers gptcalc does not read (Cohere2-Vision's) is multimodal to SGLang all the same
    unread = load_spec("gemma-3-27b").replaced(towers={}, uncounted=("vision encoder and projector",))
    assert prefill_graph_reserve(unread, 8192, 1)[0] == 0


def test_default_fraction_holds_the_prefill_graphs() -> None:
    """H100 (81,559 MiB, tp 1): 512 + 8,192 x 1.5 + 1 / 8 x 1,024 + 2 x 256 + 464 = 13,904 MiB reserved."""
    assert sglang_fraction(81559, 1, 1, prefill_graphs=464) == (round((81559 - 13904) / 81559, 3), 13904)
    result = check_run(["memory", "llama-3.1-8b", "--engine", "sglang", "--budget", "H100", "--json"])
    assert json.loads(result.stdout)["engine_budget"]["fraction"] == 0.83


def test_attention_free_mamba2_pool() -> None:
    """Codestral-Mamba (tests/configs/model_types/mamba2.json: 64 layers, intermediate 8,192, n_groups 8,
    state 128, 128 heads of 64, conv kernel 4) under tp 8, each figure from the config by hand. SGLang serves
    it (models/mamba2.py at 62daa562fb1a) with a cell size of 0, so its token pool is the context's slots
    (DefaultPoolConfigurator._zero_kv_max_tokens) and its states' pool is carved as a hybrid's
    (model_runner_kv_cache_mixin.py handle_max_mamba_cache at 226149ac457b): conv states bf16, SSM fp32."""
    conv = (8192 + 2 * 8 * 128) // 8 * (4 - 1) * 2  # Mamba2CacheParams.shape: conv_dim / tp x (kernel - 1), bf16
    ssm = 128 // 8 * 64 * 128 * 4  # (heads / tp, head_dim, state_size), fp32
    per_request = 64 * (conv + ssm)
    assert per_request == 34_045_952
    kv = kv_cache(load_spec("tests/configs/model_types/mamba2.json"), 32768, tp=8)
    memory = 100 * GIB
    pool = kv_pool(kv, "sglang", memory, 32768)
    slots = int(memory * 0.9 / 1.9 // per_request)
    assert pool.mamba is not None and pool.mamba.slots == slots == 1493
    assert pool.tokens == 32768 and pool.requests == 1  # the context's slots: one request of the whole context
    assert engine_lines(pool, kv, "sglang") == [
        f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, conv_state size: "
        f"{(slots + 1) * 64 * conv / GIB:.2f}GB, ssm_state size: {(slots + 1) * 64 * ssm / GIB:.2f}GB"]


def test_attention_free_cli_answers() -> None:
    result = check_run(["memory", "tests/configs/model_types/mamba2.json", "--engine", "sglang", "--budget", "8xH200",
                        "--seq", "32k", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["server_says"][-1].startswith("Mamba Cache is allocated. max_mamba_cache_size: ")


def test_fit_takes_the_speculative_pools() -> None:
    """`fit --speculative-num-steps`: each candidate's pool is the speculative one from its own KV memory."""
    result = check_run(["fit", "deepseek-v4-flash", "--seq", "1m", "--engine", "sglang", "--gpus", "H200", "--top", "1",
                        "--speculative-num-steps", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    best = json.loads(result.stdout)["candidates"][0]
    per = by_hand(43, 21, 20, 16, 256) * Fraction(44, 43)
    assert best["tokens"] == int(best["kv_memory_bytes"] / per) // 256 * 256


def test_dsv4_pipeline_stages_price_their_slice_and_keep_the_least_full() -> None:
    """--pp 2: SGLang's get_pp_indices gives 43 layers as 21 + 22 (the extra layer to the last stage; vLLM's split
    would be 22 + 21). compress_ratios[0:21] = 0, 0, then 4 / 128 alternating: 10 fours and 9 x 128;
    [21:43] = 128, 4, ..., 128, 4: 11 of each. With --kv-memory each stage has that memory, so the second, dearer
    stage binds, and every pool is sized from its full."""
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "100GiB", "--tp", "4",
                        "--pp", "2", "--seq", "1m", "--json"])
    assert result.exit_code == 0, result.stderr
    pools = json.loads(result.stdout)["engine"]["sglang_dsv4_pools"]
    first, second = by_hand(21, 10, 9), by_hand(22, 11, 11)
    fulls = [int(100 * GIB / per) // 256 * 256 for per in (first, second)]
    assert [(s["layers"], s["bytes_per_full_token"], s["full"]) for s in pools["pp_stages"]] == [
        (21, str(first), fulls[0]), (22, str(second), fulls[1])]
    full = min(fulls)
    swa = int(full * Fraction(1, 10)) // 256 * 256
    assert (pools["full"], pools["swa"], pools["c4"], pools["c128"]) == (full, swa, full // 4, full // 128)


def test_dsv4_pipeline_stages_take_their_own_memory_from_the_budget() -> None:
    """With --budget each stage's memory is the pool less its own weights; the least full over the stages wins."""
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--budget", "8xH200", "--tp", "4",
                        "--pp", "2", "--seq", "1m", "--json"])
    assert result.exit_code == 0, result.stderr
    pools = json.loads(result.stdout)["engine"]["sglang_dsv4_pools"]
    stages = pools["pp_stages"]
    assert stages[0]["kv_memory_bytes"] != stages[1]["kv_memory_bytes"]
    fulls = [int(s["kv_memory_bytes"] / per) // 256 * 256 for s, per in zip(stages, (by_hand(21, 10, 9),
                                                                                     by_hand(22, 11, 11)))]
    assert [s["full"] for s in stages] == fulls and pools["full"] == min(fulls)
    refused = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "100GiB", "--tp", "4",
                         "--pp", "2", "--speculative-num-steps", "1"])
    assert refused.exit_code == 2 and "PP is not compatible with MTP models" in refused.stderr


def test_fit_sizes_dsv4_pipeline_layouts_as_memory_does() -> None:
    """`fit` takes SGLang's stages too: its tp 8 x pp 2 candidate on H200s holds the tokens `memory` gives for that
    layout (each stage's own slice and memory, the least full)."""
    result = check_run(["fit", "deepseek-v4-flash", "--seq", "1m", "--engine", "sglang", "--gpus", "H200", "--top",
                        "60", "--json"])
    assert result.exit_code == 0, result.stderr
    staged = next(c for c in json.loads(result.stdout)["candidates"] if (c["tp"], c["pp"], c["ep"]) == (8, 2, 1))
    data = json.loads(check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--budget", "16xH200", "--tp",
                                 "8", "--pp", "2", "--seq", "1m", "--json"]).stdout)
    pools = data["engine"]["sglang_dsv4_pools"]
    assert staged["tokens"] == pools["full"] == min(s["full"] for s in pools["pp_stages"])
