"""The feed-forward steps: (gate,) up, the activation, down — for a dense MLP, a MoE's shared expert
and, with expert-shaped inputs and weights, its routed experts (`ffn_steps`)."""

from __future__ import annotations

from calc.analysis.shapes.core import Dims, Rows, Shape, Step
from calc.parts import MLP, MoE

__all__ = ["activation_label", "ffn_steps", "mlp_steps"]

_GATED = {"silu": "SwiGLU: SiLU(gate) × up", "gelu": "GeGLU: GELU(gate) × up",
          "gelu_tanh": "GeGLU: GELU(gate) × up (tanh approximation)", "relu": "ReGLU: ReLU(gate) × up",
          "relu2": "ReLU²(gate) × up", "xielu": "xIELU(gate) × up", "quick_gelu": "QuickGELU(gate) × up"}
_PLAIN = {"silu": "SiLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh approximation)", "relu": "ReLU", "relu2": "ReLU²", "quick_gelu": "QuickGELU",
          "xielu": "xIELU"}


def activation_label(gated: bool, activation: str) -> str:
    """'SwiGLU: SiLU(gate) × up', 'GeGLU: ...', 'GELU', 'ReLU', ... as the activation names it."""
    return (_GATED if gated else _PLAIN)[activation]


def mlp_steps(d: Dims, mlp: MLP, rows: Rows, prefix: str = "mlp", name: str = "MLP", ff: str = "d_ff") -> list[Step]:
    """A dense MLP on every token: [B, T, d_model] -> [B, T, d_ff] -> [B, T, d_model]."""
    d = d.named(**{ff: mlp.d_ff})
    x, hidden = d.hidden, d.shape("B", d.new, ff)
    weights = (d.shape("d_model", ff), d.shape(ff, "d_model"))
    return ffn_steps(d, prefix, name, (x, hidden, x), weights, rows, mlp)


def ffn_steps(d: Dims, prefix: str, name: str, shapes: tuple[Shape, Shape, Shape], weights: tuple[Shape, Shape],
              rows: Rows, part: MLP | MoE, how: str = "") -> list[Step]:
    """gate/up (x: shapes[0] -> shapes[1]), the activation, down (-> shapes[2]) of a dense MLP or of a
    MoE's routed experts; `weights` are the in and out matrices as shown, `how` says how routed rows
    meet them."""
    x, hidden, out = shapes
    w_in, w_out = weights
    width, who = hidden.sizes[-1], "each routed row" if how else "each token"
    bias = part.bias if isinstance(part, MLP) else part.expert_bias
    how = ("; plus a bias" if bias else "") + how
    steps = []
    # a dense MLP's fused gate_up is one linear (a MoE's expert stacks are parameters: params.STACKS)
    fused = "gate_up" if isinstance(part, MLP) and part.gated and part.fused_gate_up else ""
    if part.gated:
        note = "the gate: a second d_model → d_ff matrix"
        if part.fused_gate_up:
            note += f"; fused with up as one [{x.sizes[-1]}, {2 * width}] matrix (gate | up), split in two"
        steps.append(d.linear(f"{prefix}_gate", f"{name} gate ·W_gate", x, w_in, hidden,
                              rows.take(f"{prefix}_gate", f"{prefix}_gate_bias"), note + how, fused))
    if getattr(part, "sparsity", 0):  # Gemma-3n: a Gaussian top-k of the gate before its activation
        steps.append(d.step(f"{prefix}_sparsity", "cut the gate below mean + std·Φ⁻¹(s)", hidden, (hidden,),
                            note=f"each row's gate values below its mean + std × Φ⁻¹({part.sparsity:g}) set to 0 "
                                 "(elementwise: a mean, a deviation, a subtraction, a ReLU; no parameter)"))
    steps += [
        d.linear(f"{prefix}_up", f"{name} up ·W_up", x, w_in, hidden, rows.take(f"{prefix}_up", f"{prefix}_up_bias"),
                 f"widens {who} from d_model={x.sizes[-1]} to {hidden.names[-1]}={width}" + how, fused),
        d.step(f"{prefix}_act", activation_label(part.gated, part.activation), hidden,
               (hidden, hidden) if part.gated else (hidden,), params=rows.take(f"{prefix}_act"),
               note="elementwise; shape unchanged" + ("; two learned scalars (alpha_p, alpha_n)"
                                                       if part.activation == "xielu" else "")),
        d.linear(f"{prefix}_down", f"{name} down ·W_down", hidden, w_out, out,
                 rows.take(f"{prefix}_down", f"{prefix}_down_bias"), "narrows back to d_model" + how),
    ]
    return steps

