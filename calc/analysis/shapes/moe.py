"""A mixture of experts' steps: the router, top-k, the routed experts, shared experts, the sum.

Each token goes to k of E experts, so expert e multiplies the [n_e, d_model] rows of the tokens
routed to it by its own matrices. How the n_e split depends on the router, but they always add up
to B·T·k: the expert steps show all routed rows stacked, [B·T·k, d_model], and the weights of all
E experts, [E, d_model, d_ff]. Their FLOPs are therefore per routed token (the k experts each token
uses, not E), while their params are every expert's.
"""

from __future__ import annotations

from calc.analysis.shapes.core import Dims, Rows, Step
from calc.analysis.shapes.mlp import ffn_steps, mlp_steps
from calc.parts import MoE

__all__ = ["NOTE", "moe_steps"]

NOTE = ("MoE: expert e computes [n_e, d_model] × [d_model, d_ff] for the n_e tokens routed to it; the rows "
        "[B·T·k, …] stack them all (Σ n_e = B·T·k),",
        "  so the experts' FLOPs count the k experts each token uses, while their weights [E, in, out] and params "
        "are all E experts'")


def moe_steps(d: Dims, moe: MoE, rows: Rows) -> list[Step]:
    """[B, T, d_model] -> router -> k experts per token (+ shared experts) -> [B, T, d_model]."""
    routed = f"B·{d.new}·k"
    d = d.named(E=moe.n_experts, k=moe.top_k, d_ff=moe.d_ff,
                **{routed: d.sizes["B"] * d.sizes[d.new] * moe.top_k})
    x, picks = d.hidden, d.shape("B", d.new, "k")
    rows_in = d.shape(routed, "d_model")
    how = "; each expert multiplies only its own tokens' rows by its own matrix"
    weights = (d.shape("E", "d_model", "d_ff"), d.shape("E", "d_ff", "d_model"))
    norm = [d.step("experts_norm", "experts' input norm", x, (x,), params=rows.take("experts_norm"),
                   note="Gemma-4: the experts read the block's input through their own RMSNorm")] if moe.shared_norms else []
    steps = [
        *_router(d, moe, rows),
        *norm,
        d.step("experts_dispatch", "send each token to its k experts", rows_in, (x, picks),
               note=f"each token's row once per chosen expert, grouped by expert: expert e gets [n_e, d_model], "
                    f"the tokens routed to it; Σ n_e = B·{d.new}·k"),
        *ffn_steps(d, "experts", "experts", (rows_in, d.shape(routed, "d_ff"), rows_in), weights, rows, moe, how),
        d.step("experts_combine", "weighted sum of the k experts", x, (rows_in, picks),
               note="each token's k outputs times the router's weights, added: one row per token again"),
    ]
    return steps + _shared(d, moe, rows)


def _router(d: Dims, moe: MoE, rows: Rows) -> list[Step]:
    choices = "E+Z" if moe.zero_experts else "E"
    d = d.named(**{choices: moe.choices})
    logits, picks = d.shape("B", d.new, choices), d.shape("B", d.new, "k")
    pick = f"each token's k = {moe.top_k} of E = {moe.n_experts} experts: their ids and weights, both [B, {d.new}, k]"
    if moe.zero_experts:
        pick += (f"; Z = {moe.zero_experts} more choices are zero-computation experts (the token's row times its "
                 "weight, no matmul): the experts' FLOPs below are the most a token can cost, all k real")
    if moe.score_bias:
        what = "a parameter without gradient" if moe.score_bias_param else "a buffer, not a parameter"
        pick += f"; a per-expert score correction bias ({what}) shifts the choice"
    bias = "; plus a bias" if moe.router_bias else ""
    if moe.router_softcap:
        bias += f"; soft-capped, {moe.router_softcap:g}·tanh(logit / {moe.router_softcap:g})"
    if moe.router_scale:
        bias += "; its input RMS-normed and scaled per channel (a d_model-wide scale)"
        pick += "; each picked expert's weight times its own learned scale"
    return [
        d.linear("router", "router ·W_router", d.hidden, d.shape("d_model", choices), logits,
                 rows.take("router", "router_bias", "router_scale"), f"one logit per expert{bias}"),
        d.step("router_topk", "top-k experts", picks, (logits,),
               params=rows.take("router_score_bias_param", "router_expert_scale"), note=pick),
    ]


def _shared(d: Dims, moe: MoE, rows: Rows) -> list[Step]:
    """The shared expert(s) every token goes through, gated by a sigmoid in Qwen2-MoE, added to the routed sum."""
    if moe.shared is None:
        return []
    x = d.hidden
    steps = mlp_steps(d, moe.shared, rows, "shared_mlp", "shared expert", "d_ff_shared")
    if moe.shared_gate:
        gate = d.shape("B", d.new, "1")
        steps.append(d.linear("shared_expert_gate", "sigmoid gate of the shared expert ·w", x,
                              d.shape("d_model", "1"), gate, rows.take("shared_expert_gate"),
                              "sigmoid(x·w) scales the shared expert's output"))
    if moe.shared_norms:
        steps += [d.step(f"{name}", label, x, (x,), params=rows.take(name), note="Gemma-4: RMSNorm before the sum")
                  for name, label in (("shared_mlp_post_norm", "shared expert's output norm"),
                                      ("experts_post_norm", "experts' output norm"))]
    n = f"{moe.n_shared} shared experts as one MLP" if moe.n_shared > 1 else "the shared expert"
    return steps + [d.step("moe_out", "routed + shared", x, (x, x), note=f"{n}, every token, added to the routed sum")]
