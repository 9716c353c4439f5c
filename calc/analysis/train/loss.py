"""The loss over the vocabulary: what it keeps for backward and what it holds for a moment.

For n tokens and a vocabulary of V (÷ tp under tensor parallelism), in bytes per token and
vocabulary entry, measured with torch on the CPU (tests/test_train_torch.py, a live-storage tracker
around the head, the loss and backward: `held` after forward, the peaks of forward and backward):

  loss           held  forward peak adds   backward peak adds   as written by
  fp32           4     6                   8                    transformers (`logits.float()`, one
                                                                F.cross_entropy), torchtitan, Megatron
  chunked        4     2 + 4/c             8/c                  torchtune's CEWithChunkedOutputLoss (c = 8)
  chunked-compiled 2   0                   2/c                  the same under torch.compile (torchtune's compile: True)
  compiled       2     0                   2                    one compiled F.cross_entropy(logits.float())
                                                                (torchtitan's loss under --training.compile)
  linear-chunked 4     6/c                 8/c                  torchtune's LinearCrossEntropyLoss (c = 8)
  fp32-chunked   8     0                   8·k/n                litgpt (k = 128 tokens; Fabric returns fp32)
  fp32-whole-chunked 8 0                   4                    litgpt's full.py (the head on every token at once)
  fused          0     2·k/n               0                    Liger's fused linear cross-entropy

- fp32: the head's bf16 logits (2) and their fp32 copy (4) exist while F.cross_entropy runs, which
  keeps its fp32 log-softmax (4); backward makes the log-softmax's gradient and the logits' (fp32, 4 + 4).
  The caching allocator keeps the blocks forward freed: the first fp32 gradient reuses the fp32
  copy's, but the second cannot fit in the bf16 logits' (half its size), so at backward's peak that
  block (2) is reserved and idle (`cached`): reserved memory, not allocated.
- chunked: the model returns its bf16 logits in c chunks (2, dropped after the loss); each chunk is
  upcast in turn, so only 1/c of the fp32 copy exists at once (the chunk's log-softmax is among the kept); all c log-softmaxes are kept (4);
  backward works one chunk at a time.
- chunked-compiled: torch.compile fuses each chunk's upcast, log-softmax and loss into reductions;
  what it saves for backward is the bf16 chunk and one log-sum-exp per row (measured with
  saved-tensor hooks around an inductor-compiled F.cross_entropy(chunk.float()): 2 bytes per
  entry), and backward writes one bf16 chunk gradient. Its temporaries are inductor's own buffers,
  which the CPU tracker cannot see: the 0 and 2/c are read from the fused kernels, not measured.
- compiled: the same compiled function over all the tokens at once, as torchtitan compiles its
  cross_entropy_loss when compiling (torchtitan/components/loss.py, build_cross_entropy_loss): the
  bf16 logits and a log-sum-exp per row are kept, backward writes one bf16 gradient of the logits.
  Measured once with saved-tensor hooks around torch.compile(F.cross_entropy(pred.float(), y)) on
  the CPU (torch 2.13, inductor; 512 × 2048 bf16 logits): it saves the bf16 logits (2 bytes an
  entry), two fp32 values per row and the labels. Not in the test suite: inductor's compile takes
  about 90 s here.
- linear-chunked: the head itself runs inside the loss one chunk at a time, so not even the bf16
  logits exist whole (`head_inside`: its chunks' backward interleave with the head's, peak.py).
- fp32-chunked: litgpt applies the head in chunks of 128 tokens (bf16), and Lightning Fabric's
  precision plugin converts the model's output to the default dtype, fp32 (`convert_output`, in
  HalfPrecision for bf16-true and in BitsandbytesPrecision alike); the training loop's `logits` list
  (fp32, 4) and the chunks' fp32 log-softmaxes (4) are kept; backward holds one chunk's two fp32
  gradients.
- fp32-whole-chunked: litgpt's finetune/full.py calls `model(input_ids)` without lm_head_chunk_size,
  so the head runs on every token at once; Fabric's fp32 copy (4, held by the loop's `logits`) and
  chunked_cross_entropy's 128-row log-softmaxes (4) are kept, as above, but backward assembles the
  gradient of the whole fp32 logits (the split's backward: 4) before the head's backward.
- fp32 under DTensor's loss_parallel (torchtitan with TP: the head's logits stay sharded over the
  vocabulary, torch/distributed/tensor/parallel/loss.py): the log-softmax handler keeps its output
  (4) but makes the shifted logits and their exponential beside the fp32 copy (forward adds 10), and
  the nll_loss backward handler computes the logits' gradient as (zeros + exp(log-softmax)) · grad,
  three fp32 temporaries at once (backward adds 12). Measured on two gloo ranks (tests/dtensor_tp.py,
  the allocator's record through the profiler, which sees inside DTensor's dispatch); the idle bf16
  block at backward's peak follows from the order of the frees, not measured (the CPU has no cache).
- fused: the gradient is computed during forward chunk by chunk (Liger: chunks of
  next_power_of_2(⌈n / ⌈V/d⌉⌉) tokens) and nothing vocabulary-wide is kept; what is kept is the
  gradient of the head's input, n·d at the activation width. Liger's kernel is Triton: its figures
  follow its source (linkedin/Liger-Kernel, src/liger_kernel/ops/fused_linear_cross_entropy.py), not
  a measurement here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LOSSES", "LOSS_PARALLEL", "Loss"]

LITGPT_CHUNK = 128  # litgpt/finetune/lora.py: model(input_ids, lm_head_chunk_size=128); chunked_cross_entropy(chunk_size=128)


@dataclass(frozen=True)
class Loss:
    """Bytes per token·vocabulary entry: kept for backward, and added at forward's and backward's peaks,
    each `whole` over all n tokens plus `per_chunk` over one chunk's tokens."""

    label: str
    held: int
    forward: tuple[int, int]  # (whole, per chunk)
    backward: tuple[int, int]
    chunks: int = 1  # a fixed number of chunks; 0: chunks of `chunk_tokens` tokens
    chunk_tokens: int = 0
    cached: int = 0  # freed in forward, too small for backward's tensors: reserved, idle, at backward's peak
    head_inside: bool = False  # the head runs inside the loss, chunk by chunk (not in the model before it)
    keeps_logits: bool = False  # what it keeps is the model's bf16 logits themselves (a pipeline's last stage keeps
    # them too: they are counted once)

    def chunk(self, n: int, vocab: int, d: int) -> int:
        """Tokens in one chunk (the largest)."""
        if self.chunk_tokens == -1:  # Liger: next_power_of_2(⌈n / ⌈V/d⌉⌉)
            return min(n, 1 << (-(-n // -(-vocab // d)) - 1).bit_length())
        if self.chunk_tokens:
            return min(n, self.chunk_tokens)
        return -(-n // self.chunks)

    def transient(self, phase: str, n: int, vocab: int, d: int) -> int:
        """Bytes the loss adds to what it keeps at the peak of `phase` ("forward" or "backward")."""
        whole, per_chunk = self.forward if phase == "forward" else self.backward
        return (whole * n + per_chunk * self.chunk(n, vocab, d)) * vocab


LOSSES: dict[str, Loss] = {
    "fp32": Loss("fp32 logits and log-softmax (one F.cross_entropy on logits.float())", 4, (6, 0), (8, 0), cached=2),
    "chunked": Loss("chunked cross-entropy: bf16 logits in 8 chunks, each upcast in turn (torchtune)", 4, (2, 4),
                    (0, 8), chunks=8),
    "chunked-compiled": Loss("chunked cross-entropy under torch.compile: bf16 chunks and a log-sum-exp per row kept",
                             2, (0, 0), (0, 2), chunks=8, keeps_logits=True),
    "compiled": Loss("one compiled cross-entropy: bf16 logits and a log-sum-exp per row kept (torchtitan, compiled)",
                     2, (0, 0), (2, 0), keeps_logits=True),
    "linear-chunked": Loss("head and cross-entropy in 8 chunks (torchtune's LinearCrossEntropyLoss)", 4, (0, 6), (0, 8),
                           chunks=8, head_inside=True),
    "fp32-chunked": Loss("fp32 logits (Fabric's output conversion) kept, cross-entropy in chunks of 128 tokens (litgpt)",
                         8, (0, 0), (0, 8), chunks=0, chunk_tokens=LITGPT_CHUNK),
    "fp32-whole-chunked": Loss("fp32 logits of the whole head kept, cross-entropy in chunks of 128 tokens "
                               "(litgpt's full.py)", 8, (0, 0), (4, 0), chunks=0, chunk_tokens=LITGPT_CHUNK),
    "fused": Loss("fused linear cross-entropy, gradient computed in forward (Liger)", 0, (0, 2), (0, 0), chunks=0,
                  chunk_tokens=-1),
}

# each loss as DTensor's loss_parallel runs it on vocabulary-sharded logits, where it differs (see above)
LOSS_PARALLEL: dict[str, Loss] = {
    "fp32": Loss("fp32 logits and log-softmax over the vocabulary shard (DTensor's loss_parallel)", 4, (10, 0), (12, 0),
                 cached=2),
}
