"""`memory --checkpoint`: weights as a checkpoint stores them, read from its headers.

The files are full-size and sparse (tests/checkpoint_files.py): the header is real, the data
never written. Each layout is the one its publisher documents, and every expected figure is
computed here from the shapes, independently of the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from checkpoint_files import Layout, numel, write_safetensors, WIDTH

# meta-llama/Llama-3.1-8B: d_model 4096, 32 layers, 32 heads, 8 KV heads x 128, d_ff 14336, vocab 128256, untied.
# source: https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
D, LAYERS, KV, FF, VOCAB = 4096, 32, 8 * 128, 14336, 128256
MATRICES = {"self_attn.q_proj": (D, D), "self_attn.k_proj": (KV, D), "self_attn.v_proj": (KV, D),
            "self_attn.o_proj": (D, D), "mlp.gate_proj": (FF, D), "mlp.up_proj": (FF, D), "mlp.down_proj": (D, FF)}
G = 128  # GPTQ group size
KEPT = 2 * VOCAB * D + D * (2 * LAYERS + 1)  # parameters FP8 and GPTQ keep in BF16: embeddings, LM head, norms


def llama31(matrix: "callable") -> Layout:  # type: ignore[valid-type]
    """Llama-3.1-8B's tensors with each linear layer laid out by `matrix(prefix, out, in)`;
    embeddings, norms and LM head in BF16 (what FP8 and GPTQ checkpoints keep)."""
    layout: Layout = {"model.embed_tokens.weight": ("BF16", (VOCAB, D))}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        layout[p + "input_layernorm.weight"] = ("BF16", (D,))
        layout[p + "post_attention_layernorm.weight"] = ("BF16", (D,))
        for name, (out, inp) in MATRICES.items():
            layout.update(matrix(p + name, out, inp))
    layout.update({"model.norm.weight": ("BF16", (D,)), "lm_head.weight": ("BF16", (VOCAB, D))})
    return layout


def fp8(prefix: str, out: int, inp: int) -> Layout:
    """compressed-tensors FP8 (neuralmagic's Meta-Llama-3.1-8B-Instruct-FP8): an F8_E4M3 weight,
    one F32 weight_scale and one F32 input_scale per linear layer.
    # source: https://github.com/vllm-project/vllm/pull/4332 (weight_scale / input_scale per tensor)"""
    return {prefix + ".weight": ("F8_E4M3", (out, inp)), prefix + ".weight_scale": ("F32", (1,)),
            prefix + ".input_scale": ("F32", (1,))}


def gptq(prefix: str, out: int, inp: int) -> Layout:
    """AutoGPTQ's QuantLinear buffers at 4 bits, group 128: qweight int32 [in/8, out], qzeros int32
    [in/128, out/8], scales fp16 [in/128, out], g_idx int32 [in].
    # source: https://github.com/AutoGPTQ/AutoGPTQ/blob/058fd80a72d63d992347e3a23dcd5757449a9e2d/auto_gptq/nn_modules/qlinear/qlinear_cuda.py"""
    return {prefix + ".qweight": ("I32", (inp // 8, out)), prefix + ".qzeros": ("I32", (inp // G, out // 8)),
            prefix + ".scales": ("F16", (inp // G, out)), prefix + ".g_idx": ("I32", (inp,))}


def data_bytes(layout: Layout) -> int:
    return sum(numel(shape) * WIDTH[dtype] for dtype, shape in layout.values())


def run_json(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["memory", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt")
    return {name: write_safetensors(root / name / "model.safetensors", llama31(matrix))
            for name, matrix in (("fp8", fp8), ("gptq", gptq))}


def test_fp8_checkpoint_bytes_by_component(files: dict[str, Path]) -> None:
    """Every byte on disk is a weight's: the total is the file's data, and each projection carries
    its two 4-byte scales per layer."""
    data = run_json("llama-3.1-8b", "--checkpoint", str(files["fp8"]), "--seq", "8192")
    w = data["weights"]
    # source for 8,030,261,248 parameters: presets/llama-3.1-8b.yaml (keras-hub's llama3.1_8b preset)
    assert w["total_bytes"] == data_bytes(llama31(fp8)) == 2 * KEPT + (8_030_261_248 - KEPT) + 7 * LAYERS * 8
    assert w["components"]["q"] == LAYERS * (D * D + 8)
    assert w["components"]["k"] == LAYERS * (KV * D + 8)
    assert w["components"]["mlp_down"] == LAYERS * (FF * D + 8)
    assert w["components"]["token_embedding"] == w["components"]["lm_head"] == VOCAB * D * 2
    assert w["checkpoint"]["dtypes"] == ["BF16", "F32", "F8_E4M3"] and w["checkpoint"]["not_placed"] == []
    kv = run_json("llama-3.1-8b", "--seq", "8192")["kv_cache"]["total_bytes"]
    assert data["total_bytes"] == w["total_bytes"] + kv  # the cache does not follow the weights' format


def test_gptq_checkpoint_matches_the_gptq_scheme(files: dict[str, Path]) -> None:
    """GPTQ's packed tensors on disk hold exactly the bits `--quant gptq-int4` computes from its formula."""
    stored = run_json("llama-3.1-8b", "--checkpoint", str(files["gptq"]))["weights"]
    scheme = run_json("llama-3.1-8b", "--quant", "gptq-int4")["weights"]
    assert stored["components"] == scheme["components"]
    packed = sum(i * o // 2 + (i // G) * (o // 8) * 4 + (i // G) * o * 2 + i * 4 for o, i in MATRICES.values())
    assert stored["total_bytes"] == data_bytes(llama31(gptq)) == 2 * KEPT + LAYERS * packed == 5_732_835_328
    assert stored["dtype"] == "checkpoint" and stored["params"] == 8_030_261_248


def test_checkpoint_budget_and_tensor_parallel(files: dict[str, Path]) -> None:
    """The fit logic is unchanged: per GPU under --tp 2 each sharded component is half its bytes."""
    whole = run_json("llama-3.1-8b", "--checkpoint", str(files["fp8"]), "--seq", "4096")
    split = run_json("llama-3.1-8b", "--checkpoint", str(files["fp8"]), "--seq", "4096", "--tp", "2",
                     "--budget", "2xL4")
    assert split["weights"]["components"]["q"] * 2 == whole["weights"]["components"]["q"]
    assert split["weights"]["components"]["attn_norm"] == whole["weights"]["components"]["attn_norm"]
    assert split["budget"]["weights_bytes"] == split["weights"]["total_bytes"]
    assert split["budget"]["max_batch"] >= 1


def test_config_json_gives_the_model_and_buffers_are_left_out(tmp_path: Path) -> None:
    """No MODEL: the checkpoint's config.json is the spec; a rotary inv_freq buffer is stored but not a
    weight, and a tensor no weight owns is listed, never counted."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 97, "hidden_size": 32,
              "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    layout: Layout = {"model.embed_tokens.weight": ("F16", (97, 32)), "lm_head.weight": ("F16", (97, 32)),
                      "model.norm.weight": ("F16", (32,)), "model.layers.0.input_layernorm.weight": ("F16", (32,)),
                      "model.layers.0.post_attention_layernorm.weight": ("F16", (32,)),
                      "model.layers.0.self_attn.rotary_emb.inv_freq": ("F32", (4,)), "stray.tensor": ("F32", (3,))}
    for name, (out, inp) in {"self_attn.q_proj": (32, 32), "self_attn.k_proj": (16, 32), "self_attn.v_proj": (16, 32),
                             "self_attn.o_proj": (32, 32), "mlp.gate_proj": (40, 32), "mlp.up_proj": (40, 32),
                             "mlp.down_proj": (32, 40)}.items():
        layout[f"model.layers.0.{name}.weight"] = ("F16", (out, inp))
    write_safetensors(tmp_path / "model.safetensors", layout)
    (tmp_path / "config.json").write_text(json.dumps(config))
    data = run_json("--checkpoint", str(tmp_path))
    params = 2 * 97 * 32 + 3 * 32 + 2 * 32 * 32 + 2 * 16 * 32 + 3 * 40 * 32
    assert data["weights"]["params"] == params and data["weights"]["total_bytes"] == 2 * params
    assert data["weights"]["checkpoint"]["buffer_bytes"] == 16
    assert [t["name"] for t in data["weights"]["checkpoint"]["not_placed"]] == ["stray.tensor"]
    table = CliRunner().invoke(main, ["memory", "--checkpoint", str(tmp_path)])
    assert table.exit_code == 0 and "not counted: buffers 16 B, 1 tensors no weight owns (stray.tensor) 12 B" in table.stdout


@pytest.mark.parametrize("args, message", [
    (["gpt2-small"], "Error: --checkpoint "),  # another model's checkpoint
    (["llama-3.1-8b", "--dtype", "int4"], "Error: --checkpoint: the checkpoint fixes how weights are stored"),
    (["llama-3.1-8b", "--quant", "awq-int4"], "Error: --checkpoint: the checkpoint fixes how weights are stored"),
    (["--set", "n_layers=2"], "Error: --set changes MODEL"),
])
def test_checkpoint_errors(files: dict[str, Path], args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["memory", *args, "--checkpoint", str(files["fp8"])])
    assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_no_model_and_no_checkpoint_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["memory"])
    assert result.exit_code == 2 and "Missing argument 'MODEL'" in result.stderr
