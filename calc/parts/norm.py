"""Normalisation layers: LayerNorm (scale and bias, or either alone) and RMSNorm (scale only).

A norm over a width of d has d scale parameters and, for a LayerNorm with bias, d more. OLMo-1's
LayerNorm has neither (it only normalises); Cohere's and MPT's have a scale but no bias; Gemma's
RMSNorm multiplies by (1 + weight) but still stores one weight per channel. Norm placement within a
block is the block's business (`calc.spec.model.Block.norms`), not the norm's.
"""


from typing import Any, Literal

from calc.parts.base import Field, Part, model_validator

__all__ = ["LABELS", "Norm"]


class Norm(Part):
    kind: Literal["layernorm", "rmsnorm"]
    weight: bool = True  # a learned scale per channel
    bias: bool  # filled before validation: a LayerNorm has one unless told otherwise
    eps: float = Field(default=1e-5, gt=0, strict=False)
    unit_offset: bool = False  # Gemma: the stored scale w is applied as (1 + w)
    # a LayerNorm written out in torch ops, (x − mean)·rsqrt(var + ε)·w (CohereLayerNorm), rather than
    # F.layer_norm: it changes what autograd keeps for backward, not the arithmetic
    written_out: bool = False
    # an RMSNorm's rsqrt taken as pow(mean(x²) + ε, −0.5) (Gemma3nRMSNorm, Gemma4RMSNorm): pow keeps both
    # its input and its output, one value more per row than rsqrt
    pow_rsqrt: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_bias(cls, data: Any) -> Any:
        """A LayerNorm has a bias unless the config says it has not; an RMSNorm never has one."""
        if isinstance(data, dict) and data.get("bias") is None:
            data = {**data, "bias": data.get("kind") == "layernorm"}
        return data

    @model_validator(mode="after")
    def _rms_has_no_bias(self) -> "Norm":
        if self.kind == "rmsnorm" and self.bias:
            raise ValueError("an RMSNorm has no bias (bias: true needs kind: layernorm)")
        return self

    def params(self, width: int) -> int:
        """width x (scale + bias)."""
        return width * (int(self.weight) + int(self.bias))

    def describe(self) -> str:
        parts = [name for name, on in (("scale", self.weight), ("bias", self.bias)) if on]
        return f"{'LayerNorm' if self.kind == 'layernorm' else 'RMSNorm'} ({' and '.join(parts) or 'no parameters'})"


LABELS = {
    "attn_norm": "attention norm",
    "attn_post_norm": "attention output norm",
    "mlp_norm": "MLP norm",
    "mlp_post_norm": "MLP output norm",
    "final_norm": "final norm",
}
