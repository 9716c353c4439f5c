"""Multi-head attention's steps (MHA, GQA, MQA): Q/K/V, QK-norm, heads, rotary, the KV cache,
the scores and what follows them — the last part shared with MLA (`attend`).

A sliding-window layer attends to at most `window` keys: its scores are [.., T, min(T, window)]
(each query's band of keys), and in decode its rolling cache holds at most `window` of them.
"""

from __future__ import annotations

from math import prod
from typing import Any

from calc.analysis.shapes.core import Dims, Rows, Shape, Step, matmul_flops, softcap_note
from calc.analysis.shapes.norm import norm_step
from calc.parts import MLA, Attention, QKNorm

__all__ = ["attend", "attention_steps", "augment_steps", "cache_step", "key_lengths"]


def attention_steps(d: Dims, a: Attention, rows: Rows, x_width: str = "d_model") -> list[Step]:
    """From the (normed) residual stream to attention's output projection, [B, T, d_model] again;
    `x_width` names the input's width where it is wider (Zamba2's shared attention reads d_in = 2·d_model)."""
    d = d.named(h=a.n_heads, kv=a.n_kv_heads, d_head=a.head_dim, **{"h·d_head": a.q_dim, "kv·d_head": a.kv_dim})
    d = d.named(d_v=a.value_head_dim, **{"kv·d_v": a.v_dim, "h·d_v": a.o_dim}) if _v(a) == "d_v" else d
    d, (past, held, keys) = key_lengths(d, a.window)
    q_heads, k_all = d.shape("B", "h", d.new, "d_head"), d.shape("B", "kv", held, "d_head")
    steps = [*_projections(d, a, rows, x_width), *_heads(d, a, rows)]
    if d.decode and not a.kv_shared:  # a KV-shared layer reads an earlier layer's cache: nothing to append
        steps += [cache_step(d, name, d.shape("B", "kv", past, width), d.shape("B", "kv", d.new, width),
                             d.shape("B", "kv", held, width), a.window)
                  for name, width in (("k", "d_head"), ("v", _v(a)))]
    if a.n_kv_heads != a.n_heads:
        groups = f"{a.attention_kind}: each KV head serves h/kv = {a.group_size} query heads"
        steps.append(d.step("kv_groups", "KV heads shared by groups", d.shape("B", "h", held, "d_head"), (k_all,),
                            traced=False, note=groups))
    if a.indexer is not None:  # MiniMax-M3: which key blocks each KV group reads (a module that reuses cache_step)
        from calc.analysis.shapes.block_indexer import block_indexer_steps
        steps += block_indexer_steps(d, a, rows, past, held)
    keys_t, values = d.shape("B", "h", "d_head", keys), d.shape("B", "h", keys, _v(a))
    return steps + attend(d, a, rows, q_heads, keys_t, values)


def augment_steps(d: Dims, a: Attention | None, rows: Rows) -> tuple[list[Step], list[Step], list[Step]]:
    """What Gemma-3n and Gemma-4 add around a layer, in the order it runs (Gemma3nTextDecoderLayer):
    (before the layer: AltUp's router and prediction; on the normed input, before attention: LAuReL;
    after the MLP's residual add: AltUp's correction, then the per-layer input)."""
    g = getattr(a, "augment", None)
    if g is None:
        return [], [], []
    before, after = _altup_steps(d, g, rows)
    beside = _laurel_steps(d, g, rows) if g.laurel_rank else []
    return before, beside, after + per_layer_input_steps(d, a, rows)


def _altup_steps(d: Dims, g: Any, rows: Rows) -> tuple[list[Step], list[Step]]:
    """AltUp's (router and prediction, correction), or nothing."""
    if not g.altup_inputs:
        return [], []
    x, n = d.hidden, g.altup_inputs
    d = d.named(n=n, **{"n·n": n * n, "1": 1})
    coefs, streams = d.shape("B", d.new, "n·n"), d.shape("n", "B", d.new, "d_model")
    tokens = prod(coefs.sizes[:-1])
    predict = [
        d.linear("altup_router", "AltUp router ·W_router (on the normed stream 0)", x, d.shape("d_model", "n"),
                 d.shape("B", d.new, "n"), rows.take("altup_router", "altup_router_norm"),
                 "a tanh of n scores per token picks the mixing coefficients; its input RMS-normed"),
        d.step("altup_predict", "AltUp predict: each stream from all n", streams, (streams, coefs),
               d.shape("n", "n"), rows.take("altup_predict"), 2 * tokens * n**3 + 2 * prod(streams.sizes) * n,
               note="n² coefficients per token (from n·n² weights), then n × n mixes of the streams",
               formula=f"2·B·{d.new}·n·n·n + 2·B·{d.new}·d_model·n·n"),
    ]
    correct = [
        d.step("altup_correct", "AltUp correct: each stream plus its share of the layer's change", streams,
               (streams, x), d.shape("d_model", "1"), rows.take("altup_correct", "altup_scale"),
               2 * prod(x.sizes) * n + 2 * tokens * n * n,
               note="the router again, on the layer's output, and n coefficients from it (n·n weights); every "
                    "stream takes coefficient × (output − prediction), stream 0 scaled by a d_model-wide output "
                    "scale (elementwise)", formula=f"2·B·{d.new}·d_model·n + 2·B·{d.new}·n·n"),
    ]
    return predict, correct


def _laurel_steps(d: Dims, g: Any, rows: Rows) -> list[Step]:
    x, d = d.hidden, d.named(r=g.laurel_rank)
    low = d.shape("B", d.new, "r")
    return [
        d.linear("laurel_left", "LAuReL down ·W_left", x, d.shape("d_model", "r"), low, rows.take("laurel_left"),
                 "beside attention, on the same normed input: a low-rank residual"),
        d.linear("laurel_right", "LAuReL up ·W_right (normed, plus its input)", low, d.shape("r", "d_model"), x,
                 rows.take("laurel_right", "laurel_norm"),
                 "added to attention's output, the sum times 1/√2"),
    ]


def per_layer_input_steps(d: Dims, a: Attention, rows: Rows) -> list[Step]:
    """Gemma-3n's and Gemma-4's per-layer input sublayer, after the MLP's residual add."""
    g = a.augment
    if not g.per_layer_input:
        return []
    d = d.named(p=g.per_layer_input)
    x, narrow = d.hidden, d.shape("B", d.new, "p")
    return [
        d.linear("ple_gate", "per-layer input gate ·W_gate, act, × this layer's embedding slice", x,
                 d.shape("d_model", "p"), narrow, rows.take("ple_gate"),
                 "after the MLP: its output gated by the layer's own per-layer embedding"),
        d.linear("ple_proj", "per-layer input projection ·W_proj (normed, added)", narrow, d.shape("p", "d_model"),
                 x, rows.take("ple_proj", "ple_norm"), "back to d_model, RMS-normed, added to the stream"),
    ]


def _v(a: Attention) -> str:
    """The name of one value head's width: d_head, or d_v where v_head_dim differs (MiMo-V2-Flash)."""
    return "d_head" if a.value_head_dim == a.head_dim else "d_v"


def key_lengths(d: Dims, window: int | None) -> tuple[Dims, tuple[str, str, str]]:
    """The names of three key lengths: cached before this token (decode), held as K and V in this pass
    (prefill: all T; decode: the cache with the new token), and seen by each query. A sliding window
    shorter than a length replaces it with `window`; in prefill it limits only what a query sees."""
    if window is None:
        return d, ("T", d.keys, d.keys)
    d = d.named(window=window)

    def fit(name: str) -> str:
        return "window" if window < d.sizes[name] else name

    return d, (fit("T"), fit(d.keys) if d.decode else "T", fit(d.keys))


def _projections(d: Dims, a: Attention, rows: Rows, x_width: str) -> list[Step]:
    x, w_q, w_kv = d.shape("B", d.new, x_width), d.shape(x_width, "h·d_head"), d.shape(x_width, "kv·d_head")
    q, kv = d.shape("B", d.new, "h·d_head"), d.shape("B", d.new, "kv·d_head")
    w_v, v = d.shape(x_width, f"kv·{_v(a)}"), d.shape("B", d.new, f"kv·{_v(a)}")
    what = {"q": "each token's query: what it looks for", "k": "each token's key: what it can be found by",
            "v": "each token's value: what it passes on"}
    fused = (f"; fused: one x·W_QKV matmul, W_QKV [{d.sizes['d_model']}, {a.q_dim + a.kv_dim + a.v_dim}] = "
             "W_Q | W_K | W_V side by side, split in three" if a.fused_qkv else "")
    steps = []
    own = ("q",) if a.kv_shared else ("q", "k") if a.k_eq_v else ("q", "k", "v")  # Gemma-3n/4: K, V from elsewhere
    what["q"] += "; K and V are an earlier layer's (shared), not projected here" if a.kv_shared else ""
    what["k"] += "; the values are these keys too (V = K, before rotary)" if a.k_eq_v else ""
    for name, w, out, bias in (("q", w_q, q, a.q_bias), ("k", w_kv, kv, a.k_bias), ("v", w_v, v, a.v_bias)):
        if name not in own:
            continue
        big = name.upper()
        label = f"x·W_QKV (fused) → {big}" if a.fused_qkv else f"{big} = x·W_{big}"
        note = what[name] + ("; plus a bias" if bias else "") + (fused if name == "q" else "")
        steps.append(d.linear(name, label, x, w, out, rows.take(name, f"{name}_bias"), note,
                              "qkv" if a.fused_qkv else ""))
    return steps


def _heads(d: Dims, a: Attention, rows: Rows) -> list[Step]:
    """Split into heads; QK-norm over the full width (before the split) or each head (after it); rotary."""
    q, kv = d.shape("B", d.new, "h·d_head"), d.shape("B", d.new, "kv·d_head")
    q_heads, k_heads = d.shape("B", "h", d.new, "d_head"), d.shape("B", "kv", d.new, "d_head")
    qk_norm = a.qk_norm
    scope = qk_norm.scope if qk_norm else None
    rope = _rope_note(a) + (" (after the QK-norm)" if a.rope and scope == "head" else "")
    steps = _qk_norms(d, qk_norm, rows, q, kv, _full_width(qk_norm)) if qk_norm and scope == "full" else []
    steps += [
        d.step("q_heads", "split Q into heads", q_heads, (q,),
               note=f"h={a.n_heads} heads of d_head={a.head_dim}{rope}"),
        d.step("k_heads", "split K into heads", k_heads, (kv,), note=f"kv={a.n_kv_heads} heads{rope}"),
        d.step("v_heads", "split V into heads", d.shape("B", "kv", d.new, _v(a)), (d.shape("B", d.new, f"kv·{_v(a)}"),),
               note=f"kv={a.n_kv_heads} heads" + (f", times {a.value_scale:g}" if a.value_scale is not None else "")),
    ]
    if qk_norm and scope == "head":
        steps += _qk_norms(d, qk_norm, rows, q_heads, k_heads, "over each head's d_head channels, one norm for all")
    return steps


def _full_width(qk_norm: QKNorm) -> str:
    """Where a full-width QK-norm takes its statistics: over the token's whole width (OLMo-2), or, Cohere's
    (`per_head`), over each head's channels, its [heads, d_head] weights a scale per head and channel."""
    if qk_norm.per_head:
        return "over each head's d_head channels, a scale per head and channel"
    return "over each token's full width"


def _qk_norms(d: Dims, qk_norm: QKNorm, rows: Rows, q: Shape, k: Shape, where: str) -> list[Step]:
    return [norm_step(d, qk_norm.norm, "q_norm", "QK-norm on Q", q, rows.take("q_norm"), where),
            norm_step(d, qk_norm.norm, "k_norm", "QK-norm on K", k, rows.take("k_norm"), where)]


def _rope_note(a: Attention) -> str:
    if a.rope is None:
        return ""
    if a.rope.rotary_dim == a.head_dim:
        return "; rotary: rotated by position, shape unchanged"
    rotated, rest = a.rope.rotary_dim, a.head_dim - a.rope.rotary_dim
    return f"; partial rotary: {rotated} of {a.head_dim} channels rotated by position, {rest} pass unchanged"


def cache_step(d: Dims, name: str, past: Shape, new: Shape, out: Shape, window: int | None, what: str = "") -> Step:
    """Decode: the new token's K (or V, or MLA's latent) appended to the cached ones; a sliding
    window's rolling cache keeps at most `window` tokens."""
    note = "T past tokens + the new one"
    if window and out.names[-2] == "window":
        note = f"rolling cache: the last {past.sizes[-2]:,} tokens + the new one, at most window = {window:,} kept"
    elif window:
        note += f"; rolling cache: at most window = {window:,} tokens kept"
    return d.step(f"{name}_cache", f"append {what or name.upper()} to the KV cache", out, (past, new), note=note)


def attend(d: Dims, a: Attention | MLA, rows: Rows, query: Shape, keys_t: Shape, values: Shape) -> list[Step]:
    """Scores (soft-capped, with sinks), softmax, the weighted values, heads concatenated, ·W_O, for
    queries [B, h, T, d_k], keys [B, h, d_k, keys] and values [B, h, keys, d_v]."""
    scores = d.shape("B", "h", d.new, keys_t.names[-1])
    steps = [d.step("scores", f"scores = Q·Kᵀ/√{query.names[-1]}", scores, (query, keys_t),
                    flops=matmul_flops(query, keys_t), note=_scores_note(a, scores))]
    if a.softcap:
        steps.append(d.step("attn_softcap", "soft-cap the scores", scores, (scores,),
                            note=softcap_note(a.softcap, "scores")))
    softmax = "future keys masked; each row sums to 1"
    if isinstance(a, Attention) and a.sinks:
        steps.append(_sinks(d, rows, scores))
        softmax += "; the sink's column is dropped after the softmax (it only takes weight away)"
    heads_out = d.shape("B", "h", d.new, values.names[-1])
    concat = d.shape("B", d.new, f"h·{values.names[-1]}")
    gate = _output_gate(d, a, rows, concat) if isinstance(a, Attention) and a.output_gate else []
    return steps + [
        d.step("attn_weights", "causal mask + softmax", scores, (steps[-1].output,), note=softmax),
        d.step("attn_heads_out", "weights·V", heads_out, (scores, values), flops=matmul_flops(scores, values),
               note="each head's weighted sum of values"),
        d.step("attn_concat", "concatenate heads", concat, (heads_out,), note="back to one row per token"),
        *gate,
        d.linear("attn_out", "output projection ·W_O", concat, d.shape(concat.names[-1], "d_model"), d.hidden,
                 rows.take("attn_out", "attn_out_bias"), "mixes the heads' results back into d_model"),
    ]


def _output_gate(d: Dims, a: Attention, rows: Rows, concat: Shape) -> list[Step]:
    """AFMoE: a gate per channel of the concatenated heads, sigmoid(x·W_G), multiplies them before W_O;
    Laguna's is softplus(x·W_G), one per head."""
    width = concat.names[-1] if a.gate_scope == "element" else "h"
    gate = d.shape("B", d.new, width)
    what = "channel of the heads' output" if a.gate_scope == "element" else "head"
    return [d.linear("attn_gate", "output gate x·W_G", d.hidden, d.shape("d_model", width), gate,
                     rows.take("attn_gate"), f"one gate logit per {what}"),
            d.step("attn_gated", f"heads ⊙ {a.gate_activation}(gate)", concat, (concat, gate),
                   note="the gated heads go to W_O")]


def _sinks(d: Dims, rows: Rows, scores: Shape) -> Step:
    """gpt-oss: one learned logit per head joins each row of scores before the softmax."""
    name = f"{scores.names[-1]}+sink"
    with_sink = d.named(**{name: scores.sizes[-1] + 1}).shape("B", "h", d.new, name)
    return d.step("attn_sinks", "append a sink logit per head", with_sink, (scores,), d.shape("h"),
                  rows.take("attn_sinks"), note="one learned logit per head, a key no token wrote")


def _scores_note(a: Attention | MLA, scores: Shape) -> str:
    note = "every query against every key, per head"
    if isinstance(a, Attention) and a.alibi:
        note += "; plus ALiBi's per-head bias, slope × distance (no parameters)"
    if a.window:
        limited = scores.names[-1] == "window"
        note += (f"; sliding window: each query sees at most {a.window:,} keys" if limited
                 else f"; sliding window of {a.window:,} keys holds all of these")
    return note
