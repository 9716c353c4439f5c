"""The engine's own memory budget (calc/analysis/memory/startup.py) against published start-up logs,
kept verbatim with their URLs under tests/data/engine_logs/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory.gpus import find_gpu
from calc.analysis.memory.startup import sglang_fraction, vllm_batch_defaults
from calc.cli import main

LOGS = Path(__file__).parent / "data" / "engine_logs"


def logged(name: str, label: str) -> str:
    """A figure a log prints after `label` (the log file is the published excerpt, verbatim)."""
    text = (LOGS / name).read_text()
    return re.search(re.escape(label) + r"\s*([\d.,]*\d)", text).group(1)  # type: ignore[union-attr]


def memory(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["memory", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


PR10511 = "vllm-pr10511-llama3-8b-h100.log"


def test_vllm_terms_from_the_log_give_its_pool() -> None:
    """Meta-Llama-3-8B on one H100: the log's own activation peak and non-torch memory (this vLLM
    predates the CUDA graph estimate) leave exactly the pool it printed, and our weights are its weights."""
    data = memory("llama-3-8b", "--engine", "vllm", "--budget", "H100", "--seq", "8192",
                  "--activation-memory", logged(PR10511, "PyTorch activation peak memory") + "GiB",
                  "--non-torch-memory", logged(PR10511, "non_torch_memory") + "GiB", "--cuda-graph-memory", "0GiB")
    assert f"Available KV cache memory: {logged(PR10511, 'available_kv_cache_memory')} GiB" in data["server_says"]
    assert f"Model loading took {logged(PR10511, 'model weights take')} GiB memory" in data["server_says"]
    # 79.22 GiB x 0.9 = 71.298: the log's 71.29 is the same product of its unrounded total
    assert abs(data["engine_budget"]["usable_bytes"] / 2**30 - float(logged(PR10511, "the current vLLM instance can use"))) <= 0.01


def test_vllm_defaults_within_one_percent_of_the_log() -> None:
    """No figure from the log: the estimated activation peak, the stated non-torch memory and CUDA graphs
    leave a pool within 1% of the 53.29 GiB vLLM found."""
    pool = memory("llama-3-8b", "--engine", "vllm", "--budget", "H100", "--seq", "8192")["engine_budget"]
    published = float(logged(PR10511, "available_kv_cache_memory")) * 2**30
    assert abs(pool["kv_memory_bytes"] - published) / published < 0.01
    assert {t["key"]: t["how"] for t in pool["terms"]} == {"weights": "exact", "activation": "estimate",
                                                           "non_torch": "estimate", "cuda_graphs": "estimate"}


def test_sglang_default_fraction_rule() -> None:
    """source: sglang/srt/arg_groups/memory_hook.py (v0.5.23): an H100 (81,559 MiB) at tp 1 takes chunked
    prefill 8192 and decode graphs up to 256: reserved = 512 + 8192 x 1.5 + 1 x 1 / 8 x 1024 + 2 x 256 =
    13,440 MiB (over the 10,240 floor), fraction = round((81559 - 13440) / 81559, 3) = 0.835."""
    assert sglang_fraction(find_gpu("H100").mib, 1, 1) == (0.835, 13440)  # type: ignore[union-attr]
    # An RTX 4090 (24,564 MiB): chunk 4096, graphs to 48: 512 + 6144 + 128 + 96 = 6,880 MiB, no floor.
    assert sglang_fraction(find_gpu("4090").mib, 1, 1) == (round((24564 - 6880) / 24564, 3), 6880)  # type: ignore[union-attr]


def test_vllm_serve_batch_defaults_by_card() -> None:
    """source: vllm/engine/arg_utils.py get_batch_defaults (v0.32), OPENAI_API_SERVER column."""
    assert vllm_batch_defaults(80 * 2**30) == (8192, 1024)
    assert vllm_batch_defaults(180 * 2**30) == (16384, 1024)
    assert vllm_batch_defaults(24 * 2**30) == (2048, 256)


@pytest.mark.parametrize("args, message", [
    (["--budget", "RTX-4090", "--tp", "1"], "nothing left for the KV cache on RTX 4090"),
    (["--budget", "H100", "--activation-memory", "lots"], "--activation-memory"),
])
def test_engine_budget_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["memory", "llama-2-70b", "--engine", "vllm", *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output, result.output


def recorded() -> list[str]:
    """The configs a real vLLM sized (tests/conformance/record_vllm_cpu.py kept its lines)."""
    return sorted(p.name[len("vllm-cpu-"):-len(".log")] for p in LOGS.glob("vllm-cpu-*.log"))


@pytest.mark.parametrize("name", recorded())
def test_real_vllm_cpu_blocks_tokens_concurrency(name: str) -> None:
    """A real vLLM (vllm-cpu, its lines kept verbatim) on a shrunk config of each layer kind, with a
    pool of exactly kv_cache_memory_bytes: the same page size, blocks, printed tokens and concurrency.
    On CPU attention pages hold 128 tokens, max_num_batched_tokens is max(max_model_len, 4096) unless the
    recording set it (its "non-default args" line says so, as it says enable_prefix_caching False), and
    with AVX-512 bf16 the SSM state is kept in fp32, which the log says (vllm/platforms/cpu.py); the
    reference CPU_MLA backend (no AMX) forces 16-token pages, its decode kernel's only block size
    (vllm/platforms/cpu.py check_and_update_config, v1/attention/backends/mla/cpu_mla.py)."""
    from calc.analysis.memory import kv_cache, kv_pool
    from calc.spec.load import load_spec

    log = (LOGS / f"vllm-cpu-{name}.log").read_text()
    block = 16 if "Using CPU_MLA backend." in log else 128
    args = re.search(r"non-default args: (\{.*\})", log).group(1)  # type: ignore[union-attr]
    pool_bytes = int(re.search(r"'kv_cache_memory_bytes': (\d+)", args).group(1))  # type: ignore[union-attr]
    max_len = int(re.search(r"'max_model_len': (\d+)", args).group(1))  # type: ignore[union-attr]
    batched = re.search(r"'max_num_batched_tokens': (\d+)", args)  # a recording's own, else the CPU default
    prefix_caching = "'enable_prefix_caching': False" not in args  # vLLM's default for a model with attention
    real = json.loads(log.split("RESULT ", 1)[1])
    kv = kv_cache(load_spec(str(LOGS / f"vllm-cpu-{name}.config.json")), max_len, dtype="bf16")
    ssm_bytes = 4 if "Reset SSM cache type to float32" in log else 2
    # vLLM's CPU platform turns async scheduling off (platforms/cpu.py:330-331): one batch in flight
    pool = kv_pool(kv, "vllm", pool_bytes, max_len, block=block,
                   max_batched=int(batched.group(1)) if batched else max(max_len, 4096), ssm_bytes=ssm_bytes,
                   async_scheduling=False, prefix_caching=prefix_caching)
    pages = {group["page_size_bytes"] for group in real["groups"]}
    assert pool.block_bytes // (pool.hybrid.group_size if pool.hybrid else kv.n_layers) in pages
    assert (pool.blocks, pool.printed_tokens, pool.concurrency) == (
        real["num_blocks"], real["kv_cache_size_tokens"], f"{real['max_concurrency']:.2f}")
    printed = re.search(r"CPU KV cache size: .*", log).group(0)  # type: ignore[union-attr]
    assert printed == (f"CPU KV cache size: {pool.printed_tokens:,} tokens, Maximum concurrency for {max_len:,} "
                       f"tokens per request: {pool.concurrency}x")


def weighed() -> list[str]:
    """The recorded configs whose log weighs what vLLM loaded (its RESULT line's "weights"."loaded")."""
    return [name for name in recorded() if '"weights": {"loaded": ' in (LOGS / f"vllm-cpu-{name}.log").read_text()]


@pytest.mark.parametrize("name", weighed())
def test_real_vllm_cpu_weights(name: str) -> None:
    """The bytes of the parameters a real vLLM loaded (dummy weights, before the CPU build packs its linear
    layers for oneDNN) are gptcalc's engine weights: the checkpoint's tensors plus the vocabulary padded to a
    multiple of 64 (the MLA config's vocabulary of 1,000 becomes 1,024 rows of embedding and head), and the
    Mamba2 / gated DeltaNet decay A in fp32 (2 B more per value: 128 B for the Mamba2 config's 4 layers x 16
    heads), and Gemma-3n's AltUp output scale in fp32 too (models/gemma3n.py:122-124: 15,360 B more for its
    config's 15 layers x 512). MLA's W_UK_T / W_UV of a 16-bit kv_b_proj are views of it, no copy
    (mla_attention.py split_kv_b_proj). Beside them, the rotary cos/sin table its layers share, which vLLM
    measures with the weights: 4,096 x 40 YaRN positions x 64 x 2 B for the MLA config, 8,192 x 64 x 2 B for
    Llama's and LFM2's, 8,192 x 32 (a quarter of 128) x 2 B for Qwen3-Next's, 32,768 x 64 x 2 B for Mistral's,
    two such for Gemma-3n's (its local and global rope bases), Zamba2's shared attention's one; none without rotary (Mamba2, Nemotron-H) nor for OLMo-3, which vLLM runs
    through its Transformers backend."""
    config = str(LOGS / f"vllm-cpu-{name}.config.json")
    held = json.loads((LOGS / f"vllm-cpu-{name}.log").read_text().split("RESULT ", 1)[1])["weights"]
    term = memory(config, "--engine", "vllm", "--budget", "H100", "--dtype", "bf16", "--seq", "4096")[
        "engine_budget"]["terms"][0]
    assert term["key"] == "weights" and term["bytes"] == held["loaded"] + held["rope"]
    assert ("rotary cos/sin cache" in term["source"]) == (held["rope"] > 0)
    assert held["mla_copy"] == 0 and "W_UK/W_UV" not in term["source"]


def test_rope_table_is_whole_on_every_gpu() -> None:
    """The table is not split by tensor parallelism: Llama-3.1-8B's engine weights at TP 2 hold it whole
    (131,072 x 128 x 2 B) beside half the checkpoint."""
    term = memory("llama-3.1-8b", "--engine", "vllm", "--budget", "2xH100", "--tp", "2", "--seq", "8192")[
        "engine_budget"]["terms"][0]
    plain = memory("llama-3.1-8b", "--seq", "8192", "--tp", "2")["weights"]["total_bytes"]
    assert term["bytes"] == plain + 131072 * 128 * 2
    assert "33,554,432 B of rotary cos/sin cache" in term["source"]


PR11309 = (LOGS / "sglang-pr11309-deepseek-v32-exp-8xb200.log").read_text()


def test_sglang_dsa_cell_is_656_latent_and_132_indexer_bytes() -> None:
    """DeepSeek-V3.2 in SGLang with its fp8 cache: 656 B of latent (512 fp8 + 4 scales of 4 B + 64 bf16
    rope) and 132 B of indexer key (128 fp8 + one 4 B scale) per token per layer, 61 layers, whole on
    every GPU, pages of 64 tokens. The pool of the PR's 975,424 tokens is the 43.67 GB it printed; the
    cell without the indexer (656 B) gives the 54.52 GB the PR's 'before' line printed for 1,462,784."""
    from calc.analysis.memory import kv_cache, kv_pool, engine_lines
    from calc.analysis.memory.engines import dsa_row_bytes
    from calc.spec.load import load_spec

    kv = kv_cache(load_spec("tests/configs/model_types/deepseek_v32.json"), 4096, dtype="fp8_e4m3")
    rows = {kind.kind: dsa_row_bytes(kind, kv) for kind in kv.layers}
    assert rows == {"MLA": 656, "DSA indexer": 132}
    tokens = int(re.search(r"#tokens: (\d+), KV size: 43.67 GB", PR11309).group(1))  # type: ignore[union-attr]
    pool = kv_pool(kv, "sglang", tokens * 61 * (656 + 132), 4096)
    assert f"KV Cache is allocated. #tokens: {tokens}, KV size: 43.67 GB" in engine_lines(pool, kv, "sglang")
    # its buffers hold one page (64 tokens for DSA) more than the pool
    assert f"{(1462784 + 64) * 61 * 656 / 2**30:.2f}" == "54.52" and "#tokens: 1462784, KV size: 54.52 GB" in PR11309
    assert pool.block == 64 and kv_pool(kv, "sglang", tokens * 61 * (656 + 132) + 63 * 61 * 788, 4096).tokens == tokens
    # a 16-bit cache keeps the latent as 576 bf16 values; the indexer key stays fp8
    bf16 = kv_cache(load_spec("tests/configs/model_types/deepseek_v32.json"), 4096, dtype="bf16")
    assert {kind.kind: dsa_row_bytes(kind, bf16) for kind in bf16.layers} == {"MLA": 1152, "DSA indexer": 132}


def test_sglang_separate_mamba_pool() -> None:
    """SGLang carves the states' pool first: 0.9 / 1.9 of the memory, max_mamba_cache_size = floor(that /
    one slot); conv states bf16, SSM states fp32; the token pool takes the memory less those slots (source:
    sglang 226149ac model_executor/model_runner_kv_cache_mixin.py handle_max_mamba_cache, ratio-based branch)."""
    from calc.analysis.memory import kv_cache, kv_pool
    from calc.spec.load import load_spec

    kv = kv_cache(load_spec("tests/configs/model_types/bamba.json"), 4096)
    conv = sum(s.n_layers * s.elements for s in kv.states if s.name == "conv") * 2
    ssm = sum(s.n_layers * s.elements for s in kv.states if s.name != "conv") * 4
    memory = 40 * 2**30
    slots = int(memory * 0.9 / 1.9 // (conv + ssm))
    pool = kv_pool(kv, "sglang", memory, 4096)
    assert pool.mamba is not None and pool.mamba.slots == slots
    assert pool.tokens == (memory - slots * (conv + ssm)) // kv.bytes_per_token
    # no more running requests than a third of the slots (init_memory_pool: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)
    assert pool.requests == min(pool.tokens // 4096, slots // 3)


def test_trtllm_pool_is_its_fraction_of_what_profiling_leaves() -> None:
    """source: TensorRT-LLM tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator._cal_max_memory at 28295084972c:
    available_kv_mem = (total_gpu_memory - peak_memory + temporary kv) x fraction, fraction 0.9 unless set
    (llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction). With the peak's terms given, the pool is
    that product exactly; the weights are llama-3-8b's 16,060,522,496 B (test_count's arithmetic x 2 B). The
    line is that function's logger.info: the peak (with the temporary cache T in it), "kv size per token is"
    a CacheCost, whose __str__ is "{slope} bytes/token" without a fixed cost, and T apart."""
    data = memory("llama-3-8b", "--engine", "trtllm", "--budget", "H100", "--seq", "8192",
                  "--activation-memory", "2GiB", "--non-torch-memory", "1GiB")
    total = data["engine_budget"]["total_bytes"]  # 79.22 GiB, what CUDA reports on an H100 (startup.CUDA_TOTAL)
    peak = 16_060_522_496 + 3 * 2**30
    assert data["engine_budget"]["kv_memory_bytes"] == int((total - peak) * 0.9)
    assert data["server_says"][0] == (
        f"Peak memory during memory usage profiling (torch + non-torch): {peak / 2**30:.2f} GiB + T, available KV cache "
        f"memory when calculating max tokens: {int((total - peak) * 0.9) / 2**30:.2f} GiB, fraction is set 0.9, kv size "
        f"per token is 131072 bytes/token. device total memory {total / 2**30:.2f} GiB, temporary kv cache memory during "
        "profiling T GiB (T: the profiling run's temporary KV cache, not modelled; it cancels out of the pool)")
    halved = memory("llama-3-8b", "--engine", "trtllm", "--budget", "H100", "--seq", "8192", "--activation-memory",
                    "2GiB", "--non-torch-memory", "1GiB", "--free-gpu-memory-fraction", "0.5")["engine_budget"]
    assert halved["kv_memory_bytes"] == int((total - peak) * 0.5) and halved["fraction_how"] == "given"


def test_trtllm_says_the_weights_alone_exceed_the_card() -> None:
    """TensorRT-LLM takes its fraction of what the profiling peak leaves (test above), so a peak over the card
    leaves a negative remainder: the refusal names what fills the card instead. Llama-2-70B's 68,976,648,192
    parameters (transformers' meta model) x 2 B = 128.48 GiB; an RTX 4090 reports 24,564 MiB = 23.99 GiB
    (its catalog row). Llama-3-8B's 16,060,522,496 B with a given 9 GiB activation peak and 0.5 GiB of
    non-torch memory make 24.46 GiB, over the 4090's whole memory though the weights alone fit."""
    result = CliRunner().invoke(main, ["memory", "llama-2-70b", "--engine", "trtllm", "--budget", "RTX-4090"])
    assert result.exit_code == 2 and result.output == (
        "Error: --engine trtllm: nothing left for the KV cache on RTX 4090: the weights alone, 128.48 GiB a GPU, "
        "exceed the 23.99 GiB it has (try more GPUs or --tp)\n")
    peak = 16_060_522_496 + 9 * 2**30 + 2**29
    result = CliRunner().invoke(main, ["memory", "llama-3-8b", "--engine", "trtllm", "--budget", "RTX-4090",
                                       "--activation-memory", "9GiB", "--non-torch-memory", "0.5GiB"])
    assert f"model weights + activation peak + non-torch memory, {peak / 2**30:.2f} GiB, exceed the 23.99 GiB" \
        in result.output and result.exit_code == 2, result.output


def test_trtllm_prints_its_blocks_of_32_tokens() -> None:
    """source: cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (allocatePools): "Number of tokens per block:
    %d." and "[MemUsageChange] Allocated %0.2f GiB for max tokens in paged KV cache (%d).", tokens = blocks x 32.
    Qwen2.5-1.5B keeps 28 layers x 2 KV heads x 128 x (K + V) x 2 B = 28,672 B per token; a pool of exactly
    8,556 blocks of 32 such tokens prints 8,556 x 32 x 28,672 B = 7.31 GiB and 273,792 tokens."""
    pool = 8556 * 32 * 28672
    data = memory("qwen2.5-1.5b", "--engine", "trtllm", "--kv-memory", str(pool + 32 * 28672 - 1))
    assert data["server_says"] == ["Number of tokens per block: 32.",
                                   "[MemUsageChange] Allocated 7.31 GiB for max tokens in paged KV cache (273792)."]


def test_vllm_holds_a_16_bit_copy_of_a_quantised_mla_kv_b() -> None:
    """source: vllm/v1/attention/backends/mla/common.py process_weights_after_loading: a quantised kv_b_proj
    is dequantised (an identity through its quant method) into W_UK_T and W_UV, views of one 16-bit tensor that
    stays beside the fp8 kv_b_proj prefill uses; an unquantised kv_b_proj is viewed, not copied. DeepSeek-V3
    on 8 GPUs: 61 layers x 512 (kv_lora_rank) x 128 / 8 heads x (128 + 128) x 2 B = 255,852,544 B per GPU, beside
    the YaRN cos/sin table every GPU keeps whole: 4,096 (original_max_position_embeddings) x 40 (factor) positions
    x 64 (qk_rope_head_dim) x 2 B (deepseek-ai/DeepSeek-V3 config.json)."""
    def weights(*extra: str) -> dict:  # type: ignore[type-arg]
        return memory("deepseek-v3", "--engine", "vllm", "--budget", "8xH200", "--seq", "8192", *extra)[
            "engine_budget"]["terms"][0]

    stored = weights()
    assert "255,852,544 B of MLA's dequantised W_UK/W_UV copy" in stored["source"]
    plain = memory("deepseek-v3", "--seq", "8192", "--tp", "8")["weights"]["total_bytes"]
    assert stored["bytes"] == plain + 61 * 512 * 16 * 256 * 2 + 4096 * 40 * 64 * 2
    assert "W_UK/W_UV" not in weights("--budget", "8xB200", "--dtype", "bf16")["source"]


def test_vllm_pads_mxfp4_experts_for_its_kernel() -> None:
    """source: vllm/model_executor/layers/quantization/mxfp4.py: Marlin (an A100, no FP4 tensor cores) pads each
    expert's intermediate size to a multiple of 128 and the hidden size to 256; SM90's Triton kernels pad the
    intermediate size to 64, which 2,880 already is. gpt-oss-120b, 36 layers x 128 experts of 2,880 x 2,880: one
    expert as vLLM allocates it (4-bit values, a u8 scale per 32, bf16 biases) is 2 x 2,880 x (1,440 + 90 + 2) +
    2,880 x (1,440 + 90 + 2) = 13,236,480 B, padded to 2,944 x 3,072 it is 2 x 2,944 x (1,536 + 96 + 2) + 3,072 x
    (1,472 + 92 + 2) = 14,431,744 B. Every card also keeps the YaRN cos/sin table, fp32 as gpt_oss.py asks
    get_rope for it: 4,096 (original_max_position_embeddings) x 32 (factor) positions x 64 (head_dim) x 4 B
    (openai/gpt-oss-120b config.json)."""
    rope = 4096 * 32 * 64 * 4

    def loaded(gpu: str) -> int:
        return memory("gpt-oss-120b", "--engine", "vllm", "--budget", gpu, "--seq", "8192")["engine_budget"][
            "terms"][0]["bytes"]

    stored = memory("gpt-oss-120b", "--seq", "8192")["weights"]["total_bytes"]
    assert loaded("A100-80GB") - stored - rope == 36 * 128 * (14_431_744 - 13_236_480)
    assert loaded("H100") == stored + rope
    # the issue that asked for this quotes vLLM's "Model loading took 65.97 GiB" on Marlin: 0.1% above this figure
    assert abs(loaded("A100-80GB") / 2**30 - 65.97) / 65.97 < 0.002


# SGLang sizes its pool from the free memory it measured before loading (source: python/sglang/srt/model_executor/
# model_runner_kv_cache_mixin.py, profile_max_num_token, lines 111-144 at 226149ac457bd1a1b5d450f55c01f72f604320d6):
#   tokens = int((free after loading - free before loading x (1 - mem_fraction_static)) GiB) // cell
DOCS_LLAMA = "sglang-docs-llama31-8b-h100.log"
QWEN3_14B = "sglang-xinference3481-qwen3-14b.log"


def sglang_says(data: dict, label: str) -> float:  # type: ignore[type-arg]
    """A figure gptcalc prints among SGLang's lines, after `label`."""
    found = re.search(re.escape(label) + r"=?\s*([\d.]+)", " ".join(data["server_says"]))
    return float(found.group(1))  # type: ignore[union-attr]


def test_sglang_default_terms_match_its_documented_log() -> None:
    """Llama-3.1-8B-Instruct on one 80 GB GPU (SGLang's own documentation, mem_fraction_static 0.88): what is in
    use before loading defaults to this log's 79.22 - 78.81 = 0.41 GiB (so that line is reproduced, not
    predicted); the weights (16,060,522,496 B checkpoint + 131,072 x 128 x 4 B of fp32 rotary table) come
    within 0.1 GiB of the 78.81 - 63.72 = 15.09 GB loading took; the pool within 0.5% of its 444,500 tokens."""
    data = memory("llama-3.1-8b", "--engine", "sglang", "--budget", "H100", "--mem-fraction-static", "0.88",
                  "--seq", "8192")
    before, after = float(logged(DOCS_LLAMA, "Load weight begin. avail mem=")), 63.72
    assert "avail mem=63.72 GB" in (LOGS / DOCS_LLAMA).read_text()
    assert sglang_says(data, "Load weight begin. avail mem") == before
    assert abs(sglang_says(data, "Load weight end. mem usage") - (before - after)) < 0.1
    published = int(logged(DOCS_LLAMA, "max_total_num_tokens="))
    assert abs(data["engine"]["tokens"] - published) / published < 0.005


def test_sglang_pool_from_the_free_memory_before_loading() -> None:
    """Qwen3-14B on one GPU, xinference#3481: free before loading = 19.67 + 27.57 = 47.24 GB (after loading plus
    what loading took), fraction 0.88. Given that free memory as the card (nothing in use before), our weights
    (29,536,614,400 B + 40,960 x 128 x 4 B of rotary table) come within 0.1 GiB of its 27.57 GB and the
    pool within 0.5% of its 91,749 tokens (40 layers x 8 KV heads x 128 x 2 x 2 B = 163,840 B a token)."""
    data = memory("qwen3-14b", "--engine", "sglang", "--budget", "47.24GiB", "--non-torch-memory", "0GiB",
                  "--mem-fraction-static", "0.88", "--seq", "4096")
    assert data["engine"]["bytes_per_token"] == 40 * 8 * 128 * 2 * 2
    assert abs(sglang_says(data, "Load weight end. mem usage") - float(logged(QWEN3_14B, "mem usage="))) < 0.1
    published = int(logged(QWEN3_14B, "#tokens:"))
    assert abs(data["engine"]["tokens"] - published) / published < 0.005


def test_sglang_rope_table_is_fp32_and_preload_counts_the_groups() -> None:
    """SGLang keeps the cos/sin table fp32 on CUDA (python/sglang/srt/layers/rotary_embedding.py at
    ed0774f90abed3c89cbff4108683f73881a2e853, RotaryEmbedding.__init__): Llama-3.1-8B's 131,072 positions x
    128 x 4 B. Before loading, a GPU of a group also holds its process groups' buffers: the most any rank of
    sglang#11716 took, 2.01 GB; one GPU builds none (sglang#9574: 0.00 GB)."""
    from calc.analysis.memory.rope_cache import sglang_rope_cache, vllm_rope_cache
    from calc.analysis.memory.startup import sglang_preload
    from calc.spec.load import load_spec

    spec = load_spec("llama-3.1-8b")
    assert sglang_rope_cache(spec) == 131072 * 128 * 4 == 2 * vllm_rope_cache(spec, 2)
    groups = (LOGS / "sglang-pr11716-llama70b-8xh200.log").read_text()
    most = max(float(x) for x in re.findall(r"Init torch distributed ends\. mem usage=([\d.]+) GB", groups))
    assert most == 2.01 and "mem usage=0.00 GB" in groups
    assert abs(sglang_preload(4, 1) - sglang_preload(1, 1) - most * 2**30) <= 1
    assert sglang_preload(1, 2) == sglang_preload(8, 1)  # pipeline stages are a group too


def test_sglang_qwen3_235b_tp4_within_the_term_its_log_omits() -> None:
    """vllm#21348 prints only SGLang's pool line (Qwen3-235B-A22B-FP8, 4 x H100, --mem-fraction-static 0.93):
    367,404 tokens of 94 x 2 x 128 x 2 B. The defaults (in use before loading 0.41 + 2.01 GiB) give 1.1% fewer;
    the log does not print its 'Load weight begin. avail mem', and the 77.00 GB it implies (2.22 GiB in use,
    between one GPU's 0.41 and the 2.42 of sglang#11716) reproduces it to the token's rounding."""
    issue = (LOGS / "vllm-issue21348-qwen3-235b-fp8-4xh100.log").read_text()
    published = int(re.search(r"#tokens: (\d+)", issue).group(1))  # type: ignore[union-attr]
    args = ["qwen3-235b-a22b", "--quant", "fp8-block", "--engine", "sglang", "--budget", "4xH100",
            "--mem-fraction-static", "0.93", "--seq", "8192"]
    default = memory(*args)["engine"]["tokens"]
    assert 0.985 < default / published < 0.99
    implied = memory(*args, "--non-torch-memory", f"{79.22 - 77.00:.2f}GiB")
    assert sglang_says(implied, "Load weight begin. avail mem") == 77.00
    assert abs(implied["engine"]["tokens"] - published) / published < 0.0005


def test_sglang_default_fraction_on_eight_h200() -> None:
    """sglang#11716: 8 x H200 at tp 8, SGLang's default fraction (no --mem-fraction-static), a model of Llama-3.1-70B's
    shape (80 layers x 8 KV heads of 128: one head a GPU, 80 x 128 x 2 x 2 B = 40,960 B a token). The rule gives
    round((143,771 - 14,848) / 143,771, 3) = 0.897 (reserved 512 + 8,192 x 1.5 + 8 / 8 x 1,024 + 2 x 512 MiB, of
    nvidia-smi's 143,771 MiB). Of the 139.81 GiB CUDA reports for an H200 (startup.CUDA_TOTAL), the defaults put
    0.41 + 2.01 GiB in use before loading (137.39 GB free) and land within 0.15% of its 2,795,207 tokens; with the
    log's own 137.29 GB free (the rest given as in use), within 0.1%. The log (2025-10-16) predates SGLang's
    prefill CUDA graphs by default: today's rule (a82da8da) also reserves 58 graph sizes x 8 MiB = 464 MiB
    for them, 0.893, which lands within 0.5% of the log."""
    text = (LOGS / "sglang-pr11716-llama70b-8xh200.log").read_text()
    free = min(float(x) for x in re.findall(r"TP\d\] Load weight begin\. avail mem=([\d.]+) GB", text))
    assert free == 137.29
    published = int(re.search(r"#tokens: (\d+), K size: 53\.31 GB", text).group(1))  # type: ignore[union-attr]
    args = ("llama-3.1-70b", "--engine", "sglang", "--budget", "8xH200", "--seq", "8192")
    defaults = memory(*args)
    assert defaults["engine_budget"]["fraction"] == round((143771 - 14848 - 464) / 143771, 3) == 0.893
    assert abs(defaults["engine"]["tokens"] - published) / published < 0.005
    then = memory(*args, "--mem-fraction-static", "0.897")
    assert sglang_says(then, "Load weight begin. avail mem") == round(139.81 - 0.41 - 2.01, 2) == 137.39
    assert abs(then["engine"]["tokens"] - published) / published < 0.0015
    assert sglang_fraction(143771, 8, 1) == (round((143771 - 14848) / 143771, 3), 14848) == (0.897, 14848)
    data = memory(*args, "--non-torch-memory", f"{139.81 - free:.2f}GiB", "--mem-fraction-static", "0.897")
    assert data["engine"]["bytes_per_token"] == 80 * 128 * 2 * 2
    assert sglang_says(data, "Load weight begin. avail mem") == free
    assert abs(data["engine"]["tokens"] - published) / published < 0.001
