"""The feed-forward block: two matrices (GELU/ReLU) or three (gated: SwiGLU, GeGLU).

Per layer, with d = d_model and f = d_ff:  up = d·f, down = f·d, and for a gated MLP gate = d·f.
A gated MLP counted with two matrices is a classic mistake (LLaMA-7B short by 1.4B). A fused
gate_up projection (Phi-3) stores gate and up side by side: a naming matter, not a count one.
Gemma-3n's activation sparsity (`sparsity` s) keeps only the gate's values above mean + std·Φ⁻¹(s)
of each token's row before the activation (a Gaussian top-k): arithmetic, no parameter. Step-3.5's
and Step-3.7's clamped SwiGLU (`clamp` c) is min(act(gate), c) × clip(up, −c, c); DeepSeek-V4's
(`gate_clamp` c, its swiglu_limit) clamps the gate before the activation: act(min(gate, c)) × clip(up, −c, c).
"""


from typing import Literal, get_args

from calc.parts.base import Field, Part, present
from calc.parts.transient import Graph, Subgraph, glu, op, relu_squared

__all__ = ["ACTIVATION_PARAMS", "LABELS", "MLP", "WRITTEN_GELUS"]

Activation = Literal["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "relu2"]  # without parameters (a MoE's experts)
MLPActivation = Literal[Activation, "xielu"]
# How the model's code runs a GELU: torch's fused F.gelu, or written out in python ops as transformers'
# ACT2FN names them (gelu_new: NewGELUActivation, gelu_fast: FastGELUActivation, gelu_python:
# GELUActivation(use_gelu_python=True); quick_gelu: QuickGELUActivation's x·σ(1.702·x), which torch has no
# fused op for: activations.py). The same arithmetic; training keeps more for the written forms
# (calc/analysis/train/activations.py, GELU_KEPT), and a framework's own model may run the fused one.
# The one list of the forms: the config reader and training take theirs from it.
ActivationForm = Literal["fused", "gelu_new", "gelu_fast", "gelu_python", "quick_gelu"]
# The forms written out, every one but the fused: a config naming one runs in it (calc.arch.common.mlp_activation).
WRITTEN_GELUS: tuple[str, ...] = tuple(form for form in get_args(ActivationForm) if form != "fused")
# Learned parameters of an activation, per MLP (XIELUActivation's alpha_p and alpha_n: one each).
ACTIVATION_PARAMS = {"xielu": 2}


class MLP(Part):
    kind: Literal["mlp"] = "mlp"
    d_ff: int = Field(gt=0)
    gated: bool = False
    activation: MLPActivation = "gelu"
    activation_form: ActivationForm = "fused"
    bias: bool = False  # on up (and gate) and on down
    fused_gate_up: bool = False
    sparsity: float = Field(default=0.0, ge=0, lt=1, strict=False)  # Gemma-3n: the gate's Gaussian top-k
    clamp: float | None = Field(default=None, gt=0, strict=False)  # Step-3.7: act(gate) at most c, up within ±c
    gate_clamp: float | None = Field(default=None, gt=0, strict=False)  # DeepSeek-V4: gate at most c, up within ±c
    swiglu_limit: float | None = Field(default=None, gt=0, strict=False)  # gpt-oss's clamped SwiGLU (MiniMax-M3's dense MLP)
    gate_scale: float | None = Field(default=None, strict=False)  # the gate's pre-activation times this (Falcon-H1)
    down_scale: float | None = Field(default=None, strict=False)  # the output times this (Falcon-H1)

    def params(self, d_model: int, prefix: str = "mlp") -> dict[str, int]:
        d, f = d_model, self.d_ff
        return present(**{
            f"{prefix}_gate": d * f * self.gated, f"{prefix}_gate_bias": f * (self.gated and self.bias),
            f"{prefix}_up": d * f, f"{prefix}_up_bias": f * self.bias,
            f"{prefix}_act": ACTIVATION_PARAMS.get(self.activation, 0),
            f"{prefix}_down": f * d, f"{prefix}_down_bias": d * self.bias,
        })

    def matrices(self, d_model: int, prefix: str = "mlp") -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer."""
        gate = {f"{prefix}_gate": (d_model, 1)} if self.gated else {}
        return {**gate, f"{prefix}_up": (d_model, 1), f"{prefix}_down": (self.d_ff, 1)}

    def transient(self, g: Graph) -> int:
        """Gate, up and their product (GGML_OP_GLU is not in place); ungated, up and down."""
        return 3 * g.per_token(self.d_ff) if self.gated else g.per_token(self.d_ff) + g.per_token(g.d_model)

    def graph_nodes(self, g: Graph, layer: int, x: str, at: str = "ffn") -> Subgraph | None:
        """build_ffn's nodes (src/llama-graph.cpp:1799-1998): a SwiGLU or GeGLU with gate and up separate (as
        llama.cpp loads them), up, gate, the gated activation of the two (not in place), down; or an ungated
        squared ReLU (Nemotron-H), up, ReLU and its square in place, down; an ungated GELU (Falcon, GPT-NeoX), up,
        GELU in place, down, each product's bias added in place where it has one (biases on no other MLP: none is
        checked against llama.cpp); where gate and up are one tensor
        in the GGUF (`llamacpp.fused_up`: GLM-4, src/models/glm4.cpp:154-158) their one product and the GLU over it.
        Step-3.5's clamped SwiGLU (`clamp`) is not one GLU node but up clamped, SiLU(gate) and its clamp, and their
        product, each in place (`clamped_swiglu`); DeepSeek-V4's (`gate_clamp`) one GLU node, ggml_swiglu_clamp
        (src/llama-graph.cpp:1882-1896). None for anything else. The gate and
        down scales (Falcon-H1's mlp_multipliers) are no node: llama.cpp's converter multiplies them into the
        weights (conversion/falcon_h1.py:64-67)."""
        if (self.bias and self.activation not in ("gelu", "gelu_tanh")) or self.sparsity \
                or (self.clamp and self.activation != "silu") or self.swiglu_limit \
                or (self.gated, self.activation) not in ((True, "silu"), (True, "gelu"), (True, "gelu_tanh"),
                                                         (False, "relu2"), (False, "gelu"), (False, "gelu_tanh")):
            return None
        at, n, f = f"l{layer}.{at}.", g.seq_tokens() * g.n_seqs, self.d_ff
        if self.gated and g.build is not None and g.build.fused_up:  # one product of both, the GLU splits it
            nodes = [op(at + "up", (2 * f, n), x), op(at + "act", (f, n), at + "up"),
                     op(at + "down", (g.d_model, n), at + "act")]
            return Subgraph(nodes, [], at + "down")
        up = [op(at + "up", (f, n), x), *([op(at + "up_b", (f, n), at + "up", inplace=True)] if self.bias else [])]
        if self.gated:
            act = [op(at + "gate", (f, n), x), *glu(at, (f, n), at + "gate", at + "up", self.clamp)]
        elif self.activation == "relu2":
            act = relu_squared(at, (f, n), at + "up")
        else:
            act = [op(at + "act", (f, n), up[-1].name, inplace=True)]
        down = [op(at + "down", (g.d_model, n), at + "act")]
        down += [op(at + "down_b", (g.d_model, n), at + "down", inplace=True)] if self.bias else []
        return Subgraph(up + act + down, [], down[-1].name)

    def describe(self) -> str:
        kind = {"silu": "SwiGLU", "gelu": "GeGLU", "gelu_tanh": "GeGLU", "relu": "ReGLU"}.get(self.activation, "gated")
        plain = {"xielu": "xIELU"}.get(self.activation, self.activation.upper())
        sparse = f", {self.sparsity:g} of the gate's activations cut" if self.sparsity else ""
        sparse += f", clamped at {self.clamp:g}" if self.clamp else ""
        sparse += f", gate clamped at {self.gate_clamp:g}" if self.gate_clamp else ""
        sparse += f", SwiGLU-OAI clamped at {self.swiglu_limit:g}" if self.swiglu_limit else ""
        return f"{kind} (d_ff {self.d_ff:,}{sparse})" if self.gated else f"{plain} (d_ff {self.d_ff:,}{sparse})"


LABELS = {
    "mlp_gate": "MLP gate",
    "mlp_gate_bias": "MLP gate bias",
    "mlp_up": "MLP up",
    "mlp_up_bias": "MLP up bias",
    "mlp_act": "MLP activation scalars",
    "mlp_down": "MLP down",
    "mlp_down_bias": "MLP down bias",
}
