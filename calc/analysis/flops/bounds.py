"""Lower bounds on time from a GPU's peak throughput and memory bandwidth.

A prefill (and a training step) moves few bytes per FLOP: it cannot finish faster than its FLOPs at
the GPU's peak, and at a model FLOPs utilisation (MFU) below 1 it takes FLOPs / (peak · MFU). A
decode step does ~2 FLOPs per weight it reads: it cannot finish before every weight it multiplies
and the whole KV cache have been read once, bytes / bandwidth. Each bound ignores the other
resource, communication and kernel overheads, so real times are longer.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from calc.analysis.count import count
from calc.analysis.flops.rows import Flops
from calc.analysis.memory import kv_cache
from calc.analysis.memory.formats import weight_format
from calc.analysis.memory.gpus import GPU
from calc.spec.model import ModelSpec

__all__ = ["Bounds", "bounds", "weights_read"]


@dataclass(frozen=True)
class Bounds:
    gpu: GPU
    mfu: Fraction
    dtype: str
    flops: int  # the forward pass (FLOPs, whatever the printed unit)
    training_flops: int | None  # a training step without recomputation (prefill only)
    weight_bytes: int  # decode: weights read once per step
    kv_bytes: int  # decode: the KV cache read once per step
    batch: int

    def compute_seconds(self, n: int, mfu: Fraction = Fraction(1)) -> Fraction:
        return Fraction(n) / (self.gpu.bf16_flops * mfu)

    @property
    def read_seconds(self) -> Fraction:
        """One decode step reads every multiplied weight and the cache once."""
        return Fraction(self.weight_bytes + self.kv_bytes, self.gpu.bandwidth)

    @property
    def decode_step_seconds(self) -> Fraction:
        """The larger of the two bounds: the step is limited by whichever resource it uses up first."""
        return max(self.read_seconds, self.compute_seconds(self.flops))

    @property
    def tokens_per_second(self) -> Fraction:
        return self.batch / self.decode_step_seconds

    def to_json(self, decode: bool) -> dict[str, object]:
        result: dict[str, object] = {"gpu": self.gpu.to_json(), "mfu": float(self.mfu), "dtype": self.dtype}
        if decode:
            result.update(weight_bytes=self.weight_bytes, kv_cache_bytes=self.kv_bytes,
                          read_seconds=float(self.read_seconds), step_seconds=float(self.decode_step_seconds),
                          tokens_per_second=float(self.tokens_per_second))
        else:
            result.update(prefill_seconds_at_peak=float(self.compute_seconds(self.flops)),
                          prefill_seconds_at_mfu=float(self.compute_seconds(self.flops, self.mfu)))
            if self.training_flops is not None:
                result["training_step_seconds_at_mfu"] = float(self.compute_seconds(self.training_flops, self.mfu))
        return result


def weights_read(spec: ModelSpec) -> int:
    """Parameters a decode step reads: every weight a token multiplies (MoE: its k routed experts, the
    fewest a batch can read), not the embedding tables a lookup reads a row of — but the tied head's
    matrix, which the head multiplies in full."""
    b = count(spec)
    params = b.active if b.active is not None else b.decoder_total  # a text token: the decoder, not the towers
    tables = b.get("token_embedding") + b.get("position_embedding")
    tied_head = spec.vocab_size * spec.embedding.width(spec.d_model) if spec.head.tied else 0
    return params - tables + tied_head


def bounds(spec: ModelSpec, f: Flops, gpu: GPU, mfu: Fraction, dtype: str = "bf16",
           kv_dtype: str = "bf16") -> Bounds:
    """Weights read at `dtype` (any storage format, block scales included), the cache at `kv_dtype`."""
    weight_bytes = weight_format(dtype).row_bytes(weights_read(spec))
    cache = kv_cache(spec, f.seq, f.batch, kv_dtype).total_bytes if f.decode else 0
    training = None if f.decode else f.training()["none"]
    return Bounds(gpu, mfu, dtype, f.forward, training, weight_bytes, cache, f.batch)
