"""llama.cpp itself, on tiny GGUFs: every line a CPU build prints about the model's buffers and its caches equals
gptcalc's (calc/analysis/memory/llamacpp.py, llamacpp_devices.py).

Two halves:
- recorded: `tests/data/llamacpp/<run>.log` hold the lines a real llama.cpp CPU build printed for each run of `RUNS`
  (its model, output, KV and RS buffer lines and its `llama_kv_cache*` / `llama_memory_recurrent` lines, nothing
  edited); the default test run rebuilds the same GGUF and checks `gptcalc memory FILE --engine llamacpp
  --cpu-only` prints the same lines, without llama.cpp;
- live, opt-in: `pytest --llamacpp BUILD/bin tests/test_llamacpp_conformance.py` runs `llama-completion`
  of a llama.cpp build (docs/memory.md: how it was built) on each GGUF and compares; with
  `--llamacpp-record` it (re)writes the recorded logs from that run.

`OFFLOAD_RUNS` are a CUDA build's (-ngl, -ot, --n-cpu-moe, -nkvo, -lm none, -sm none on one GPU): recorded under
`tests/data/llamacpp/offload/` from a run on an H100 and checked the same way.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from calc.cli import main
from tests.tiny_models import tiny_config

pytest.importorskip("gguf")
from tests.gguf_files import TYPES, write_gguf  # noqa: E402

RECORDED = Path(__file__).parent / "data" / "llamacpp"
# Gemma 3's layout (five sliding-window layers, then a global one: llama.cpp's gemma3 hard-codes this pattern)
GEMMA6 = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
# a quantised cache needs heads whose width its block (32) divides (llama_init_from_model refuses 8)
WIDE = {"head_dim": 32}
# rows whole k-quant super-blocks (256): 4 layers of 256, MLP 768, 4 heads of 64 over 2, 4096 tokens
KQUANT = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "head_dim": 64, "vocab_size": 4096}
# name: (model_type, config changes, llama.cpp options); options are those of `OPTIONS`
RUNS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "qwen3-c4096": ("qwen3", {}, ["-c", "4096"]),
    "qwen3-np4": ("qwen3", {}, ["-c", "4096", "-np", "4"]),
    "qwen3-q8_0-fa": ("qwen3", WIDE, ["-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]),
    "qwen3-ctk-q4_0": ("qwen3", WIDE, ["-c", "1000", "-ctk", "q4_0", "-fa", "on"]),
    "qwen3_moe-c2048": ("qwen3_moe", {}, ["-c", "2048"]),
    "gemma3-swa": ("gemma3_text", GEMMA6, ["-c", "4096"]),
    "gemma3-swa-np2": ("gemma3_text", GEMMA6, ["-c", "4096", "-np", "2", "-ub", "256"]),
    "gemma3-swa-full": ("gemma3_text", GEMMA6, ["-c", "2048", "--swa-full"]),
    # a vocabulary wide enough for the output buffer (its logits: n_vocab F32 per sequence) to show in MiB
    "qwen3-vocab-np3": ("qwen3", {"vocab_size": 32768}, ["-c", "3072", "-np", "3"]),
    "llama-c4096": ("llama", {}, ["-c", "4096"]),
    # MistralForCausalLM converts as llama.cpp's llama, which reads no window: every layer keeps every cell
    "mistral-swa-c4096": ("mistral", {}, ["-c", "4096"]),
    "ministral3-c4096": ("ministral3", {}, ["-c", "4096"]),
    "qwen2-c4096": ("qwen2", {}, ["-c", "4096"]),
    "qwen2_moe-c2048": ("qwen2_moe", {}, ["-c", "2048"]),
    "olmo2-c2048": ("olmo2", {}, ["-c", "2048"]),
    "gemma2-swa": ("gemma2", {}, ["-c", "4096"]),
    "gemma2-swa-np2": ("gemma2", {}, ["-c", "4096", "-np", "2"]),
    # both caches quantised: this build's SWA cache takes -ctk / -ctv as the full one does
    "gemma2-swa-q8_0": ("gemma2", WIDE, ["-c", "4096", "-ctk", "q8_0", "-ctv", "q8_0"]),
    "phi3-c4096": ("phi3", {}, ["-c", "4096"]),
    "smollm3-c4096": ("smollm3", {}, ["-c", "4096"]),
    "gemma-c4096": ("gemma", {}, ["-c", "4096"]),
    "glm4-c4096": ("glm4", {}, ["-c", "4096"]),
    "stablelm-c4096": ("stablelm", {}, ["-c", "4096"]),
    "phi-c4096": ("phi", {}, ["-c", "4096"]),
    "internlm3-c4096": ("internlm3", {}, ["-c", "4096"]),  # InternLM3ForCausalLM converts as llama (internlm.py:173)
    "granite-c4096": ("granite", {}, ["-c", "4096"]),
    "mixtral-c2048": ("mixtral", {}, ["-c", "2048"]),  # converts as llama with experts, and no window
    "starcoder2-c4096": ("starcoder2", {}, ["-c", "4096"]),  # a window llama.cpp does not read
    "exaone4-c4096": ("exaone4", {}, ["-c", "4096"]),  # 4 layers: llama.cpp slides only the 64-layer model's
    "exaone4-64-swa": ("exaone4", {"num_hidden_layers": 64}, ["-c", "4096"]),
    "olmo3-swa": ("olmo3", {}, ["-c", "4096"]),
    "gpt_oss-swa": ("gpt_oss", {}, ["-c", "4096"]),  # sinks, biased experts stored transposed
    "gpt_oss-swa-np2-ub256": ("gpt_oss", {}, ["-c", "8192", "-np", "2", "-ub", "256"]),
    "olmo-c4096": ("olmo", {}, ["-c", "4096"]),
    # no QK-norm, as Command-R models have it (tests/configs/model_types/cohere.json, Aya-23-8B)
    "cohere-c4096": ("cohere", {"use_qk_norm": False}, ["-c", "4096"]),
    # biases as the published configs have them (ERNIE-4.5-0.3B-PT: tests/configs/model_types/ernie4_5.json,
    # use_bias false; Seed-OSS-36B-Instruct: attention_out_bias and mlp_bias false; Hunyuan-7B-Instruct's attention and
    # AFM-4.5B's MLP without): the tiny configs switch on more than llama.cpp's graphs load
    "hunyuan_v1_dense-c4096": ("hunyuan_v1_dense", {"attention_bias": False}, ["-c", "4096"]),
    "arcee-c4096": ("arcee", {"mlp_bias": False}, ["-c", "4096"]),
    "seed_oss-c4096": ("seed_oss", {"attention_out_bias": False, "mlp_bias": False}, ["-c", "4096"]),
    "ernie4_5-c4096": ("ernie4_5", {"use_bias": False}, ["-c", "4096"]),
    "gpt2-c1024": ("gpt2", {}, ["-c", "1024"]),  # Conv1D weights stored transposed
    "gpt_bigcode-mqa-c1024": ("gpt_bigcode", {}, ["-c", "1024"]),  # llama.cpp's starcoder: one KV head
    "gpt_neox-c2048": ("gpt_neox", {}, ["-c", "2048"]),
    "falcon-mqa-c2048": ("falcon", {}, ["-c", "2048"]),  # Falcon-7B's multi-query attention
    "bloom-c2048": ("bloom", {}, ["-c", "2048"]),
    # Llama 4's chunked layers (every 4th one global, as Llama-4-Scout's no_rope_layer_interval) in llama.cpp's SWA
    # cache of n_swa 8192, whatever attention_chunk_size says: GGML_PAD(8192 + 512, 256) = 8704 cells
    "llama4-chunked-c16384": ("llama4_text", {"no_rope_layer_interval": 4}, ["-c", "16384"]),
    "llama4-chunked-np2-c32768": ("llama4_text", {"no_rope_layer_interval": 4}, ["-c", "32768", "-np", "2"]),
    "kimi_k2-mla-c2048": ("kimi_k2", {}, ["-c", "2048"]),
    # MiniMax-M2's sigmoid router (tests/configs/model_types/minimax_m2.json: scoring_func), which llama.cpp needs
    "minimax_m2-c2048": ("minimax_m2", {"scoring_func": "sigmoid"}, ["-c", "2048"]),
    # K-EXAONE's sigmoid router (its config.json: scoring_func "sigmoid"), which llama.cpp's exaone-moe needs written
    "exaone_moe-swa": ("exaone_moe", {"scoring_func": "sigmoid"}, ["-c", "4096"]),
    # dots.llm1 as published: every head its own KV head (llama.cpp's dots1 builds K and V of n_head heads), no
    # attention biases, sigmoid routing, no sliding layer (max_window_layers = its layers)
    "dots1-c2048": ("dots1", {"num_key_value_heads": 4, "attention_bias": False, "max_window_layers": 3,
                              "scoring_func": "sigmoid"}, ["-c", "2048"]),  # DeepSeek-V3's converter class: llama.cpp's deepseek2
    # as many KV heads as heads, as OLMoE has (tests/configs/model_types/olmoe.json; llama.cpp's olmoe norms K over
    # n_embd)
    "olmoe-c2048": ("olmoe", {"num_key_value_heads": 4}, ["-c", "2048"]),
    # Phi-3.5-MoE-instruct config.json: attention_bias and lm_head_bias true (llama.cpp's phimoe loads both)
    "phimoe-c2048": ("phimoe", {"attention_bias": True, "lm_head_bias": True}, ["-c", "2048"]),
    # c4ai-command-r7b-12-2024 config.json: a tied head, no attention biases; three sliding layers, then a global
    "cohere2-swa": ("cohere2", {"tie_word_embeddings": True, "attention_bias": False}, ["-c", "4096"]),
    # without GLM-4.5's MTP layer (tests/configs/model_types/glm4_moe.json: num_nextn_predict_layers 1), which
    # transformers does not build and the converter would add to the block count (glm.py:121)
    "glm4_moe-c2048": ("glm4_moe", {"num_nextn_predict_layers": 0}, ["-c", "2048"]),
    # DeepSeek-V2 (softmax routing) with a query latent; llama.cpp reads none only in 26/27-layer models (Lite)
    "deepseek_v2-mla-c2048": ("deepseek_v2", {"q_lora_rank": 24}, ["-c", "2048"]),
    "deepseek_v2-lite27-c2048": ("deepseek_v2", {"num_hidden_layers": 27}, ["-c", "2048"]),
    "deepseek_v3-mla-c2048": ("deepseek_v3", {}, ["-c", "2048"]),
    "deepseek_v3-mla-np2": ("deepseek_v3", {}, ["-c", "4096", "-np", "2"]),
    # MLA's K row (latent 16 + rotary 4) in 32-value q8_0 blocks is refused (REFUSED); a latent and a rotary key of
    # 32 each fill whole blocks
    "deepseek_v3-mla-q8_0": ("deepseek_v3", {"kv_lora_rank": 32, "qk_rope_head_dim": 32},
                             ["-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0"]),
}
# runs llama.cpp refuses: the error it prints, and the start of gptcalc's (one Error line, exit 2)
REFUSED: dict[str, tuple[str, dict[str, Any], list[str], str, str]] = {
    "deepseek_v3-mla-ctk-q8_0": ("deepseek_v3", {}, ["-c", "2048", "-ctk", "q8_0"],
                                 "model does not support different K (q8_0) and V (f16) cache types",
                                 "Error: --cache-type-k q8_0, --cache-type-v f16: llama.cpp refuses different K and V"),
    "deepseek_v3-mla-k20-q8_0": ("deepseek_v3", {}, ["-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0"],
                                 "K cache type q8_0 with block size 32 does not divide n_embd_head_k=20",
                                 "Error: --cache-type-k q8_0: llama.cpp refuses it with flash attention"),
}
# gptcalc's option for each llama.cpp one (-lm none: its weights read, not mapped)
OPTIONS = {"-c": "--seq", "-np": "--parallel", "-ub": "--ubatch", "-fa": "--flash-attn", "-ctk": "--cache-type-k",
           "-ctv": "--cache-type-v", "--swa-full": "--swa-full", "-lm": "--no-mmap", "-ngl": "--n-gpu-layers",
           "-nkvo": "--no-kv-offload", "-ot": "--override-tensor", "--n-cpu-moe": "--n-cpu-moe", "-sm": "--split-mode"}
FLAGS = ("--swa-full", "-nkvo")  # options without a value (llama-completion has no -kvu: llama-server's)
LINE = re.compile(r"(load_tensors: +\S+ model buffer size = .*|llama_context: +\S+ +output buffer size = .*|"
                  r"llama_kv_cache: +\S+ KV buffer size = .*|llama_memory_recurrent: +\S+ RS buffer size = .*|"
                  r"llama_kv_cache_iswa: creating .*|llama_kv_cache: size = .*|llama_memory_recurrent: size = .*)$")


def allocator_bytes(suite: str) -> dict[str, int]:
    """llama.cpp's own compute-buffer size for each recorded run of `suite` (tests/data/llamacpp/allocator_bytes.json,
    whose "source" says how they were read): the exact bytes the MiB lines of the logs round."""
    return json.loads((RECORDED / "allocator_bytes.json").read_text(encoding="utf-8"))[suite]


def engine_lines(log: str, line: re.Pattern[str] = LINE) -> list[str]:
    """The buffer and cache lines of a llama.cpp log (whatever prefix its logger adds)."""
    return [m.group(1).rstrip() for text in log.splitlines() if (m := line.search(text))]


def cpu_build_says(path: Path, args: list[str]) -> list[str]:
    """What gptcalc says a CPU-only llama.cpp build prints running `path` with these llama.cpp options. The machine
    that recorded the logs runs AVX-512 (their build's system_info line), which sets the weights it repacks."""
    result = CliRunner().invoke(main, ["memory", str(path), "--engine", "llamacpp", "--cpu-only", "--cpu-isa",
                                       "avx512", "--json", *gptcalc_options(args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["server_says"]


def gptcalc_options(args: list[str]) -> list[str]:
    """gptcalc's options for these llama.cpp ones."""
    cli, rest = [], list(args)
    while rest:
        option = rest.pop(0)
        value = None if option in FLAGS else rest.pop(0)
        if option == "-lm" and value == "mmap":
            continue
        cli += [OPTIONS[option], *([value] if value and option != "-lm" else [])]
    return cli


def llamacpp_binary(request: pytest.FixtureRequest, build: str) -> str:
    """--llamacpp's build directory; the test is skipped (opt-in) without it."""
    binary = request.config.getoption("--llamacpp")
    if not binary:
        pytest.skip(f"opt-in: --llamacpp BUILD/bin ({build} with llama-completion)")
    return binary


def completion_log(binary: str, path: Path, args: list[str]) -> tuple[str, int]:
    """What `llama-completion` of the build at `binary` prints loading `path` with these options (at -lv 4, where
    the load-time lines print), generating one token on one thread, and its exit status. Its logger writes from a
    thread of its own, and on a loaded machine a run that exits 0 has been seen to lose most of its log (from the
    model's hyperparameters on): such a run is tried again, up to three times in all."""
    for _ in range(3):
        run = subprocess.run([str(Path(binary) / "llama-completion"), "-m", str(path), *args, "-lv", "4", "-n", "1",
                              "-p", "", "--no-warmup", "-t", "1", "-no-cnv"], capture_output=True, text=True, timeout=300)
        log = run.stdout + run.stderr
        if run.returncode or "common_perf_print" in log:  # the last lines a whole log holds
            break
    return log, run.returncode


def gguf_of(name: str, where: Path) -> Path:
    model_type, changes, _ = RUNS[name]
    path = where / f"{name}.gguf"
    write_gguf({**tiny_config(model_type), **changes}, path, runnable=True)
    return path


def ours(path: Path, args: list[str]) -> list[str]:
    return engine_lines("\n".join(cpu_build_says(path, args)))


@pytest.mark.parametrize("name", sorted(p.stem for p in RECORDED.glob("*.log")))
def test_recorded_llamacpp_lines(name: str, tmp_path: Path) -> None:
    """source: the log llama.cpp printed for this run (tests/data/llamacpp/NAME.log, recorded by --llamacpp-record)."""
    recorded = engine_lines((RECORDED / f"{name}.log").read_text())
    assert any("model buffer" in line for line in recorded) and any("size =" in line for line in recorded), name
    assert ours(gguf_of(name, tmp_path), RUNS[name][2]) == recorded


def test_every_run_is_recorded() -> None:
    assert sorted(p.stem for p in RECORDED.glob("*.log")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_llamacpp(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary = llamacpp_binary(request, "a CPU build of llama.cpp")
    path, args = gguf_of(name, tmp_path), RUNS[name][2]
    log, status = completion_log(binary, path, args)
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's (test_live_llamacpp_offload is a CUDA one's)")
    printed = engine_lines(log)
    assert printed, f"llama.cpp printed no buffer line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        (RECORDED / f"{name}.log").write_text("\n".join(printed) + "\n")
    assert ours(path, args) == printed


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_as_llamacpp_refuses(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """source: llama_init_from_model's check (src/llama-context.cpp:3854-3873); live with --llamacpp."""
    model_type, changes, args, error, ours_error = REFUSED[name]
    path = tmp_path / f"{name}.gguf"
    write_gguf({**tiny_config(model_type), **changes}, path, runnable=True)
    result = CliRunner().invoke(main, ["memory", str(path), "--engine", "llamacpp", *gptcalc_options(args)])
    assert result.exit_code == 2 and result.output.startswith(ours_error), result.output
    if request.config.getoption("--llamacpp"):
        for _ in range(3):  # a failing run may lose its log too (completion_log)
            log, status = completion_log(request.config.getoption("--llamacpp"), path, args)
            if error in log:
                break
        assert status and error in log, log[-2000:]


# --- a CUDA build: where -ngl / -ot / --n-cpu-moe / -nkvo / -lm none put the model and the caches ---------------------
# Recorded: tests/data/llamacpp/offload/<run>.log hold the lines a CUDA build of the same tree printed on one H100
# (sm_90; -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF: flash attention's kernels left out, which changes no buffer but the
# compute ones), nothing edited; live, opt-in: `pytest --llamacpp CUDA_BUILD/bin -k offload`. Every run at -c 256
# unless it says. (model_type, config changes, llama.cpp placement options)
OFFLOAD_RUNS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "qwen3-ngl0": ("qwen3", {}, ["-ngl", "0"]),
    "qwen3-ngl2": ("qwen3", {}, ["-ngl", "2"]),
    "qwen3-ngl99": ("qwen3", {}, ["-ngl", "99"]),
    "qwen3-nkvo": ("qwen3", {}, ["-ngl", "99", "-nkvo"]),
    "qwen3-ot": ("qwen3", {}, ["-ngl", "99", "-ot", "attn_q=CPU"]),
    "qwen3_moe-ncmoe1": ("qwen3_moe", {}, ["-ngl", "99", "--n-cpu-moe", "1"]),
    "gemma3-ngl3": ("gemma3_text", GEMMA6, ["-ngl", "3"]),  # a tied head: token_embd loaded again as the output
    "gemma3-ngl99": ("gemma3_text", GEMMA6, ["-ngl", "99"]),
    "qwen3_moe-ngl1": ("qwen3_moe", {}, ["-ngl", "1"]),  # the output layer alone
    "qwen3_moe-ncmoe1-ngl2": ("qwen3_moe", {}, ["-ngl", "2", "--n-cpu-moe", "1"]),
    "qwen3-ot-cuda0": ("qwen3", {}, ["-ngl", "0", "-ot", "ffn=CUDA0"]),  # a CPU layer's tensors sent to the GPU
    "qwen3-nommap-ngl0": ("qwen3", {}, ["-ngl", "0", "-lm", "none"]),  # CPU tensors in CUDA_Host, not mapped
    "qwen3-nommap-ngl2": ("qwen3", {}, ["-ngl", "2", "-lm", "none"]),
    "qwen3-sm-none": ("qwen3", {}, ["-ngl", "99", "-sm", "none"]),
    "qwen3-ngl2-np4-ctk": ("qwen3", WIDE, ["-ngl", "2", "-np", "4", "-ctk", "q8_0"]),
    "gpt_oss-ngl2": ("gpt_oss", {}, ["-ngl", "2"]),  # both caches split, MXFP4 experts
    "deepseek_v3-ngl2": ("deepseek_v3", {}, ["-ngl", "2"]),  # MLA: K only
    # the converted LFM2 of the recurrent suite (OFFLOAD_CONVERTED): its RS buffers split with the layers
    "lfm2-ngl2-np2": ("lfm2", {}, ["-ngl", "2", "-np", "2"]),
    # a vocabulary and a context wide enough for a padding slip to show in the MiB printed
    "qwen3-vocab-ngl2-c4096": ("qwen3", {"vocab_size": 32768}, ["-c", "4096", "-ngl", "2"]),
    # k-quants (OFFLOAD_TYPES) in rows of 256 and 768, which the GPU pads to 512 values and the CPU does not
    "llama-kquant-ngl3": ("llama", KQUANT, ["-c", "1024", "-ngl", "3"]),
    "llama-kquant-nommap-ngl2": ("llama", KQUANT, ["-ngl", "2", "-lm", "none"]),
    "llama-kquant-ngl99-np2": ("llama", KQUANT, ["-c", "2048", "-ngl", "99", "-np", "2", "-ctk", "q4_0"]),
    "qwen3_moe-kquant-ncmoe2": ("qwen3_moe", {**KQUANT, "moe_intermediate_size": 256},
                                ["-c", "1024", "-ngl", "99", "--n-cpu-moe", "2"]),
    # the converted Gemma 3n of 22 layers: per_layer_token_embd stays on the CPU; 20 cached layers split
    "gemma3n-22-ngl12": ("gemma3n_text", {}, ["-c", "4096", "-ngl", "12"]),
}
OFFLOAD_CONVERTED = {"lfm2-ngl2-np2": RECORDED / "recurrent" / "lfm2-np4.gguf.gz",
                     "gemma3n-22-ngl12": RECORDED / "converted" / "gemma3n_text-22-swa.gguf.gz"}
OFFLOAD_TYPES = {name: ("Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K", "IQ4_XS", "Q8_0")
                 for name in OFFLOAD_RUNS if "-kquant" in name}
OFFLOADED = re.compile(r"(load_tensors: offloaded .*|" + LINE.pattern[1:])


def offload_run(name: str, where: Path) -> tuple[Path, list[str]]:
    """The run's GGUF, written to `where`, and its llama.cpp options."""
    import gzip

    model_type, changes, args = OFFLOAD_RUNS[name]
    path = where / f"{name}.gguf"
    if name in OFFLOAD_CONVERTED:
        path.write_bytes(gzip.decompress(OFFLOAD_CONVERTED[name].read_bytes()))
    else:
        write_gguf({**tiny_config(model_type), **changes}, path, OFFLOAD_TYPES.get(name, TYPES), runnable=True)
    return path, args if "-c" in args else ["-c", "256", *args]


def gpu_build_says(path: Path, args: list[str]) -> list[str]:
    """gptcalc's lines for a one-GPU build running `path` with these llama.cpp options."""
    result = CliRunner().invoke(main, ["memory", str(path), "--engine", "llamacpp", "--json", *gptcalc_options(args)])
    assert result.exit_code == 0, result.output
    return engine_lines("\n".join(json.loads(result.output)["server_says"]), OFFLOADED)


@pytest.mark.parametrize("name", sorted(OFFLOAD_RUNS))
def test_recorded_llamacpp_offload(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp's CUDA build printed for this run (tests/data/llamacpp/offload/NAME.log)."""
    recorded = engine_lines((RECORDED / "offload" / f"{name}.log").read_text(), OFFLOADED)
    assert recorded[0].startswith("load_tensors: offloaded") and any("model buffer" in line for line in recorded), name
    assert gpu_build_says(*offload_run(name, tmp_path)) == recorded


def test_every_offload_run_is_recorded() -> None:
    assert sorted(p.stem for p in (RECORDED / "offload").glob("*.log")) == sorted(OFFLOAD_RUNS)


@pytest.mark.parametrize("name", sorted(OFFLOAD_RUNS))
def test_live_llamacpp_offload(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """llama.cpp's model, output, KV and RS buffer lines under -ngl / -ot / --n-cpu-moe / -nkvo / -lm none equal
    gptcalc's (calc/analysis/memory/llamacpp_devices.py)."""
    binary = llamacpp_binary(request, "a CUDA build of llama.cpp")
    path, args = offload_run(name, tmp_path)
    log, status = completion_log(binary, path, [*args, "-fit", "off"])
    if "CUDA0" not in log:  # the device list llama.cpp prints at start-up names it
        pytest.skip(f"not a CUDA build, or no GPU (exit {status}): {log[-500:]}")
    printed = engine_lines(log, OFFLOADED)
    if request.config.getoption("--llamacpp-record"):
        (RECORDED / "offload").mkdir(parents=True, exist_ok=True)
        (RECORDED / "offload" / f"{name}.log").write_text("\n".join(printed) + "\n")
    assert gpu_build_says(path, args) == printed
