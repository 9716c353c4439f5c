"""One set of sizing options on every sizing command, and weights sized as stored by default."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc import cli
from calc.analysis.memory import stored_scheme
from calc.spec.load import load_spec

SIZING = {"--dtype", "--quant", "--kv-dtype", "--tp", "--pp", "--ep", "--engine"}


def _command(path: str):  # type: ignore[no-untyped-def]
    command = cli.main
    for name in path.split():
        command = command.get_command(None, name)  # type: ignore[union-attr]
    return command


@pytest.mark.parametrize("path, where", [("memory", "--budget"), ("kvcache", "--budget"), ("compare", "--budget"),
                                         ("plot memory", "--gpus"), ("report", "--gpus")])
def test_every_sizing_command_has_the_one_set(path: str, where: str) -> None:
    options = {opt for param in _command(path).params for opt in param.opts}
    assert SIZING | {where} <= options
    helps = {param.opts[0]: param.help for param in _command(path).params if param.opts[0] in SIZING}
    assert helps == {param.opts[0]: param.help for param in _command("compare").params if param.opts[0] in SIZING}


@pytest.mark.parametrize("config, scheme", [
    # source: openai/gpt-oss-120b config.json (presets/gpt-oss-120b.yaml)
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}, "mxfp4"),
    # source: deepseek-ai/DeepSeek-V3 config.json (presets/deepseek-v3.yaml)
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8-block"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq-int4"),
    ({"quant_method": "awq", "bits": 4}, "awq-int4"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_use_double_quant": True}, "bnb-nf4-dq"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "strategy": "channel"}}}}, "fp8-channel"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "gptq", "bits": 3}, None), ({"quant_method": "hqq"}, None), (None, None),
])
def test_quantization_config_names_the_scheme(config: object, scheme: str | None) -> None:
    assert stored_scheme(config) == scheme


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli.main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_gpt_oss_is_compared_and_sized_as_stored() -> None:
    assert (load_spec("gpt-oss-120b").quant, load_spec("deepseek-v3").quant, load_spec("llama-3-8b").quant) == \
        ("mxfp4", "fp8-block", None)
    compared = _json("compare", "gpt-oss-120b", "llama-3-8b", "--seq", "4096")["models"]
    stored = _json("memory", "gpt-oss-120b", "--seq", "4096")
    assert compared[0]["weights_dtype"] == stored["weights"]["dtype"] == "mxfp4"
    assert compared[0]["weights_bytes"] == stored["weights"]["total_bytes"] == \
        _json("memory", "gpt-oss-120b", "--seq", "4096", "--quant", "mxfp4")["weights"]["total_bytes"]
    # source: https://openai.com/index/introducing-gpt-oss/ ("gpt-oss-120b ... efficiently on a single 80 GB GPU")
    assert compared[0]["weights_bytes"] < 80 * 10**9 < _json(
        "compare", "gpt-oss-120b", "--dtype", "fp16")["models"][0]["weights_bytes"]
    assert compared[1]["weights_dtype"] == "fp16"


def test_compare_takes_a_budget_and_a_layout() -> None:
    data = _json("compare", "gpt-oss-120b", "llama-3-70b", "--seq", "8k", "--budget", "2xH100-80GB")
    assert data["layout"] == {"tp": 2, "pp": 1, "ep": 1} and data["budget"]["bytes_per_gpu"] == 81559 * 2**20
    per_gpu = {m["model"]: m["memory_bytes"] for m in data["models"]}
    memory = _json("memory", "llama-3-70b", "--seq", "8k", "--tp", "2")
    assert per_gpu["llama-3-70b"] == memory["total_bytes"]
    assert all(m["headroom_bytes"] == 81559 * 2**20 - m["memory_bytes"] for m in data["models"])


def test_plot_takes_n_cards(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    path = tmp_path / "m.svg"
    result = CliRunner().invoke(cli.main, ["plot", "memory", "llama-3-8b", "--gpus", "8xH100-80GB,4090",
                                           "-o", str(path)])
    assert result.exit_code == 0, result.output
    text = path.read_text(encoding="utf-8")
    assert "8 x H100-80GB: 637.2 GiB" in text  # 8 x 81,559 MiB = 652,472 MiB


@pytest.mark.parametrize("sizing", [
    ("--budget", "2xH100-80GB"), ("--pp", "4", "--tp", "2"), ("--budget", "24GB", "--quant", "fp8"),
    ("--engine", "llamacpp"), ("--budget", "H100-80GB", "--engine", "vllm"), ("--ep", "2", "--tp", "2"),
])
def test_kvcache_sizes_the_cache_as_memory_does(sizing: tuple[str, ...]) -> None:
    """kvcache takes memory's sizing options and answers with memory's figures: the cache on the
    busiest GPU, the weights beside it, the budget's verdict and the server's lines."""
    model = "qwen3-30b-a3b" if "--ep" in sizing else "llama-3-8b"
    cache = _json("kvcache", model, "--seq", "8192", *sizing)[0]
    memory = _json("memory", model, "--seq", "8192", *sizing)
    assert {k: v for k, v in cache.items() if k not in ("layout", "weights_bytes", "engine", "server_says", "budget",
                                                       "llamacpp_caches")} == memory["kv_cache"]
    assert (cache["layout"], cache["weights_bytes"]) == (memory["layout"], memory["weights"]["total_bytes"])
    assert all(cache.get(key) == memory.get(key) for key in ("engine", "server_says", "budget", "llamacpp_caches"))


def test_kvcache_under_pipeline_stages_is_the_busiest_stage() -> None:
    # llama-3-8b: 32 layers over 4 stages = 8 layers; 8 KV heads / tp 2 = 4 heads x 128 x (K + V) x 2 B = 16 KiB per
    # layer per token, hand-computed from the preset (presets/llama-3-8b.yaml)
    cache = _json("kvcache", "llama-3-8b", "--seq", "1024", "--pp", "4", "--tp", "2")[0]
    assert cache["bytes_per_token"] == 8 * 4 * 128 * 2 * 2 and cache["total_bytes"] == 1024 * 8 * 4 * 128 * 2 * 2
    assert "the busiest of 4 pipeline stages" in CliRunner().invoke(
        cli.main, ["kvcache", "llama-3-8b", "--seq", "1024", "--pp", "4", "--tp", "2"]).output


def test_kvcache_plain_json_is_unchanged_by_the_sizing_options() -> None:
    """Without a layout, server or budget the entry is the cache alone, as before the options came."""
    assert set(_json("kvcache", "llama-3-8b", "--seq", "1024")[0]) == set(_json("memory", "llama-3-8b", "--seq",
                                                                             "1024")["kv_cache"])


def test_fit_shares_the_weight_and_cache_options() -> None:
    """fit searches --tp/--pp/--ep and the GPUs itself; its weight and cache options are the one set's."""
    fit_helps = {p.opts[0]: p.help for p in _command("fit").params if p.opts[0] in ("--dtype", "--quant", "--kv-dtype")}
    assert fit_helps == {p.opts[0]: p.help for p in _command("compare").params if p.opts[0] in fit_helps} and \
        len(fit_helps) == 3
