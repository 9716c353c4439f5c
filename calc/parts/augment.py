"""What Gemma-3n and Gemma-4 add around a layer's attention, each present or not: a learned
low-rank residual, AltUp's predict/correct coefficients and a per-layer input. With d = d_model:

    LAuReL (laurel_rank r):          laurel_left = d·r, laurel_right = r·d, laurel_norm = d
    AltUp (altup_inputs n):          altup_scale = d (correct_output_scale), altup_correct = n·n,
                                     altup_predict = n·n², altup_router = d·n, altup_router_norm = d
    per-layer input (width p):       ple_gate = d·p, ple_proj = p·d, ple_norm = d

LAuReL (Learned Augmented Residual Layer) reads the normed input beside attention: its output,
x + norm(x·W_left·W_right), is added to attention's, the sum scaled by 1/√2. AltUp (Alternating
Updates) carries n copies of the residual stream: before a layer it predicts every copy from all of
them (n² coefficients a token's router picks from d·n scores), the layer runs on copy 0 alone, and
after it each copy is corrected by the layer's change. The per-layer input (PLE) is one more
sublayer after the MLP: act(x·W_gate) times this layer's slice of the per-layer embedding, back to
d by W_proj, normed and added. Their norms are RMSNorms with a scale (Gemma-3n's and Gemma-4's).
The model-level halves (the per-layer embedding table, AltUp's projections of the stream into n
copies and back) are the `Embedding`'s.
"""


from calc.parts.base import Field, Part, present
from calc.parts.embedding import PER_LAYER_INPUTS
from calc.parts.transient import Subgraph, op, rms_norm, view

__all__ = ["LABELS", "Augment"]


class Augment(Part):
    laurel_rank: int | None = Field(default=None, gt=0)
    altup_inputs: int | None = Field(default=None, gt=0)  # AltUp's n copies of the residual stream
    per_layer_input: int | None = Field(default=None, gt=0)  # the per-layer embedding's width per layer
    layer_scalar: bool = False  # Gemma-4: the layer's output times a one-element buffer (no parameter)
    # AltUp's training-time details, which change what backward keeps, not the counts: its correction
    # coefficients clamped to ±altup_coef_clip (a k x k copy), and the corrected stream scaled (altup_correct_scale)
    altup_clip: bool = False
    altup_scale_output: bool = False

    def params(self, d_model: int) -> dict[str, int]:
        d, r, n, p = d_model, self.laurel_rank or 0, self.altup_inputs or 0, self.per_layer_input or 0
        return present(
            altup_scale=d * bool(n), altup_correct=n * n, altup_predict=n ** 3, altup_router=d * n,
            altup_router_norm=d * bool(n),
            laurel_left=d * r, laurel_right=r * d, laurel_norm=d * bool(r),
            ple_gate=d * p, ple_proj=p * d, ple_norm=d * bool(p),
        )

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """The weight matrices a quantised layout would quantise: the d-wide and rank-wide projections."""
        rows = {"laurel_left": (d_model, 1), "laurel_right": (self.laurel_rank, 1)} if self.laurel_rank else {}
        if self.per_layer_input:
            rows.update({"ple_gate": (d_model, 1), "ple_proj": (self.per_layer_input, 1)})
        return rows

    def graph_nodes(self, n: int, d_model: int, layer: int, x: str) -> Subgraph | None:
        """What llama.cpp's gemma4 runs after a layer's last add `x` (src/models/gemma4.cpp:371-402): with a
        per-layer input, x's gate projection, its GELU in place, times the layer's slice of the per-layer inputs
        (a view of calc/parts/embedding.py PER_LAYER_INPUTS) in place, projected back, RMS-normed with a scale and
        added to x in place; then the layer scalar, a product in place. None where LAuReL or AltUp surround the
        layer (Gemma 3n), which this does not build."""
        if self.laurel_rank or self.altup_inputs:
            return None
        at, nodes, out = f"l{layer}.aug.", [], x
        if self.per_layer_input:
            p = self.per_layer_input
            nodes += [op(at + "gate", (p, n), x), op(at + "gelu", (p, n), at + "gate", inplace=True),
                      view(at + "slice", PER_LAYER_INPUTS),
                      op(at + "mul", (p, n), at + "gelu", at + "slice", inplace=True),
                      op(at + "proj", (d_model, n), at + "mul"), *rms_norm(at + "norm", (d_model, n), at + "proj"),
                      op(at + "added", (d_model, n), x, at + "norm", inplace=True)]
            out = at + "added"
        if self.layer_scalar:
            nodes.append(op(at + "scaled", (d_model, n), out, inplace=True))
            out = at + "scaled"
        return Subgraph(nodes, [], out)

    def describe(self) -> str:
        what = [f"LAuReL rank {self.laurel_rank}"] if self.laurel_rank else []
        what += [f"AltUp over {self.altup_inputs} streams"] if self.altup_inputs else []
        what += [f"per-layer input {self.per_layer_input} wide"] if self.per_layer_input else []
        return ", ".join(what)


LABELS = {
    "altup_scale": "AltUp output scale",
    "altup_correct": "AltUp correction coefficients",
    "altup_predict": "AltUp prediction coefficients",
    "altup_router": "AltUp router",
    "altup_router_norm": "AltUp router norm",
    "laurel_left": "LAuReL down",
    "laurel_right": "LAuReL up",
    "laurel_norm": "LAuReL norm",
    "ple_gate": "per-layer input gate",
    "ple_proj": "per-layer input projection",
    "ple_norm": "per-layer input norm",
}
