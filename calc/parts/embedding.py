"""What sits outside the stack of blocks: the token embedding, learned positions, an embedding
norm, and the LM head.

    token_embedding = vocab·d      position_embedding = (n_positions + offset)·d
    embedding_norm = BLOOM's LayerNorm after the lookup      lm_head = vocab·d, or 0 when tied

OPT's learned position table has 2 rows more than its context (positions start at offset 2). A tied
head *is* the token embedding's matrix, so it is counted once: counting it again is the classic
"GPT-2 has 163M parameters" mistake. Gemma scales embeddings by √d_model, with no parameter.

OPT-350m's word embeddings are narrower than the model (`proj_dim` = word_embed_proj_dim, 512 of
1,024): the token embedding and the head are vocab·proj_dim, with two bias-free projections,
project_in = proj_dim·d after the lookup and project_out = d·proj_dim before the head.
"""


from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.norm import Norm

__all__ = ["LABELS", "Embedding", "Head"]


class Embedding(Part):
    positions: Literal["none", "learned"] = "none"  # rotary and ALiBi live in attention: no table
    position_offset: int = Field(default=0, ge=0)  # extra rows of the learned table (OPT: 2)
    norm: Norm | None = None  # BLOOM's word_embeddings_layernorm
    scale: bool = False  # Gemma: embeddings times sqrt(d_model)
    proj_dim: int | None = Field(default=None, gt=0)  # OPT-350m: word embeddings this wide, projected in and out
    multiplier: float | None = Field(default=None, strict=False)  # Granite: embeddings times embedding_multiplier

    def width(self, d_model: int) -> int:
        """How wide the token embedding (and so the head) is: proj_dim when set, else d_model."""
        return self.proj_dim or d_model

    def params(self, vocab_size: int, d_model: int, n_positions: int) -> dict[str, int]:
        learned = (n_positions + self.position_offset) * d_model if self.positions == "learned" else 0
        return present(token_embedding=vocab_size * self.width(d_model), position_embedding=learned,
                       embedding_norm=self.norm.params(d_model) if self.norm else 0,
                       project_in=(self.proj_dim or 0) * d_model)


class Head(Part):
    tied: bool
    bias: bool = False  # GPT-J and Phi-2 have one
    softcap: float | None = Field(default=None, gt=0, strict=False)  # Gemma-2's final_logit_softcapping
    logit_scale: float | None = Field(default=None, strict=False)  # logits times this (Cohere; Granite: 1/logits_scaling)

    def params(self, vocab_size: int, d_model: int, proj_dim: int | None = None) -> dict[str, int]:
        """The head row is always present (0 when tied), so every source shows it; with the
        embedding's `proj_dim`, project_out (d_model -> proj_dim) comes first."""
        width = proj_dim or d_model
        return {**present(project_out=d_model * (proj_dim or 0)), "lm_head": 0 if self.tied else vocab_size * width,
                **present(lm_head_bias=vocab_size * self.bias)}


LABELS = {
    "token_embedding": "token embedding",
    "position_embedding": "position embedding",
    "embedding_norm": "embedding norm",
    "project_in": "embedding projection in (project_in)",
    "project_out": "projection out to the head (project_out)",
    "lm_head": "LM head",
    "lm_head_bias": "LM head bias",
}
