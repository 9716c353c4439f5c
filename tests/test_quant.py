"""Quantisation companions and packed weights (calc/checkpoint/quant.py), and how a checkpoint report uses them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.checkpoint.quant import fp8_block_scale_shape, split_quantised, unpacked_shape
from calc.checkpoint.sources import TensorRecord
from calc.cli import main
from checkpoint_files import Layout, write_safetensors


def record(name: str, dtype: str, shape: tuple[int, ...]) -> TensorRecord:
    width = {"F32": 4, "BF16": 2, "U8": 1, "F8_E4M3": 1}[dtype]
    return TensorRecord(name, dtype, shape, math.prod(shape) * width, "model.safetensors")


# source: https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md (128x128 blocks, padded at the edge)
# and https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (hidden_size 7168, q_lora_rank 1536,
# kv_lora_rank 512 + qk_rope_head_dim 64 = 576, moe_intermediate_size 2048)
@pytest.mark.parametrize("weight, scale", [
    ((1536, 7168), (12, 56)),  # q_a_proj
    ((576, 7168), (5, 56)),  # kv_a_proj_with_mqa: 576 = 4.5 blocks, padded to 5
    ((2048, 7168), (16, 56)),  # an expert's gate_proj
    ((7168, 2048), (56, 16)),  # an expert's down_proj
])
def test_deepseek_v3_fp8_block_scale_shapes(weight: tuple[int, int], scale: tuple[int, int]) -> None:
    assert fp8_block_scale_shape(weight) == scale


@pytest.mark.parametrize("suffix, dtype, shape, words", [
    ("weight_scale_inv", "F32", (5, 56), "128x128 block"),
    ("weight_scale", "F32", (), "per tensor or per channel"),
    ("input_scale", "F32", (), "activation scale"),
])
def test_fp8_companions_are_named_and_set_aside(suffix: str, dtype: str, shape: tuple[int, ...], words: str) -> None:
    name = f"model.layers.0.self_attn.kv_a_proj_with_mqa.{suffix}"
    tensor, companion = split_quantised(record(name, dtype, shape))
    assert companion is not None and companion.tensor is tensor
    assert companion.base == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" and words in companion.scheme


def test_an_fp8_weight_is_a_parameter_counted_as_stored() -> None:
    weight = record("model.layers.0.self_attn.q_a_proj.weight", "F8_E4M3", (1536, 7168))
    assert split_quantised(weight) == (weight, None)


# gpt-oss-20b: 24 layers, 32 experts, hidden_size 2880, intermediate_size 2880.
# source: https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
# Blocks [E, 2I, H/32, 16] U8 and scales [E, 2I, H/32]; dequantised to [E, H, 2I]:
# source: https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/mxfp4.py
E, H, I, LAYERS = 32, 2880, 2880, 24


def gpt_oss_20b_experts(layer: int) -> list[TensorRecord]:
    p = f"model.layers.{layer}.mlp."
    return [
        record(p + "experts.gate_up_proj_blocks", "U8", (E, 2 * I, H // 32, 16)),
        record(p + "experts.gate_up_proj_scales", "U8", (E, 2 * I, H // 32)),
        record(p + "experts.gate_up_proj_bias", "BF16", (E, 2 * I)),
        record(p + "experts.down_proj_blocks", "U8", (E, H, I // 32, 16)),
        record(p + "experts.down_proj_scales", "U8", (E, H, I // 32)),
        record(p + "experts.down_proj_bias", "BF16", (E, H)),
        record(p + "router.weight", "BF16", (E, H)),
        record(p + "router.bias", "BF16", (E,)),
    ]


def test_mxfp4_blocks_stand_for_their_unpacked_parameter() -> None:
    blocks, scales = gpt_oss_20b_experts(0)[:2]
    tensor, companion = split_quantised(blocks)
    assert companion is None
    assert tensor.name == "model.layers.0.mlp.experts.gate_up_proj" and tensor.shape == (E, H, 2 * I)
    assert tensor.numel == 2 * blocks.nbytes  # two 4-bit values per stored byte
    assert tensor.nbytes == blocks.nbytes  # the bytes are what is stored
    scale, companion = split_quantised(scales)
    assert companion is not None and companion.base == tensor.name and "one E8M0 exponent per 32" in companion.scheme
    assert scales.numel * 32 == tensor.numel  # one scale per block of 32 values


def test_gpt_oss_20b_mlp_parameters_match_the_model_card() -> None:
    """Routers, expert biases and the MXFP4 experts counted from the packed elements: the model card's MLP row."""
    counted = scales = 0
    for layer in range(LAYERS):
        for stored in gpt_oss_20b_experts(layer):
            tensor, companion = split_quantised(stored)
            if companion is None:
                counted += tensor.numel
            else:
                scales += stored.nbytes
    # source: https://arxiv.org/abs/2508.10925 (gpt-oss model card, Table 1: gpt-oss-20b MLP 19.12B)
    assert round(counted / 1e9, 2) == 19.12
    # source: the same model card: MXFP4 weights take 4.25 bits per parameter (4 bits + 8 bits / 32)
    experts = counted - LAYERS * (E * H + E + E * (2 * I + H))
    assert (experts * 4 + scales * 8) / experts == 4.25


@pytest.mark.parametrize("stored", [
    record("model.layers.0.mlp.experts.gate_up_proj_blocks", "BF16", (E, 2 * I, H // 32, 16)),  # not bytes
    record("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", (E, 2 * I, H // 16, 8)),  # not 16-byte blocks
    record("model.layers.0.self_attn.q_proj.weight_scale_inv", "U8", (12, 56)),  # a scale is not stored as U8
])
def test_a_look_alike_is_left_for_the_name_maps(stored: TensorRecord) -> None:
    assert split_quantised(stored) == (stored, None)


def test_unpacked_shape_of_a_single_matrix() -> None:
    assert unpacked_shape((2880, 90, 16)) == (2880, 2880)  # [R, G, 16] -> [R, G*32], no expert axis to swap


# --- through the checkpoint report: an FP8 Llama checkpoint as vLLM loads them -----------------------------

D, KV, FF, VOCAB, N_LAYERS = 64, 32, 96, 128, 2


def fp8_llama(static: bool) -> Layout:
    """A tiny Llama with every linear in F8_E4M3 plus its scales; norms and embeddings in BF16.
    # source: https://github.com/vllm-project/vllm/pull/4332 (FP8 checkpoints: weight_scale, input_scale)
    """
    layout: Layout = {"model.embed_tokens.weight": ("BF16", (VOCAB, D))}
    for i in range(N_LAYERS):
        p = f"model.layers.{i}."
        layout[p + "input_layernorm.weight"] = ("BF16", (D,))
        layout[p + "post_attention_layernorm.weight"] = ("BF16", (D,))
        for name, shape in (("self_attn.q_proj", (D, D)), ("self_attn.k_proj", (KV, D)), ("self_attn.v_proj", (KV, D)),
                            ("self_attn.o_proj", (D, D)), ("mlp.gate_proj", (FF, D)), ("mlp.up_proj", (FF, D)),
                            ("mlp.down_proj", (D, FF))):
            layout[p + name + ".weight"] = ("F8_E4M3", shape)
            layout[p + name + ".weight_scale"] = ("F32", ())
            if static:
                layout[p + name + ".input_scale"] = ("F32", ())
    layout.update({"model.norm.weight": ("BF16", (D,)), "lm_head.weight": ("BF16", (VOCAB, D))})
    return layout


def fp8_dir(tmp_path: Path, static: bool = True) -> Path:
    write_safetensors(tmp_path / "model.safetensors", fp8_llama(static))
    config = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": D, "intermediate_size": FF,
              "num_hidden_layers": N_LAYERS, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64, "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def expected_parameters() -> int:
    per_layer = 2 * D + D * D + 2 * KV * D + D * D + 3 * FF * D
    return VOCAB * D + N_LAYERS * per_layer + D + VOCAB * D


def test_inspect_sets_fp8_scales_apart_and_counts_the_weights(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["inspect", str(fp8_dir(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True and data["unknown"] == []
    assert data["parameters"] == expected_parameters()
    companions = data["quantisation_companions"]
    assert len(companions) == 2 * 7 * N_LAYERS
    assert {c["base"] for c in companions} == {n for n, (dtype, _) in fp8_llama(True).items() if dtype == "F8_E4M3"}
    assert data["tensor_bytes"] == sum(math.prod(s) * {"BF16": 2, "F8_E4M3": 1, "F32": 4}[d]
                                       for d, s in fp8_llama(True).values())
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert "quantisation scales (not parameters)" in result.output
    assert f"FP8 weight scale (per tensor or per channel) x {7 * N_LAYERS}: F32, {4 * 7 * N_LAYERS} B" in result.output


def test_verify_agrees_and_load_refuses_to_dequantise(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = fp8_dir(tmp_path, static=False)
    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(root)])
    assert result.exit_code == 0, result.output
    assert "quantisation companions, stored but not parameters: 14 tensors" in result.output
    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(root), "--load"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"Error: --load: {root} is quantised (14 scale tensors")
    assert "does not dequantise" in result.stderr and result.stderr.count("\n") == 1
