"""Mixture of experts: a router picks top_k of n_experts gated MLPs per token, plus shared experts.

Per layer, with d = d_model, E = n_experts, f = the expert's d_ff:

    router = d·E (+ E for a router bias: gpt-oss)
    experts_gate = experts_up = E·d·f,  experts_down = E·f·d   (+ E·f, E·f, E·d of expert biases: gpt-oss)
    shared experts: one MLP of their combined width (DeepSeek: n_shared_experts x f; Qwen2-MoE:
    shared_expert_intermediate_size), and Qwen2-MoE's shared_expert_gate = d·1.

DeepSeek-V3's and GLM-4.5's e_score_correction_bias (`score_bias`, E per layer) is stored in the
checkpoint but is no parameter: it is adjusted by the load-balancing rule, not by gradients, and
transformers registers it as a buffer. `buffers()` reports it; it is not in `params()` or the total.
ERNIE-4.5 keeps the same bias as an nn.Parameter without gradient (`score_bias_param`): transformers'
parameters() counts it, and so does `params()` (router_score_bias_param).

Gemma-4 runs its dense MLP beside the experts, as a shared expert with norms of its own
(`shared_norms`: the MLP's output, the experts' input and their output, RMSNorms of d each), and
scales its router's input per channel and each picked expert's weight (`router_scale`: d + E).

DeepSeek-V4's first layers route by token id (`hash_vocab`): a fixed table (tid2eid, vocab x
top_k, a buffer like the score bias) names each token's experts, and the router's scores only
weigh them; its other layers score with sqrt(softplus(logits)) ("sqrtsoftplus").

Active parameters per token: everything but the experts the router did not pick, i.e. the router,
top_k experts and the shared experts.
"""


from typing import Literal

from calc.parts.base import Field, Part, model_validator, present
from calc.parts.mlp import MLP, Activation
from calc.parts.transient import (I32, TOKENS, Graph, Node, Subgraph, glu, op, relu_squared, rms_norm, set_rows, tensor,
                                  view)

__all__ = ["LABELS", "MoE"]


class MoE(Part):
    kind: Literal["moe"] = "moe"
    n_experts: int = Field(gt=0)
    # LongCat-Flash's zero-computation experts: the router chooses among n_experts + zero_experts, and a
    # zero expert gives back its input times its routing weight; no parameters, so a token routed to one
    # uses fewer (active counts the most a token can use: top_k real experts)
    zero_experts: int = Field(default=0, ge=0)
    top_k: int = Field(gt=0)
    d_ff: int = Field(gt=0)  # one routed expert's hidden size
    gated: bool = True
    activation: Activation = "silu"
    expert_bias: bool = False
    fused_gate_up: bool = False
    router_bias: bool = False
    score_bias: bool = False  # DeepSeek-V3's e_score_correction_bias, one per expert: a stored buffer
    score_bias_param: bool = False  # ERNIE-4.5: the score bias is a parameter (no gradient), counted
    hash_vocab: int | None = Field(default=None, gt=0)  # DeepSeek-V4: experts from a vocab x top_k token-id table
    router_softcap: float | None = Field(default=None, gt=0, strict=False)  # Laguna: router logits c·tanh(l/c)
    shared: MLP | None = None  # the shared expert(s), as one MLP of their combined d_ff
    n_shared: int = Field(default=0, ge=0)  # how many experts `shared` stands for (DeepSeek: 1 or 2)
    shared_gate: bool = False  # Qwen2-MoE: a sigmoid gate d -> 1 on the shared expert's output
    shared_norms: bool = False  # Gemma-4: the shared MLP's output, the experts' input and output normed (3 x d)
    router_scale: bool = False  # Gemma-4: the router's input times a d-wide scale, each expert's weight times its own
    # How the router picks and weighs experts (no parameters): softmax or sigmoid scores, top_k of them
    # renormalised to sum to 1 or not, DeepSeek's group-limited choice (n_group groups scored by their
    # best expert, "max", or best two, "top2_sum"; the best topk_group groups kept) and a final scale;
    # Phi-3.5-MoE's sparsemixer (top-2) picks each expert among those within 2·jitter_eps of the best.
    scoring: Literal["softmax", "sigmoid", "sparsemixer", "sqrtsoftplus"] = "softmax"
    norm_topk: bool = True
    # a softmax router on 16-bit logits that computes in fp32 (softmax(router_logits, dtype=torch.float)), keeping
    # its scores and renormalised weights in fp32: "cast" hands the experts the weights cast back (Qwen2/3-MoE,
    # OLMoE), "kept" hands them on in fp32 (Mixtral); "none": in the logits' dtype. Only training memory changes
    router_fp32: Literal["none", "cast", "kept"] = "none"
    # GraniteMoE's router takes the top-k logits first and softmaxes only those: the weights of softmax,
    # top-k and renormalisation, but backward keeps k scores per token rather than n_experts
    topk_first: bool = False
    # ERNIE-4.5 renormalises by clamp(sum, min=ε): the clamp keeps the sum, one value more per token
    clamped_sum: bool = False
    n_group: int = Field(default=1, gt=0)
    topk_group: int = Field(default=1, gt=0)
    group_score: Literal["max", "top2_sum"] = "max"
    routed_scale: float = Field(default=1.0, gt=0, strict=False)
    swiglu_limit: float | None = Field(default=None, gt=0, strict=False)  # gpt-oss: clamped SwiGLU, (up + 1)
    clamp: float | None = Field(default=None, gt=0, strict=False)  # Step-3.7: act(gate) at most c, up within ±c
    gate_clamp: float | None = Field(default=None, gt=0, strict=False)  # DeepSeek-V4: gate at most c, up within ±c
    weight_input: bool = False  # Llama-4: the routing weight scales the expert's input, not its output
    # Llama-4 as transformers runs it (Llama4TextMoe): every expert over every token, the ones not picked
    # weighed 0; the arithmetic is the top-k's, what a training step computes and keeps is E/top_k times more
    all_experts: bool = False
    jitter_eps: float = Field(default=0.01, ge=0, strict=False)  # sparsemixer's threshold (router_jitter_noise)

    @model_validator(mode="after")
    def _check(self) -> "MoE":
        if sum(bool(limit) for limit in (self.clamp, self.gate_clamp, self.swiglu_limit)) > 1:
            raise ValueError("clamp, gate_clamp and swiglu_limit: an expert's SwiGLU is clamped one way "
                             "(Step-3.7's, DeepSeek-V4's or gpt-oss's)")
        if self.top_k > self.choices:
            raise ValueError(f"top_k={self.top_k} is more than the router's {self.choices} choices")
        if self.shared_gate and self.shared is None:
            raise ValueError("shared_gate needs a shared expert")
        if self.shared_norms and self.shared is None:
            raise ValueError("shared_norms: the norms sit on a shared expert's output, and there is none")
        return self

    @property
    def choices(self) -> int:
        """What the router scores: the routed experts and the zero-computation ones."""
        return self.n_experts + self.zero_experts

    def expert_params(self, d_model: int) -> dict[str, int]:
        """One routed expert."""
        d, f = d_model, self.d_ff
        return present(
            experts_gate=d * f * self.gated, experts_gate_bias=f * (self.gated and self.expert_bias),
            experts_up=d * f, experts_up_bias=f * self.expert_bias,
            experts_down=f * d, experts_down_bias=d * self.expert_bias,
        )

    def params(self, d_model: int) -> dict[str, int]:
        e, c = self.n_experts, self.choices
        rows = present(router_scale=d_model * self.router_scale, router_expert_scale=e * self.router_scale,
                       router=d_model * c, router_bias=c * self.router_bias,
                       router_score_bias_param=c * (self.score_bias and self.score_bias_param),
                       experts_norm=d_model * self.shared_norms)
        rows.update({name: e * n for name, n in self.expert_params(d_model).items()})
        if self.shared is not None:
            rows.update(self.shared.params(d_model, prefix="shared_mlp"))
            rows.update(present(shared_expert_gate=d_model * self.shared_gate,
                                shared_mlp_post_norm=d_model * self.shared_norms,
                                experts_post_norm=d_model * self.shared_norms))
        return rows

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix's input width and how many there are per layer (one per routed expert)."""
        e = self.n_experts
        rows = {"router": (d_model, 1), **({"experts_gate": (d_model, e)} if self.gated else {}),
                "experts_up": (d_model, e), "experts_down": (self.d_ff, e)}
        if self.shared is not None:
            rows.update(self.shared.matrices(d_model, prefix="shared_mlp"))
            rows.update({"shared_expert_gate": (d_model, 1)} if self.shared_gate else {})
        return rows

    def buffers(self) -> dict[str, int]:
        """What one layer stores beside its parameters: the router's score correction bias, or its
        token-id table."""
        return present(router_score_bias=self.choices * (self.score_bias and not self.score_bias_param),
                       router_hash_table=(self.hash_vocab or 0) * self.top_k)

    def active_params(self, d_model: int) -> dict[str, int]:
        """What one token uses: every row, with top_k routed experts instead of all of them."""
        rows = self.params(d_model)
        rows.update({name: self.top_k * n for name, n in self.expert_params(d_model).items()})
        return rows

    def transient(self, g: Graph) -> int:
        """The router's scores, their probabilities, the chosen ids and weights, then the top-k experts' gate,
        up and product per token (src/llama-graph.cpp build_moe_ffn); or the shared expert beside the routed
        output."""
        n = g.n_tokens
        router = 2 * tensor(self.n_experts * n) + tensor(self.n_experts * n, I32) + tensor(self.top_k * n)
        routed = router + (3 if self.gated else 2) * tensor(self.d_ff * self.top_k * n)
        return max(routed, g.per_token(g.d_model) + (self.shared.transient(g) if self.shared else 0))

    def graph_nodes(self, g: Graph, layer: int, x: str, stream: str | None = None) -> Subgraph | None:
        """build_moe_ffn's nodes (src/llama-graph.cpp:2044-2405) for softmax or sigmoid routing (both in place on
        the logits, after the router's bias, added in place, where it has one), or gpt-oss's soft max over the chosen
        experts' logits (spec.llamacpp.softmax_weight: in place on their rows), a selection bias added to a new
        tensor (the probabilities have a view), DeepSeek-V3's groups (`_groups`), SwiGLU experts (biased or not:
        `_biased`) or ungated squared-ReLU ones (Nemotron-H): the top-k ids
        (I32) and their probabilities, normalised by their sum (clamped in place) where the model does, scaled where
        it does (a new tensor: they are a view); the chosen experts' up, gate and SwiGLU, or up, ReLU and square in
        place, and down (MUL_MAT_ID, {width, top_k, tokens}), weighted in place; the k experts' rows added (the
        first sum a new tensor: its sources are views); then the shared expert (build_ffn), behind its sigmoid gate
        where it has one, added in place. A score bias kept as a parameter (ERNIE-4.5-MoE, Laguna) is the same
        exp_probs_b weight; Laguna's router soft-cap is not in llama.cpp's graph (src/models/laguna.cpp:277-289 passes
        none to build_moe_ffn): neither is a node. Gemma 4's (src/models/gemma4.cpp:290-345: GeGLU experts, its router
        on the stream, `_router_input`, its per-expert scale, `_down_scale`, gate and up one tensor, `_gate_up`, the
        experts on a norm of their own of the stream and the shared MLP each normed after, `shared_norms`) reads the
        residual `stream` too. DeepSeek-V4's (src/models/deepseek4.cpp:1280-1324): sqrt(softplus(logits)), two ops in
        place (`sqrtsoftplus`), its first layers' experts the rows of their token-id table (`hash_vocab`: a GET_ROWS
        of the token ids, I32, with no argsort), and its clamped SwiGLU one GLU node (ggml_swiglu_clamp,
        src/llama-graph.cpp:2276-2290). None otherwise."""
        shared = self.shared.graph_nodes(g, layer, x, "shexp") if self.shared else None
        if self.scoring not in ("softmax", "sigmoid", "sqrtsoftplus") or (self.gated, self.activation) not in (
                (True, "silu"), (True, "gelu"), (True, "gelu_tanh"), (False, "relu2")) \
                or self.zero_experts or self.all_experts or self.top_k < 2 \
                or (self.shared is not None and shared is None) or (self.router_scale and self.expert_bias) \
                or ((self.router_scale or self.shared_norms) and stream is None):
            return None
        at, n, e, k, d = f"l{layer}.moe.", g.seq_tokens() * g.n_seqs, self.n_experts, self.top_k, g.d_model
        # the soft max over the chosen experts' logits, not all: their weights so sum to 1 (llama.cpp's norm_w is
        # false, src/models/openai-moe.cpp:139), where the spec says the same as norm_topk
        after = bool(g.build and g.build.softmax_weight)
        if after and (self.score_bias or self.n_group > 1 or self.scoring != "softmax"):
            return None
        scores = [op(at + "logits_b", (e, n), at + "logits", inplace=True)] if self.router_bias else []
        probs = scores[-1].name if scores else at + "logits"
        scores += [op(at + "softplus", (e, n), probs, inplace=True)] if self.scoring == "sqrtsoftplus" else []
        probs = scores[-1].name if scores else probs
        scores += [] if after else [op(at + "probs", (e, n), probs, inplace=True)]
        probs = scores[-1].name if scores else probs
        selection = at + "biased" if self.score_bias else probs
        weights = at + ("weights3" if after else "norm3" if self.norm_topk else "weights")
        groups = self._groups(at, selection, n)
        router = self._router_input(at, stream, g.d_model, n)
        nodes = [*router, op(at + "logits", (e, n), router[-1].name if router else x), *scores,
                 view(at + "probs3", probs),
                 *([op(at + "biased", (e, n), probs, inplace=True)] if self.score_bias else []), *groups,
                 *self._choice(at, groups[-1].name if groups else selection, e, k, n),
                 op(at + "weights", (1, k, n), at + "probs3", at + "topk")]
        if after:
            nodes += [view(at + "weights2", at + "weights"),
                      op(at + "softmax", (k, n), at + "weights2", inplace=True), view(at + "weights3", at + "softmax")]
        if self.norm_topk and not after:
            nodes += [view(at + "weights2", at + "weights"), op(at + "sum", (1, n), at + "weights2"),
                      op(at + "clamp", (1, n), at + "sum", inplace=True),
                      op(at + "div", (k, n), at + "weights2", at + "clamp", inplace=True),
                      view(at + "norm3", at + "div")]
        if self.routed_scale != 1.0:  # expert_weights_scale: in place where the weights are a whole tensor
            nodes.append(op(at + "scaled", (1, k, n), weights, inplace=True))
            weights = at + "scaled"
        down = self._biased(at, "down", (d, k, n), at + "act") + self._down_scale(at, d, k, n)
        experts = rms_norm(at + "x_norm", (d, n), stream) if self.shared_norms else []  # Gemma 4's pre_norm_2
        nodes += [*experts, view(at + "x3", experts[-1].name if experts else x), *self._gate_up(at, g, k, n),
                  *down, op(at + "weighted", (d, k, n), down[-1].name, weights, inplace=True)]
        rows = [view(f"{at}row{i}", at + "weighted") for i in range(k)]
        sums = [op(f"{at}sum{i}", (d, n), f"{at}sum{i - 1}" if i > 1 else rows[0].name, rows[i].name, inplace=True)
                for i in range(1, k)]
        nodes += rows + sums
        expanded = [weights, at + "weighted", *(r.name for r in rows), *(s.name for s in sums)]
        out = sums[-1].name
        if shared is not None and self.shared_norms:  # each normed after, the shared expert's added first
            post = rms_norm(at + "shexp_post", (d, n), shared.out) + rms_norm(at + "moe_post", (d, n), out)
            nodes += shared.nodes + post + [op(at + "out", (d, n), at + "shexp_post", at + "moe_post", inplace=True)]
            out = at + "out"
        elif shared is not None:
            gated = self._shared_gate(at, shared.out, d, n, x)
            nodes += shared.nodes + gated + [op(at + "out", (d, n), out, gated[-1].name if gated else shared.out,
                                                 inplace=True)]
            out = at + "out"
        return Subgraph(nodes, expanded, out)

    def _choice(self, at: str, scores: str, e: int, k: int, n: int) -> list[Node]:
        """The chosen experts' ids (`topk`, I32): the first k of the scores' argsort (a view), or, routed by token id
        (`hash_vocab`), the tokens' rows of the id table (src/models/deepseek4.cpp:1288-1292)."""
        if self.hash_vocab:
            return [op(at + "topk", (k, n), TOKENS, size=I32)]
        return [op(at + "argsort", (e, n), scores, size=I32), view(at + "topk", at + "argsort")]

    def _router_input(self, at: str, stream: str | None, d: int, n: int) -> list[Node]:
        """Gemma 4's router input (src/models/gemma4.cpp:316-319): the stream RMS-normed without a scale (a new
        tensor: the stream has other consumers), scaled and times the router's input scale, in place; nothing
        where the router reads `x`."""
        if not self.router_scale:
            return []
        return [op(at + "r_rms", (d, n), stream, inplace=True), op(at + "r_scaled", (d, n), at + "r_rms", inplace=True),
                op(at + "r_in", (d, n), at + "r_scaled", inplace=True)]

    def _down_scale(self, at: str, d: int, k: int, n: int) -> list[Node]:
        """Gemma 4's per-expert scale, which the converter makes ffn_down_exps.scale (conversion/gemma.py
        modify_tensors): repeated over the tokens, the chosen experts' gathered, times the experts' output in
        place, inside build_lora_mm_id (src/llama-graph.cpp:2355; graph_nodes builds no expert biases beside it);
        nothing without it."""
        if not self.router_scale:
            return []
        return [op(at + "down_rep", (1, self.n_experts, n)),
                op(at + "down_sel", (1, k, n), at + "down_rep", at + "topk"),
                op(at + "down_scaled", (d, k, n), at + "down", at + "down_sel", inplace=True)]

    def _gate_up(self, at: str, g: Graph, k: int, n: int) -> list[Node]:
        """The chosen experts' up and activation (`_act`); where the GGUF holds gate and up as one tensor
        (spec.llamacpp.fused_experts: Gemma 4) one product twice as wide, gate and up views of it, and their GLU."""
        if not (g.build and g.build.fused_experts):
            return [*self._biased(at, "up", (self.d_ff, k, n), at + "x3"), *self._act(at, k, n)]
        shape = (self.d_ff, k, n)
        return [op(at + "gate_up", (2 * self.d_ff, k, n), at + "x3", at + "topk"), view(at + "gate", at + "gate_up"),
                view(at + "up", at + "gate_up"), *glu(at, shape, at + "gate", at + "up")]

    def _groups(self, at: str, selection: str, n: int) -> list[Node]:
        """DeepSeek-V3's group-limited choice as llama.cpp builds it (src/llama-graph.cpp:2132-2154), whatever the
        group score: each group's best two scores (argsort, I32, then the rows gathered) summed, the best
        topk_group groups (argsort), their scores gathered and set into a copy of the scores filled with -inf
        (ggml_fill: a new tensor, as its source is a view; set_rows writes into it); nothing without groups."""
        if self.n_group == 1:
            return []
        g, per, used = self.n_group, self.n_experts // self.n_group, self.topk_group
        return [view(at + "groups", selection), op(at + "g_argsort", (per, g, n), at + "groups", size=I32),
                view(at + "g_top2", at + "g_argsort"), view(at + "groups4", selection),
                op(at + "g_rows", (1, 2, g, n), at + "groups4", at + "g_top2"), view(at + "g_rows3", at + "g_rows"),
                op(at + "g_sum", (1, g, n), at + "g_rows3"), view(at + "g_sum2", at + "g_sum"),
                op(at + "g_order", (g, n), at + "g_sum2", size=I32), view(at + "g_used", at + "g_order"),
                op(at + "g_kept", (per, used, n), at + "groups", at + "g_used"),
                op(at + "g_fill", (per, g, n), at + "groups", inplace=True),
                set_rows(at + "g_set", at + "g_kept", at + "g_used", at + "g_fill"),
                view(at + "g_masked", at + "g_fill", at + "g_set")]

    def _shared_gate(self, at: str, shared: str, d: int, n: int, x: str) -> list[Node]:
        """Qwen2-MoE's gate on the shared expert's output (src/models/qwen3next.cpp:597-606): x's one score per
        token, its sigmoid and the product, both in place; nothing without one."""
        if not self.shared_gate:
            return []
        return [op(at + "shgate", (1, n), x), op(at + "shgate_sig", (1, n), at + "shgate", inplace=True),
                op(at + "shexp_gated", (d, n), shared, at + "shgate_sig", inplace=True)]

    def _biased(self, at: str, name: str, shape: tuple[int, ...], x: str) -> list[Node]:
        """The chosen experts' product (MUL_MAT_ID) and, where they have biases (gpt-oss), the chosen experts'
        bias added in place (ggml_add_id, src/llama-graph.cpp:2249, 2265, 2367)."""
        product = op(at + name, shape, x, at + "topk")
        return [product, op(at + name + "_b", shape, product.name, at + "topk", inplace=True)] if self.expert_bias \
            else [product]

    def _act(self, at: str, k: int, n: int) -> list[Node]:
        """The experts' activation: the gate's product and its SwiGLU with up (gpt-oss's SwiGLU-OAI, clamped at
        swiglu_limit, is one GLU node too: ggml_swiglu_oai, src/llama-graph.cpp:2326-2333; Step-3.5's clamp is four ops
        in place: clamped_swiglu), or up's ReLU squared, in place."""
        shape, up = (self.d_ff, k, n), at + ("up_b" if self.expert_bias else "up")
        if self.gated:
            gate = self._biased(at, "gate", shape, at + "x3")
            return [*gate, *glu(at, shape, gate[-1].name, up, self.clamp)]
        return relu_squared(at, shape, up)

    def describe(self) -> str:
        shared = f" + {self.n_shared or 1} shared" if self.shared else ""
        clamp = f", SwiGLU clamped at {self.clamp:g}" if self.clamp else ""
        clamp += f", gate clamped at {self.gate_clamp:g}" if self.gate_clamp else ""
        zero = f" and {self.zero_experts} zero-computation (identity) experts" if self.zero_experts else ""
        zero += ", picked by token id" if self.hash_vocab else ""
        return f"MoE: top-{self.top_k} of {self.n_experts} experts (d_ff {self.d_ff:,}{clamp}){zero}{shared}"


LABELS = {
    "router_scale": "router input scale",
    "router_expert_scale": "router per-expert scale",
    "router": "router",
    "router_bias": "router bias",
    "router_score_bias": "router score correction bias (buffer)",
    "router_hash_table": "router token-id to expert table (buffer)",
    "router_score_bias_param": "router score correction bias",
    "experts_norm": "experts input norm",
    "experts_gate": "experts gate",
    "experts_gate_bias": "experts gate bias",
    "experts_up": "experts up",
    "experts_up_bias": "experts up bias",
    "experts_down": "experts down",
    "experts_down_bias": "experts down bias",
    "shared_mlp_gate": "shared expert gate proj",
    "shared_mlp_up": "shared expert up",
    "shared_mlp_down": "shared expert down",
    "shared_mlp_gate_bias": "shared expert gate proj bias",
    "shared_mlp_up_bias": "shared expert up bias",
    "shared_mlp_down_bias": "shared expert down bias",
    "shared_mlp_act": "shared expert activation scalars",
    "shared_expert_gate": "shared expert gate (sigmoid)",
    "shared_mlp_post_norm": "shared expert output norm",
    "experts_post_norm": "experts output norm",
}
