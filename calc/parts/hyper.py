"""Manifold-constrained hyper-connections (mHC, DeepSeek-V4): the residual stream is `streams` copies
of the hidden state, and each sublayer reads a learned mix of them and writes back into all of them.

Before a sublayer, n = streams copies of width d are flattened (n·d), RMS-normed without a weight,
and one projection gives the sublayer's three mixing weights: `pre` (n: collapse the copies into
the sublayer's input), `post` (n: spread its output back) and `comb` (n·n: mix the copies, made
doubly stochastic by Sinkhorn iterations). Per sublayer (DeepseekV4HyperConnection):

    fn = (2 + n)·n x n·d,  base = (2 + n)·n,  scale = 3

A layer has two (before attention, `hc_attn`, and before the MLP, `hc_mlp`); the model's head
collapses the copies once more before the final norm (DeepseekV4HyperHead: fn = n x n·d, base = n,
scale = 1; `hc_head`). transformers keeps all of them in fp32 (_keep_in_fp32_modules_strict).
"""


from calc.parts.base import Field, Part

__all__ = ["LABELS", "HyperConnections"]


class HyperConnections(Part):
    streams: int = Field(gt=0)  # hc_mult: copies of the residual stream
    # what the forward pass reads (no parameters): Sinkhorn iterations making `comb` doubly stochastic,
    # and the epsilon added to `pre`, `comb` and their normalisers (hc_sinkhorn_iters, hc_eps)
    sinkhorn_iters: int = Field(default=20, gt=0)
    eps: float = Field(default=1e-6, gt=0, strict=False)

    def sublayer(self, d_model: int) -> int:
        """One sublayer's mixing projection, its bias and its three scales."""
        n = self.streams
        width = (2 + n) * n
        return width * n * d_model + width + 3

    def params(self, d_model: int) -> dict[str, int]:
        """One layer's: before its attention and before its MLP."""
        return {"hc_attn": self.sublayer(d_model), "hc_mlp": self.sublayer(d_model)}

    def head(self, d_model: int) -> int:
        """The final collapse of the copies before the last norm."""
        n = self.streams
        return n * n * d_model + n + 1

    def describe(self) -> str:
        return f"hyper-connections over {self.streams} residual streams"


LABELS = {
    "hc_attn": "hyper-connection mix (attention)",
    "hc_mlp": "hyper-connection mix (MLP)",
    "hc_head": "hyper-connection head collapse",
}
