"""The tensors a spec's parts imply, one `Slot` each: name, shape, component(s) and holder kind.

`model_slots(spec, layout)` gives the tensors outside the stack, `block_slots(layout, block, d)` one
layer's, named relative to `layers.{layer}.`; the layout (`calc.checkpoint.layouts`) says where each
part's tensors live, the part says which exist and their shapes. Linear weights are [out, in]
(torch's nn.Linear; GPT-2's Conv1D: [in, out]); `hub=True` names routed experts as the Hub's
checkpoints store them (one tensor per expert, `{expert}` its index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calc.parts.shared import PREFIX
from calc.spec.model import Block, ModelSpec

__all__ = ["Slot", "Target", "block_slots", "model_slots", "mtp_slots"]

Target = str | tuple[str, ...] | None


@dataclass(frozen=True)
class Slot:
    """One tensor: its name, shape, component(s) and, for a fused tensor, the widths it splits in."""

    name: str
    shape: tuple[int, ...]
    target: Target
    widths: tuple[int, ...] = ()
    init: str = "normal"  # normal (matrices), ones (norm scales), zeros (biases), buffer (not a parameter)
    kind: str = "param"  # what holds it in torch: linear, norm, embedding, param (a bare tensor) or buffer



class _Slots:
    """Collects slots for one model or one block, in the order a token meets them."""

    def __init__(self, lay: dict[str, Any], hub: bool = False) -> None:
        self.lay, self.slots, self.hub = lay, {}, hub  # hub: the Hub's names where the layout's `hub` gives them

    def add(self, role: str, name: str, shape: tuple[int, ...], target: Target, widths: tuple[int, ...] = (),
            init: str = "normal", kind: str = "param") -> None:
        self.slots[role] = Slot(name, shape, target, widths, init, "buffer" if init == "buffer" else kind)

    def linear(self, role: str, n_in: int, n_out: int, target: Target, bias: Target = None,
               widths: tuple[int, ...] = (), path: str | None = None) -> None:
        """nn.Linear: weight [out, in] (GPT-2's Conv1D: [in, out]) and, with a bias target, bias [out]."""
        path = path or self.lay[role]
        shape = (n_in, n_out) if self.lay.get("conv1d") else (n_out, n_in)
        self.add(f"{role}.weight", f"{path}.weight", shape, target, widths, kind="linear")
        if bias:
            self.add(f"{role}.bias", f"{path}.bias", (n_out,), bias, widths, "zeros", "linear")

    def norm(self, role: str, norm: Any, width: int | tuple[int, ...], target: str, path: str | None = None) -> None:
        path, shape = path or self.lay[role], width if isinstance(width, tuple) else (width,)
        if norm.weight:
            self.add(f"{role}.weight", f"{path}.weight", shape, target, init="zeros" if norm.unit_offset else "ones",
                     kind="norm")
        if norm.bias:
            self.add(f"{role}.bias", f"{path}.bias", shape, target, init="zeros", kind="norm")


def _attention(s: _Slots, a: Any, d: int) -> None:
    """Q, K, V (or fused), QK-norms, sinks (under the Hub's name in a hub table whose layout renames them),
    an output gate's W_G, W_O."""
    q, kv, v = a.q_dim, a.kv_dim, a.v_dim
    gate_in_q = a.output_gate and s.lay.get("q_gate")  # Qwen3-Next: q_proj holds each head's queries, then its gate
    if gate_in_q:
        s.linear("q", d, 2 * q, ("q", "attn_gate"), a.q_bias and ("q_bias", "attn_gate_bias"), (q, q))
        s.linear("k", d, kv, "k", a.k_bias and "k_bias")
        s.linear("v", d, v, "v", a.v_bias and "v_bias")
    elif a.fused_qkv:
        bias = ("q_bias", "k_bias", "v_bias") if a.q_bias else None
        s.linear("qkv", d, q + kv + v, ("q", "k", "v"), bias, (q, kv, v))
    else:
        own = {"q"} if a.kv_shared else {"q", "k"} if a.k_eq_v else {"q", "k", "v"}  # Gemma-3n/4: K, V elsewhere
        for role, width, bias in (("q", q, a.q_bias), ("k", kv, a.k_bias), ("v", v, a.v_bias)):
            if role in own:
                s.linear(role, d, width, role, bias and f"{role}_bias")
    if a.augment is not None:
        _augment(s, a.augment, d)
    if a.qk_norm is not None:
        head = a.qk_norm.scope == "head"
        for role, heads in (("q_norm", a.n_heads), ("k_norm", a.n_kv_heads))[:1 if a.kv_shared else 2]:
            width = a.head_dim if head else ((heads, a.head_dim) if s.lay.get("qk_norm_heads") else heads * a.head_dim)
            s.norm(role, a.qk_norm.norm, width, role)
    if a.indexer is not None:  # MiniMax-M3's block indexer: its Q and K from x, a norm over each of their heads
        i, names = a.indexer, _hub_names(s)
        s.linear("block_idx_q", d, i.n_heads * i.head_dim, "block_idx_q", path=names["block_idx_q"])
        s.linear("block_idx_k", d, i.head_dim, "block_idx_k", path=names["block_idx_k"])
        for role in ("block_idx_q_norm", "block_idx_k_norm"):
            s.norm(role, i.norm, i.head_dim, role, names[role])
    if a.sinks:
        s.add("sinks", ((s.lay.get("hub") or {}) if s.hub else {}).get("sinks", s.lay["sinks"]), (a.n_heads,),
              "attn_sinks")
    if a.output_gate and not gate_in_q:
        s.linear("attn_gate", d, a.gate_width, "attn_gate")
    s.linear("o", a.o_dim, d, "attn_out", a.o_bias and "attn_out_bias")


def _augment(s: _Slots, g: Any, d: int) -> None:
    """Gemma-3n's AltUp and LAuReL and the per-layer input sublayer (Gemma-3n, Gemma-4); their norms
    are scale-only RMSNorms."""
    def norm(role: str, name: str, target: str) -> None:
        s.add(role, name, (d,), target, init="ones", kind="norm")

    if g.altup_inputs:
        n, path = g.altup_inputs, s.lay["altup"]
        s.add("altup.scale", f"{path}.correct_output_scale", (d,), "altup_scale")
        s.linear("altup.correct", n, n, "altup_correct", path=f"{path}.correction_coefs")
        s.linear("altup.predict", n, n * n, "altup_predict", path=f"{path}.prediction_coefs")
        s.linear("altup.router", d, n, "altup_router", path=f"{path}.modality_router")
        norm("altup.router_norm", f"{path}.router_norm.weight", "altup_router_norm")
    if g.laurel_rank:
        path = s.lay["laurel"]
        s.linear("laurel.left", d, g.laurel_rank, "laurel_left", path=f"{path}.linear_left")
        s.linear("laurel.right", g.laurel_rank, d, "laurel_right", path=f"{path}.linear_right")
        norm("laurel.norm", f"{path}.post_laurel_norm.weight", "laurel_norm")
    if g.per_layer_input:
        s.linear("ple_gate", d, g.per_layer_input, "ple_gate")
        s.linear("ple_proj", g.per_layer_input, d, "ple_proj")
        norm("ple_norm", f"{s.lay['ple_norm']}.weight", "ple_norm")


def _mla(s: _Slots, a: Any, d: int) -> None:
    h, r = a.n_heads, a.q_lora_rank
    if r is None:
        s.linear("q", d, h * a.qk_head_dim, "q")
    else:
        s.linear("q_a", d, r, "q_a", a.bias and "q_a_bias")
        s.norm("q_a_norm", a.norm, r, "q_a_norm")
        s.linear("q_b", r, h * a.qk_head_dim, "q_b")
    if a.indexer is not None:
        _indexer(s, a, d)
    s.linear("kv_a", d, a.kv_lora_rank + a.qk_rope_head_dim, "kv_a", a.bias and "kv_a_bias")
    s.norm("kv_a_norm", a.norm, a.kv_lora_rank, "kv_a_norm")
    s.linear("kv_b", a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim), "kv_b")
    s.linear("o", h * a.v_head_dim, d, "attn_out", a.bias and "attn_out_bias")


def _indexer(s: _Slots, a: Any, d: int) -> None:
    """DSA's indexer: wq_b from the query latent, wk, the key's LayerNorm (weight and bias), weights_proj."""
    i = a.indexer
    s.linear("idx_q", a.q_lora_rank, i.n_heads * i.head_dim, "idx_q")
    s.linear("idx_k", d, i.head_dim, "idx_k")
    s.add("idx_k_norm.weight", f"{s.lay['idx_k_norm']}.weight", (i.head_dim,), "idx_k_norm", init="ones", kind="norm")
    s.add("idx_k_norm.bias", f"{s.lay['idx_k_norm']}.bias", (i.head_dim,), "idx_k_norm", init="zeros", kind="norm")
    s.linear("idx_weights", d, i.n_heads, "idx_weights")


def _conv(s: _Slots, role: str, channels: int, kernel: int, target: str, bias: str | None) -> None:
    """A depthwise causal Conv1d: weight [channels, 1, kernel] (and a bias per channel)."""
    s.add(f"{role}.weight", f"{s.lay[role]}.weight", (channels, 1, kernel), target)
    if bias:
        s.add(f"{role}.bias", f"{s.lay[role]}.bias", (channels,), bias, init="zeros")


def _mamba2(s: _Slots, m: Any, d: int) -> None:
    inner, conv, h = m.d_inner, m.conv_dim, m.n_heads
    s.linear("ssm_in", d, inner + conv + h, "ssm_in", m.proj_bias and "ssm_in_bias")
    _conv(s, "ssm_conv", conv, m.conv_kernel, "ssm_conv", m.conv_bias and "ssm_conv_bias")
    for role in ("ssm_dt_bias", "ssm_a_log", "ssm_d"):
        s.add(role, s.lay[role], (h,), role)
    if m.gated_norm:
        s.add("ssm_norm.weight", f"{s.lay['ssm_norm']}.weight", (inner,), "ssm_norm", init="ones", kind="norm")
    s.linear("ssm_out", inner, d, "ssm_out", m.has_out_bias and "ssm_out_bias")


def _mamba(s: _Slots, m: Any, d: int) -> None:
    """Mamba (v1): in_proj, conv1d, x_proj, (Jamba's dt/B/C norms,) dt_proj, A_log, D, out_proj."""
    i, n, r = m.d_inner, m.d_state, m.dt_rank
    s.linear("ssm_in", d, 2 * i, "ssm_in", m.proj_bias and "ssm_in_bias")
    _conv(s, "ssm_conv", i, m.conv_kernel, "ssm_conv", m.conv_bias and "ssm_conv_bias")
    s.linear("ssm_x_proj", i, r + 2 * n, "ssm_x_proj")
    if m.dt_norms:
        for role, width in (("ssm_dt_norm", r), ("ssm_b_norm", n), ("ssm_c_norm", n)):
            s.add(f"{role}.weight", f"{s.lay[role]}.weight", (width,), role, init="ones", kind="norm")
    s.linear("ssm_dt_proj", r, i, "ssm_dt_proj", "ssm_dt_proj_bias")
    s.add("ssm_a_log", s.lay["ssm_a_log"], (i, n), "ssm_a_log")
    s.add("ssm_d", s.lay["ssm_d"], (i,), "ssm_d")
    s.linear("ssm_out", i, d, "ssm_out", m.proj_bias and "ssm_out_bias")


def _deltanet(s: _Slots, g: Any, d: int) -> None:
    """Qwen3-Next fuses q, k, v with z and b with a (in_proj_qkvz, in_proj_ba); Qwen3.5 keeps four."""
    h, value = g.n_v_heads, g.value_dim
    if "gdn_qkvz" in s.lay:
        s.linear("gdn_qkvz", d, g.conv_dim + value, ("gdn_qkv", "gdn_z"), widths=(g.conv_dim, value))
        s.linear("gdn_ba", d, 2 * h, ("gdn_b", "gdn_a"), widths=(h, h))
    else:  # OLMo-Hybrid keeps q, k and v apart too
        split = (("gdn_q", g.key_dim), ("gdn_k", g.key_dim), ("gdn_v", value)) if "gdn_q" in s.lay else ()
        for role, width in split:
            s.linear(role, d, width, "gdn_qkv")
        for role, width in (*(() if split else (("gdn_qkv", g.conv_dim),)), ("gdn_z", value), ("gdn_b", h), ("gdn_a", h)):
            s.linear(role, d, width, role)
    names = {**s.lay, **(s.lay.get("hub") or {})} if s.hub else s.lay
    _qkv_conv(s, "gdn_conv", names, (g.key_dim, g.key_dim, value), g.conv_kernel)
    s.add("gdn_dt_bias", s.lay["gdn_dt_bias"], (h,), "gdn_dt_bias")
    s.add("gdn_a_log", s.lay["gdn_a_log"], (h,), "gdn_a_log")
    s.add("gdn_norm.weight", f"{s.lay['gdn_norm']}.weight", (g.v_head_dim,), "gdn_norm", init="ones", kind="norm")
    s.linear("gdn_out", value, d, "gdn_out")


def _qkv_conv(s: _Slots, role: str, names: dict[str, Any], widths: tuple[int, ...], kernel: int) -> None:
    """A bias-free conv over q | k | v: one [sum(widths), 1, kernel] tensor, or, where a Hub layout
    names `<role>_split` (Kimi Linear's and OLMo-Hybrid's q_conv1d, k_conv1d, v_conv1d), one per part."""
    split = names.get(f"{role}_split")
    if not split:
        return _conv(s, role, sum(widths), kernel, role, None)
    for part, path, width in zip("qkv", split, widths):
        s.add(f"{role}_{part}.weight", f"{path}.weight", (width, 1, kernel), role)


def _kda(s: _Slots, k: Any, d: int) -> None:
    """Kimi Delta Attention: q, k, v, their conv (three convs in the Hub's layout), the forget gate
    (f_a, f_b, dt_bias, A_log stored [1, 1, H, 1]), b, the output gate (g_a, g_b), o_norm, o_proj."""
    names = {**s.lay, **(s.lay.get("hub") or {})} if s.hub else s.lay
    width, r, h = k.width, k.head_dim, k.n_heads
    for role in ("kda_q", "kda_k", "kda_v"):
        s.linear(role, d, width, role)
    _qkv_conv(s, "kda_conv", names, (width, width, width), k.conv_kernel)
    s.linear("kda_f_a", d, r, "kda_f_a", path=names["kda_f_a"])
    s.linear("kda_f_b", r, width, "kda_f_b", path=names["kda_f_b"])
    s.add("kda_dt_bias", names["kda_dt_bias"], (width,), "kda_dt_bias")
    s.add("kda_a_log", names["kda_a_log"], (1, 1, h, 1), "kda_a_log")
    s.linear("kda_b", d, h, "kda_b")
    s.linear("kda_g_a", d, r, "kda_g_a")
    s.linear("kda_g_b", r, width, "kda_g_b")
    s.add("kda_norm.weight", f"{s.lay['kda_norm']}.weight", (r,), "kda_norm", init="ones", kind="norm")
    s.linear("kda_out", width, d, "kda_out")


def _lightning(s: _Slots, a: Any, d: int) -> None:
    """MiniMax's lightning attention: qkv_proj, its norm, output_gate, out_proj (its decays are buffers)."""
    w = a.width
    s.linear("la_qkv", d, 3 * w, "la_qkv")
    s.add("la_norm.weight", f"{s.lay['la_norm']}.weight", (w,), "la_norm", init="ones", kind="norm")
    s.linear("la_gate", d, w, "la_gate")
    s.linear("la_out", w, d, "la_out")


def _short_conv(s: _Slots, c: Any, d: int) -> None:
    s.linear("conv_in", d, 3 * d, "conv_in", c.bias and "conv_in_bias")
    _conv(s, "conv", d, c.kernel, "conv", c.bias and "conv_bias")
    s.linear("conv_out", d, d, "conv_out", c.bias and "conv_out_bias")


def _hub_names(s: _Slots) -> dict[str, Any]:
    """The layout's paths, with its hub table's over them when the Hub's names are asked for."""
    return {**s.lay, **(s.lay.get("hub") or {})} if s.hub else s.lay


def _compressed(s: _Slots, a: Any, d: int) -> None:
    """DeepSeek-V4's attention: the query latent, the one K = V head, the grouped output, the sinks,
    then the compressor (kv and gate k·c wide, a [ratio, k·c] position bias, a norm) and the indexer's."""
    names, h, c, r, go = _hub_names(s), a.n_heads, a.head_dim, a.q_lora_rank, a.o_groups * a.o_lora_rank
    s.linear("q_a", d, r, "q_a", path=names["q_a"])
    s.norm("q_a_norm", a.norm, r, "q_a_norm", names["q_a_norm"])
    s.linear("q_b", r, h * c, "q_b", path=names["q_b"])
    s.linear("kv", d, c, "kv", path=names["kv"])
    s.norm("kv_norm", a.norm, c, "kv_norm", names["kv_norm"])
    s.linear("o_a", h * c // a.o_groups, go, "o_a", path=names["o_a"])
    s.linear("o_b", go, d, "o_b", path=names["o_b"])
    s.add("sinks", names["sinks"], (h,), "attn_sinks")
    compressors = [("comp", a.series, c)] if a.ratio else []
    compressors += [("idx", 2, a.indexer.head_dim)] if a.indexer else []
    for prefix, series, width in compressors:
        for role in (f"{prefix}_kv", f"{prefix}_gate"):
            s.linear(role, d, series * width, role, path=names[role])
        s.add(f"{prefix}_bias", names[f"{prefix}_bias"], (a.ratio, series * width), f"{prefix}_bias")
        s.norm(f"{prefix}_norm", a.norm, width, f"{prefix}_norm", names[f"{prefix}_norm"])
    if a.indexer:
        s.linear("idx_q", r, a.indexer.n_heads * a.indexer.head_dim, "idx_q", path=names["idx_q"])
        s.linear("idx_weights", d, a.indexer.n_heads, "idx_weights", path=names["idx_weights"])


def _hyper(s: _Slots, role: str, n: int, d: int) -> None:
    """One hyper-connection mix (DeepSeek-V4): fn [(2 + n)·n, n·d], base [(2 + n)·n], scale [3]."""
    path, width = _hub_names(s)[role], (2 + n) * n
    s.add(f"{role}.fn", path.format("fn"), (width, n * d), role)
    s.add(f"{role}.base", path.format("base"), (width,), role, init="zeros")
    s.add(f"{role}.scale", path.format("scale"), (3,), role, init="ones")


# Each token mixer's tensors, by the part's kind (its fields say which exist and their shapes).
def _parallel(s: _Slots, p: Any, d: int) -> None:
    """A parallel group: each member's tensors under its own paths (Falcon-H1's self_attn and mamba)."""
    for mixer in p.mixers:
        MIXERS[mixer.kind](s, mixer, d)


MIXERS = {"attention": _attention, "mla": _mla, "compressed_attention": _compressed, "mamba": _mamba, "mamba2": _mamba2, "gated_deltanet": _deltanet,
          "kda": _kda, "lightning": _lightning, "short_conv": _short_conv, "parallel": _parallel}


def _mlp(s: _Slots, m: Any, d: int, prefix: str = "mlp", container: str | None = None,
         leaves: dict[str, str] | None = None) -> None:
    """A dense MLP; a MoE's shared expert is one under the layout's `shared` container, its tensors
    named as the MLP's or as `leaves` says (DeepSeek-V4's Hub: w1, w3, w2)."""
    def path(role: str) -> str:
        if container is None:
            return s.lay[role]
        return f"{container}.{(leaves or {}).get(role) or s.lay[role].rsplit('.', 1)[1]}"

    f, bias = m.d_ff, m.bias
    role = "shared." if prefix == "shared_mlp" else ""
    split = _hub_names(s).get(f"{role}gate_up_split")  # MiniMax-M3's Hub: gate and up apart, fused on load
    if m.gated and m.fused_gate_up and not split:
        s.linear(f"{role}gate_up", d, 2 * f, (f"{prefix}_gate", f"{prefix}_up"),
                 bias and (f"{prefix}_gate_bias", f"{prefix}_up_bias"), (f, f), path("gate_up"))
    else:
        if m.gated:
            s.linear(f"{role}gate", d, f, f"{prefix}_gate", bias and f"{prefix}_gate_bias",
                     path=split[0] if split else path("gate"))
        s.linear(f"{role}up", d, f, f"{prefix}_up", bias and f"{prefix}_up_bias", path=split[1] if split else path("up"))
    if m.activation == "xielu":
        _xielu(s, f"{role}act", f"{path('up').rpartition('.')[0]}.act_fn", f"{prefix}_act")
    s.linear(f"{role}down", f, d, f"{prefix}_down", bias and f"{prefix}_down_bias", path=path("down"))


def _xielu(s: _Slots, role: str, path: str, target: str) -> None:
    """XIELUActivation, beside up_proj as the MLP's act_fn: alpha_p and alpha_n, one-element parameters,
    and beta and eps, scalar buffers that save_pretrained writes too."""
    for name in ("alpha_p", "alpha_n"):
        s.add(f"{role}.{name}", f"{path}.{name}", (1,), target)
    for name in ("beta", "eps"):
        s.add(f"{role}.{name}", f"{path}.{name}", (), None, init="buffer")


def _moe(s: _Slots, m: Any, d: int, hub: bool) -> None:
    lay, e, f = s.lay, m.choices, m.d_ff  # the router scores zero-computation experts too (LongCat-Flash)
    names = {**lay, **(lay.get("hub") or {})} if hub else lay
    if m.router_scale:  # Gemma-4: a d-wide input scale and one scale per expert beside the router
        s.add("router_scale", names["router_scale"], (d,), "router_scale", init="ones")
        s.add("router_expert_scale", names["router_expert_scale"], (e,), "router_expert_scale", init="ones")
    s.linear("router", d, e, "router", m.router_bias and "router_bias", path=names["router"])
    if m.shared_norms:
        for role, target in (("experts_norm", "experts_norm"), ("shared_post_norm", "shared_mlp_post_norm"),
                             ("experts_post_norm", "experts_post_norm")):
            s.add(role, f"{names[role]}.weight", (d,), target, init="ones", kind="norm")
    if m.score_bias:  # ERNIE-4.5 stores it [1, E] and counts it (a parameter without gradient)
        shape = (1, e) if lay.get("score_bias_2d") else (e,)
        counted = "router_score_bias_param" if m.score_bias_param else None
        s.add("score_bias", names["score_bias"], shape, counted, init="zeros" if counted else "buffer")
    if m.hash_vocab:  # DeepSeek-V4's hashed layers: the token-id -> experts table
        s.add("hash_table", names["hash_table"], (m.hash_vocab, m.top_k), None, init="buffer")
    if hub and "expert_gate" in names:
        for role, n_in, n_out in (("gate", d, f), ("up", d, f), ("down", f, d)):
            if role != "gate" or m.gated:
                s.linear(f"expert_{role}", n_in, n_out, f"experts_{role}", m.expert_bias and f"experts_{role}_bias",
                         path=names[f"expert_{role}"])
    else:
        _fused_experts(s, m, d, names if hub else lay)
    if m.shared is not None:
        _mlp(s, m.shared, d, "shared_mlp", names["shared"], names.get("shared_leaves") if hub else None)
        if m.shared_gate:
            s.linear("shared_gate", d, 1, "shared_expert_gate")


def _fused_experts(s: _Slots, m: Any, d: int, names: dict[str, Any]) -> None:
    """transformers 5's [E, 2f, d] gate_up_proj and [E, d, f] down_proj (or [E, d, 2f], [E, f, d]);
    `names` may rename them (GraniteMoE's Hub checkpoints: input_linear, output_linear) or keep gate
    and up apart, [E, f, d] each (Step-3.7's Hub checkpoints: moe.gate_proj, moe.up_proj)."""
    e, f, path = m.n_experts, m.d_ff, s.lay["experts"]
    if s.lay.get("experts_order") == "stacked_rows":
        return _stacked_rows(s, m, d)
    in_out = s.lay.get("experts_order", "out_in").startswith("in_out")
    up = ("experts_gate", "experts_up") if m.gated else "experts_up"
    up_bias = ("experts_gate_bias", "experts_up_bias") if m.gated else "experts_up_bias"
    width = 2 * f if m.gated else f
    name = "gate_up_proj" if m.gated else "up_proj"
    widths = (f, f) if m.gated else ()
    if "experts.gate" in names and m.gated:
        for role in ("gate", "up"):
            s.add(f"experts.{role}", names[f"experts.{role}"], (e, f, d), f"experts_{role}")
    else:
        s.add("experts.gate_up", names.get("experts.gate_up", f"{path}.{name}"),
              (e, d, width) if in_out else (e, width, d), up, widths)
    if m.expert_bias:
        s.add("experts.gate_up_bias", f"{path}.{name}_bias", (e, width), up_bias, widths, "zeros")
    s.add("experts.down", names.get("experts.down", f"{path}.down_proj"), (e, f, d) if in_out else (e, d, f),
          "experts_down")
    if m.expert_bias:
        s.add("experts.down_bias", f"{path}.down_proj_bias", (e, d), "experts_down_bias", init="zeros")


def _stacked_rows(s: _Slots, m: Any, d: int) -> None:
    """DBRX's experts: gate (w1), up (v1) and down (w2) each one [E·f, d] matrix, expert after expert
    (the down projection transposed: an expert's output is act @ w2[e])."""
    rows, path = m.n_experts * m.d_ff, s.lay["experts"]
    for role, name in (("gate", "w1"), ("up", "v1"), ("down", "w2")):
        s.add(f"experts.{role}", f"{path}.{name}", (rows, d), f"experts_{role}")


def block_slots(lay: dict[str, Any], block: Block, d: int, hub: bool = False) -> dict[str, Slot]:
    """One layer's tensors, names relative to `layers.{layer}.` (`{expert}` in a hub layout). A layer
    of several mixer + MLP pairs (LongCat-Flash) has each pair's under its own index, `{sub}` in the
    layout's paths, roles `0.q_a`, `1.q_a`, ...; a shortcut's roles are `shortcut.router`, ..."""
    if block.shared is not None:  # Zamba2's hybrid layer: its own tensors; its shared block's are the model's
        slots = _pair_slots({**lay, **lay["applied"]}, block, d, hub)
        s = _Slots(lay["applied"])
        if block.shared.proj:
            s.linear("shared_proj", d, d, f"{PREFIX}proj")
        return {**s.slots, **slots}
    if block.pairs == 1 and block.shortcut is None:
        return _pair_slots(lay, block, d, hub)
    slots = {f"{i}.{role}": slot for i in range(block.pairs)
             for role, slot in _pair_slots(_sub_layout(lay, i), block, d, hub).items()}
    if block.shortcut is not None:
        s = _Slots(lay, hub)
        _moe(s, block.shortcut, d, hub) if block.shortcut.kind == "moe" else _mlp(s, block.shortcut, d)
        slots.update({f"shortcut.{role}": slot for role, slot in s.slots.items()})
    return slots


def _sub_layout(lay: dict[str, Any], index: int) -> dict[str, Any]:
    """The layout with `{sub}` in every path replaced by a pair's index."""
    return {key: value.replace("{sub}", str(index)) if isinstance(value, str) else value for key, value in lay.items()}


def _pair_slots(lay: dict[str, Any], block: Block, d: int, hub: bool) -> dict[str, Slot]:
    """One mixer + MLP pair's tensors with its norms."""
    s = _Slots(lay, hub)
    parallel_names = lay.get("parallel_norms") if block.parallel and len(block.norms) == 2 else None
    hub_norms = (lay.get("hub") or {}) if hub else {}  # OLMo-Hybrid's OLMo-core names
    norm_path = {pos: (parallel_names or {}).get(pos, hub_norms.get(pos, lay.get(pos))) for pos in block.norms}
    order = {"attn_in": 0, "attn_out": 1, "mlp_in": 2, "mlp_out": 3}
    targets = {"attn_in": "attn_norm", "attn_out": "attn_post_norm", "mlp_in": "mlp_norm", "mlp_out": "mlp_post_norm"}
    positions = sorted(block.norms, key=order.get)
    if block.hyper is not None:
        _hyper(s, "hc_attn", block.hyper.streams, d)
    for position in (p for p in positions if p == "attn_in"):
        s.norm(position, block.norm, d, targets[position], norm_path[position])
    if block.attention is not None:
        MIXERS[block.attention.kind](s, block.attention, d)
    if block.hyper is not None:
        _hyper(s, "hc_mlp", block.hyper.streams, d)
    for position in (p for p in positions if p in ("attn_out", "mlp_in")):
        s.norm(position, block.norm, d, targets[position], norm_path[position])
    if block.mlp is not None and block.mlp.kind == "moe":
        _moe(s, block.mlp, d, hub)
    elif block.mlp is not None:  # a hub layout may keep even the dense MLP elsewhere (Kimi Linear's block_sparse_moe)
        _mlp(s, block.mlp, d, container=(lay.get("hub") or {}).get("mlp") if hub else None)
    for position in (p for p in positions if p == "mlp_out"):
        s.norm(position, block.norm, d, targets[position], norm_path[position])
    if "layer_scalar" in lay:  # Gemma-4: each layer's output times a stored one-element buffer (1 when built)
        s.add("layer_scalar", lay["layer_scalar"], (1,), None, init="ones", kind="buffer")
    return s.slots


def _shared_slots(s: _Slots, spec: ModelSpec, lay: dict[str, Any]) -> None:
    """Each shared block (Zamba2's) under the first layer applying it, with every application's
    adapters by its index among the applying layers (transformers' adapter lists)."""
    firsts: dict[str, int] = {}
    uses: dict[str, list[tuple[int, Any]]] = {}  # copy -> (index among the applying layers, that layer's use)
    applying = [(layer, shared) for layer in range(spec.n_layers)
                if (shared := spec.blocks[spec.block_at(layer)].shared) is not None]
    for index, (layer, shared) in enumerate(applying):
        firsts.setdefault(shared.name, layer)
        uses.setdefault(shared.name, []).append((index, shared))
    d = spec.d_model
    for name, (copy, _) in spec.shared_blocks().items():
        at = {role: f"{lay['layers']}.{firsts[name]}.{path}" for role, path in lay["shared_block"].items()}
        a, m, role = copy.attention, copy.mlp, f"shared.{name}."
        s.norm(f"{role}attn_in", copy.norm, copy.in_width, f"{PREFIX}attn_norm", at["attn_in"])
        for key, width in (("q", a.q_dim), ("k", a.kv_dim), ("v", a.v_dim)):
            s.linear(f"{role}{key}", copy.in_width, width, PREFIX + key, path=at[key])
        s.linear(f"{role}o", a.o_dim, d, f"{PREFIX}attn_out", path=at["o"])
        s.norm(f"{role}mlp_in", copy.norm, d, f"{PREFIX}mlp_norm", at["mlp_in"])
        gate, up = f"{PREFIX}mlp_gate", f"{PREFIX}mlp_up"
        s.linear(f"{role}gate_up", d, 2 * m.d_ff, (gate, up), m.bias and (f"{gate}_bias", f"{up}_bias"),
                 (m.d_ff, m.d_ff), at["gate_up"])
        s.linear(f"{role}down", m.d_ff, d, f"{PREFIX}mlp_down", m.bias and f"{PREFIX}mlp_down_bias", path=at["down"])
        for index, shared in uses[name]:
            r = shared.adapter_rank
            for key, (n_in, n_out) in shared.adapter_widths(d).items():
                path, target = f"{at[f'{key}_adapter']}.{index}", f"{PREFIX}{key}_adapter"
                s.linear(f"{role}{key}_adapter.{index}.0", n_in, r, target, path=f"{path}.0")
                s.linear(f"{role}{key}_adapter.{index}.1", r, n_out, target, path=f"{path}.1")


def model_slots(spec: ModelSpec, lay: dict[str, Any]) -> dict[str, Slot]:
    """The tensors outside the stack: embeddings, final norm, head."""
    s, d, e = _Slots(lay), spec.d_model, spec.embedding
    width = e.width(d)
    s.add("embed.weight", f"{lay['embed']}.weight", (spec.vocab_size, width), "token_embedding", kind="embedding")
    if e.per_layer is not None:  # Gemma-3n, Gemma-4: every layer's slice of one table, and a projection into them
        p = e.per_layer
        s.add("embed_per_layer.weight", f"{lay['embed_per_layer']}.weight", (p.vocab_size, p.n_layers * p.width),
              "per_layer_embedding", kind="embedding")
        s.linear("per_layer_projection", d, p.n_layers * p.width, "per_layer_projection")
        s.add("per_layer_projection_norm.weight", f"{lay['per_layer_projection_norm']}.weight", (p.width,),
              "per_layer_projection_norm", init="ones", kind="norm")
    for i in range(1, e.altup_inputs or 1):  # Gemma-3n's AltUp: n - 1 projections into the extra streams and back
        s.linear(f"altup_in.{i}", d, d, "altup_in", path=f"{lay['altup_in']}.{i - 1}")
        s.linear(f"altup_out.{i}", d, d, "altup_out", path=f"{lay['altup_out']}.{i - 1}")
    if e.positions == "learned":
        s.add("positions.weight", f"{lay['positions']}.weight", (spec.n_positions + e.position_offset, d),
              "position_embedding", kind="embedding")
    if e.proj_dim:
        s.linear("project_in", e.proj_dim, d, "project_in")
    if e.norm is not None:
        s.norm("embed_norm", e.norm, d, "embedding_norm")
    if spec.shared_blocks():
        _shared_slots(s, spec, lay)
    if spec.head.hyper is not None:  # DeepSeek-V4: the residual copies collapsed before the final norm
        n, path = spec.head.hyper.streams, lay["hc_head"]
        s.add("hc_head.fn", path.format("fn"), (n, n * d), "hc_head")
        s.add("hc_head.base", path.format("base"), (n,), "hc_head", init="zeros")
        s.add("hc_head.scale", path.format("scale"), (1,), "hc_head", init="ones")
    if spec.final_norm is not None:
        s.norm("final_norm", spec.final_norm, d, "final_norm")
    if e.proj_dim:
        s.linear("project_out", d, e.proj_dim, "project_out")
    if not spec.head.tied:
        s.add("lm_head.weight", f"{lay['lm_head']}.weight", (spec.vocab_size, width), "lm_head", kind="linear")
    if spec.head.bias:
        s.add("lm_head.bias", f"{lay['lm_head']}.bias", (spec.vocab_size,), "lm_head_bias", init="zeros",
              kind="linear")
    return s.slots


def mtp_slots(spec: ModelSpec, lay: dict[str, Any], hub: bool = False) -> dict[str, Slot]:
    """One multi-token-prediction layer (DeepSeek-V3's model.layers.61, GLM-4.5's): a whole block,
    its buffers counted with it, plus enorm, hnorm, eh_proj (2d -> d), shared_head.norm and, when
    stored, copies of the embedding and head (calc.spec.model.MTP; DeepSeek-V3's README_WEIGHTS.md)."""
    mtp, d = spec.mtp, spec.d_model
    block = spec.blocks[mtp.block]
    s, names = _Slots(lay), lay.get("mtp_names", {})  # DeepSeek-V4's: its output norm `norm`, e_proj and h_proj
    for role, slot in block_slots(lay, block, d, hub).items():
        s.add(role, slot.name, slot.shape, "mtp_layers", (), slot.init, slot.kind)
    for role in ("enorm", "hnorm", "shared_head.norm"):
        s.norm(role, block.norm, d, "mtp_layers", names.get(role, role))
    if "eh_proj" in names:  # its two halves apart: the embedding's and the hidden state's
        for path in names["eh_proj"]:
            s.linear(path, d, d, "mtp_layers", path=path)
    else:
        s.linear("eh_proj", 2 * d, d, "mtp_layers", path="eh_proj")
    if spec.head.hyper is not None:
        n, path = spec.head.hyper.streams, names["hc_head"]
        s.add("hc_head.fn", path.format("fn"), (n, n * d), "mtp_layers")
        s.add("hc_head.base", path.format("base"), (n,), "mtp_layers", init="zeros")
        s.add("hc_head.scale", path.format("scale"), (1,), "mtp_layers", init="ones")
    if "embedding" in mtp.copies:
        s.add("mtp.embed", "embed_tokens.weight", (spec.vocab_size, d), "mtp_embedding_copies", kind="embedding")
    if "head" in mtp.copies:
        s.add("mtp.head", names.get("head", "shared_head.head") + ".weight", (spec.vocab_size, d),
              "mtp_embedding_copies", kind="linear")
    return s.slots
