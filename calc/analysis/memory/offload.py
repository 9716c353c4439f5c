"""Routed experts kept in system RAM: llama.cpp's `--n-cpu-moe N` and `--cpu-moe`.

llama.cpp's `--n-cpu-moe N` adds one tensor override per block index i < N, sending every tensor
matching `blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps` to the CPU buffer; `--cpu-moe` does it for
every block (LLM_FFN_EXPS_REGEX and llm_add_n_cpu_ffn_overrides in
https://github.com/ggml-org/llama.cpp/blob/001d906a6d86e2490e394361e7cc6f478b100088/common/common.h;
the option came in https://github.com/ggml-org/llama.cpp/pull/15077). So:

- N counts blocks from 0, dense ones included: DeepSeek-V3's first 3 layers have no routed
  experts, and `--n-cpu-moe 3` moves nothing;
- only the routed experts move (their biases too: the pattern is not anchored to `.weight`); the
  router (`ffn_gate_inp`), shared experts (`ffn_*_shexp`), attention and the KV cache stay on the GPU.

A decode step then reads, per offloaded layer, its top_k of n_experts experts from system RAM:
that share of the offloaded bytes crosses the CPU's memory bus for every token, which is why
offloading slows decoding (the bytes of one token, not a bandwidth model).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.weights import Weights
from calc.errors import GptcalcError
from calc.inputs import strict_int
from calc.spec.model import ModelSpec

__all__ = ["Offload", "offload", "on_gpu", "parse_cpu_experts"]

EXPERTS = "experts_"  # the routed experts' components (calc/parts/moe.py)


@dataclass(frozen=True)
class Offload:
    """What stays in system RAM: the routed experts of blocks 0 .. layers-1."""

    layers: int
    weights: Weights  # the offloaded experts, at the weights' format
    read_per_token: Weights  # what one decode step reads of them: top_k of n_experts per layer

    def to_json(self) -> dict[str, object]:
        return {"layers": self.layers, "weights_bytes": self.weights.total_bytes,
                "components": dict(self.weights.components),
                "decode_read_bytes_per_token": self.read_per_token.total_bytes}


def parse_cpu_experts(text: str, spec: ModelSpec) -> int:
    """`--cpu-experts all|N` (llama.cpp `--cpu-moe` / `--n-cpu-moe N`): how many blocks, from 0, keep
    their routed experts in system RAM; at most the model's layers."""
    moe = [b for b in spec.blocks.values() if b.moe]
    if not moe:
        raise GptcalcError(f"--cpu-experts: {spec.name} has no routed experts to keep in system RAM")
    if text.strip().lower() == "all":
        return spec.n_layers
    if not (text.strip().isascii() and text.strip().isdigit()):
        raise GptcalcError(f"--cpu-experts {text!r}: give 'all' or a number of layers (llama.cpp --n-cpu-moe N)")
    return min(strict_int(text.strip(), "--cpu-experts"), spec.n_layers)


def offload(spec: ModelSpec, breakdown: Breakdown, whole: Weights, layers: int) -> Offload:
    """The routed-expert parameters of blocks 0 .. layers-1, and the k/E of them a token reads."""
    per_layer = {block.name: block.per_layer for block in breakdown.blocks}
    held: dict[str, int] = {}
    read: dict[str, int] = {}
    for name, count in spec.layer_counts(0, layers).items():  # run-length: any depth costs its kinds
        mlp = spec.blocks[name].moe
        for component, n in per_layer[name].items():
            if component.startswith(EXPERTS):
                held[component] = held.get(component, 0) + count * n
                read[component] = read.get(component, 0) + count * (n * mlp.top_k // mlp.n_experts)
    return Offload(layers, replace(whole, params=held), replace(whole, params=read))


def on_gpu(params: dict[str, int], moved: Offload | None) -> dict[str, int]:
    """A GPU's parameters less the experts kept in system RAM (if any)."""
    if moved is None:
        return params
    return {name: n - moved.weights.params.get(name, 0) for name, n in params.items()}
