"""The torch source of truth: count a built `Decoder`'s parameters by component.

Every parameter name goes through `calc.checkpoint.names` (`classify` and `component_counts`), the
same table the checkpoint reader uses, so the torch model and a checkpoint cannot disagree about
what a tensor is; fused tensors (GPT-2's `c_attn`, Phi-3's `gate_up_proj`, the experts' fused
`gate_up_proj`) are split there. A name the table does not know is an error quoting it, never
silently skipped; buffers (rotary tables, DeepSeek-V3's e_score_correction_bias) are not parameters.
Imports torch: callers import this module lazily.
"""

from __future__ import annotations

from calc.analysis.breakdown import ORDER, Breakdown
from calc.checkpoint.names import component_counts, tensor_table
from calc.reference.model import Decoder, build
from calc.spec.model import ModelSpec

__all__ = ["breakdown", "torch_breakdown"]


def breakdown(model: Decoder) -> Breakdown:
    """Parameters by component, as `source="torch"`.

    named_parameters() lists each tensor once and a tied model has no `lm_head` parameter (its
    logits use the token embedding's matrix), so the tied head counts 0 with tied=True, exactly
    as the analytic counter reports it.
    """
    spec, table = model.spec, tensor_table(model.spec)
    totals: dict[str, int] = {}
    for name, param in model.named_parameters():
        meaning = table.classify(name)
        if meaning is None or meaning.is_buffer:
            raise ValueError(f"{name}: not a {table.layout} parameter name (calc.checkpoint.names)")
        for component, n in component_counts(meaning, tuple(param.shape)).items():
            totals[component] = totals.get(component, 0) + n
    tied = spec.head.tied
    totals.setdefault("lm_head", 0)
    ordered = {c: totals[c] for c in ORDER if c in totals} | totals
    saving = spec.vocab_size * spec.embedding.width(spec.d_model) if tied else 0
    return Breakdown(spec.name, spec.n_layers, ordered, tied=tied, tied_saving=saving, source="torch")


def torch_breakdown(spec: ModelSpec) -> Breakdown:
    """Build the spec on the meta device (no memory, any size) and count it."""
    return breakdown(build(spec, device="meta"))
