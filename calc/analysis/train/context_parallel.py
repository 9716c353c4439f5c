"""Context parallelism (torchtitan's `context_parallel_degree`, torch's ring attention): what it adds.

Over c CP ranks each GPU holds T/c of every sequence (torch's causal load balancer gives each rank
two chunks, so T must split into 2·c), so the activations, the loss and the head's logits are
those of T/c tokens; FSDP shards the parameters over the data-parallel and CP ranks together
(torchtitan's `dp_shard_cp` mesh). Attention still sees every key: its ring passes K and V round the
CP ranks. What that holds while one layer's attention runs backward, from torch's source
(torch 2.13, torch/distributed/tensor/experimental/_context_parallel/_attention.py,
`_templated_ring_attention_backward`, default options `convert_to_f32=True`,
`rotate_method=ALL_GATHER`, the default torchtitan keeps):

- K and V all-gathered from every rank at once (`_AllGatherRotater`): c × the local K and V (bf16);
- the local K and V concatenated to be sent (`torch.cat([key.flatten(), value.flatten()])`);
- fp32 accumulators for dQ, dK, dV (`torch.zeros_like(..., dtype=float32)`);
- dK and dV sent on round the ring (all-to-all), fp32: the concatenation and the received buffer.

Forward holds less (the gathered K, V and fp32 output and log-sum-exp accumulators), and what is
saved for backward is what a fused kernel saves for the local tokens (Q, K, V, output, log-sum-exp).

K and V are as wide as the model hands them to the kernel: at the kv heads, or, where the model repeats
them to every query head first (`repeat_kv`: torchtitan's Llama, models/llama/model.py @ 9dec370,
`keys = repeat_kv(xk, self.n_rep)` before F.scaled_dot_product_attention), at the query heads, so the
ring gathers, sends and accumulates the repeated ones (Llama 3.1 405B at TP 8: 16 heads a GPU, not 1).
"""

from __future__ import annotations

from calc.parts import Attention
from calc.spec.model import ModelSpec

__all__ = ["ring_bytes"]

BF16, FP32 = 2, 4


def ring_bytes(spec: ModelSpec, cp: int, local_tokens: int, tp: int, repeat_kv: bool = False) -> int:
    """The largest attention layer's ring buffers in backward on one GPU; 0 without CP. `repeat_kv`: K and
    V reach the kernel repeated to the query heads."""
    if cp == 1:
        return 0
    largest = 0
    for _, a in spec.attention_parts():
        if not isinstance(a, Attention):
            continue
        width = a.q_dim + a.o_dim if repeat_kv else a.kv_dim + a.v_dim
        kv, q = local_tokens * -(-width // tp), local_tokens * -(-a.q_dim // tp)
        gathered = cp * kv * BF16 + kv * BF16
        grads = (q + kv) * FP32 + 2 * kv * FP32
        largest = max(largest, gathered + grads)
    return largest
