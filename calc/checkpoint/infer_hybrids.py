"""config.json keys read off tensor shapes for the hybrids whose layers hold a second kind of
sublayer beside their mixer: Granite-4.0-H (Mamba2 or attention, then experts beside a shared
SwiGLU), OLMo-Hybrid (gated DeltaNet or OLMo-3 attention), Zamba2 (Mamba2 layers, shared
transformer blocks stored once under the first layer that applies each) and Gemma-3n's text
decoder (AltUp, LAuReL, per-layer embeddings, KV shared by the top layers).

As in `calc.checkpoint.infer_configs`, a tensor only the layout stores tells it (`SIGNATURES`,
tried before that module's: Granite's and Zamba2's layers store the `mamba.dt_bias` that Bamba's
signature looks for), its sizes become its config.json's keys and its adapter builds the spec;
what no tensor stores keeps the config class's default and the notes say so.
"""

from __future__ import annotations

from typing import Any, Callable

from calc.checkpoint import infer_configs
from calc.checkpoint.infer_configs import L, Shapes, Uninferable, _head_note, _heads, _mamba2_widths, _state_note

__all__ = ["SIGNATURES", "config_of"]

_EMBED = "model.embed_tokens.weight"


def _base(shapes: Shapes, model_type: str) -> dict[str, Any]:
    """The keys every layout here reads the same way: vocabulary and width from the embedding."""
    return {"model_type": model_type, "vocab_size": shapes.dim(_EMBED, 0), "hidden_size": shapes.dim(_EMBED, 1),
            "num_hidden_layers": shapes.n_layers, "tie_word_embeddings": "lm_head.weight" not in shapes}


def _kinds(shapes: Shapes, names: dict[str, str]) -> list[str]:
    """Each layer's kind: the first of `names` (kind -> a tensor only that kind stores) the layer has."""
    layers = {kind: set(shapes.layers_of(L + tensor)) for kind, tensor in names.items()}
    kinds = [next((kind for kind, held in layers.items() if layer in held), None) for layer in range(shapes.n_layers)]
    if None in kinds:
        raise Uninferable(f"layer {kinds.index(None)} stores none of {', '.join(names.values())}")
    return kinds  # type: ignore[return-value]


def _mamba2(shapes: Shapes, mixer: str, state: int = 128) -> dict[str, Any]:
    """The Mamba2 mixer's widths, with its inner width as a multiple of hidden_size (`expand`)."""
    widths, width = _mamba2_widths(shapes, mixer, state), shapes.dim(_EMBED, 1)
    inner = widths["mamba_num_heads"] * widths["mamba_head_dim"]
    if inner % width:
        raise Uninferable(f"the Mamba2 inner width {inner} is not a multiple of hidden_size {width}")
    return {**widths, "expand": inner // width}


# Granite-4.0-H's experts as the Hub stores them (GraniteMoe's fused names) and as transformers 5 holds them.
_GRANITE_EXPERTS = (("block_sparse_moe.router.layer.weight", "block_sparse_moe.input_linear.weight"),
                    ("block_sparse_moe.router.weight", "block_sparse_moe.experts.gate_up_proj"))


def _granite(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Granite-4.0-H (granitemoehybrid): Mamba2 or attention in each layer, then the always-on
    shared SwiGLU (its fused input_linear is twice its width) and, where a router is stored,
    experts whose fused [E, 2f, d] gate-up gives their width."""
    mixer = _mamba2(shapes, L + "mamba.") if L + "mamba.A_log" in shapes else None
    kinds = _kinds(shapes, {"linear_attention": "mamba.A_log", "full_attention": "self_attn.q_proj.weight"})
    config = {**_base(shapes, "granitemoehybrid"), "layer_types": kinds, "num_local_experts": 0, "num_experts_per_tok": 0,
              "shared_intermediate_size": shapes.dim(L + "shared_mlp.input_linear.weight", 0) // 2,
              "attention_bias": L + "self_attn.q_proj.bias" in shapes}
    notes = ["not stored in tensors: the context length, whether attention is rotary, Granite's four multipliers "
             "(none changes a count) and the experts each token picks (6 assumed, Granite-4.0-H-Tiny's, or all "
             "when fewer)"]
    if mixer:
        config.update(mamba_n_heads=mixer["mamba_num_heads"], mamba_d_head=mixer["mamba_head_dim"],
                      mamba_d_state=mixer["ssm_state_size"], mamba_n_groups=mixer["n_groups"],
                      mamba_d_conv=mixer["conv_kernel"], mamba_expand=mixer["expand"],
                      mamba_proj_bias=mixer["use_bias"], mamba_conv_bias=mixer["use_conv_bias"])
        notes.append(_state_note())
    if "full_attention" in kinds:
        heads = _heads(shapes, L + "self_attn.")
        config.update(num_attention_heads=heads["num_attention_heads"], num_key_value_heads=heads["num_key_value_heads"])
        notes.append(_head_note(heads["head_dim"]))
    router, gate_up = next(((L + r, L + g) for r, g in _GRANITE_EXPERTS if L + r in shapes), (None, None))
    if router and gate_up:
        n_experts = shapes.dim(router, 0)
        config.update(num_local_experts=n_experts, num_experts_per_tok=min(6, n_experts),
                      intermediate_size=shapes.dim(gate_up, 1, rank=3) // 2)
    return config, tuple(notes)


def _olmo_hybrid(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """OLMo-Hybrid: gated DeltaNet where linear_attn is stored, OLMo-3 attention elsewhere, a SwiGLU
    in every layer. The DeltaNet's value heads are A_log's length, their width its output norm's;
    its q_proj stores the key heads' total width only: as many key heads as value heads is assumed
    (Olmo-Hybrid-7B's 30 and 30)."""
    deltanet = L + "linear_attn."
    kinds = _kinds(shapes, {"linear_attention": "linear_attn.A_log", "full_attention": "self_attn.q_proj.weight"})
    v_heads, v_dim = shapes.dim(deltanet + "A_log", 0, rank=1), shapes.dim(deltanet + "o_norm.weight", 0, rank=1)
    keys = shapes.dim(deltanet + "q_proj.weight", 0)
    conv = deltanet + ("q_conv1d.weight" if deltanet + "q_conv1d.weight" in shapes else "conv1d.weight")
    if keys % v_heads or shapes.dim(deltanet + "v_proj.weight", 0) != v_heads * v_dim:
        raise Uninferable("linear_attn's q_proj is not whole heads, or its v_proj not A_log's heads x o_norm's width")
    config = {**_base(shapes, "olmo_hybrid"), "layer_types": kinds,
              "intermediate_size": shapes.dim(L + "mlp.gate_proj.weight", 0),
              "linear_num_key_heads": v_heads, "linear_key_head_dim": keys // v_heads,
              "linear_num_value_heads": v_heads, "linear_value_head_dim": v_dim,
              "linear_conv_kernel_dim": shapes.dim(conv, 2, rank=3)}
    notes = [f"the DeltaNet's key heads are not stored apart from their width: {v_heads} of {keys // v_heads} assumed "
             "(as many as its value heads)",
             "not stored in tensors: the context length, the rotary base and whether beta is doubled "
             "(OLMo-Hybrid's defaults assumed; none changes a count)"]
    if "full_attention" in kinds:
        heads = _heads(shapes, L + "self_attn.")
        config.update(num_attention_heads=heads["num_attention_heads"], num_key_value_heads=heads["num_key_value_heads"])
        notes.append(_head_note(heads["head_dim"]))
    return config, tuple(notes)


_SHARED_BLOCK = L + "shared_transformer."
# Zamba2Config's num_attention_heads and mamba_d_state, and every released Zamba2's (1.2B, 2.7B, 7B)
ZAMBA2_HEADS, ZAMBA2_STATE = 32, 64


def _zamba2(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Zamba2: a hybrid layer stores its own output linear; each shared block is stored once, under
    the first hybrid layer applying it, so their count is the layers storing one; the adapters'
    rank is their down projection's rows. The shared attention's heads (over 2 x hidden_size) are
    stored only as widths: 32 heads assumed, Zamba2's."""
    kinds = _kinds(shapes, {"hybrid": "linear.weight", "mamba": "mamba.A_log"})
    mixer = _mamba2(shapes, L + ("mamba_decoder.mamba." if "mamba" not in kinds else "mamba."), ZAMBA2_STATE)
    queries, width = shapes.dim(_SHARED_BLOCK + "self_attn.q_proj.weight", 0), shapes.dim(_EMBED, 1)
    heads = ZAMBA2_HEADS if queries % ZAMBA2_HEADS == 0 else 1
    adapter = _SHARED_BLOCK + "feed_forward.gate_up_proj_adapter_list.0.0.weight"
    config = {**_base(shapes, "zamba2"), "layers_block_type": kinds,
              "num_mem_blocks": len(shapes.layers_of(_SHARED_BLOCK + "self_attn.q_proj.weight")),
              "num_attention_heads": heads,
              "num_key_value_heads": shapes.dim(_SHARED_BLOCK + "self_attn.k_proj.weight", 0) // (queries // heads),
              "intermediate_size": shapes.dim(_SHARED_BLOCK + "feed_forward.gate_up_proj.weight", 0) // 2,
              "use_shared_attention_adapter": _SHARED_BLOCK + "self_attn.linear_q_adapter_list.0.0.weight" in shapes,
              "adapter_rank": shapes.dim(adapter, 0), "add_bias_linear": mixer["use_bias"],
              "n_mamba_heads": mixer["mamba_num_heads"], "mamba_d_state": mixer["ssm_state_size"],
              "mamba_ngroups": mixer["n_groups"], "mamba_d_conv": mixer["conv_kernel"], "mamba_expand": mixer["expand"]}
    if queries != 2 * width:
        raise Uninferable(f"the shared attention's q_proj is {queries} wide, not 2 x hidden_size = {2 * width}")
    return config, (_state_note(ZAMBA2_STATE), f"the shared attention's head count is not stored in tensor shapes: "
                    f"{heads} assumed (head_dim {queries // heads})",
                    "not stored in tensors: the context length and whether the shared attention is rotary "
                    "(Zamba2's defaults assumed; neither changes a count)")


_PER_LAYER_EMBED = "model.embed_tokens_per_layer.weight"


def _gemma3n(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Gemma-3n's text decoder: AltUp's n streams are its correction matrix's n x n, LAuReL's rank
    its left matrix's rows, the per-layer input's width the gate's rows and its vocabulary the
    per-layer table's rows; the top layers with no k_proj share an earlier layer's K and V. Local
    and global layers have the same widths, so which is which is not stored: Gemma-3n's every
    fifth layer global is assumed (as both released models have it), and its sparsity pattern."""
    attention, n_layers = L + "self_attn.", shapes.n_layers
    head_dim = shapes.dim(attention + "q_norm.weight", 0, rank=1)
    keys = set(shapes.layers_of(attention + "k_proj.weight"))
    n_shared = next((n for n in range(n_layers) if keys == set(range(n_layers - n))), None)
    widths = shapes.dims(L + "mlp.gate_proj.weight", 0)
    if n_shared is None or set(widths) != set(range(n_layers)):
        raise Uninferable("Gemma-3n's layers need an MLP each, and K projections in all but the top layers")
    config = {**_base(shapes, "gemma3n_text"), "head_dim": head_dim,
              "num_attention_heads": shapes.dim(attention + "q_proj.weight", 0) // head_dim,
              "num_key_value_heads": shapes.dim(attention + "k_proj.weight", 0) // head_dim,
              "num_kv_shared_layers": n_shared, "intermediate_size": [widths[layer] for layer in range(n_layers)],
              "altup_num_inputs": shapes.dim(L + "altup.correction_coefs.weight", 0),
              "laurel_rank": shapes.dim(L + "laurel.linear_left.weight", 0),
              "hidden_size_per_layer_input": shapes.dim(L + "per_layer_input_gate.weight", 0),
              "vocab_size_per_layer_input": shapes.dim(_PER_LAYER_EMBED, 0),
              "attention_bias": attention + "q_proj.bias" in shapes}
    return config, ("not stored in tensors: which layers are global (every fifth assumed), the sliding window, "
                    "the context length and the activation sparsity (Gemma-3n's defaults assumed: the first two "
                    "set the local layers' cache; none changes a count)",)


# A tensor only the layout stores -> how its config is read off the shapes (tried before infer_configs').
SIGNATURES: dict[str, Callable[[Shapes], tuple[dict[str, Any], tuple[str, ...]]]] = {
    L + "shared_mlp.input_linear.weight": _granite,
    L + "linear_attn.g_proj.weight": _olmo_hybrid,
    L + "mamba_decoder.mamba.A_log": _zamba2,
    L + "altup.correction_coefs.weight": _gemma3n,
    **infer_configs.SIGNATURES,
}


def config_of(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """The config.json keys of a layout `SIGNATURES` knows, and what was assumed; None for any other."""
    reader = next((read for template, read in SIGNATURES.items() if template in shapes), None)
    return None if reader is None else reader(shapes)
