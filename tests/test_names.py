"""Tensor names per model_type: what each stored name means, at full size, for both expert layouts.

Golden shapes are the config.json values of each preset multiplied out by hand (the presets hold the
configs verbatim; URLs in the presets), as the checkpoints on the Hub store them. Names are the ones
in those checkpoints' model.safetensors.index.json files.
"""

from __future__ import annotations

import pytest

from calc.checkpoint.layouts import LAYOUTS
from calc.checkpoint.names import classify, component_counts, expected_shapes, tensor_table
from calc.spec.load import load_spec
from calc.spec.model import spec_from_dict


@pytest.mark.parametrize(("preset", "name", "shape"), [
    # source: https://huggingface.co/mistralai/Mixtral-8x7B-v0.1 (model.safetensors.index.json names;
    # hidden_size 4096, intermediate_size 14336, 8 experts)
    ("mixtral-8x7b", "model.layers.0.block_sparse_moe.experts.7.w1.weight", (14336, 4096)),
    ("mixtral-8x7b", "model.layers.31.block_sparse_moe.experts.0.w2.weight", (4096, 14336)),
    ("mixtral-8x7b", "model.layers.5.block_sparse_moe.gate.weight", (8, 4096)),
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V3 (hidden 7168, 128 heads, q_lora_rank 1536,
    # kv_lora_rank 512, qk 128 + 64, v 128, 256 experts of 2048)
    ("deepseek-v3", "model.layers.3.mlp.experts.255.down_proj.weight", (7168, 2048)),
    ("deepseek-v3", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", (512 + 64, 7168)),
    ("deepseek-v3", "model.layers.0.self_attn.q_b_proj.weight", (128 * 192, 1536)),
    ("deepseek-v3", "model.layers.60.self_attn.kv_b_proj.weight", (128 * (128 + 128), 512)),
    ("deepseek-v3", "model.layers.3.mlp.shared_experts.gate_proj.weight", (2048, 7168)),
    ("deepseek-v3", "model.layers.2.mlp.down_proj.weight", (7168, 18432)),
])
def test_hub_layout_shapes(preset: str, name: str, shape: tuple[int, ...]) -> None:
    spec = load_spec(preset)
    assert expected_shapes(spec, hub=True)[name] == shape
    assert classify(name, spec) is not None and not classify(name, spec).is_buffer


def test_fused_and_hub_experts_count_the_same() -> None:
    """transformers 5's fused [E, 2f, d] gate_up_proj splits into the per-expert gate and up it stands for."""
    spec = load_spec("mixtral-8x7b")
    table = tensor_table(spec)
    fused = classify("model.layers.0.mlp.experts.gate_up_proj", spec)
    assert fused.target == ("experts_gate", "experts_up")
    split = component_counts(fused, expected_shapes(spec)["model.layers.0.mlp.experts.gate_up_proj"])
    assert split == {"experts_gate": 8 * 14336 * 4096, "experts_up": 8 * 14336 * 4096}
    assert table.is_hub(["model.layers.0.block_sparse_moe.experts.3.w3.weight"])
    assert not table.is_hub(["model.layers.0.mlp.experts.gate_up_proj"])
    hub = classify("model.layers.0.block_sparse_moe.gate.weight", spec)
    assert hub.name == "model.layers.0.mlp.gate.weight"  # the same router under transformers 5's name


@pytest.mark.parametrize(("preset", "name"), [
    ("deepseek-v3", "model.layers.3.mlp.gate.e_score_correction_bias"),
    ("llama-2-7b", "model.layers.0.self_attn.rotary_emb.inv_freq"),
    ("gpt2-small", "h.11.attn.bias"),
    ("gpt2-small", "transformer.h.0.attn.masked_bias"),
    ("gemma-2-2b", "model.embed_tokens.embed_scale"),
])
def test_buffers_are_classified_as_buffers(preset: str, name: str) -> None:
    meaning = classify(name, load_spec(preset))
    assert meaning is not None and meaning.is_buffer and component_counts(meaning, (7,)) == {}


@pytest.mark.parametrize(("preset", "name"), [
    ("llama-3-8b", "model.layers.32.self_attn.q_proj.weight"),  # 32 layers: 0..31
    ("llama-3-8b", "model.layers.0.self_attn.qkv_proj.weight"),  # fused in Phi-3, not in Llama
    ("mixtral-8x7b", "model.layers.0.mlp.gate_proj.weight"),  # a MoE layer has no dense MLP
    ("gpt2-small", "score.weight"),
])
def test_names_the_spec_has_no_place_for_are_unknown(preset: str, name: str) -> None:
    assert classify(name, load_spec(preset)) is None


def test_layer_kinds_have_their_own_names() -> None:
    """DeepSeek-V3: layers 0-2 dense, 3-60 MoE; gemma-3: sandwich norms in every layer."""
    spec = load_spec("deepseek-v3")
    assert classify("model.layers.2.mlp.gate_proj.weight", spec).target == "mlp_gate"
    assert classify("model.layers.3.mlp.gate_proj.weight", spec) is None
    assert classify("model.layers.3.mlp.experts.gate_up_proj", spec).layer == 3


def test_every_model_type_has_a_layout() -> None:
    from calc.arch import ADAPTERS

    assert set(ADAPTERS) <= set(LAYOUTS)


def test_custom_spec_takes_llamas_names() -> None:
    spec = spec_from_dict({"family": "llama", "vocab_size": 10, "d_model": 8, "n_layers": 1, "n_heads": 2,
                           "n_positions": 16}, "tiny")
    assert "model.layers.0.mlp.gate_proj.weight" in expected_shapes(spec)


def test_deepseek_v3_full_size_hub_checkpoint_with_its_mtp_layer(tmp_path) -> None:
    """A sparse file with DeepSeek-V3's every tensor as the Hub stores it (one per expert, the
    e_score_correction_bias buffers, the MTP layer 61 with its embedding and head copies), in BF16:
    every name recognised, every shape as the spec says, the MTP layer beside the total, not in it."""
    import time

    from calc.analysis.count import count
    from calc.checkpoint.report import read_checkpoint
    from checkpoint_files import write_safetensors

    spec = load_spec("deepseek-v3")
    table = tensor_table(spec)
    layout = {name: ("BF16", shape) for name, shape in table.expected_shapes(hub=True, buffers=True, mtp=True).items()}
    assert "model.layers.61.shared_head.head.weight" in layout and "model.layers.61.mlp.experts.255.w1.weight" not in layout
    path = write_safetensors(tmp_path / "model.safetensors", layout)
    start = time.perf_counter()
    report = read_checkpoint(str(path), spec)
    elapsed = time.perf_counter() - start
    assert report.ok, ([t.name for t in report.unknown[:3]], [m.describe() for m in report.mismatches[:3]])
    analytic = count(spec)
    assert report.breakdown.total == analytic.total == 671_026_404_352  # source: transformers' count, presets/deepseek-v3.yaml
    assert report.breakdown.extra == {k: v for k, v in analytic.extra.items() if k.startswith("mtp")}
    assert len(report.buffers) == 58  # e_score_correction_bias of the 58 MoE layers (the MTP layer's counts with it)
    assert elapsed < 10, elapsed
