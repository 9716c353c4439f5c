"""vLLM's encoder cache and the encoder's profiling forward as terms of `memory --engine vllm`'s budget.

Facts: vLLM sizes the encoder budget as max(encoder_cache_size or max_num_batched_tokens, the largest
image's embeddings) and profiles budget // item dummy images (vllm/v1/core/encoder_cache_manager.py
compute_mm_encoder_budget, vllm/multimodal/encoder_budget.py _get_max_items). Qwen3-VL's largest image
is 4096x4096 -> 16,384 embeddings: published start-up logs of Qwen3-VL print "Encoder cache will be
initialized with a budget of 16384 tokens, and profiled with 1 image items of the maximum feature
size" at the default 8,192 batched tokens (https://github.com/vllm-project/vllm/issues/34209 asks how
to lower that 16384), and with --max-num-batched-tokens 32768 "a budget of 32768 tokens, and profiled
with 2 image items" beside "Qwen3-VL dummy_mm_data target_width: 4096" (a Qwen3-VL-8B log found by
search; Qwen3-VL-8B and the 4B kept here share the vision rule: patch 16, merge 2, max_pixels 4096²).
"""

from __future__ import annotations

import json

import pytest

from cli_checks import check_run
from oracle import CONFIG_DIR

QWEN3_VL = str(CONFIG_DIR / "model_types" / "qwen3_vl.json")  # Qwen3-VL-4B: text width 2560, 3 DeepStack mergers


def budget(*more: str) -> dict:
    data = json.loads(check_run(["memory", QWEN3_VL, "--engine", "vllm", "--budget", "H100-80GB", "--seq", "32768",
                                 "--json", *more]).stdout)
    return {term["key"]: term for term in data["engine_budget"]["terms"]} | {"pool": data["engine_budget"]["kv_memory_bytes"]}


@pytest.mark.parametrize("batched, items", [(None, 1), (32768, 2)])
def test_encoder_cache_is_vllms_budget_of_largest_images(batched: int | None, items: int) -> None:
    """items x 16,384 embeddings x (2560 x (1 + 3 DeepStack levels)) wide x 2 bytes."""
    terms = budget(*(["--max-num-batched-tokens", str(batched)] if batched else []))
    assert terms["encoder_cache"]["bytes"] == items * 16384 * 2560 * 4 * 2
    assert f"{items:,} dummy image(s) of 4096x4096 (16,384 embeddings each, 65,536 patches)" in terms["encoder_cache"]["source"]
    assert f"the cache holds {items * 16384:,} embeddings" in terms["encoder_cache"]["source"]


def test_encoder_terms_are_settable_and_leave_the_pool() -> None:
    """--encoder-cache-size 49152: one image computed, the cache padded to 49,152 embeddings (vllm#34051: more
    embeddings when the cache exceeds the compute budget); an encoder forward given from a log is taken as
    given; both come out of the KV pool byte for byte."""
    base, more = budget(), budget("--encoder-cache-size", "49152", "--encoder-activation-memory", "1GiB")
    assert more["encoder_cache"]["bytes"] == 3 * base["encoder_cache"]["bytes"]
    assert more["encoder_activation"]["bytes"] == 2**30 and more["encoder_activation"]["how"] == "given"
    assert base["pool"] - more["pool"] == (more["encoder_cache"]["bytes"] - base["encoder_cache"]["bytes"]) + (
        2**30 - base["encoder_activation"]["bytes"])


@pytest.mark.parametrize("more", [["--text-only"], ["--limit-mm-per-prompt", "0"], ["--activation-memory", "3GiB"]],
                         ids=["text-only", "no-images", "peak-from-a-log"])
def test_no_encoder_terms_without_a_profiled_encoder(more: list[str]) -> None:
    """No towers loaded, images limited to 0, or the whole activation peak read off a log (which holds
    the encoder's profiling already): no encoder terms."""
    terms = budget(*more)
    assert "encoder_cache" not in terms and "encoder_activation" not in terms


def test_largest_images_of_each_rule() -> None:
    """The largest image each processor rule allows: Qwen2.5-VL's max_pixels 12,845,056 = 3584²
    (16,384 tokens), Gemma 3's fixed 256, Pixtral's 1540-pixel square of 55 x 55 tokens."""
    from calc.spec.load import load_spec

    largest = {name: load_spec(str(CONFIG_DIR / "model_types" / f"{name}.json")).towers["vision"].images.largest()
               for name in ("qwen2_5_vl", "gemma3_multimodal", "mistral3")}
    assert (largest["qwen2_5_vl"].width, largest["qwen2_5_vl"].image_tokens) == (3584, 16384)
    assert largest["gemma3_multimodal"].image_tokens == 256
    assert largest["mistral3"].image_tokens == 55 * 55


def test_fit_takes_the_same_encoder_terms() -> None:
    """fit draws up memory's budget for each layout: one H100 holds the same encoder cache."""
    data = json.loads(check_run(["fit", QWEN3_VL, "--seq", "32768", "--json"]).stdout)
    first = data["candidates"][0]
    terms = {term["key"]: term["bytes"] for term in first["budget"]["terms"]}
    assert (first["gpu"], first["tp"]) == ("H100-80GB", 1) and terms["encoder_cache"] == budget()["encoder_cache"]["bytes"]


def sglang(model: str, *more: str) -> dict:
    data = json.loads(check_run(["memory", model, "--engine", "sglang", "--budget", "H100-80GB", "--seq", "8192",
                                 "--json", *more]).stdout)
    return {**data["engine_budget"], "server_says": data["server_says"]}


# SGLang's default mem_fraction_static on an H100 (81,559 MiB) at TP 1: round((81,559 - max(512 + 1.5 x 8,192
# + 1,024 / 8 + 2 x 256, 10,240)) / 81,559, 3) (python/sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings)
H100_SGLANG = round((81559 - (512 + 1.5 * 8192 + 1024 / 8 + 2 * 256)) / 81559, 3)


@pytest.mark.parametrize("model, layers, width", [
    # google/gemma-3-27b-it vision_config: SigLIP, num_hidden_layers 27, hidden_size 1152 (preset gemma-3-27b)
    ("gemma-3-27b", 27, 1152),
    # Qwen/Qwen3-VL-4B-Instruct vision_config: depth 24, hidden_size 1024 (transformers' Qwen3VLVisionConfig
    # answers num_hidden_layers with depth): ViT-L/14's size, 0.95 exactly
    (QWEN3_VL, 24, 1024),
    # Qwen/Qwen2.5-VL-7B-Instruct vision_config: depth 32 (Qwen2_5_VLVisionConfig's default), hidden_size 1280
    (str(CONFIG_DIR / "model_types" / "qwen2_5_vl.json"), 32, 1280),
])
def test_sglang_scales_its_default_fraction_for_the_vision_encoder(model: str, layers: int, width: int) -> None:
    """adjust_mem_fraction_for_vlm (sglang a82da8d python/sglang/srt/arg_groups/memory_hook.py): the default
    fraction x 0.95 x clamp(1 - 0.1 x (layers x width^2 / (24 x 1024^2) - 1), 0.8, 1.05); none with the towers
    left unloaded (--text-only: SGLang's language_only) or with a fraction the user gives. SGLang does not round
    the product, and logs it as Python's repr of the float (engine.py's logger.info(f"{server_args=}"), a
    dataclass repr; newer builds f"server_args={server_args.resolved_dict()}", a dict's): the same operations in
    the same order give the same float, so the line carries its repr, digits and all (Gemma-3-27B's
    0.7596298339843749), never a rounded 0.76."""
    factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (layers * width**2 / (24 * 1024**2) - 1.0)))
    default = sglang(model)
    assert default["fraction"] == H100_SGLANG * factor
    assert default["server_says"][0] == f"mem_fraction_static={H100_SGLANG * factor!r}"
    assert sglang(model, "--text-only")["fraction"] == H100_SGLANG
    assert sglang(model, "--mem-fraction-static", "0.8")["fraction"] == 0.8


def test_moonvit_rotary_table_is_built_in_the_profiling_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Kimi-K2.5's MoonViT (27 x 1,152, 16 heads of 72): vLLM builds Rope2DPosEmbRepeated(72, 512, 512)'s
    table on the tower's first forward, inside the profiling run, and keeps it as a buffer
    (vllm/model_executor/models/kimi_k25_vit.py:550-552, _precompute_freqs_cis 266-286: 512 x 512 positions x
    72 / 2 complex64 values): 512 x 512 x 36 x 8 B = 75,497,472 B taken from the pool, not from the weights.
    The text model is Kimi-K2's config shrunk to 2 layers so one H100 holds it."""
    from oracle import saved

    text = {k: v for k, v in saved("kimi_k2.json").items() if k != "quantization_config"}
    config = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {**text, "num_hidden_layers": 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
                              "n_group": 1, "topk_group": 1},
              "tie_word_embeddings": False, "vision_config": {"vt_num_hidden_layers": 27, "vt_hidden_size": 1152}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = json.loads(check_run(["memory", str(path), "--engine", "vllm", "--budget", "H100-80GB", "--json"]).stdout)
    terms = {term["key"]: term for term in data["engine_budget"]["terms"]}
    assert terms["encoder_rope"]["bytes"] == 512 * 512 * 36 * 8 == 75_497_472 and terms["encoder_rope"]["how"] == "exact"
    weights = terms["weights"]["source"]
    assert "vision tower's rotary" not in weights  # none at load: the tower's only table is this one


@pytest.mark.parametrize("where", [["--engine", "sglang", "--budget", "H100-80GB"],  # SGLang scales its fraction
                                   ["--engine", "trtllm", "--budget", "H100-80GB"],
                                   ["--engine", "vllm", "--kv-memory", "10GiB"],  # no start-up budget drawn up
                                   ["--budget", "H100-80GB"]])  # no engine
@pytest.mark.parametrize("flag", [["--encoder-cache-size", "49152"], ["--limit-mm-per-prompt", "0"],
                                  ["--encoder-activation-memory", "1GiB"]])
def test_vllm_encoder_flags_refused_where_no_vllm_budget_reads_them(where: list[str], flag: list[str]) -> None:
    """The encoder cache and forward are terms of vLLM's start-up budget alone (startup.startup_budget): with
    another engine's budget, or none, one `Error:` line naming vLLM, not a pool that ignores them."""
    result = check_run(["memory", QWEN3_VL, "--seq", "32768", *where, *flag])
    assert result.exit_code == 2 and result.stderr == (
        "Error: --encoder-cache-size, --limit-mm-per-prompt and --encoder-activation-memory set vLLM's start-up "
        "budget: give --engine vllm with --budget (not --kv-memory)\n"), result.stderr
