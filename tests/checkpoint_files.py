"""Checkpoint files for tests, written from scratch (not by the code under test).

`write_safetensors` lays tensors out back to back as the safetensors format says (8-byte
little-endian header length, JSON header padded with spaces to 8 bytes, then the data) and
makes the file sparse: the header is written, then the file is truncated to its full length,
so a 138 GB checkpoint costs a few kilobytes of disk. The layouts below are the published ones.

The fixtures at the end are shared by the checkpoint, inspect and verify tests; a test module
uses one by importing it (`from checkpoint_files import gpt2_file, tiny`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WIDTH = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}

Layout = dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)


def numel(shape: tuple[int, ...]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def header_bytes(layout: Layout, metadata: dict[str, str] | None = None) -> tuple[bytes, int]:
    """The length-prefixed, space-padded header of a file holding `layout`, and its data size."""
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in layout.items():
        size = numel(shape) * WIDTH[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def write_safetensors(path: Path, layout: Layout, metadata: dict[str, str] | None = None) -> Path:
    """A sparse safetensors file: real header, zero-filled (unwritten) data of the right length."""
    prefix, data_size = header_bytes(layout, metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(prefix)
        handle.truncate(len(prefix) + data_size)
    return path


def write_raw(path: Path, header: bytes | str, data_size: int = 0, length: int | None = None) -> Path:
    """A file with an arbitrary header (for bad-file tests): length prefix, header, zero data."""
    raw = header.encode() if isinstance(header, str) else header
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw) if length is None else length) + raw)
        handle.truncate(8 + len(raw) + data_size)
    return path


def write_sharded(directory: Path, shards: list[Layout], total_size: int | None = None) -> Path:
    """`model-0000i-of-0000n.safetensors` files plus `model.safetensors.index.json`."""
    weight_map, total = {}, 0
    for i, layout in enumerate(shards, start=1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(directory / name, layout)
        for tensor, (dtype, shape) in layout.items():
            weight_map[tensor] = name
            total += numel(shape) * WIDTH[dtype]
    index = {"metadata": {"total_size": total if total_size is None else total_size}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return directory


def gpt2_small_layout() -> Layout:
    """openai-community/gpt2's model.safetensors: 160 F32 tensors, no `transformer.` prefix, no
    lm_head (tied), Conv1D weights [in, out], a [1, 1, 1024, 1024] causal mask per block.
    # source: https://huggingface.co/openai-community/gpt2 (model.safetensors tensor list; issue 5)
    """
    d, ff, ctx = 768, 3072, 1024
    layout: Layout = {"wte.weight": ("F32", (50257, d)), "wpe.weight": ("F32", (ctx, d))}
    for i in range(12):
        h = f"h.{i}."
        layout.update({
            h + "ln_1.weight": ("F32", (d,)), h + "ln_1.bias": ("F32", (d,)),
            h + "attn.bias": ("F32", (1, 1, ctx, ctx)),
            h + "attn.c_attn.weight": ("F32", (d, 3 * d)), h + "attn.c_attn.bias": ("F32", (3 * d,)),
            h + "attn.c_proj.weight": ("F32", (d, d)), h + "attn.c_proj.bias": ("F32", (d,)),
            h + "ln_2.weight": ("F32", (d,)), h + "ln_2.bias": ("F32", (d,)),
            h + "mlp.c_fc.weight": ("F32", (d, ff)), h + "mlp.c_fc.bias": ("F32", (ff,)),
            h + "mlp.c_proj.weight": ("F32", (ff, d)), h + "mlp.c_proj.bias": ("F32", (d,)),
        })
    layout.update({"ln_f.weight": ("F32", (d,)), "ln_f.bias": ("F32", (d,))})
    return layout


def llama2_layer(i: int, d: int, kv: int, ff: int, inv_freq: int) -> Layout:
    """One Llama-2 block as meta-llama's *-hf checkpoints store it (F16, plus F32 inv_freq)."""
    p = f"model.layers.{i}."
    return {
        p + "input_layernorm.weight": ("F16", (d,)),
        p + "self_attn.q_proj.weight": ("F16", (d, d)),
        p + "self_attn.k_proj.weight": ("F16", (kv, d)),
        p + "self_attn.v_proj.weight": ("F16", (kv, d)),
        p + "self_attn.o_proj.weight": ("F16", (d, d)),
        p + "self_attn.rotary_emb.inv_freq": ("F32", (inv_freq,)),
        p + "post_attention_layernorm.weight": ("F16", (d,)),
        p + "mlp.gate_proj.weight": ("F16", (ff, d)),
        p + "mlp.up_proj.weight": ("F16", (ff, d)),
        p + "mlp.down_proj.weight": ("F16", (d, ff)),
    }


def llama2_70b_shards(n_shards: int = 15, n_layers: int = 80) -> list[Layout]:
    """Llama-2-70b-hf: d_model 8192, 8 KV heads x 128, d_ff 28672, vocab 32000, F16, 15 shards.
    # source: https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json
    """
    d, kv, ff, vocab = 8192, 8 * 128, 28672, 32000
    shards: list[Layout] = [{} for _ in range(n_shards)]
    shards[0]["model.embed_tokens.weight"] = ("F16", (vocab, d))
    for i in range(n_layers):
        shards[i * n_shards // n_layers].update(llama2_layer(i, d, kv, ff, 64))
    shards[-1].update({"model.norm.weight": ("F16", (d,)), "lm_head.weight": ("F16", (vocab, d))})
    return shards


# --- shared fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """openai-community/gpt2's model.safetensors at full size (sparse), with no config.json beside it."""
    return write_safetensors(tmp_path_factory.mktemp("gpt2") / "model.safetensors", gpt2_small_layout())


# Tiny models of each supported model_type: (transformers config class, model class, config fields).
TINY = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=97, n_positions=32, n_embd=24, n_layer=2, n_head=4)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                                     tie_word_embeddings=True)),
}


@dataclass(frozen=True)
class TinyModel:
    root: Path  # single/ and sharded/ (save_pretrained, with config.json) and state.bin (torch.save)
    params: int  # torch's own count of the model's parameters (a tied weight once)
    model: Any  # the transformers model, in eval mode


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TinyModel]:
    """Each TINY model saved single-file, sharded and as a torch state dict."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    out = {}
    for name, (config_cls, model_cls, kwargs) in TINY.items():
        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kwargs)).eval()
        root = tmp_path_factory.mktemp(name)
        model.save_pretrained(root / "single")
        model.save_pretrained(root / "sharded", max_shard_size="8KB")
        torch.save(model.state_dict(), root / "state.bin")
        out[name] = TinyModel(root, sum(p.numel() for p in model.parameters()), model)
    return out
