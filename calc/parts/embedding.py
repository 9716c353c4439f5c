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

Gemma-3n and Gemma-4 (E2B, E4B) give every layer its own slice of a second, per-layer embedding
(`per_layer`: a V_p x (L·p) table, plus per_layer_projection d·(L·p) of the token embedding into the
same slices and one p-wide norm); Gemma-3n's AltUp widens the stream into n copies after the
lookup and folds them back before the final norm (`altup_inputs`: (n - 1)·d² each way).
"""


from typing import Literal

from calc.parts.base import Field, Part, present
from calc.parts.hyper import HyperConnections
from calc.parts.norm import Norm
from calc.parts.transient import I32, Subgraph, graph_input, op, rms_norm, view

__all__ = ["LABELS", "PER_LAYER_INPUTS", "Embedding", "Head", "PerLayerEmbedding"]

# the per-layer inputs' token ids (llm_graph_input_gemma4_ple) and the contiguous inputs each layer slices
PLE_TOKENS, PER_LAYER_INPUTS = "inp_ple_tokens", "per_layer_inputs"


class PerLayerEmbedding(Part):
    """Gemma-3n's and Gemma-4's per-layer embeddings: `width` channels per layer, for `n_layers` layers."""

    vocab_size: int = Field(gt=0)
    width: int = Field(gt=0)
    n_layers: int = Field(gt=0)

    def params(self, d_model: int) -> dict[str, int]:
        wide = self.n_layers * self.width
        return {"per_layer_embedding": self.vocab_size * wide, "per_layer_projection": d_model * wide,
                "per_layer_projection_norm": self.width}

    def graph_nodes(self, n: int, d_model: int, embd: str) -> Subgraph:
        """llama.cpp's gemma4 per-layer inputs (src/models/gemma4.cpp:173-181, 467-537): its own token ids (an
        input, I32), their rows of the table reshaped to layers and scaled (a new tensor: its source is a view),
        expanded after the embedding; and, which the first layer to read them reaches, the token embedding `embd`
        projected, scaled in place, reshaped, RMS-normed per layer with a scale, plus those rows and scaled (in
        place), then permuted to {width, tokens, layers} and made contiguous: `PER_LAYER_INPUTS`, whose slice each
        layer views (calc/parts/augment.py graph_nodes)."""
        p, layers = self.width, self.n_layers
        shape = (p, layers, n)
        nodes = [graph_input(PLE_TOKENS, (n,), I32),
                 op("ple_rows", (p * layers, n), PLE_TOKENS),
                 view("ple_rows3", "ple_rows"), op("ple_selected", shape, "ple_rows3", inplace=True),
                 op("ple_proj", (p * layers, n), embd), op("ple_proj_s", (p * layers, n), "ple_proj", inplace=True),
                 view("ple_proj3", "ple_proj_s"), *rms_norm("ple_norm", shape, "ple_proj3"),
                 op("ple_sum", shape, "ple_norm", "ple_selected", inplace=True),
                 op("ple_scaled", shape, "ple_sum", inplace=True), view("ple_perm", "ple_scaled"),
                 op(PER_LAYER_INPUTS, (p, n, layers), "ple_perm")]
        return Subgraph(nodes, ["ple_selected"], PER_LAYER_INPUTS)


class Embedding(Part):
    positions: Literal["none", "learned"] = "none"  # rotary and ALiBi live in attention: no table
    position_offset: int = Field(default=0, ge=0)  # extra rows of the learned table (OPT: 2)
    norm: Norm | None = None  # BLOOM's word_embeddings_layernorm
    scale: bool = False  # Gemma: embeddings times sqrt(d_model)
    proj_dim: int | None = Field(default=None, gt=0)  # OPT-350m: word embeddings this wide, projected in and out
    multiplier: float | None = Field(default=None, strict=False)  # Granite: embeddings times embedding_multiplier
    per_layer: PerLayerEmbedding | None = None  # Gemma-3n, Gemma-4 E2B/E4B: every layer's own embedding slice
    altup_inputs: int | None = Field(default=None, gt=0)  # Gemma-3n: the stream as n copies (AltUp)
    # GPT-2's embd_pdrop: dropout on the embeddings' sum in training; only what a training step keeps changes
    dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)

    def width(self, d_model: int) -> int:
        """How wide the token embedding (and so the head) is: proj_dim when set, else d_model."""
        return self.proj_dim or d_model

    def params(self, vocab_size: int, d_model: int, n_positions: int) -> dict[str, int]:
        learned = (n_positions + self.position_offset) * d_model if self.positions == "learned" else 0
        altup = ((self.altup_inputs or 1) - 1) * d_model * d_model
        return present(token_embedding=vocab_size * self.width(d_model), position_embedding=learned,
                       embedding_norm=self.norm.params(d_model) if self.norm else 0,
                       project_in=(self.proj_dim or 0) * d_model,
                       **(self.per_layer.params(d_model) if self.per_layer else {}), altup_in=altup, altup_out=altup)


class Head(Part):
    tied: bool
    bias: bool = False  # GPT-J and Phi-2 have one
    softcap: float | None = Field(default=None, gt=0, strict=False)  # Gemma-2's final_logit_softcapping
    logit_scale: float | None = Field(default=None, strict=False)  # logits times this (Cohere; Granite: 1/logits_scaling)
    hyper: HyperConnections | None = None  # DeepSeek-V4: the residual copies collapsed once more before the final norm

    def params(self, vocab_size: int, d_model: int, proj_dim: int | None = None) -> dict[str, int]:
        """The head row is always present (0 when tied), so every source shows it; with the
        embedding's `proj_dim`, project_out (d_model -> proj_dim) comes first."""
        width = proj_dim or d_model
        return {**present(hc_head=self.hyper.head(d_model) if self.hyper else 0, project_out=d_model * (proj_dim or 0)),
                "lm_head": 0 if self.tied else vocab_size * width, **present(lm_head_bias=vocab_size * self.bias)}


LABELS = {
    "token_embedding": "token embedding",
    "position_embedding": "position embedding",
    "embedding_norm": "embedding norm",
    "project_in": "embedding projection in (project_in)",
    "per_layer_embedding": "per-layer embedding",
    "per_layer_projection": "per-layer projection",
    "per_layer_projection_norm": "per-layer projection norm",
    "altup_in": "AltUp projections in",
    "altup_out": "AltUp projections out",
    "project_out": "projection out to the head (project_out)",
    "lm_head": "LM head",
    "lm_head_bias": "LM head bias",
}
