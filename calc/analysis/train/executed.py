"""The model as a training framework runs it, where that differs from its reference implementation.

A spec says what the model's reference code (transformers') computes; what a training step keeps
follows what the framework runs, so two of the spec's facts are the framework's to set:

- the MoE form. transformers' Llama4TextMoe runs every expert over every token, the experts not
  picked weighed 0 (MoE.all_experts, set by the llama4 adapter): "reference" keeps that. torchtitan
  and torchtune send each token's top-k rows, scaled by their scores, through grouped matmuls —
  torchtitan/models/common/moe/moe.py @ 18761a8 (TokenChoiceTopKRouter, GroupedExperts and
  _run_experts_grouped_mm), torchtune/modules/moe/moe.py @ 0e25699 (MoE.forward: torch.gather of
  the routed rows, `routed_input * top_scores`, self.experts(routed_input, num_tokens_per_expert)):
  "grouped" counts those rows as transformers' grouped_mm path keeps them for the other MoE models.
- dropout. The config's rates (GPT-2's attn_pdrop, resid_pdrop, embd_pdrop; Seed-OSS's) apply where
  the framework builds the model from it; torchtune's, litgpt's and torchtitan's own model code has
  no dropout, so a run there keeps no masks.
- the tied head. A config's tie_word_embeddings holds where the framework ties (transformers,
  torchtune's TiedLinear); litgpt's GPT always builds its own lm_head (litgpt/model.py @ 5895df10,
  line 25: nn.Linear(n_embd, padded_vocab_size)) and its checkpoint converter copies the embedding
  into it when a checkpoint has none (scripts/convert_hf_checkpoint.py, lines 176-177): Gemma's or
  Llama 3.2's head there is a second vocab × d matrix, trained in full fine-tuning.
- the GELU's form. transformers runs the GELU its config names through ACT2FN, written out in python
  ops for gelu_new, gelu_fast and gelu_python (MLP.activation_form), which keep more for backward
  than torch's fused F.gelu; litgpt's GptNeoxMLP calls F.gelu(x, approximate=config.gelu_approximate)
  whatever the checkpoint's config named (litgpt/model.py @ 5895df10): `fused_gelu` runs that form.
  QuickGELU (x·σ(1.702·x)) is no GELU that F.gelu computes, so it keeps its written form.
"""

from __future__ import annotations

from calc.parts import MLA, MLP, Attention, MoE
from calc.parts.parallel import Parallel
from calc.spec.model import Block, ModelSpec

__all__ = ["MOE_FORMS", "as_run"]

MOE_FORMS = ("reference", "grouped")


def as_run(spec: ModelSpec, moe_form: str, dropout: bool, tied: bool = True, fused_gelu: bool = False) -> ModelSpec:
    """`spec` as the run executes it: its MoE blocks in `moe_form`, its dropout off unless `dropout`,
    its head untied unless `tied`, its GELUs torch's fused op where `fused_gelu`."""
    if not tied and spec.head.tied:
        spec = spec.replaced(head=spec.head.replaced(tied=False))
    if moe_form == "reference" and dropout and not fused_gelu:
        return spec
    blocks = {kind: _block(block, moe_form, dropout, fused_gelu) for kind, block in spec.blocks.items()}
    embedding = spec.embedding if dropout else spec.embedding.replaced(dropout=0.0)
    return spec.replaced(blocks=blocks, embedding=embedding)


def _block(block: Block, moe_form: str, dropout: bool, fused_gelu: bool = False) -> Block:
    changes: dict[str, object] = {}
    if fused_gelu and isinstance(block.mlp, MLP) and block.mlp.activation != "quick_gelu":
        changes["mlp"] = block.mlp.replaced(activation_form="fused")
    if moe_form == "grouped":
        changes.update({field: part.replaced(all_experts=False) for field, part in
                        (("mlp", block.mlp), ("shortcut", block.shortcut)) if isinstance(part, MoE)})
    if not dropout:
        changes.update(residual_dropout=0.0, mixer_dropout=0.0)
        changes["attention"] = _undropped(block.attention)
        if block.shared is not None:  # Zamba2's shared block: its attention's P
            copy = block.shared.block
            changes["shared"] = block.shared.replaced(block=copy.replaced(attention=_undropped(copy.attention)))
    return block.replaced(**changes) if changes else block


def _undropped(mixer: object) -> object:
    """The mixer without P's dropout: an attention's, or each of a parallel group's (Falcon-H1's)."""
    if isinstance(mixer, (Attention, MLA)):
        return mixer.replaced(dropout=0.0)
    if isinstance(mixer, Parallel):
        return mixer.replaced(mixers=tuple(_undropped(m) for m in mixer.mixers))
    return mixer
