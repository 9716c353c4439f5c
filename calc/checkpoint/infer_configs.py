"""config.json keys read off tensor shapes, for the layouts whose spec the adapter then builds.

A Llama-named checkpoint whose layers hold more than attention and an MLP — LFM2's short
convolutions beside attention, DeepSeek's MLA with routed experts (and V3.2's lightning indexer,
its multi-token-prediction layer), Qwen3-Next's and Qwen3.5's gated DeltaNet beside gated
attention, Jamba's Mamba, Bamba's and Falcon-H1's Mamba2, Kimi Linear's KDA beside MLA,
MiniMax's lightning attention, DeepSeek-V4's compressed attention and hyper-connections, Gemma-4's
local and global layers of two head widths — and a `backbone.` one of Mamba2 or Nemotron-H's
hybrid layers are told by a tensor only they store (`SIGNATURES`). Its sizes are then read off
the shapes into the keys of its config.json, and its model_type's adapter (`calc.arch`) builds
the spec from them, exactly as from the real file: one description of each layout, never a second
one here. What no tensor stores (the context length, how many experts a token picks) keeps its
config-class default, or where the class has none the released models' value, and the notes say
so; it changes no stored count.
"""

from __future__ import annotations

from math import gcd
from typing import Any, Callable

__all__ = ["SIGNATURES", "Shapes", "Uninferable"]

L = "model.layers.{}."


class Uninferable(Exception):
    """A tensor inference needs is absent, or not the matrix it should be."""


class Shapes:
    """The shape of each template (`model.layers.{}.…` for a layer's), and which layers store each."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], layers_of: Callable[[str], list[int]], n_layers: int,
                 in_layer: Callable[[int], dict[str, tuple[int, ...]]],
                 per_layer: Callable[[str], dict[int, tuple[int, ...]]]) -> None:
        self.shapes, self.layers_of, self.n_layers = shapes, layers_of, n_layers
        self.in_layer, self.per_layer = in_layer, per_layer

    def of_layer(self, layer: int) -> "Shapes":
        """The shapes as `layer` stores them, where a template's last shape may be another kind of layer's."""
        return Shapes(self.in_layer(layer), self.layers_of, self.n_layers, self.in_layer, self.per_layer)

    def __contains__(self, template: str) -> bool:
        return template in self.shapes

    def dim(self, template: str, axis: int, rank: int = 2) -> int:
        """One dimension of a tensor of `rank` dimensions (a weight matrix unless said otherwise)."""
        shape = self.shapes.get(template)
        if shape is None:
            raise Uninferable(f"no {_shown(template)} tensor")
        return _checked(template, shape, rank)[axis]

    def dims(self, template: str, axis: int, rank: int = 2) -> dict[int, int]:
        """`dim` in each layer that stores `template`, where layers of one layout differ in it."""
        return {layer: _checked(template, shape, rank)[axis] for layer, shape in self.per_layer(template).items()}


def _shown(template: str) -> str:
    return template.replace("{}", "N").removeprefix("transformer.")


def _checked(template: str, shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """`shape`, refused unless it has `rank` dimensions, none empty."""
    if len(shape) != rank or not all(shape):
        raise Uninferable(f"{_shown(template)}: shape {list(shape)}, expected {rank} dimensions, neither empty")
    return shape


def _lfm2(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """LFM2: attention where q_proj is stored, a short convolution elsewhere; head_dim from the QK-norm.
    LFM2-MoE is told by its router: its first layers keep a SwiGLU (w1), the others route to experts
    (the router's rows; one expert's w1, or the fused gate-up, gives their width)."""
    head_dim, ffn = shapes.dim(L + "self_attn.q_layernorm.weight", 0, rank=1), L + "feed_forward."
    routed, dense = shapes.layers_of(ffn + "gate.weight"), shapes.layers_of(ffn + "w1.weight")
    config = {
        "model_type": "lfm2_moe" if routed else "lfm2", "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
        "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": shapes.n_layers,
        "full_attn_idxs": shapes.layers_of(L + "self_attn.q_proj.weight"), "head_dim": head_dim,
        "num_attention_heads": shapes.dim(L + "self_attn.q_proj.weight", 0) // head_dim,
        "num_key_value_heads": shapes.dim(L + "self_attn.k_proj.weight", 0) // head_dim,
        "conv_L_cache": shapes.dim(L + "conv.conv.weight", 2, rank=3), "conv_bias": L + "conv.in_proj.bias" in shapes,
        "tie_word_embeddings": "lm_head.weight" not in shapes,
    }
    if dense:
        config["intermediate_size"] = shapes.dim(ffn + "w1.weight", 0)
    if not routed:
        config["block_auto_adjust_ff_dim"] = False
        return config, ("context length is not stored in tensors: LFM2's default max_position_embeddings is assumed",)
    if dense != list(range(len(dense))) or routed != list(range(len(dense), shapes.n_layers)):
        raise Uninferable("LFM2-MoE's dense layers are not the first ones, the routed ones the rest: pass MODEL")
    n_experts, width = _routed(shapes, ffn)
    config.update(num_dense_layers=len(dense), num_experts=n_experts, moe_intermediate_size=width,
                  use_expert_bias=ffn + "expert_bias" in shapes)
    return config, ("context length and the experts each token picks are not stored in tensors: "
                    "LFM2-MoE's defaults assumed",)


def _deepseek(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """DeepSeek-V2/V3/V3.2: MLA's widths solved from its four matrices, experts from the router."""
    mtp = shapes.layers_of(L + "eh_proj.weight")  # the multi-token-prediction layers sit above the stack
    n_layers = shapes.n_layers - len(mtp)
    routed = [layer for layer in shapes.layers_of(L + "mlp.gate.weight") if layer < n_layers]
    model_type = ("deepseek_v32" if L + "self_attn.indexer.wk.weight" in shapes else "deepseek_v3"
                  if L + "mlp.gate.e_score_correction_bias" in shapes else "deepseek_v2")
    config = {"model_type": model_type, "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
              "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": n_layers,
              "tie_word_embeddings": "lm_head.weight" not in shapes, **_mla(shapes),
              "first_k_dense_replace": n_layers - len(routed), "num_nextn_predict_layers": len(mtp),
              "attention_bias": L + "self_attn.o_proj.bias" in shapes}
    if routed != list(range(n_layers - len(routed), n_layers)):
        raise Uninferable("routed experts in layers that are not the top ones: pass MODEL")
    if len(routed) < n_layers:
        config["intermediate_size"] = shapes.dim(L + "mlp.gate_proj.weight", 0)
    if routed:
        config.update(_experts(shapes))
    if routed and model_type == "deepseek_v2":  # DeepseekV2Config has no default: both V2 and V2-Lite pick 6
        config["num_experts_per_tok"] = 6
    if model_type == "deepseek_v32":
        head_dim = shapes.dim(L + "self_attn.indexer.wk.weight", 0)
        config.update(index_head_dim=head_dim, index_n_heads=shapes.dim(L + "self_attn.indexer.weights_proj.weight", 0))
    return config, ("context length and the experts each token picks are not stored in tensors: "
                    f"{model_type}'s config defaults are assumed",)


def _kimi_linear(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Kimi Linear: Kimi Delta Attention where its f_a_proj is stored, MLA elsewhere, DeepSeek-V3's
    experts above the first dense layers (under `block_sparse_moe.` on the Hub, `mlp.` in
    transformers 5). Both mixers name their projections q_proj and o_proj, so MLA's widths are read
    from a layer that holds it. The KDA's heads are A_log's, its head width its output norm's; the
    Hub stores its forget gate and q/k/v convolutions apart, transformers 5 under `forget_gate.` and
    as one conv1d."""
    kda, mla_layers = L + "self_attn.", shapes.layers_of(L + "self_attn.kv_a_proj_with_mqa.weight")
    gate = kda + "forget_gate." if kda + "forget_gate.f_a_proj.weight" in shapes else kda
    conv, convs = (kda + "q_conv1d.weight", 1) if kda + "q_conv1d.weight" in shapes else (kda + "conv1d.weight", 3)
    heads, head_dim = shapes.dim(gate + "A_log", 2, rank=4), shapes.dim(kda + "o_norm.weight", 0, rank=1)
    if shapes.dim(conv, 0, rank=3) != convs * heads * head_dim:
        raise Uninferable("the KDA's conv1d channels are not A_log's heads x o_norm's width for each of q, k, v")
    moe = L + "block_sparse_moe." if L + "block_sparse_moe.gate.weight" in shapes else L + "mlp."
    routed = shapes.layers_of(moe + "gate.weight")
    if routed != list(range(shapes.n_layers - len(routed), shapes.n_layers)):
        raise Uninferable("routed experts in layers that are not the top ones: pass MODEL")
    linear = set(shapes.layers_of(gate + "f_a_proj.weight"))
    config = {"model_type": "kimi_linear", "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
              "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": shapes.n_layers,
              "tie_word_embeddings": "lm_head.weight" not in shapes,
              "layer_types": ["linear_attention" if layer in linear else "full_attention" for layer in range(shapes.n_layers)],
              "linear_num_heads": heads, "linear_head_dim": head_dim,
              "linear_conv_kernel_dim": shapes.dim(conv, 2, rank=3),
              "first_k_dense_replace": shapes.n_layers - len(routed),
              **(_mla(shapes.of_layer(mla_layers[0])) if mla_layers else {}), **(_experts(shapes, moe) if routed else {})}
    if len(routed) < shapes.n_layers:
        config["intermediate_size"] = shapes.dim(moe + "gate_proj.weight", 0)
    return config, ("context length and the experts each token picks are not stored in tensors: "
                    "Kimi Linear's defaults assumed",)


def _mla(shapes: Shapes) -> dict[str, Any]:
    """MLA's heads and widths: kv_a_layernorm gives the latent, kv_a the rotary width beside it; then
    q_b (or q) = h·(nope + rope), kv_b = h·(nope + v) and o_proj's input h·v fix h, nope and v."""
    latent = shapes.dim(L + "self_attn.kv_a_layernorm.weight", 0, rank=1)
    rope = shapes.dim(L + "self_attn.kv_a_proj_with_mqa.weight", 0) - latent
    lora = L + "self_attn.q_a_proj.weight" in shapes
    queries = shapes.dim(L + ("self_attn.q_b_proj.weight" if lora else "self_attn.q_proj.weight"), 0)
    keys_values, values = shapes.dim(L + "self_attn.kv_b_proj.weight", 0), shapes.dim(L + "self_attn.o_proj.weight", 1)
    heads, left = divmod(queries - keys_values + values, rope) if rope > 0 else (0, 1)
    if left or heads <= 0 or values % heads or (keys_values - values) % heads:
        raise Uninferable("MLA's q_b, kv_a, kv_b and o_proj widths do not solve to whole heads")
    return {"num_attention_heads": heads, "kv_lora_rank": latent, "qk_rope_head_dim": rope,
            "qk_nope_head_dim": (keys_values - values) // heads, "v_head_dim": values // heads,
            "q_lora_rank": shapes.dim(L + "self_attn.q_a_proj.weight", 0) if lora else None}


def _experts(shapes: Shapes, moe: str = L + "mlp.") -> dict[str, Any]:
    """DeepSeek's experts: the shared ones as multiples of a routed expert's width."""
    routed, width = _routed(shapes, moe)
    shared = _width(shapes, moe + "shared_experts.gate_proj.weight") // width
    return {"n_routed_experts": routed, "moe_intermediate_size": width, "n_shared_experts": shared}


def _routed(shapes: Shapes, moe: str = L + "mlp.", router: str = "gate.weight") -> tuple[int, int]:
    """How many routed experts (the router's rows) and how wide one is: from one expert's gate_proj
    (or Mixtral's w1: the Hub's names), else from the fused gate_up_proj (transformers 5's)."""
    one = next((name for name in (moe + "experts.0.gate_proj.weight", moe + "experts.0.w1.weight") if name in shapes), None)
    width = shapes.dim(one, 0) if one else shapes.dim(moe + "experts.gate_up_proj", 1, rank=3) // 2
    return shapes.dim(moe + router, 0), width


def _width(shapes: Shapes, gate: str) -> int:
    """A SwiGLU's width from its gate projection's rows; 0 when none is stored."""
    return shapes.dim(gate, 0) if gate in shapes else 0


def _qwen3_next(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Qwen3-Next and Qwen3.5 (text): gated DeltaNet layers where linear_attn is stored, gated
    attention elsewhere. Qwen3.5 is told by its four-way input projection (in_proj_qkv, not
    Qwen3-Next's fused in_proj_qkvz), its MoE variant by a router in every layer.

    The DeltaNet's value heads are A_log's length and their width its norm's; its conv mixes
    queries, keys and values (2·nk·dk + nv·dv channels), which fixes nk·dk but not the split:
    dk = dv is assumed (both models' 128 and 128). Attention's head_dim is the QK-norm's width,
    its q_proj twice the heads' width (queries and the output gate)."""
    deltanet, attention = L + "linear_attn.", L + "self_attn."
    head_dim, v_dim = shapes.dim(attention + "q_norm.weight", 0, rank=1), shapes.dim(deltanet + "norm.weight", 0, rank=1)
    v_heads = shapes.dim(deltanet + "A_log", 0, rank=1)
    keys, left = divmod(shapes.dim(deltanet + "conv1d.weight", 0, rank=3) - v_heads * v_dim, 2 * v_dim)
    if left or keys <= 0:
        raise Uninferable("linear_attn.conv1d's channels are not 2·nk·dk + nv·dv with dk = dv")
    mtp = shapes.layers_of(L + "eh_proj.weight")  # the multi-token-prediction layers sit above the stack (mtp.fc)
    n_layers = shapes.n_layers - len(mtp)
    routed = [layer for layer in shapes.layers_of(L + "mlp.gate.weight") if layer < n_layers]
    linear = set(shapes.layers_of(deltanet + "out_proj.weight"))
    config = {
        "model_type": _qwen_type(shapes, routed, n_layers), "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
        "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": n_layers,
        "mtp_num_hidden_layers": len(mtp),
        "layer_types": ["linear_attention" if layer in linear else "full_attention" for layer in range(n_layers)],
        "head_dim": head_dim, "num_attention_heads": shapes.dim(attention + "q_proj.weight", 0) // (2 * head_dim),
        "num_key_value_heads": shapes.dim(attention + "k_proj.weight", 0) // head_dim,
        "attention_bias": attention + "q_proj.bias" in shapes, "linear_num_value_heads": v_heads,
        "linear_value_head_dim": v_dim, "linear_key_head_dim": v_dim, "linear_num_key_heads": keys,
        "linear_conv_kernel_dim": shapes.dim(deltanet + "conv1d.weight", 2, rank=3),
        "intermediate_size": _width(shapes, L + "mlp.gate_proj.weight"),
        "tie_word_embeddings": "lm_head.weight" not in shapes,
    }
    notes = ("not stored in tensors: the context length, the experts each token picks, the rotary fraction "
             f"({config['model_type']}'s defaults assumed) and the DeltaNet's key head width (assumed its value "
             f"head width, {v_dim}: {keys} key heads)",)
    if config["model_type"] == "qwen3_next":
        config.update(mlp_only_layers=sorted(set(range(n_layers)) - set(routed)), decoder_sparse_step=1)
    else:  # every published Qwen3.5 config.json says mamba_ssm_dtype float32 (Qwen/Qwen3.5-27B, -35B-A3B, -397B-A17B)
        config["mamba_ssm_dtype"] = "float32"
        notes += ("the DeltaNet's recurrent state dtype is not stored in tensors: float32 assumed, as every "
                  "Qwen3.5 config.json says",)
    if routed:
        n_experts, width = _routed(shapes)
        config.update(num_experts=n_experts, moe_intermediate_size=width,
                      shared_expert_intermediate_size=shapes.dim(L + "mlp.shared_expert.gate_proj.weight", 0))
    return config, notes


def _qwen_type(shapes: Shapes, routed: list[int], n_layers: int) -> str:
    """Qwen3-Next (fused in_proj_qkvz), else Qwen3.5: its MoE variant routes in every layer, its dense one in none."""
    if L + "linear_attn.in_proj_qkvz.weight" in shapes:
        return "qwen3_next"
    if routed and routed != list(range(n_layers)):
        raise Uninferable("a Qwen3.5 checkpoint with experts in only some layers: pass MODEL")
    return "qwen3_5_moe_text" if routed else "qwen3_5_text"


B = "backbone.layers.{}.mixer."  # Mamba2's and Nemotron-H's layers: one mixer each


def _mamba(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Mamba2 (every layer the mixer) and Nemotron-H (each layer one mixer: Mamba2, attention, a
    squared-ReLU MLP or MoE, as its pattern's M, *, - and E say, read off which tensors a layer has)."""
    embed, mixer, notes = "backbone.embeddings.weight", _mamba2_widths(shapes), [_state_note()]
    config = {"vocab_size": shapes.dim(embed, 0), "hidden_size": shapes.dim(embed, 1), "num_hidden_layers": shapes.n_layers,
              "tie_word_embeddings": "lm_head.weight" not in shapes}
    letters = {letter: set(shapes.layers_of(B + tensor)) for letter, tensor in
               (("M", "A_log"), ("*", "q_proj.weight"), ("E", "gate.weight"), ("-", "up_proj.weight"))}
    pattern = "".join(next((letter for letter, layers in letters.items() if layer in layers), "?")
                      for layer in range(shapes.n_layers))
    if pattern == "M" * shapes.n_layers:
        inner, width = mixer["mamba_num_heads"] * mixer["mamba_head_dim"], config["hidden_size"]
        if inner % width:
            raise Uninferable(f"Mamba2's inner width {inner} is not a multiple of hidden_size {width}")
        config.update(model_type="mamba2", num_heads=mixer["mamba_num_heads"], head_dim=mixer["mamba_head_dim"],
                      state_size=mixer["ssm_state_size"], n_groups=mixer["n_groups"], conv_kernel=mixer["conv_kernel"],
                      expand=inner // width, use_bias=mixer["use_bias"], use_conv_bias=mixer["use_conv_bias"])
        return config, tuple(notes)
    config.update(model_type="nemotron_h", hybrid_override_pattern=pattern, **mixer)
    if "*" in pattern:
        config.update(_heads(shapes, B))
        notes.append(_head_note(config["head_dim"]))
    if "-" in pattern:
        config["intermediate_size"] = shapes.dim(B + "up_proj.weight", 0)
    if "E" in pattern:
        one = B + "experts.0.up_proj.weight"
        width = shapes.dim(one, 0) if one in shapes else shapes.dim(B + "experts.up_proj", 1, rank=3)
        config.update(n_routed_experts=shapes.dim(B + "gate.weight", 0), moe_intermediate_size=width,
                      moe_shared_expert_intermediate_size=shapes.dim(B + "shared_experts.up_proj.weight", 0))
    return config, (*notes, "context length and the experts each token picks are not stored in tensors: "
                    "Nemotron-H's defaults assumed")


def _heads(shapes: Shapes, attention: str) -> dict[str, int]:
    """Attention's heads, which only their total widths store: head_dim 128 assumed where both
    q_proj's and k_proj's widths allow it, else 64, else their common divisor."""
    queries, kv = shapes.dim(attention + "q_proj.weight", 0), shapes.dim(attention + "k_proj.weight", 0)
    head_dim = next((h for h in (128, 64) if queries % h == 0 and kv % h == 0), gcd(queries, kv))
    return {"head_dim": head_dim, "num_attention_heads": queries // head_dim, "num_key_value_heads": kv // head_dim}


def _head_note(head_dim: int) -> str:
    """The one wording of `_heads`' assumption, whichever layout makes it."""
    return f"attention's head count is not stored in tensor shapes: assumed head_dim {head_dim}"


def _state_note(state: int = 128) -> str:
    """The one wording of `_mamba2_widths`' assumption, whichever layout makes it."""
    return (f"Mamba2's groups and state width are not stored apart (only their product): d_state {state} assumed "
            "where it divides it")


def _mamba2_widths(shapes: Shapes, mixer: str = B, state: int = 128) -> dict[str, Any]:
    """The Mamba2 mixer's keys (Nemotron-H's names): heads from A_log, the inner width from out_proj's
    input, groups x state from the conv's other channels (d_state `state` assumed when it divides them)."""
    heads, inner = shapes.dim(mixer + "A_log", 0, rank=1), shapes.dim(mixer + "out_proj.weight", 1)
    groups_state, left = divmod(shapes.dim(mixer + "conv1d.weight", 0, rank=3) - inner, 2)
    if left or groups_state <= 0 or inner % heads:
        raise Uninferable("Mamba2's conv1d, out_proj and A_log widths do not fit its layout")
    state = state if groups_state % state == 0 else groups_state
    return {"mamba_num_heads": heads, "mamba_head_dim": inner // heads, "ssm_state_size": state,
            "n_groups": groups_state // state, "conv_kernel": shapes.dim(mixer + "conv1d.weight", 2, rank=3),
            "use_bias": mixer + "in_proj.bias" in shapes, "use_conv_bias": mixer + "conv1d.bias" in shapes}


def _mamba2_hybrid(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Bamba (each layer Mamba2 or attention, then a SwiGLU) and Falcon-H1 (both in parallel in every
    layer): the Mamba2 mixer under `mamba.`, its keys renamed to these configs' `mamba_*`."""
    mixer, attention = L + "mamba.", L + "self_attn."
    if L + "feed_forward.gate_proj.weight" not in shapes:
        raise Uninferable("a Mamba2 hybrid without Bamba's feed_forward")
    widths, mamba_layers = _mamba2_widths(shapes, mixer), shapes.layers_of(mixer + "A_log")
    attention_layers = shapes.layers_of(attention + "q_proj.weight")
    parallel = mamba_layers == attention_layers == list(range(shapes.n_layers))
    config = {"model_type": "falcon_h1" if parallel else "bamba", "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
              "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": shapes.n_layers,
              "intermediate_size": shapes.dim(L + "feed_forward.gate_proj.weight", 0),
              "tie_word_embeddings": "lm_head.weight" not in shapes, "mamba_n_heads": widths["mamba_num_heads"],
              "mamba_d_head": widths["mamba_head_dim"], "mamba_d_state": widths["ssm_state_size"],
              "mamba_n_groups": widths["n_groups"], "mamba_d_conv": widths["conv_kernel"],
              "mamba_proj_bias": widths["use_bias"], "mamba_conv_bias": widths["use_conv_bias"],
              **(_heads(shapes, attention) if attention_layers else {})}
    inner = widths["mamba_num_heads"] * widths["mamba_head_dim"]
    notes = [_state_note(), *([_head_note(config["head_dim"])] if attention_layers else [])]
    if parallel:
        config.update(mamba_d_ssm=inner, mamba_rms_norm=mixer + "norm.weight" in shapes,
                      projectors_bias=mixer + "out_proj.bias" in shapes)
        notes.append("Falcon-H1's muP multipliers cost no parameter and are not stored in tensors: all assumed 1")
    else:
        if inner % config["hidden_size"]:
            raise Uninferable(f"Bamba's Mamba2 inner width {inner} is not a multiple of hidden_size")
        if set(mamba_layers) | set(attention_layers) != set(range(shapes.n_layers)):
            raise Uninferable("a layer with neither a Mamba2 mixer nor attention")
        config.update(mamba_expand=inner // config["hidden_size"], attn_layer_indices=attention_layers)
    return config, (*notes, f"context length is not stored in tensors: {config['model_type']}'s default assumed")


_JAMBA = L + "mamba."


def _jamba(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Jamba: Mamba (version 1) or attention in each layer, a SwiGLU or experts after it, each kind
    placed every `period` layers from an `offset`, solved from the layers that store it. Mamba's
    inner width is out_proj's input, its state A_log's columns, the dt rank dt_proj's input."""
    width = shapes.dim("model.embed_tokens.weight", 1)
    inner = shapes.dim(_JAMBA + "out_proj.weight", 1)
    dense, (n_experts, expert) = _width(shapes, L + "feed_forward.gate_proj.weight"), (0, 0)
    if L + "feed_forward.router.weight" in shapes:
        n_experts, expert = _routed(shapes, L + "feed_forward.", "router.weight")
    if inner % width or (dense and expert and dense != expert):
        raise Uninferable("Jamba's inner width is not a multiple of hidden_size, or its experts differ from its MLP")
    config = {"model_type": "jamba", "vocab_size": shapes.dim("model.embed_tokens.weight", 0), "hidden_size": width,
              "num_hidden_layers": shapes.n_layers, "tie_word_embeddings": "lm_head.weight" not in shapes,
              "intermediate_size": expert or dense, "mamba_expand": inner // width,
              "mamba_d_state": shapes.dim(_JAMBA + "A_log", 1), "mamba_dt_rank": shapes.dim(_JAMBA + "dt_proj.weight", 1),
              "mamba_d_conv": shapes.dim(_JAMBA + "conv1d.weight", 2, rank=3),
              "mamba_conv_bias": _JAMBA + "conv1d.bias" in shapes, "mamba_proj_bias": _JAMBA + "in_proj.bias" in shapes,
              **_placement(shapes, "attn_layer", L + "self_attn.q_proj.weight"),
              **_placement(shapes, "expert_layer", L + "feed_forward.router.weight")}
    notes = ["context length and the experts each token picks are not stored in tensors: Jamba's defaults assumed"]
    if shapes.layers_of(L + "self_attn.q_proj.weight"):
        heads = _heads(shapes, L + "self_attn.")
        config.update(num_attention_heads=width // heads["head_dim"], num_key_value_heads=heads["num_key_value_heads"])
        notes.append(_head_note(heads["head_dim"]))
    if expert:
        config["num_experts"] = n_experts
    return config, tuple(notes)


def _placement(shapes: Shapes, what: str, tensor: str) -> dict[str, int]:
    """Jamba's `<what>_period` and `_offset` for the layers storing `tensor`: every period-th layer
    from offset (an offset past the last layer when none stores it)."""
    layers, n = shapes.layers_of(tensor), shapes.n_layers
    period = layers[1] - layers[0] if len(layers) > 1 else n
    offset = layers[0] if layers else n
    if layers != list(range(offset, n, period)):
        raise Uninferable(f"the layers storing {tensor.replace('{}', 'N')} are not every period-th one: pass MODEL")
    return {f"{what}_period": period, f"{what}_offset": offset}

def _minimax(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """MiniMax-Text-01 / M1 (transformers' minimax): lightning attention where qkv_proj is stored,
    softmax GQA elsewhere, both of the same heads; Mixtral's experts (under `block_sparse_moe.` on
    the Hub, `mlp.` in transformers 5). The heads are stored only as widths: head_dim 128 assumed."""
    attention = L + "self_attn."
    inner = shapes.dim(attention + "norm.weight", 0, rank=1)
    softmax = shapes.layers_of(attention + "q_proj.weight")
    if softmax and shapes.dim(attention + "q_proj.weight", 0) != inner:
        raise Uninferable("lightning attention's width is not the softmax attention's heads x head_dim")
    heads = _heads(shapes, attention) if softmax else {"head_dim": 128 if inner % 128 == 0 else inner}
    moe = L + "block_sparse_moe." if L + "block_sparse_moe.gate.weight" in shapes else L + "mlp."
    n_experts, width = _routed(shapes, moe)
    config = {"model_type": "minimax", "vocab_size": shapes.dim("model.embed_tokens.weight", 0),
              "hidden_size": shapes.dim("model.embed_tokens.weight", 1), "num_hidden_layers": shapes.n_layers,
              "tie_word_embeddings": "lm_head.weight" not in shapes,
              "num_attention_heads": inner // heads["head_dim"], **heads, "num_local_experts": n_experts, "intermediate_size": width,
              "layer_types": ["full_attention" if layer in softmax else "linear_attention" for layer in range(shapes.n_layers)]}
    return config, (_head_note(heads["head_dim"]),
                    "not stored in tensors: the context length, the rotary fraction, the experts each token picks "
                    "and the residual scales (MiniMax's defaults assumed; none changes a count)")


# DeepSeek-V4's tensors as the Hub stores them and as transformers 5 names them (calc.checkpoint.layouts).
V4_NAMES = {
    "hub": {"hc": "hc_attn_fn", "q_a": "attn.wq_a.weight", "q_b": "attn.wq_b.weight", "kv_norm": "attn.norm.weight",
            "o_a": "attn.wo_a.weight", "compressor": "attn.compressor.norm.weight", "moe": "ffn.",
            "indexer": "attn.indexer.weights_proj.weight", "index_norm": "attn.indexer.compressor.norm.weight"},
    "transformers": {"hc": "attn_hc.fn", "q_a": "self_attn.q_a_proj.weight", "q_b": "self_attn.q_b_proj.weight",
                     "kv_norm": "self_attn.kv_norm.weight", "o_a": "self_attn.o_a_proj.weight",
                     "compressor": "self_attn.compressor.kv_norm.weight", "moe": "mlp.",
                     "indexer": "self_attn.compressor.indexer.scorer.weights_proj.weight",
                     "index_norm": "self_attn.compressor.indexer.kv_norm.weight"},
}
V4_RATES = {"indexer": 4, "compressor": 128}  # DeepseekV4Config's CSA and HCA compress rates


def _deepseek_v4(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """DeepSeek-V4: shared-KV MQA of `head_dim` (its KV norm's width) in every layer, grouped low-rank
    output (o_a's input is one group's heads), compressed blocks where a compressor is stored (CSA
    where an indexer is too, HCA elsewhere), hyper-connections of `hc_mult` copies (their mixing
    matrix's input), hash-routed experts where the token table is, MTP layers (e_proj) on top."""
    names = {key: L + name for key, name in V4_NAMES["hub" if L + "hc_attn_fn" in shapes else "transformers"].items()}
    mtp = shapes.layers_of(L + "e_proj.weight")
    n_layers, width = shapes.n_layers - len(mtp), shapes.dim("model.embed_tokens.weight", 1)
    head_dim, queries = shapes.dim(names["kv_norm"], 0, rank=1), shapes.dim(names["q_b"], 0)
    groups, left = divmod(queries, shapes.dim(names["o_a"], 1))
    hashed = shapes.layers_of(names["moe"] + "gate.tid2eid")
    compressed, indexed = (set(shapes.layers_of(names[key])) for key in ("compressor", "indexer"))
    if left or queries % head_dim or shapes.dim(names["o_a"], 0) % groups or hashed != list(range(len(hashed))):
        raise Uninferable("DeepSeek-V4's q_b, KV norm and o_a widths do not fit whole heads and groups, "
                          "or hash-routed layers are not the first ones")
    n_experts, expert = _routed(shapes, names["moe"])
    config = {"model_type": "deepseek_v4", "vocab_size": shapes.dim("model.embed_tokens.weight", 0), "hidden_size": width,
              "num_hidden_layers": n_layers, "num_nextn_predict_layers": len(mtp),
              "tie_word_embeddings": "lm_head.weight" not in shapes, "head_dim": head_dim,
              "num_attention_heads": queries // head_dim, "q_lora_rank": shapes.dim(names["q_a"], 0),
              "o_groups": groups, "o_lora_rank": shapes.dim(names["o_a"], 0) // groups,
              "compress_ratios": [V4_RATES["indexer"] if layer in indexed else V4_RATES["compressor"]
                                  if layer in compressed else 0 for layer in range(n_layers)],
              "n_routed_experts": n_experts, "moe_intermediate_size": expert, "num_hash_layers": len(hashed),
              "hc_mult": shapes.dim(names["hc"], 1) // width}
    if indexed:
        config.update(index_n_heads=shapes.dim(names["indexer"], 0), index_head_dim=shapes.dim(names["index_norm"], 0, rank=1))
    if hashed:  # the token table holds each token's experts: how many a token picks
        config["num_experts_per_tok"] = shapes.dim(names["moe"] + "gate.tid2eid", 1)
    return config, ("not stored in tensors: the compress rates (CSA 4, HCA 128), the sliding window, the rotary "
                    "width, the indexer's top-k and the SwiGLU clamp (DeepSeek-V4's defaults assumed; none changes a count)",)


def _gemma4(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Gemma-4's text decoder (every layer stores a `layer_scalar`): global layers are those whose
    QK-norm is as wide as the last layer's (always global) where local ones are narrower; the last
    layers with no k_proj share an earlier layer's K and V; a global layer with no v_proj takes its
    values from its keys; a router beside the MLP makes each layer a MoE; a per-layer embedding
    table gives the per-layer input's width (its columns over the layers)."""
    attention, n_layers = L + "self_attn.", shapes.n_layers
    norm_widths = shapes.dims(attention + "q_norm.weight", 0, rank=1)
    wide, narrow = norm_widths.get(n_layers - 1), min(norm_widths.values(), default=None)
    keys = set(shapes.layers_of(attention + "k_proj.weight"))
    n_shared = next((n for n in range(n_layers + 1) if keys == set(range(n_layers - n))), None)
    if wide is None or narrow is None or n_shared is None or set(norm_widths) != set(range(n_layers)):
        raise Uninferable("Gemma-4's layers need a QK-norm each, and K projections in all but the top layers")
    kinds = ["full_attention" if width == wide and wide != narrow else "sliding_attention"
             for _, width in sorted(norm_widths.items())]
    local = shapes.of_layer(kinds.index("sliding_attention"))
    full = max((layer for layer in range(n_layers - n_shared) if kinds[layer] == "full_attention"), default=None)
    k_eq_v = full is not None and full not in shapes.layers_of(attention + "v_proj.weight")
    width, mlps = shapes.dim("model.embed_tokens.weight", 1), shapes.dims(L + "mlp.gate_proj.weight", 0)
    if set(mlps) != set(range(n_layers)):
        raise Uninferable("Gemma-4's layers need a dense MLP each")
    config = {"model_type": "gemma4_text", "vocab_size": shapes.dim("model.embed_tokens.weight", 0), "hidden_size": width,
              "num_hidden_layers": n_layers, "layer_types": kinds, "head_dim": narrow, "global_head_dim": wide,
              "num_attention_heads": local.dim(attention + "q_proj.weight", 0) // narrow,
              "num_key_value_heads": local.dim(attention + "k_proj.weight", 0) // narrow,
              "attention_k_eq_v": k_eq_v,
              "num_kv_shared_layers": n_shared, "intermediate_size": mlps[0],
              "use_double_wide_mlp": n_shared > 0 and mlps[n_layers - 1] == 2 * mlps[0],
              "attention_bias": attention + "q_proj.bias" in shapes,
              "tie_word_embeddings": "lm_head.weight" not in shapes, "hidden_size_per_layer_input": 0}
    notes = ["not stored in tensors: the sliding window, the context length and the logit soft-cap "
             "(Gemma-4's defaults assumed: the window sizes the local layers' cache)"]
    if k_eq_v:
        config["num_global_key_value_heads"] = shapes.dims(attention + "k_proj.weight", 0)[full] // wide
    if "model.embed_tokens_per_layer.weight" in shapes:
        config.update(vocab_size_per_layer_input=shapes.dim("model.embed_tokens_per_layer.weight", 0),
                      hidden_size_per_layer_input=shapes.dim("model.embed_tokens_per_layer.weight", 1) // n_layers)
    if L + "router.proj.weight" in shapes:  # (Gemma4TextConfig has no default for the experts a token picks)
        n_experts = shapes.dim(L + "router.proj.weight", 0)
        config.update(enable_moe_block=True, num_experts=n_experts, top_k_experts=min(8, n_experts),
                      moe_intermediate_size=shapes.dim(L + "experts.gate_up_proj", 1, rank=3) // 2)
        notes.append("the experts each token picks are not stored in tensors: 8 assumed, Gemma-4-26B-A4B's (all when fewer)")
    return config, tuple(notes)


# A tensor only the layout stores -> how its config is read off the shapes.
SIGNATURES: dict[str, Callable[[Shapes], tuple[dict[str, Any], tuple[str, ...]]]] = {
    L + "conv.conv.weight": _lfm2,
    # (Kimi Linear's before DeepSeek's: its MLA layers store kv_a_proj_with_mqa too)
    L + "self_attn.f_a_proj.weight": _kimi_linear,
    L + "self_attn.forget_gate.f_a_proj.weight": _kimi_linear,
    L + "self_attn.kv_a_proj_with_mqa.weight": _deepseek,
    L + "linear_attn.in_proj_qkvz.weight": _qwen3_next,
    L + "linear_attn.in_proj_qkv.weight": _qwen3_next,
    B + "A_log": _mamba,
    L + "mamba.dt_bias": _mamba2_hybrid,
    L + "mamba.x_proj.weight": _jamba,
    L + "self_attn.output_gate.weight": _minimax,
    L + "hc_attn_fn": _deepseek_v4,
    L + "attn_hc.fn": _deepseek_v4,
    L + "layer_scalar": _gemma4,
}

