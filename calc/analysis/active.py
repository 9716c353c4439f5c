"""Active parameters per token under every convention vendors use, and which one each vendor quotes.

A MoE's "active" count differs by what is counted beside the routed experts: everything a token
touches (embedding row, every layer's active part, the LM head); without the input embedding (a
row lookup, no multiply) but with the LM head, as OpenAI counts gpt-oss; or without both, Kaplan's
non-embedding N. The vendor's own convention is data, each with the figure it published.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown

__all__ = ["CONVENTIONS", "VENDOR", "ActiveCount", "active_counts"]

# name -> (what it leaves out, the components it leaves out)
CONVENTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "all": ("everything a token touches", ()),
    "without_embedding": ("without the input embedding (the LM head counted)", ("token_embedding", "position_embedding")),
    "without_embedding_and_head": ("without the embedding and the LM head",
                                   ("token_embedding", "position_embedding", "lm_head")),
}

# model_type -> (the convention its vendor quotes, where, and the figure): only where the published figure,
# at its own precision, is one convention's and no other's (Qwen's "3.3B" for Qwen3-30B-A3B is none of
# 3.35, 3.04 and 2.73 rounded; DeepSeek-V3's "37B" fits two)
VENDOR: dict[str, tuple[str, str]] = {
    "gpt_oss": ("without_embedding", "https://openai.com/index/gpt-oss-model-card/ (gpt-oss-120b 5.13B and gpt-oss-20b "
                                     "3.61B active: the unembedding counted, the embedding not)"),
    "mixtral": ("all", "https://mistral.ai/news/mixtral-of-experts (Mixtral 8x7B: 12.9B parameters per token)"),
}


@dataclass(frozen=True)
class ActiveCount:
    convention: str  # a key of CONVENTIONS
    params: int
    vendor: bool  # the convention this model's vendor quotes

    def to_json(self) -> dict[str, object]:
        return {"convention": self.convention, "params": self.params, "vendor": self.vendor}


def active_counts(breakdown: Breakdown, model_type: str) -> list[ActiveCount]:
    """The active count under each convention (none for a dense model: every parameter is active)."""
    if breakdown.active is None:
        return []
    vendor = VENDOR.get(model_type, (None, ""))[0]
    return [ActiveCount(name, breakdown.active - sum(breakdown.get(c) for c in left_out), name == vendor)
            for name, (_, left_out) in CONVENTIONS.items()]
