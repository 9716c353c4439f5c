"""DeepSeek-V4's attention steps and its hyper-connections, in the order transformers'
DeepseekV4Attention and DeepseekV4DecoderLayer compute them (models/deepseek_v4/modeling_deepseek_v4.py):

    Q:  x ·W_q_a -> q_a_norm -> ·W_q_b -> h heads of d_head (each RMS-normed without a weight), rotary
    KV: x ·W_kv -> kv_norm -> one head, both key and value, rotary -> [cache: the window]
    compressor: x ·W_comp_kv and ·W_comp_gate (k series) -> each window of m tokens pooled by the
        softmax of gate + position bias -> one entry of d_head, normed, rotary -> [cache: the entries]
    indexer (CSA): its own compressed keys (d_idx), queries from the Q latent, ReLU(q·k) weighted per
        head -> the top `topk` entries for each query
    attention over the window and the compressed entries (HCA: all of them; CSA: the top k), with a
    sink logit per head; the output's rotary undone, then the grouped output: g groups of h·d_head/g
    down to d_o each (·W_o_a, batched), and ·W_o_b back to d_model.

Pooling, the softmax and the copies' collapse are counted as no FLOPs (elementwise work, the
convention); the copies' comb mix is a [n, n] x [n, d_model] matmul per token. A compressed
entry closes every m tokens, so a prefill of T tokens makes T // m of them and a decode step reads
(T + 1) // m, making one only when its token fills a window. A CSA query scores the window's keys and its top k entries (transformers' eager
attention scores every entry and masks the rest; a sparse kernel reads only the k).

The hyper-connections wrap each sublayer: the residual is n copies [B, T, n, d_model], mixed
before it (`hc_*`: one matmul to (2 + n)·n mixing weights, then the copies collapsed to one input)
and written back after it (each copy: post × output + comb-mixed copies).
"""

from __future__ import annotations

from calc.analysis.shapes.attention import cache_step, key_lengths
from calc.analysis.shapes.core import Dims, Rows, Shape, Step, matmul_flops
from calc.analysis.shapes.norm import norm_step
from calc.parts import CompressedAttention

__all__ = ["compressed_steps", "hyper_mix", "hyper_write"]


def compressed_steps(d: Dims, a: CompressedAttention, rows: Rows) -> list[Step]:
    """From the (normed, collapsed) residual stream to the output projection, [B, T, d_model] again."""
    h, c, g = a.n_heads, a.head_dim, a.o_groups
    d = d.named(h=h, d_head=c, r_q=a.q_lora_rank, g=g, d_o=a.o_lora_rank,
                **{"h·d_head": h * c, "h·d_head/g": h * c // g, "g·d_o": g * a.o_lora_rank, "1": 1})
    d, (past, held, keys) = key_lengths(d, a.window)
    entries = f"{d.keys}/m"
    d = d.named(m=a.ratio or 1, **{entries: d.sizes[d.keys] // a.ratio if a.ratio else 0})
    steps = [*_query(d, a, rows), *_key_value(d, a, rows, past, held)]
    seen = held if not a.ratio else _seen(d, a, keys, entries)
    if a.ratio:
        steps += _compressor(d, a, rows, entries)
    if a.indexer:
        steps += _indexer(d, a, rows, entries)
    return steps + _attend(d, a, rows, seen)


def _query(d: Dims, a: CompressedAttention, rows: Rows) -> list[Step]:
    latent, q = d.shape("B", d.new, "r_q"), d.shape("B", d.new, "h·d_head")
    return [
        d.linear("q_a", "Q down ·W_q_a", d.hidden, d.shape("d_model", "r_q"), latent, rows.take("q_a"),
                 f"compresses each token to a q_lora_rank = {a.q_lora_rank} latent (the indexer reads it too)"),
        norm_step(d, a.norm, "q_a_norm", "Q latent norm", latent, rows.take("q_a_norm")),
        d.linear("q_b", "Q up ·W_q_b", latent, d.shape("r_q", "h·d_head"), q, rows.take("q_b"),
                 "expands the latent to every head's query"),
        d.step("q_heads", "split Q into heads", d.shape("B", "h", d.new, "d_head"), (q,),
               note=f"h={a.n_heads} heads of {a.head_dim}, each RMS-normed without a weight; "
                    f"{_rotary(a)}"),
    ]


def _rotary(a: CompressedAttention) -> str:
    rotated = a.rope.rotary_dim if a.rope else 0
    return f"the last {rotated} channels rotated by position (pairs)" if rotated else "no rotary"


def _key_value(d: Dims, a: CompressedAttention, rows: Rows, past: str, held: str) -> list[Step]:
    kv = d.shape("B", d.new, "d_head")
    steps = [
        d.linear("kv", "K = V ·W_kv", d.hidden, d.shape("d_model", "d_head"), kv, rows.take("kv"),
                 "one head that is both every head's key and its value (shared-KV MQA)"),
        norm_step(d, a.norm, "kv_norm", "K = V norm", kv, rows.take("kv_norm"), "then rotary"),
    ]
    if d.decode:
        steps.append(cache_step(d, "kv", d.shape("B", "1", past, "d_head"), d.shape("B", "1", d.new, "d_head"),
                                d.shape("B", "1", held, "d_head"), a.window, "K = V"))
    return steps


def _seen(d: Dims, a: CompressedAttention, keys: str, entries: str) -> str:
    """The keys each query attends to: the window's, then the compressed entries (CSA: its top k)."""
    picked = min(a.indexer.topk, d.sizes[entries]) if a.indexer else d.sizes[entries]
    name = f"{keys}+{'k' if a.indexer else entries}"
    d.sizes[name] = d.sizes[keys] + picked  # a name the later shapes of this layer read
    return name


def _compressor(d: Dims, a: CompressedAttention, rows: Rows, entries: str) -> list[Step]:
    """kv and gate projections (two series with overlap), pooled per window of m tokens into one entry."""
    d = d.named(**{"k·d_head": a.series * a.head_dim})
    wide, pooled = d.shape("B", d.new, "k·d_head"), _made(d, entries, "d_head")
    window = f"{2 * a.ratio} tokens (two overlapping windows)" if a.overlap else f"{a.ratio} tokens"
    steps = [d.linear(role, f"compressor {what} ·W_{role}", d.hidden, d.shape("d_model", "k·d_head"), wide,
                      rows.take(role), f"{a.series} series of d_head per token")
             for role, what in (("comp_kv", "K = V"), ("comp_gate", "gate"))]
    steps.append(d.step("comp_pool", "pool each window: softmax(gate + position bias) · kv", pooled, (wide, wide),
                        d.shape("m", "k·d_head"), rows.take("comp_bias"),
                        note=f"one entry per {a.ratio} tokens, each a weighted sum over {window}"))
    steps.append(norm_step(d, a.norm, "comp_norm", "compressor norm", pooled, rows.take("comp_norm"),
                           "then rotary at the window's position; the entries are cached"))
    return steps + _entries_cache(d, "comp", pooled, entries, "d_head", "compressed entry")


def _made(d: Dims, entries: str, width: str) -> Shape:
    """The entries this pass closes: T // m in prefill; in a decode step one when it fills a window
    (its position + 1 a multiple of m), else none."""
    if not d.decode:
        return d.shape("B", entries, width)
    closes = d.sizes[d.keys] % d.sizes["m"] == 0
    return d.named(**{"0": 0}).shape("B", "1" if closes else "0", width)


def _entries_cache(d: Dims, name: str, made: Shape, entries: str, width: str, what: str) -> list[Step]:
    """Decode: a closed window's entry joins the cached ones; the pass reads all (T + 1) // m of them."""
    if not d.decode:
        return []
    return [d.step(f"{name}_cache", f"append the {what} to the cache", d.shape("B", entries, width), (made,),
                   note="the cache holds one per m tokens; a decode step adds one when its window closes")]


def _indexer(d: Dims, a: CompressedAttention, rows: Rows, entries: str) -> list[Step]:
    """CSA's lightning indexer: its own compressed keys, queries from the Q latent, per-head weights."""
    i = a.indexer
    d = d.named(h_idx=i.n_heads, d_idx=i.head_dim, **{"2·d_idx": 2 * i.head_dim, "h_idx·d_idx": i.n_heads * i.head_dim})
    wide, keys = d.shape("B", d.new, "2·d_idx"), _made(d, entries, "d_idx")
    q_heads, keys_t = d.shape("B", d.new, "h_idx", "d_idx"), d.shape("B", "d_idx", entries)
    steps = [d.linear(role, f"indexer compressor {what} ·W_{role}", d.hidden, d.shape("d_model", "2·d_idx"), wide,
                      rows.take(role), "two series of d_idx per token")
             for role, what in (("idx_kv", "K"), ("idx_gate", "gate"))]
    return steps + [
        d.step("idx_pool", "pool each window into an indexer key", keys, (wide, wide), d.shape("m", "2·d_idx"),
               rows.take("idx_bias"), note="the same overlapping windows as the compressor, at d_idx"),
        norm_step(d, a.norm, "idx_norm", "indexer K norm", keys, rows.take("idx_norm"), "then rotary; cached"),
        *_entries_cache(d, "idx", keys, entries, "d_idx", "indexer key"),
        d.linear("idx_q", "indexer Q ·W_idx_q", d.shape("B", d.new, "r_q"), d.shape("r_q", "h_idx·d_idx"),
                 d.shape("B", d.new, "h_idx·d_idx"), rows.take("idx_q"),
                 f"{i.n_heads} indexer heads of {i.head_dim}, from the Q latent"),
        d.linear("idx_weights", "indexer head weights ·W_idx_w", d.hidden, d.shape("d_model", "h_idx"),
                 d.shape("B", d.new, "h_idx"), rows.take("idx_weights"), "how much each indexer head counts"),
        d.step("idx_scores", "indexer scores = ReLU(Q_idx·K_idx) weighted, summed over heads",
               d.shape("B", d.new, "h_idx", entries), (q_heads, keys_t), flops=matmul_flops(q_heads, keys_t),
               note=f"every compressed entry scored; the top {i.topk:,} join the window's keys"),
    ]


def _attend(d: Dims, a: CompressedAttention, rows: Rows, seen: str) -> list[Step]:
    """Scores over the window's keys and the compressed entries, a sink per head, the weighted
    values, the output's rotary undone, and the grouped output projection."""
    query, keys_t = d.shape("B", "h", d.new, "d_head"), d.shape("B", "1", "d_head", seen)
    scores, values = d.shape("B", "h", d.new, seen), d.shape("B", "1", seen, "d_head")
    out, grouped = d.shape("B", "h", d.new, "d_head"), d.shape("B", d.new, "g", "h·d_head/g")
    low = d.shape("B", d.new, "g·d_o")
    w_a = d.shape("g", "h·d_head/g", "d_o")
    name = f"{seen}+sink"
    with_sink = d.named(**{name: d.sizes[seen] + 1}).shape("B", "h", d.new, name)
    return [
        d.step("scores", "scores = Q·Kᵀ/√d_head", scores, (query, keys_t), flops=matmul_flops(query, keys_t),
               note=f"every head against the window's keys (at most {a.window:,}) and the compressed entries"),
        d.step("attn_sinks", "append a sink logit per head", with_sink, (scores,), d.shape("h"),
               rows.take("attn_sinks"), note="one learned logit per head, a key no token wrote"),
        d.step("attn_weights", "mask + softmax", scores, (with_sink,),
               note="future keys and unpicked entries masked; the sink's column dropped after the softmax"),
        d.step("attn_heads_out", "weights·V (V = K)", out, (scores, values), flops=matmul_flops(scores, values),
               note="each head's weighted sum of the shared key-value rows; then the rotary undone"),
        d.linear("o_a", "grouped output down ·W_o_a", grouped, w_a, low, rows.take("o_a"),
                 f"{a.o_groups} groups of heads, each to d_o = {a.o_lora_rank} with its own matrix"),
        d.linear("o_b", "output up ·W_o_b", low, d.shape("g·d_o", "d_model"), d.hidden, rows.take("o_b"),
                 "mixes the groups back into d_model"),
    ]


def hyper_mix(d: Dims, role: str, n: int, rows: Rows) -> list[Step]:
    """Before a sublayer: the n copies' mixing weights from their flattened, normed rows, and the
    copies collapsed into the sublayer's one input."""
    d = d.named(n=n, **{"n·d_model": n * d.sizes["d_model"], "(2+n)·n": (2 + n) * n})
    streams, flat = d.shape("B", d.new, "n", "d_model"), d.shape("B", d.new, "n·d_model")
    w = d.shape("n·d_model", "(2+n)·n")
    return [
        d.linear(role, "hyper-connection mixes ·W_hc", flat, w, d.shape("B", d.new, "(2+n)·n"), rows.take(role),
                 f"from the {n} copies, flattened and RMS-normed: pre (n), post (n) and comb (n·n, Sinkhorn-normalised)"),
        d.step(f"{role}_collapse", "collapse the copies: Σ pre · copy", d.hidden, (streams,),
               note="the sublayer's one input"),
    ]


def hyper_write(d: Dims, role: str, n: int, note: str) -> Step:
    """After a sublayer: every copy becomes post × its output + the comb-mixed copies."""
    d = d.named(n=n)
    comb, streams = d.shape("B", d.new, "n", "n"), d.shape("B", d.new, "n", "d_model")
    return d.step(f"{role}_write", "copies = post · output + combᵀ · copies", streams, (comb, streams, d.hidden),
                  flops=matmul_flops(comb, streams), note=note)
