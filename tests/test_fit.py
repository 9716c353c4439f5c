"""`gptcalc fit` and the one-place layout validation it shares with memory and budgets."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.memory.parallel import Layout, validate_layout
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from cli_checks import check_run


def fit(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["fit", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_fit_ranks_fewest_gpus_first_and_each_serves() -> None:
    data = fit("llama-3.1-70b", "--seq", "32k", "--gpus", "H100,H200")
    ranked = [(c["gpus"], c["gpu"]) for c in data["candidates"]]
    assert ranked == sorted(ranked, key=lambda r: (r[0], r[1] != "H100-80GB"))
    # 70.6B parameters in bf16 (141 GB) fit no single H100 or H200 with a pool left: two H200s come first
    assert ranked[0] == (2, "H200") and all(c["serves"] and float(c["max_concurrency"]) >= 1 for c in data["candidates"])


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_fit_agrees_with_memory_on_the_same_layout(engine: str) -> None:
    """fit's pool for a layout is memory --engine's for it: one budget, two commands."""
    first = fit("llama-3.1-70b", "--seq", "32k", "--gpus", "H100", "--engine", engine)["candidates"][0]
    result = CliRunner().invoke(main, ["memory", "llama-3.1-70b", "--seq", "32k", "--engine", engine,
                                       "--budget", f"{first['gpus']}xH100", "--json"])
    assert json.loads(result.output)["engine_budget"]["kv_memory_bytes"] == first["kv_memory_bytes"]


def test_fit_sizes_weights_as_stored() -> None:
    """gpt-oss-120b's config stores its experts in MXFP4: fit sizes it so, as memory does, unless --dtype says."""
    stored = fit("gpt-oss-120b", "--seq", "32k", "--gpus", "H100")["candidates"][0]
    # source: https://openai.com/index/introducing-gpt-oss/ ("gpt-oss-120b ... efficiently on a single 80 GB GPU")
    assert stored["gpus"] == 1
    memory = CliRunner().invoke(main, ["memory", "gpt-oss-120b", "--seq", "32k", "--json"])
    assert stored["weights_bytes_per_gpu"] == json.loads(memory.output)["weights"]["total_bytes"]
    assert fit("gpt-oss-120b", "--seq", "32k", "--gpus", "H100", "--dtype", "bf16")["candidates"][0]["gpus"] > 1


def test_fit_concurrency_needs_more() -> None:
    one = fit("llama-3.1-8b", "--seq", "128k", "--gpus", "RTX-4090")["candidates"][0]
    many = fit("llama-3.1-8b", "--seq", "128k", "--gpus", "RTX-4090", "--concurrency", "16")["candidates"][0]
    assert many["gpus"] > one["gpus"] and float(many["max_concurrency"]) >= 16


@pytest.mark.parametrize("model, layout, message", [
    ("llama-2-7b", Layout(tp=64), "--tp 64: does not divide llama-2-7b's 32 query heads"),
    ("llama-2-7b", Layout(ep=2, tp=2), "--ep 2: llama-2-7b has no routed experts"),
    ("mixtral-8x7b", Layout(tp=4, ep=3), "--ep 3: does not divide mixtral-8x7b's 8 routed experts"),
    ("llama-2-7b", Layout(pp=33), "--pp 33: more stages than llama-2-7b's 32 layers"),
])
def test_validate_layout_names_the_option(model: str, layout: Layout, message: str) -> None:
    with pytest.raises(GptcalcError, match=message.replace("'", ".")):
        validate_layout(load_spec(model), layout)


@pytest.mark.parametrize("args, message", [
    (["--gpus", "H100,,B200"], "an empty name"),
    (["--gpus", "H999"], "unknown GPU 'H999'"),
    (["--seq", "1M"], "longer than llama-3.1-8b's context"),
])
def test_fit_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["fit", "llama-3.1-8b", "--seq", "8k", *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("engine, flags", [("vllm", ["--use-kv-cache-manager-v2", "true"]),
                                           ("sglang", ["--disable-overlap-scheduler"]),
                                           (None, ["--use-kv-cache-manager-v2", "false"])])  # fit's default: vllm
def test_fit_refuses_trtllms_manager_flags_with_another_engine_once(engine: str | None, flags: list[str]) -> None:
    """TensorRT-LLM's manager flags size no vLLM or SGLang pool: fit says so in one `Error:` line, exit 2, as memory
    does (whose line adds the --budget or --kv-memory its pool needs), not in a 'not tried' line per layout."""
    chosen = ["--engine", engine] if engine else []
    refused = check_run(["fit", "llama-3.1-8b", "--seq", "8k", *chosen, *flags])
    said = check_run(["memory", "llama-3.1-8b", "--seq", "8k", "--budget", "H100", *chosen, *flags])
    assert refused.exit_code == said.exit_code == 2 and "not tried" not in refused.output
    assert refused.stderr == ("Error: --use-kv-cache-manager-v2 and --disable-overlap-scheduler set TensorRT-LLM's KV "
                              "cache manager: give --engine trtllm\n")
    assert said.stderr == refused.stderr.replace("\n", " with --budget or --kv-memory\n")


@pytest.mark.parametrize("engine, flags", [
    ("vllm", ["--speculative-num-steps", "3"]),  # SGLang's draft worker (calc/analysis/memory/sglang_draft.py)
    ("vllm", ["--speculative-draft-layers", "1"]),
    ("sglang", ["--speculative-draft-layers", "1"]),  # the draft's layers without its steps
    ("sglang", ["--indexer-kv-dtype", "fp8"]),  # vLLM's attention_config.indexer_kv_dtype
    ("trtllm", ["--indexer-kv-dtype", "fp8"]),
    ("vllm", ["--mamba-ssm-dtype", "float32"]),  # SGLang's Mamba pool
    ("sglang", ["--no-async-scheduling"]),  # vLLM's scheduler (engines.py: its window and chunk groups alone)
    ("sglang", ["--no-enable-prefix-caching"]),  # vLLM's mamba_cache_mode
    ("trtllm", ["--no-async-scheduling"]),
    ("trtllm", ["--no-enable-prefix-caching"]),
])
def test_fit_refuses_another_engines_pool_flag_once_as_memory_does(engine: str, flags: list[str]) -> None:
    """A pool flag another engine's pool takes (or draft layers without draft steps) would fail every layout
    alike: fit says it in one `Error:` line, exit 2, memory's own (memory's --mamba-ssm-dtype line adds the --budget
    or --kv-memory its pool needs), not in a 'not tried' line per layout."""
    refused = check_run(["fit", "llama-3-8b", "--seq", "8k", "--engine", engine, *flags])
    said = check_run(["memory", "llama-3-8b", "--seq", "8k", "--budget", "H100", "--engine", engine, *flags])
    assert refused.exit_code == said.exit_code == 2 and "not tried" not in refused.output
    assert refused.stderr.startswith("Error: ") and refused.stderr.count("\n") == 1
    assert said.stderr.replace(" with --budget or --kv-memory", "") == refused.stderr


@pytest.mark.parametrize("model, flags", [
    ("llama-3-8b", ["--engine", "sglang", "--speculative-num-steps", "3"]),  # no MTP layers, no draft layers given
    ("llama-3-8b", ["--engine", "trtllm", "--speculative-num-steps", "3"]),  # TensorRT-LLM's: no MTP layer to add
    ("tests/configs/model_types/qwen3_next.json", ["--engine", "sglang", "--speculative-num-steps", "3"]),  # Mamba
    ("gemma-2-9b", ["--engine", "sglang", "--speculative-num-steps", "3", "--speculative-draft-layers", "1"]),
    ("deepseek-v4-flash", ["--engine", "sglang", "--speculative-num-steps", "3", "--speculative-draft-layers", "2"]),
    ("llama-3-8b", ["--engine", "vllm", "--indexer-kv-dtype", "fp8"]),  # no sparse-attention indexer
    ("deepseek-v3.2", ["--engine", "vllm", "--indexer-kv-dtype", "mxfp4"]),  # its DSA keys are fp8 only
])
def test_fit_refuses_what_the_model_does_not_take_once_as_memory_does(model: str, flags: list[str]) -> None:
    """A draft or indexer-key dtype the model's cache does not take (whatever its layout) is memory's one `Error:`
    line in fit too (calc/analysis/memory/sglang_draft.py refuse_unmodelled_draft, vllm_indexer.py), not a 'not
    tried' line per layout."""
    refused = check_run(["fit", model, "--seq", "8k", *flags])
    said = check_run(["memory", model, "--seq", "8k", "--kv-memory", "20GiB", *flags])
    assert refused.exit_code == said.exit_code == 2 and "not tried" not in refused.output
    assert refused.stderr.startswith("Error: ") and refused.stderr == said.stderr


def test_a_layout_serves_whole_requests_not_the_printed_figure() -> None:
    """A pool of 18,996 token slots at --seq 1,000 holds 18.996 requests: SGLang prints 19.00, admits
    18. Asked for 19, the layout does not serve; asked for 18, it does (18,996 = 18,996 x 131,072 B of
    Llama-3-8B's fp16 K and V per token: 32 layers x 2 x 8 heads x 128 x 2 B)."""
    from dataclasses import replace

    from calc.analysis.count import count
    from calc.analysis.fit import fit as fit_layouts
    from calc.analysis.memory import GPUS, kv_cache
    from calc.analysis.memory.engines import kv_pool

    spec = load_spec("llama-3-8b")
    first = fit_layouts(spec, count(spec), 1000, tuple(g for g in GPUS if g.name == "H100-80GB"), "sglang")[0][0]
    pool = kv_pool(kv_cache(spec, 1000), "sglang", 18_996 * 131_072, 1000)
    assert (pool.concurrency, pool.requests) == ("19.00", 18)
    assert not replace(first, pool=pool, concurrency=19).serves
    assert replace(first, pool=pool, concurrency=18).serves


@pytest.mark.parametrize("options", [[], ["--no-async-scheduling"], ["--max-num-batched-tokens", "2048"]])
def test_fit_takes_vllms_scheduling_options_as_memory_does(options: list[str]) -> None:
    """Llama-4 Scout at 128k on 8 x H100: --max-num-batched-tokens sizes the profiling forward (the pool) and,
    with --no-async-scheduling, the tokens in flight a chunked group holds; fit's pool and concurrency for the
    layout are memory's under the same options."""
    found = fit("llama-4-scout", "--seq", "128k", "--gpus", "H100", *options)["candidates"]
    eight = next(c for c in found if (c["gpus"], c["ep"]) == (8, 1))
    result = CliRunner().invoke(main, ["memory", "llama-4-scout", "--seq", "128k", "--engine", "vllm",
                                       "--budget", "8xH100", *options, "--json"])
    engine = json.loads(result.output)["engine"]
    assert (eight["kv_memory_bytes"], eight["max_concurrency"]) == (engine["kv_memory_bytes"], engine["max_concurrency"])
    # the tokens fit lists are the "GPU KV cache size" vLLM 0.32 prints, as memory's line says (not blocks x 16
    # per group, what older vLLM printed)
    assert eight["tokens"] == engine["printed_tokens"]
    # 12 NoPE layers take 131,072 / 16 pages a request, each of 3 chunked groups ceil((8,192 + in flight) / 16)
    # (tests/test_vllm_chunked.py): in flight 2 x 8,192 by default, 8,192 without async scheduling, 2 x 2,048
    in_flight = {0: 2 * 8192, 1: 8192, 2: 2 * 2048}[len(options)]
    assert engine["blocks_per_request"] == 8192 + 3 * -(-(8192 + in_flight) // 16)


def test_fit_names_the_card_a_layout_was_not_tried_on() -> None:
    """vLLM takes DeepSeek-V4's indexer keys in mxfp4 on SM10x cards only (v1/attention/backends/mla/indexer.py:91-96):
    under --gpus H100,B200 the B200s of tp 4 serve, so the refusal is the H100's (compute capability 9.0), not the
    layout's; with --gpus H100 alone it is every card's, and the line names none."""
    args = ["fit", "deepseek-v4-flash", "--seq", "32k", "--engine", "vllm", "--indexer-kv-dtype", "mxfp4"]
    both = fit(*args[1:], "--gpus", "H100,B200")
    assert any(c["gpus"] == 4 and c["gpu"] == "B200" and c["tp"] == 4 for c in both["candidates"]), both["candidates"]
    reason = ": --indexer-kv-dtype mxfp4: vLLM takes it on SM10x cards only"
    assert any(line.startswith("tp 4 pp 1 ep 1 on H100-80GB" + reason) for line in both["skipped_layouts"]), both["skipped_layouts"]
    assert not any(line.startswith("tp 4 pp 1 ep 1:") for line in both["skipped_layouts"])
    alone = fit(*args[1:], "--gpus", "H100")
    assert any(line.startswith("tp 8 pp 1 ep 1" + reason) for line in alone["skipped_layouts"]), alone["skipped_layouts"]
