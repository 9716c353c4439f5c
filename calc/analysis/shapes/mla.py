"""Multi-head latent attention's steps (DeepSeek-V2/V3), in the order transformers'
DeepseekV3Attention.forward computes them (transformers 5.23, models/deepseek_v3/modeling_deepseek_v3.py):

    Q:  x ·W_q_a -> q_a_norm -> ·W_q_b (or x ·W_q)  -> h heads of d_nope + d_rope -> split nope / rope
    KV: x ·W_kv_a -> split latent (r_kv) / rope key (d_rope, one for all heads) -> kv_a_norm on the latent
        -> [cache: latent + rope key] -> ·W_kv_b -> per head K nope (d_nope) and V (d_v)
    scores over d_nope + d_rope channels; the output projection reads h·d_v.

What is cached per token is the normed latent and the rotated rope key — r_kv + d_rope numbers a
layer, the point of MLA — and K and V are expanded from the cache (as transformers does), so in
decode ·W_kv_b runs over every cached token.
"""

from __future__ import annotations

from math import prod

from calc.analysis.shapes.attention import attend, cache_step, key_lengths
from calc.analysis.shapes.core import Dims, Rows, Step, matmul_flops
from calc.analysis.shapes.norm import norm_step
from calc.parts import MLA, Norm

__all__ = ["cache_note", "mla_steps"]


def mla_steps(d: Dims, m: MLA, rows: Rows) -> list[Step]:
    """From the (normed) residual stream to attention's output projection, [B, T, d_model] again."""
    h, nope, rope, v = m.n_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    d = d.named(h=h, r_q=m.q_lora_rank or 0, r_kv=m.kv_lora_rank, d_nope=nope, d_rope=rope, d_qk=nope + rope, d_v=v,
                **{"r_kv+d_rope": m.kv_lora_rank + rope, "h·d_qk": h * (nope + rope), "d_nope+d_v": nope + v,
                   "h·(d_nope+d_v)": h * (nope + v), "h·d_v": h * v})
    d, (past, held, keys) = key_lengths(d, m.window)
    indexer = _indexer(d, m, rows, past, held) if m.indexer else []
    return [*_query(d, m, rows), *indexer, *_latent(d, m, rows, past, held), *_keys_values(d, m, rows, held, keys)]


def _indexer(d: Dims, m: MLA, rows: Rows, past: str, held: str) -> list[Step]:
    """DSA's lightning indexer: small queries from the Q latent and one key per token score every
    held key; the layer then attends to the top `topk` of them. The scores are counted in full (a
    quadratic term, small: n_heads x head_dim per pair); which keys MLA then reads is a selection."""
    i = m.indexer
    d = d.named(h_idx=i.n_heads, d_idx=i.head_dim, **{"h_idx·d_idx": i.n_heads * i.head_dim})
    q, k = d.shape("B", d.new, "h_idx·d_idx"), d.shape("B", d.new, "d_idx")
    q_heads, keys_t = d.shape("B", d.new, "h_idx", "d_idx"), d.shape("B", "d_idx", held)
    scores = d.shape("B", d.new, "h_idx", held)
    steps = [
        d.linear("idx_q", "indexer Q ·W_idx_q", d.shape("B", d.new, "r_q"), d.shape("r_q", "h_idx·d_idx"), q,
                 rows.take("idx_q"), f"{i.n_heads} indexer heads of {i.head_dim}, from the Q latent"),
        d.linear("idx_k", "indexer K ·W_idx_k", d.hidden, d.shape("d_model", "d_idx"), k, rows.take("idx_k"),
                 "one key per token, for every indexer head; cached beside the latent"),
        norm_step(d, Norm.model_construct(kind="layernorm", weight=True, bias=True, eps=1e-6), "idx_k_norm",
                  "indexer K norm", k, rows.take("idx_k_norm")),
        d.linear("idx_weights", "indexer head weights ·W_idx_w", d.hidden, d.shape("d_model", "h_idx"),
                 d.shape("B", d.new, "h_idx"), rows.take("idx_weights"), "how much each indexer head counts"),
    ]
    if d.decode:
        steps.append(cache_step(d, "idx_k", d.shape("B", "d_idx", past), k, keys_t, m.window, "the indexer key"))
    return steps + [
        d.step("idx_scores", "indexer scores = ReLU(Q_idx·K_idx) weighted, summed over heads", scores, (q_heads, keys_t),
               flops=matmul_flops(q_heads, keys_t) + 2 * prod(scores.sizes),
               note=f"every held key scored, then the heads' scores summed with their weights (a matmul over "
                    f"h_idx); the top {i.topk:,} go to MLA",
               formula=f"2·B·{d.new}·h_idx·d_idx·{held} + 2·B·{d.new}·h_idx·{held}"),
    ]


def _query(d: Dims, m: MLA, rows: Rows) -> list[Step]:
    x, q = d.hidden, d.shape("B", d.new, "h·d_qk")
    if m.q_lora_rank is None:
        steps = [d.linear("q", "Q = x·W_Q", x, d.shape("d_model", "h·d_qk"), q, rows.take("q"),
                          "each token's query, full rank (no Q latent)")]
    else:
        latent = d.shape("B", d.new, "r_q")
        steps = [
            d.linear("q_a", "Q down ·W_q_a", x, d.shape("d_model", "r_q"), latent, rows.take("q_a", "q_a_bias"),
                     f"compresses each token to a q_lora_rank = {m.q_lora_rank} latent"),
            norm_step(d, m.norm, "q_a_norm", "Q latent norm", latent, rows.take("q_a_norm")),
            d.linear("q_b", "Q up ·W_q_b", latent, d.shape("r_q", "h·d_qk"), q, rows.take("q_b"),
                     "expands the latent to every head's query"),
        ]
    heads = d.shape("B", "h", d.new, "d_qk")
    steps.append(d.step("q_heads", "split Q into heads", heads, (q,),
                        note=f"h={m.n_heads} heads of d_qk = {m.qk_nope_head_dim} + {m.qk_rope_head_dim} channels"))
    if m.qk_nope_head_dim:
        steps.append(d.step("q_nope", "Q's no-position part", d.shape("B", "h", d.new, "d_nope"), (heads,),
                            note=f"the first d_nope = {m.qk_nope_head_dim} channels of each head: no rotary"))
    steps.append(d.step("q_rope", "Q's rotary part", d.shape("B", "h", d.new, "d_rope"), (heads,),
                        note=f"the last d_rope = {m.qk_rope_head_dim} channels of each head{_rotated(m)}"))
    return steps


def _rotated(m: MLA) -> str:
    return ", rotated by position" if m.rope else ""


def _latent(d: Dims, m: MLA, rows: Rows, past: str, held: str) -> list[Step]:
    """x -> the compressed latent and the one rotary key: all the cache holds."""
    both, latent = d.shape("B", d.new, "r_kv+d_rope"), d.shape("B", d.new, "r_kv")
    rope = d.shape("B", "1", d.new, "d_rope")
    steps = [
        d.linear("kv_a", "KV down ·W_kv_a", d.hidden, d.shape("d_model", "r_kv+d_rope"), both,
                 rows.take("kv_a", "kv_a_bias"),
                 f"a kv_lora_rank = {m.kv_lora_rank} latent and a {m.qk_rope_head_dim}-wide key per token"),
        d.step("kv_latent", "split off the KV latent", latent, (both,),
               note="compressed keys and values of every head, before the norm"),
        d.step("k_rope", "split off the rotary key", rope, (both,),
               note=f"one head's worth, shared by all heads{_rotated(m)}"),
        norm_step(d, m.norm, "kv_a_norm", "KV latent norm", latent, rows.take("kv_a_norm")),
    ]
    if d.decode:
        steps += [
            cache_step(d, "latent", d.shape("B", past, "r_kv"), latent, d.shape("B", held, "r_kv"), m.window,
                       "the latent"),
            cache_step(d, "k_rope", d.shape("B", "1", past, "d_rope"), rope, d.shape("B", "1", held, "d_rope"),
                       m.window, "the rotary key"),
        ]
    return steps


def cache_note(m: MLA) -> tuple[str, str]:
    """What MLA's KV cache holds, for the sentences under the table."""
    per_token = m.kv_lora_rank + m.qk_rope_head_dim
    return (f"MLA caches the normed latent and the rotated key: r_kv + d_rope = {m.kv_lora_rank} + "
            f"{m.qk_rope_head_dim} = {per_token:,} numbers per token and layer,",
            f"  not per-head K and V (h·(d_qk + d_v) = {m.n_heads * (m.qk_head_dim + m.v_head_dim):,}); "
            "·W_kv_b expands them from the cache")


def _keys_values(d: Dims, m: MLA, rows: Rows, held: str, keys: str) -> list[Step]:
    """The latents (decode: the cached ones) expanded to every head's K (nope) and V; K gets the
    shared rotary key. `held` latents are expanded, `keys` of them seen by each query."""
    latent, kv = d.shape("B", held, "r_kv"), d.shape("B", held, "h·(d_nope+d_v)")
    heads = d.shape("B", "h", held, "d_nope+d_v")
    values, key = d.shape("B", "h", held, "d_v"), d.shape("B", "h", held, "d_qk")
    query = d.shape("B", "h", d.new, "d_qk")
    nope = m.qk_nope_head_dim > 0
    parts = ("d_nope", "d_rope") if nope else ("d_rope",)
    k_nope = (d.shape("B", "h", held, "d_nope"),) if nope else ()
    steps = [
        d.linear("kv_b", "K/V up ·W_kv_b", latent, d.shape("r_kv", "h·(d_nope+d_v)"), kv, rows.take("kv_b"),
                 "each latent expanded to every head's K (no-position part) and V"
                 + ("; in decode, every cached latent, at every step" if d.decode else "")),
        d.step("kv_heads", "split K/V into heads", heads, (kv,), note=f"h={m.n_heads} heads"),
        *[d.step("k_nope", "K's no-position part", shape, (heads,),
                 note=f"d_nope = {m.qk_nope_head_dim} channels per head") for shape in k_nope],
        d.step("v_heads", "split off V", values, (heads,), note=f"d_v = {m.v_head_dim} channels per head"),
        d.step("query", "Q = [nope | rope]", query, tuple(d.shape("B", "h", d.new, p) for p in parts),
               note="each head's two parts side by side"),
        d.step("key", "K = [nope | rotary key]", key, (*k_nope, d.shape("B", "1", held, "d_rope")),
               note="the shared rotary key repeated for every head"),
    ]
    seen = d.shape("B", "h", keys, "d_v")
    return steps + attend(d, m, rows, query, d.shape("B", "h", "d_qk", keys), seen)
