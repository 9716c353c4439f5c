"""FLOPs of a forward pass and of a training step, per component, with their conventions named.

The matmuls are not listed a second time: every row is a step of the shapes journey
(`calc.analysis.shapes.journey`) that multiplies something, with its FLOPs (2·m·n·k) and the names
of its dimensions. On top of the journey this module applies the conventions a user picks:

- FLOPs (a multiply and an add are 2) or MACs (1): `Conventions.macs`; every row is 2·m·n·k, so
  MACs are exactly half.
- Causal attention counted in full (every query against every key it holds: PaLM, torchtitan,
  torch's FlopCounterMode on an explicit QKᵀ) or only the (query, key) pairs the causal mask
  keeps, `causal_half`: Σ_p min(p+1, window) pairs, T(T+1)/2 without a window (Megatron-LM and
  MaxText take exactly T²/2).
- The LM head on every position (what training and a plain forward compute) or on the last one
  only (`last_logit`, what an inference engine computes for the next token).
- Embedding lookups, norms, softmax, activations, residual adds and biases: 0.

A training step is forward + backward, and backward is 2× forward (for each matmul, the gradient
of its input and of its weight are each a matmul of the same size). Recomputation adds the forward
it recomputes: the attention scores and weighted values (selective, Korthikanti et al.) or every
block (full).
"""

from __future__ import annotations

from calc.analysis.flops.rows import Conventions, FlopRow, Flops, flops, tower_flops

__all__ = ["Conventions", "FlopRow", "Flops", "flops", "tower_flops"]
