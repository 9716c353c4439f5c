"""Builders the adapters share: the pieces most configs spell the same way.

Each returns plain data (a mapping of ModelSpec fields) that an adapter may adjust before the
spec is validated, so an adapter reads as "a Llama, but with ..." instead of repeating the
reading of thirty keys. Defaults are those of transformers' own config classes, because a key a
config leaves out means whatever transformers does without it.
"""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any, Callable

from calc.arch.config import Config
from calc.parts.mlp import WRITTEN_GELUS

__all__ = ["ACTIVATIONS", "ATTENTION_KINDS", "KEYS", "TRANSFORMERS_BACKEND", "activation", "attention",
           "attention_kinds", "decoder", "defaulted_note", "gated_mlp", "granite_scalars", "kind_stack", "layer_kinds",
           "layer_runs", "mha", "mlp_activation", "norm", "qwen3_vl_build", "renamed", "rope", "rotary_layers", "uniform",
           "with_defaults"]

# The same quantity under the names different configs give it (transformers' attribute_map), first wins.
KEYS = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "n_heads": ("num_attention_heads", "n_head", "n_heads"),
    "n_positions": ("max_position_embeddings", "max_sequence_length", "n_positions", "n_ctx", "max_seq_len", "seq_length"),
}


# How vLLM builds a model (calc/spec/vllm.py) for the architectures vLLM 0.32 serves through its Transformers
# backend: each adapter that states it cites the line of vllm/model_executor/models/registry.py that decides it.
TRANSFORMERS_BACKEND = {"vllm": {"implementation": "transformers"}}
# How llama.cpp builds a model (calc/spec/llamacpp.py) whose window it drops, so that every layer keeps every cell:
# one whose converter class is its `llama` architecture, which reads no sliding window (conversion/llama.py:17-30,
# src/models/llama.cpp), and the others LlamaCppBuild.sliding_window lists (starcoder2, EXAONE 4 but its 64-layer
# model, Phi-3)
LLAMACPP_NO_WINDOW = {"llamacpp": {"sliding_window": False}}
# How llama.cpp builds a model its converter's LlamaModel class writes (conversion/llama.py): a Llama-3 rope's factors
# as rope_freqs.weight (calc/spec/llamacpp.py LlamaCppBuild.rope_factors)
LLAMA_CLASS = {"llamacpp": {"rope_factors": "llama3"}}
# and one whose window llama.cpp's llama architecture drops: MistralForCausalLM, MixtralForCausalLM
# (conversion/llama.py:17-30)
LLAMA_CLASS_NO_WINDOW = {"llamacpp": {**LLAMACPP_NO_WINDOW["llamacpp"], **LLAMA_CLASS["llamacpp"]}}
# How llama.cpp builds a model its converter's Phi3MiniModel class writes (conversion/phi.py:175-211: Phi3ForCausalLM,
# and PhiMoEForCausalLM by its subclass): a LongRoPE's factors as rope_factors_long / _short.weight
PHI3_CLASS = {"llamacpp": {"rope_factors": "longrope"}}
# A model llama.cpp has no architecture for: its converter registers no class for the config's architecture
# (conversion/*.py of the tree) and src/llama-model.cpp loads none (calc/spec/llamacpp.py LlamaCppBuild.converts)
NO_LLAMACPP = {"llamacpp": {"converts": False}}


def qwen3_vl_build(cfg: Config, attention: dict[str, Any]) -> dict[str, Any]:
    """vLLM's and llama.cpp's build of Qwen3 or Qwen3-MoE layers: with M-RoPE they are Qwen3-VL's
    (calc/arch/config.py TEXT_AS), whose decoder layers vLLM gives get_rope with mrope_positions_factor 1, 4 only
    when video pruning is on (vllm/model_executor/models/qwen3_vl.py mrope_positions_factor, L1818-1825;
    qwen3_vl_moe.py L77), and llama.cpp four positions per token (interleaved M-RoPE: src/llama-model.cpp:3206-3213)
    and a deepstack input per vision layer its mergers tap (calc/spec/llamacpp.py; the vision config's
    deepstack_visual_indexes, which unwrap_text_config hands to the text layers, or a GGUF's count of them,
    `n_deepstack_layers`, which is all the converter keeps: calc/checkpoint/gguf_own_keys.py)."""
    if not (attention.get("rope") or {}).get("sections"):
        return {}
    deepstack = cfg.int("n_deepstack_layers", default=None)
    if deepstack is None:
        deepstack = len(cfg.list("deepstack_visual_indexes") or [])
    return {"vllm": {"mrope_positions": 1}, "llamacpp": {"positions_per_token": 4, "deepstack": deepstack}}


def norm(kind: str, eps: float, **changes: Any) -> dict[str, Any]:
    return {"kind": kind, "eps": eps, **changes}


def rope(cfg: Config, head_dim: int, default_theta: float = 10000.0, layer_type: str | None = None) -> dict[str, Any]:
    """Rotary settings from rope_theta / rope_scaling / partial_rotary_factor, or transformers-5's
    nested `rope_parameters` holding the same keys (and winning over them, as in transformers'
    standardize_rope_params). Gemma-3 nests one such mapping per layer type: `layer_type` picks it."""
    nested = cfg.dict("rope_parameters")
    if isinstance(nested.get(layer_type), dict):
        nested = nested[layer_type]
    theta = nested.get("rope_theta")
    if theta is None:
        theta = cfg.float("rope_theta", default=default_theta)
    factor = nested.get("partial_rotary_factor")
    if factor is None:
        factor = cfg.float("partial_rotary_factor", default=1.0)
    theta, factor = float(theta), float(factor)
    scaling = cfg.dict("rope_scaling") or {k: v for k, v in nested.items()
                                           if k not in ("rope_theta", "partial_rotary_factor")}
    sections = scaling.get("mrope_section")  # M-RoPE (Qwen-VL's rope_type "default" with sections)
    if scaling.get("rope_type", scaling.get("type")) in (None, "default"):
        scaling = {}
    return {"theta": theta, "rotary_dim": int(head_dim * factor), "scaling": scaling or None,
            **({"sections": tuple(sections)} if sections else {})}


def head_dim(cfg: Config, d_model: int, n_heads: int) -> int:
    """`head_dim` when the config sets it (Gemma, Qwen3, Mistral-Nemo), else d_model / n_heads."""
    return cfg.int("head_dim", default=None) or d_model // n_heads


def attention(cfg: Config, **changes: Any) -> dict[str, Any]:
    """Llama's attention keys: heads, KV heads, head_dim, `attention_bias` on Q, K, V and O, rotary, and
    `attention_dropout` on P in training (0.0 in every config class that has it but Seed-OSS's)."""
    d, heads = cfg.int(*KEYS["d_model"]), cfg.int(*KEYS["n_heads"])
    dim = head_dim(cfg, d, heads)
    bias = cfg.bool("attention_bias", default=False)
    part = {"n_heads": heads, "n_kv_heads": cfg.int("num_key_value_heads", default=heads), "head_dim": dim,
            "q_bias": bias, "k_bias": bias, "v_bias": bias, "o_bias": bias, "rope": rope(cfg, dim),
            "dropout": cfg.float("attention_dropout", default=0.0)}
    return {**part, **changes}


def mha(cfg: Config, bias: bool, **changes: Any) -> dict[str, Any]:
    """The pre-Llama attention (GPT-NeoX, GPT-J, OPT, BLOOM, Falcon, MPT): head_dim = d_model / n_heads,
    whatever a `head_dim` key says, a KV head per query head and `bias` on Q, K, V and the output,
    unless `changes` say otherwise."""
    d, heads = cfg.int(*KEYS["d_model"]), cfg.int(*KEYS["n_heads"])
    if d % heads:
        key = next(name for name in KEYS["d_model"] if cfg.has(name))
        raise cfg.error(key, f"d_model={d} is not divisible by n_heads={heads}")
    part = {"n_heads": heads, "n_kv_heads": heads, "head_dim": d // heads,
            "q_bias": bias, "k_bias": bias, "v_bias": bias, "o_bias": bias}
    return {**part, **changes}


def gated_mlp(cfg: Config, d_ff_key: str = "intermediate_size", **changes: Any) -> dict[str, Any]:
    """SwiGLU: gate, up and down, with `mlp_bias` on all three."""
    return {"d_ff": cfg.int(d_ff_key), "gated": True, "activation": "silu",
            "bias": cfg.bool("mlp_bias", default=False), **changes}


SGLANG_SSM_DTYPES = ("float32", "bfloat16", "float16")  # mamba2_state_dtype's dtype_map (configs/mamba_utils.py)


def sglang_ssm_dtype(cfg: Config) -> dict[str, Any]:
    """The spec's `sglang` field for a hybrid whose SGLang config class passes itself to mamba2_state_dtype
    (sgl-project/sglang@02e208de configs/mamba_utils.py): the config's `mamba_ssm_dtype` sets the SSM states'
    dtype there; absent (or a value SGLang warns about and ignores) it stays SGLang's float32."""
    dtype = cfg.raw("mamba_ssm_dtype", default=None)
    return {"sglang": {"ssm_dtype": dtype}} if dtype in SGLANG_SSM_DTYPES else {}


def decoder(cfg: Config, model_type: str, blocks: dict[str, Any], layers: list[tuple[int, str]],
            final_norm: dict[str, Any] | None, tied: bool, **changes: Any) -> dict[str, Any]:
    """The model-level fields every decoder has."""
    notes = (*defaulted_note(cfg), *changes.pop("notes", ()))
    return {
        "name": cfg.raw("_name_or_path", default=None) or model_type,
        "model_type": model_type,
        "vocab_size": cfg.int("vocab_size"),
        "d_model": cfg.int(*KEYS["d_model"]),
        "n_positions": changes.pop("n_positions", None) or cfg.int(*KEYS["n_positions"]),
        "blocks": blocks, "layers": layers, "final_norm": final_norm, "head": {"tied": tied},
        **({"notes": notes} if notes else {}),
        **changes,
    }


def uniform(cfg: Config, model_type: str, block: dict[str, Any], final_norm: dict[str, Any] | None,
            tied: bool, **changes: Any) -> dict[str, Any]:
    """A stack of `num_hidden_layers` identical blocks."""
    return decoder(cfg, model_type, {"decoder": block}, [(cfg.int(*KEYS["n_layers"]), "decoder")],
                   final_norm, tied, **changes)


def with_defaults(cfg: Config, defaults: dict[str, Any]) -> Config:
    """The config as transformers' config class reads it: a key it leaves out takes the class's
    default (`defaults`, transcribed from configuration_<type>.py), unless the same quantity is
    given under another name (LLaMA-1's `max_sequence_length`). A key set to null stays null.
    The keys filled are remembered (`Config.defaulted`) for `decoder` to name in a note."""
    given = {alias for names in KEYS.values() if any(name in cfg.data for name in names) for alias in names}
    filled = {key: value for key, value in defaults.items() if key not in given and key not in cfg.data}
    return Config({**filled, **cfg.data}, cfg.origin, {**cfg.defaulted, **filled})


def defaulted_note(cfg: Config) -> tuple[str, ...]:
    """One note naming the sizes and switches (integer and true/false keys: the ones a count depends
    on) that the config left out and its model_type's transformers defaults filled, or none."""
    shown = {key: value for key, value in cfg.defaulted.items() if isinstance(value, (bool, int))}
    if not shown:
        return ()
    keys = ", ".join(f"{key}={json.dumps(value)}" for key, value in shown.items())
    model_type = cfg.raw("model_type")
    return (f"{model_type}: not in the config, so transformers' defaults for {model_type} are used: {keys}",)


# The older layer type names transformers renames as every config loads (configuration_utils.py,
# _LEGACY_LAYER_TYPE_REMAP, applied by PreTrainedConfig.__post_init__): Granite-4.0-H's released configs
# say "mamba" and "attention".
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention",
                      "deepseek_sparse_attention": "indexed_attention", "qwen_sparse_attention": "indexed_attention"}


def layer_kinds(cfg: Config, default: Callable[[int], str]) -> list[str]:
    """Each layer's attention type: the config's `layer_types` (one name per layer, older names as
    transformers renames them), else `default(layer_index)`, the rule the model_type's config class
    fills it with."""
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds = cfg.list("layer_types")
    if kinds is None:
        return [default(i) for i in range(n_layers)]
    if len(kinds) != n_layers or not all(isinstance(kind, str) for kind in kinds):
        raise cfg.error("layer_types", f"expected {n_layers} layer type names (one per layer), got {kinds!r}")
    return current_kinds(kinds)


def current_kinds(kinds: list[Any]) -> list[Any]:
    """Layer type names with the older ones renamed as transformers renames them (LEGACY_LAYER_TYPES)."""
    return [LEGACY_LAYER_TYPES.get(kind, kind) if isinstance(kind, str) else kind for kind in kinds]


# The attention types `layer_types` may name, as transformers' hybrid models write them.
ATTENTION_KINDS = ("sliding_attention", "full_attention")


def attention_kinds(cfg: Config, default: Callable[[int], str]) -> list[str]:
    """`layer_kinds` for models whose layers are sliding-window or full attention, and nothing else."""
    kinds = layer_kinds(cfg, default)
    unknown = sorted(set(kinds) - set(ATTENTION_KINDS))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(ATTENTION_KINDS)})")
    return kinds


def kind_stack(kinds: list[str], names: dict[str, str],
               build: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], list[tuple[int, str]]]:
    """Blocks and run-length layers of a stack of layer kinds: one block per kind, `build(kind)`, named
    by `names`, or "decoder" when every layer is of one kind."""
    named = names if len(set(kinds)) > 1 else {kinds[0]: "decoder"}
    blocks = {named[kind]: build(kind) for kind in dict.fromkeys(kinds)}
    return blocks, layer_runs([named[kind] for kind in kinds])


def rotary_layers(cfg: Config, n_layers: int) -> list[bool]:
    """Which layers rotate: `no_rope_layers` (SmolLM3, Llama-4) holds 1 where a layer uses rotary and 0
    where it has none; without it (null or empty), every `no_rope_layer_interval`-th layer has none."""
    flags = cfg.list("no_rope_layers")
    if not flags:
        interval = cfg.int("no_rope_layer_interval")
        return [(i + 1) % interval != 0 for i in range(n_layers)]
    if len(flags) != n_layers or any(flag not in (0, 1) or isinstance(flag, bool) for flag in flags):
        raise cfg.error("no_rope_layers", f"expected {n_layers} flags of 0 or 1 (one per layer), got {flags!r}")
    return [bool(flag) for flag in flags]


def layer_runs(kinds: list[str]) -> list[tuple[int, str]]:
    """Per-layer block names as run-length layers: [a, a, b, a] -> [(2, a), (1, b), (1, a)]."""
    return [(len(list(run)), name) for name, run in groupby(kinds)]


# transformers' ACT2FN names -> the MLP part's activations (the tanh approximations of GELU are one kind).
ACTIVATIONS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu", "relu2": "relu2",
               "xielu": "xielu", "quick_gelu": "quick_gelu"}


def activation(cfg: Config, key: str) -> str:
    """The MLP activation `key` names (hidden_act, activation_function, ...), as the MLP part spells it."""
    name = cfg.raw(key)
    if name not in ACTIVATIONS:
        raise cfg.error(key, f"activation {name!r} is not one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def mlp_activation(cfg: Config, key: str) -> dict[str, str]:
    """The MLP's activation `key` names and the form transformers runs it in: what training keeps depends on
    the form (calc/analysis/train/activations.py), the arithmetic does not."""
    name = cfg.raw(key)
    return {"activation": activation(cfg, key), "activation_form": name if name in WRITTEN_GELUS else "fused"}


def renamed(cfg: Config, names: dict[str, str]) -> Config:
    """The config with legacy keys under the names transformers reads now (BLOOM's and Falcon's
    `n_embed` is hidden_size, GPT-NeoX's `rotary_pct` is partial_rotary_factor); the legacy key
    wins, as in those config classes, which pop it over the new one."""
    data = dict(cfg.data)
    for old, new in names.items():
        if data.get(old) is not None:
            data[new] = data.pop(old)
    return cfg.replace(data)


def granite_scalars(cfg: Config, spec: dict[str, Any]) -> dict[str, Any]:
    """Granite's (and GraniteMoE's) four multipliers, scalars with no parameters: embeddings times
    embedding_multiplier, each sublayer's output times residual_multiplier, attention scores times
    attention_multiplier (instead of 1/sqrt(head_dim)), logits divided by logits_scaling. Granite-4.0-H's
    Mamba2 layers have no scores to scale: only their residual is."""
    scale = cfg.float("attention_multiplier", default=1.0)
    blocks = {name: {**block, "residual_scale": cfg.float("residual_multiplier", default=1.0),
                     "attention": {**block["attention"], "scale": scale}
                     if block["attention"].get("kind", "attention") == "attention" else block["attention"]}
              for name, block in spec["blocks"].items()}
    return {**spec, "blocks": blocks, "embedding": {**spec.get("embedding", {}),
                                                    "multiplier": cfg.float("embedding_multiplier", default=1.0)},
            "head": {**spec["head"], "logit_scale": 1.0 / cfg.float("logits_scaling", default=1.0)}}
