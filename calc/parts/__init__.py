"""The parts a decoder is made of, one module per kind: its fields (validated by pydantic, see
`calc.parts.base`), its parameter formulas (`params(d_model)` for one layer), its KV-cache elements
per token and its labels.

`calc.spec.model.Block` puts a token mixer (Attention, MLA, Mamba2, GatedDeltaNet or ShortConv), an
MLP part (MLP or MoE) and norms together, either of the two possibly absent; `ModelSpec` stacks blocks run-length and adds the embedding and head.
"""

from __future__ import annotations

from calc.parts import (attention, augment, block_indexer, compressed, embedding, gated_deltanet, hyper, kda, lightning, mamba, mamba2, mla,
                        mlp, moe, norm, shared, short_conv)
from calc.parts.attention import Attention, QKNorm, Rope, attention_kind
from calc.parts.compressed import CompressedAttention
from calc.parts.embedding import Embedding, Head
from calc.parts.gated_deltanet import GatedDeltaNet
from calc.parts.hyper import HyperConnections
from calc.parts.kda import KimiDeltaAttention
from calc.parts.lightning import LightningAttention
from calc.parts.mamba import Mamba
from calc.parts.mamba2 import Mamba2
from calc.parts.mla import MLA
from calc.parts.mlp import MLP
from calc.parts.moe import MoE
from calc.parts.norm import Norm
from calc.parts.short_conv import ShortConv

__all__ = ["LABELS", "MLA", "MLP", "Attention", "CompressedAttention", "Embedding", "HyperConnections", "GatedDeltaNet", "Head", "KimiDeltaAttention", "LightningAttention", "Mamba", "Mamba2", "MoE", "Norm", "QKNorm", "Rope",
           "ShortConv", "attention_kind"]

# Every component key any part can produce, with its label, in the order a token meets them.
LABELS: dict[str, str] = {
    **{k: v for k, v in embedding.LABELS.items() if not k.startswith("lm_head") and k not in ("project_out", "altup_out")},
    **shared.LABELS,
    "hc_attn": hyper.LABELS["hc_attn"],
    "attn_norm": norm.LABELS["attn_norm"],
    **mla.LABELS,
    **compressed.LABELS,
    **attention.LABELS,
    **block_indexer.LABELS,
    **augment.LABELS,
    **mamba2.LABELS,
    **mamba.LABELS,
    **gated_deltanet.LABELS,
    **kda.LABELS,
    **lightning.LABELS,
    **short_conv.LABELS,
    "attn_post_norm": norm.LABELS["attn_post_norm"],
    "hc_mlp": hyper.LABELS["hc_mlp"],
    "mlp_norm": norm.LABELS["mlp_norm"],
    **mlp.LABELS,
    **moe.LABELS,
    "mlp_post_norm": norm.LABELS["mlp_post_norm"],
    "altup_out": embedding.LABELS["altup_out"],
    "hc_head": hyper.LABELS["hc_head"],
    "final_norm": norm.LABELS["final_norm"],
    "project_out": embedding.LABELS["project_out"],
    "lm_head": embedding.LABELS["lm_head"],
    "lm_head_bias": embedding.LABELS["lm_head_bias"],
}
