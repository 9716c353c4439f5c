"""Tiny GGUF files written the way llama.cpp's converter writes them, for the GGUF reader's tests.

`write_gguf(config, path)` builds transformers' model of a config on the meta device and writes its
tensors with gguf-py's `GGUFWriter`, as convert_hf_to_gguf.py (llama.cpp's converter) does:

- names through gguf-py's `TensorNameMap` (`map_tensor_name`, conversion/base.py), with the
  converter's one rename first (`e_score_correction_bias` -> `e_score_correction.bias`, base.py:593);
- routed experts' fused `gate_up_proj` split into `gate_proj` / `up_proj` halves (conversion/qwen.py),
  MLA's `kv_b_proj` split per head into `k_b` (transposed) and `v_b` (conversion/deepseek.py:433-449);
- ggml shapes are torch's reversed; norms and 1-D tensors F32, matrices in the `types` given in turn
  (every type with blocks of 32, since the tiny models' rows are 32 or 48 wide);
- hyperparameters as TextModel.set_gguf_parameters (conversion/base.py) and DeepseekV2Model write them.

Random bytes stand in for weights: the reader never reads them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from tests.oracle import transformers_model

gguf = __import__("pytest").importorskip("gguf")

ARCH = {"llama": "llama", "qwen3": "qwen3", "qwen2": "qwen2", "qwen3_moe": "qwen3moe", "gemma3_text": "gemma3",
        "deepseek_v3": "deepseek2", "mistral": "llama", "lfm2": "lfm2", "qwen2_moe": "qwen2moe", "olmo2": "olmo2",
        "gemma2": "gemma2", "phi3": "phi3", "starcoder2": "starcoder2", "smollm3": "smollm3", "ministral3": "mistral3"}
# Every ggml type whose block divides a row of 32: the quantised ones, and the plain ones.
TYPES = ("Q8_0", "Q4_0", "Q5_1", "IQ4_NL", "Q4_1", "Q5_0", "MXFP4", "F16", "BF16")


def write_gguf(config: dict[str, Any], path: Path, types: tuple[str, ...] = TYPES, split_max_tensors: int = 0,
               runnable: bool = False, finite: bool = False) -> None:
    """A GGUF of the tiny `config` (a config.json mapping) at `path`. `runnable`: with the vocabulary llama.cpp
    needs to load it (a stub SentencePiece one of vocab_size tokens: n_vocab is its length), for the conformance suite.
    `finite`: F32 / F16 tensors hold small normal values, not random bytes (llama-quantize refuses NaN scales)."""
    model = transformers_model(copy.deepcopy(config))
    arch = ARCH[config["model_type"]]
    enum = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.TensorNameMap(enum, config["num_hidden_layers"])
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    _hyperparameters(writer, config)
    if runnable:
        vocab = config["vocab_size"]
        writer.add_tokenizer_model("llama")
        writer.add_token_list([f"<t{i}>" for i in range(vocab)])
        writer.add_token_scores([0.0] * vocab)
        writer.add_token_types([1] * vocab)
    cycle = iter(types * 10_000)
    for hf_name, shape in _converted(model, config):
        hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        hf_name += "" if hf_name.endswith((".weight", ".bias")) else ".weight"  # conversion/qwen.py: fused experts
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        kind = "F32" if len(shape) == 1 or name.endswith("norm.weight") else next(cycle)
        _add(writer, name, shape, kind, finite)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _converted(model: Any, config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, torch shape) of every tensor the converter writes: fused experts and kv_b split."""
    out, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # a tied head: save_pretrained stores it once, so the converter sees one
            continue
        seen.add(id(tensor))
        shape = tuple(tensor.shape)
        if name.endswith("experts.gate_up_proj"):
            half = (shape[0], shape[1] // 2, shape[2])
            out += [(name.replace("gate_up_proj", "gate_proj"), half), (name.replace("gate_up_proj", "up_proj"), half)]
        elif name.endswith("conv.conv.weight") and config["model_type"] == "lfm2":  # LFM2Model.modify_tensors: squeeze(1)
            out.append((name, (shape[0], shape[2])))
        elif name.endswith("kv_b_proj.weight"):
            heads, nope, v = config["num_attention_heads"], config["qk_nope_head_dim"], config["v_head_dim"]
            out += [(name.replace("kv_b_proj", "k_b_proj"), (heads, config["kv_lora_rank"], nope)),
                    (name.replace("kv_b_proj", "v_b_proj"), (heads, v, config["kv_lora_rank"]))]
        else:
            out.append((name, shape))
    return out


def _add(writer: Any, name: str, shape: tuple[int, ...], kind: str, finite: bool = False) -> None:
    """Random bytes of `kind` (F16 where its block does not divide the row, as llama-quantize falls back)."""
    if finite and kind in ("F32", "F16"):
        values = np.random.default_rng(0).normal(0, 0.02, shape)
        writer.add_tensor(name, values.astype(np.float32 if kind == "F32" else np.float16))
        return
    qtype = gguf.GGMLQuantizationType[kind]
    if shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        qtype = gguf.GGMLQuantizationType.F16
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(0).integers(0, 256, (*shape[:-1], shape[-1] // block * size), dtype=np.uint8)
    writer.add_tensor(name, data, raw_dtype=qtype)


def _hyperparameters(writer: Any, c: dict[str, Any]) -> None:
    """What TextModel.set_gguf_parameters writes from these configs' keys."""
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    if c["model_type"] != "lfm2":
        writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    kv = 1 if "kv_lora_rank" in c else c.get("num_key_value_heads", c["num_attention_heads"])  # MLA as MQA (deepseek.py:326)
    writer.add_head_count_kv([kv if t != "conv" else 0 for t in c["layer_types"]] if "layer_types" in c else kv)
    writer.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if "head_dim" in c:
        writer.add_key_length(c["head_dim"])
        writer.add_value_length(c["head_dim"])
    if "sliding_window" in c:
        writer.add_sliding_window(c["sliding_window"])
    experts = c.get("num_experts", c.get("n_routed_experts"))
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(c["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(c["moe_intermediate_size"])
    if "shared_expert_intermediate_size" in c:  # Qwen2MoeModel
        writer.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if c["model_type"] == "lfm2":  # LFM2Model: the adjusted width (Lfm2MLP), the conv's cache length
        writer.add_vocab_size(c["vocab_size"])
        writer.add_shortconv_l_cache(c.get("conv_L_cache", 3))
        ff = int(2 * c["intermediate_size"] / 3)
        writer.add_feed_forward_length(-(-ff // 256) * 256)  # block_multiple_of 256, multiplier 1.0 (defaults)
    if "kv_lora_rank" in c:  # DeepseekV2Model.set_gguf_parameters
        writer.add_vocab_size(c["vocab_size"])
        writer.add_leading_dense_block_count(c["first_k_dense_replace"])
        writer.add_q_lora_rank(c["q_lora_rank"])
        writer.add_kv_lora_rank(c["kv_lora_rank"])
        writer.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
        writer.add_value_length(c["kv_lora_rank"])
        writer.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        writer.add_value_length_mla(c["v_head_dim"])
        writer.add_rope_dimension_count(c["qk_rope_head_dim"])
        writer.add_expert_shared_count(c["n_shared_experts"])
        writer.add_expert_weights_scale(c["routed_scaling_factor"])
        writer.add_expert_weights_norm(c["norm_topk_prob"])
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


# --- llama.cpp's own converter, for the architectures whose converter classes the writer above does not follow ---
# (recurrent and hybrid: conv kernels squeezed, A_log -> -exp(A_log), per-arch ssm.* keys, DeltaNet's V reordered...)
# It runs in a subprocess from the llama.cpp source tree, with the vocabulary `write_gguf(runnable=True)` writes in
# place of every converter class's set_vocab: those read tokenizer files (and check a pre-tokenizer's hash) that a
# random tiny model has none of.
_CONVERT = """
import sys
from pathlib import Path
source, model, out = map(Path, sys.argv[1:4])
sys.path.insert(0, str(source))
sys.argv = ["convert_hf_to_gguf.py", str(model), "--outfile", str(out), "--outtype", *sys.argv[4:]]
import convert_hf_to_gguf as convert

def stub_vocab(self):
    vocab = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("llama")
    self.gguf_writer.add_token_list([f"<t{i}>" for i in range(vocab)])
    self.gguf_writer.add_token_scores([0.0] * vocab)
    self.gguf_writer.add_token_types([1] * vocab)

def tiny_vocab(found):
    def get_model_class(*args, **kwargs):
        cls = found(*args, **kwargs)
        return type(cls.__name__, (cls,), {"set_vocab": stub_vocab, "model_arch": cls.model_arch})
    return get_model_class

convert.get_model_class = tiny_vocab(convert.get_model_class)
convert.main()
"""


def convert_gguf(config: dict[str, Any], path: Path, source: Path, options: tuple[str, ...] = ("f16",),
                 published: dict[str, Any] | None = None) -> None:
    """A GGUF of the tiny `config` at `path` made by llama.cpp's convert_hf_to_gguf.py (of the tree at `source`)
    from transformers' save_pretrained of it (random weights, seed 0); `options`: the --outtype and any others.
    `published`: config.json keys as the model's Hub config spells them where transformers 5 renamed them on
    saving (Granite-4.0-H's layer_types "mamba" / "attention", which the converter reads)."""
    import json
    import subprocess
    import sys

    import torch
    import transformers

    from calc.arch import transformers_view

    data = transformers_view(copy.deepcopy(config))
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    torch.manual_seed(0)
    model_dir = path.with_suffix(".hf")
    transformers.AutoModelForCausalLM.from_config(hf_config).save_pretrained(model_dir)
    saved = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**saved, **(published or {})}))
    run = subprocess.run([sys.executable, "-c", _CONVERT, str(source), str(model_dir), str(path), *options],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
