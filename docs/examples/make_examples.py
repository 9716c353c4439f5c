"""Write the tiny checkpoints docs/checkpoints.md runs its commands on (a few kB, committed).

They copy the real layouts at toy sizes: `tiny-gpt2` is openai-community/gpt2's model.safetensors
(no `transformer.` prefix, no lm_head, Conv1D [in, out], one causal-mask buffer per block) with
d_model 8; `tiny-llama2` is a sharded Llama-2 checkpoint (two shards, an index, rotary inv_freq
buffers); `bad/` holds broken files. Weights are zeros: only the headers matter here.
Run: python docs/examples/make_examples.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIDTH = {"F32": 4, "F16": 2}


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        size = WIDTH[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def tiny_gpt2() -> None:
    d, ff, ctx, vocab = 8, 32, 16, 64
    t: dict[str, tuple[str, list[int]]] = {"wte.weight": ("F32", [vocab, d]), "wpe.weight": ("F32", [ctx, d])}
    for i in range(2):
        h = f"h.{i}."
        t.update({h + "ln_1.weight": ("F32", [d]), h + "ln_1.bias": ("F32", [d]),
                  h + "attn.bias": ("F32", [1, 1, ctx, ctx]),
                  h + "attn.c_attn.weight": ("F32", [d, 3 * d]), h + "attn.c_attn.bias": ("F32", [3 * d]),
                  h + "attn.c_proj.weight": ("F32", [d, d]), h + "attn.c_proj.bias": ("F32", [d]),
                  h + "ln_2.weight": ("F32", [d]), h + "ln_2.bias": ("F32", [d]),
                  h + "mlp.c_fc.weight": ("F32", [d, ff]), h + "mlp.c_fc.bias": ("F32", [ff]),
                  h + "mlp.c_proj.weight": ("F32", [ff, d]), h + "mlp.c_proj.bias": ("F32", [d])})
    t.update({"ln_f.weight": ("F32", [d]), "ln_f.bias": ("F32", [d])})
    safetensors(HERE / "tiny-gpt2" / "model.safetensors", t)
    config = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": ctx, "n_embd": d, "n_layer": 2, "n_head": 2}
    (HERE / "tiny-gpt2" / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def tiny_llama2() -> None:
    d, kv, ff, vocab = 16, 8, 40, 64
    shards: list[dict[str, tuple[str, list[int]]]] = [{"model.embed_tokens.weight": ("F16", [vocab, d])}, {}]
    for i in range(2):
        p = f"model.layers.{i}."
        shards[i].update({p + "input_layernorm.weight": ("F16", [d]), p + "self_attn.q_proj.weight": ("F16", [d, d]),
                          p + "self_attn.k_proj.weight": ("F16", [kv, d]), p + "self_attn.v_proj.weight": ("F16", [kv, d]),
                          p + "self_attn.o_proj.weight": ("F16", [d, d]), p + "self_attn.rotary_emb.inv_freq": ("F32", [2]),
                          p + "post_attention_layernorm.weight": ("F16", [d]), p + "mlp.gate_proj.weight": ("F16", [ff, d]),
                          p + "mlp.up_proj.weight": ("F16", [ff, d]), p + "mlp.down_proj.weight": ("F16", [d, ff])})
    shards[1].update({"model.norm.weight": ("F16", [d]), "lm_head.weight": ("F16", [vocab, d])})
    weight_map, total = {}, 0
    for n, tensors in enumerate(shards, start=1):
        name = f"model-{n:05d}-of-00002.safetensors"
        total += safetensors(HERE / "tiny-llama2" / name, tensors)
        weight_map.update({tensor: name for tensor in tensors})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (HERE / "tiny-llama2" / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = {"model_type": "llama", "vocab_size": vocab, "max_position_embeddings": 32, "hidden_size": d,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": ff}
    (HERE / "tiny-llama2" / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def bad() -> None:
    good = (HERE / "tiny-gpt2" / "model.safetensors").read_bytes()
    (HERE / "bad").mkdir(exist_ok=True)
    (HERE / "bad" / "truncated.safetensors").write_bytes(good[: len(good) // 2])
    (HERE / "bad" / "three-bytes.safetensors").write_bytes(b"abc")
    header = b'{"wte.weight":{"dtype":"F32","shape":[64,8],"data_offsets":[0,2000]}}'
    (HERE / "bad" / "wrong-size.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(2000))


if __name__ == "__main__":
    tiny_gpt2()
    tiny_llama2()
    bad()
