"""`ModelSpec`: a decoder-only transformer as data — embeddings, a run-length stack of blocks made
of typed parts, a final norm and a head.

    blocks:  {name: Block}           a Block = a token mixer + an MLP (MLP | MoE) + norms; either may be absent
    layers:  [(repeat, name), ...]   DeepSeek-V3: [(3, dense), (58, moe)]; Gemma-3: (5, local), (1, global), ...

Layers are stored run-length, never one object per layer, so a 10,000-layer spec costs nothing.
A spec is frozen and validated once: unknown fields are rejected (a typo must not fall back to a
default), ints are strict (`d_model: true` is an error, not 1), and errors name the field.

The flat form of earlier versions (`family`, `n_layers`, `n_heads`, ... in `calc.spec.flat`) is
shorthand for one block kind repeated `n_layers` times: `spec_from_dict` accepts both.
"""


from typing import Any, Iterator, Literal

from calc.errors import GptcalcError
from calc.parts import (MLA, MLP, Attention, CompressedAttention, Embedding, GatedDeltaNet, Head, HyperConnections,
                        KimiDeltaAttention, LightningAttention, Mamba, Mamba2, MoE, Norm, ShortConv)
from calc.parts.base import Field, Part, field_validator, model_validator, present
from calc.parts.cache import CacheSpec
from calc.parts.parallel import Member, Parallel
from calc.parts.shared import Shared, SharedBlock
from calc.spec.llamacpp import LlamaCppBuild
from calc.spec.sglang import SglangBuild
from calc.spec.vllm import VllmBuild
from calc.towers import Conformer, MobileNet, Phi4Audio, Tower

__all__ = ["Block", "LayerRun", "ModelSpec", "MTP", "NormedResidual", "is_flat", "spec_from_dict"]

NormPosition = Literal["attn_in", "attn_out", "mlp_in", "mlp_out"]
Mixer = (Attention | MLA | CompressedAttention | Mamba | Mamba2 | GatedDeltaNet | KimiDeltaAttention | LightningAttention
         | ShortConv | Parallel)
NORM_COMPONENTS = {"attn_in": "attn_norm", "attn_out": "attn_post_norm", "mlp_in": "mlp_norm", "mlp_out": "mlp_post_norm"}


class NormedResidual(Part):
    """MiniMax's residual adds (MiniMaxDecoderLayer): the residual is the sublayer's normed input, not
    its raw input, and both sides are scaled: x = alpha·norm(x) + beta·f(norm(x)), one (alpha, beta)
    for the mixer and one for the MLP (the config's *_alpha_factor and *_beta_factor). Scalars: they
    change no count, cache or shape, only what the torch reference computes."""

    mixer: tuple[float, float] = Field(default=(1.0, 1.0), strict=False)
    mlp: tuple[float, float] = Field(default=(1.0, 1.0), strict=False)


class Block(Part):
    """One layer: a token mixer, an MLP, and where its norms sit.

    The token mixer (`attention`) is what lets a token see the others: attention (`attention`,
    `mla`) or one of the mechanisms hybrids use instead (`mamba2`, `gated_deltanet`, `short_conv`),
    or a parallel group of them (`parallel`: Falcon-H1's attention and Mamba2 on the same input).
    Either sublayer may be absent: Mamba2 and Nemotron-H layers hold a mixer alone, Nemotron-H's
    MLP layers an MLP alone (`attention: null` / `mlp: null`).

    `norms` lists the positions that have a norm: before the mixer (`attn_in`), on the mixer's
    output before the residual add (`attn_out`: Gemma-2/3's sandwich, OLMo-2), before the MLP
    (`mlp_in`), on the MLP's output (`mlp_out`). `parallel`: mixer and MLP both read the block's
    input and are added together (GPT-J, GPT-NeoX, Falcon, Phi-2, Cohere); one shared norm there is
    just `norms: [attn_in]`. `post_ln`: the attn_in and mlp_in norms normalise the residual stream
    after each add instead of each sublayer's input (the original Transformer's post-LN, OPT-350m):
    the same parameters in another place.

    A layer is a sequence of sublayers, each behind its norm with its residual add; the fields say
    which sequence: the mixer then the MLP, `pairs` times over with weights of their own
    (LongCat-Flash: attention, MLP, attention, MLP), and a `shortcut` that reads the first MLP's
    normed input beside it and joins the residual stream at the end of the layer (LongCat-Flash's
    shortcut-connected MoE). A parallel group of mixers is the mixer `parallel` (Falcon-H1).
    `shared` applies a block stored once for the whole model (calc/parts/shared.py: Zamba2) before
    them: its weights are the model's `shared` rows, its adapters and cache this layer's own.
    """

    attention: Mixer | None = Field(discriminator="kind")
    mlp: MLP | MoE | None = Field(discriminator="kind")
    norm: Norm
    norms: tuple[NormPosition, ...] = Field(default=("attn_in", "mlp_in"), strict=False)
    parallel: bool = False
    post_ln: bool = False
    residual_scale: float | None = Field(default=None, strict=False)  # Granite: each sublayer's output times this
    # dropout on each sublayer's output before its residual add, in training only (Seed-OSS, GPT-2's resid_pdrop)
    residual_dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)
    # which outputs it drops: each sublayer's, or the MLP's alone (StableLM's hidden_dropout; Falcon's, on the
    # attention and MLP outputs' sum, one mask)
    residual_dropout_on: Literal["each", "mlp"] = "each"
    # the mixer's output dropped out at a rate of its own where only the MLP's takes residual_dropout (a sequential
    # Falcon's attention_dropout on the attention's output, hidden_dropout on the MLP's): a second mask per mixer
    mixer_dropout: float = Field(default=0.0, ge=0, lt=1, strict=False)
    pairs: int = Field(default=1, gt=0)  # the mixer + MLP pair, in sequence, this many times (LongCat-Flash: 2)
    shortcut: MLP | MoE | None = Field(default=None, discriminator="kind")  # LongCat-Flash's shortcut-connected MoE
    shared: Shared | None = None  # a stored block this layer applies before its own sublayers (Zamba2's hybrid layers)
    hyper: HyperConnections | None = None  # DeepSeek-V4's mHC: the residual as copies, mixed before each sublayer
    normed_residual: NormedResidual | None = None  # MiniMax: each add starts from the normed input, both sides scaled

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, data: Any) -> Any:
        """`kind` may be left out for plain attention and a dense MLP; a layer without one sublayer
        keeps only its own norms by default."""
        if isinstance(data, dict):
            data = dict(data)
            for field, kind in (("attention", "attention"), ("mlp", "mlp")):
                if isinstance(data.get(field), dict) and "kind" not in data[field]:
                    data[field] = {"kind": kind, **data[field]}
            if "norms" not in data and (data.get("attention", 0) is None or data.get("mlp", 0) is None):
                data["norms"] = ["attn_in"] if data.get("mlp", 0) is None else ["mlp_in"]
        return data

    @field_validator("norms")
    @classmethod
    def _unique(cls, norms: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(norms)) != len(norms):
            raise ValueError(f"{list(norms)}: a position is listed twice")
        return tuple(sorted(norms, key=list(NORM_COMPONENTS).index))

    @model_validator(mode="after")
    def _post_ln(self) -> "Block":
        if self.attention is None and self.mlp is None:
            raise ValueError("a layer needs a token mixer (attention), an MLP, or both")
        orphans = [p for p in self.norms if (p.startswith("attn") and self.attention is None)
                   or (p.startswith("mlp") and self.mlp is None)]
        if orphans:
            raise ValueError(f"norms: {orphans[0]} normalises a sublayer this layer does not have")
        if self.parallel and (self.attention is None or self.mlp is None):
            raise ValueError("parallel: a layer needs both a mixer and an MLP to run them side by side")
        if self.post_ln and (self.parallel or not set(self.norms) <= {"attn_in", "mlp_in"}):
            raise ValueError("post_ln moves the attn_in and mlp_in norms after each residual add; "
                             "it takes no other norm positions and no parallel block")
        if self.shortcut is not None and (self.mlp is None or self.parallel or self.post_ln
                                          or "mlp_in" not in self.norms):
            raise ValueError("shortcut: reads the first MLP's normed input (mlp_in), in a sequential pre-norm layer")
        if self.shortcut is not None and self.mlp is not None and set(self.shortcut.params(1)) & set(self.mlp.params(1)):
            raise ValueError("shortcut: a MoE beside a dense MLP (an MLP of the same kind would share its rows)")
        if self.pairs > 1 and (self.parallel or self.post_ln):
            raise ValueError("pairs: repeats a sequential pre-norm mixer + MLP pair")
        if self.hyper is not None and (self.parallel or self.post_ln or self.pairs > 1 or self.shortcut is not None
                                       or self.attention is None or self.mlp is None):
            raise ValueError("hyper: mixes the residual copies before a mixer and an MLP, in sequence, once each")
        if self.normed_residual is not None and (self.parallel or self.post_ln or self.pairs > 1 or self.shortcut
                                                 or self.residual_scale is not None
                                                 or not set(self.norms) <= {"attn_in", "mlp_in"}):
            raise ValueError("normed_residual: one sequential mixer + MLP pair with input norms only (attn_in, mlp_in), "
                             "scaled by its own factors")
        return self

    def mixers(self) -> tuple[Member, ...]:
        """The mechanisms this layer's mixer is made of: a parallel group's members, or the mixer itself."""
        if self.attention is None:
            return ()
        return self.attention.mixers if isinstance(self.attention, Parallel) else (self.attention,)

    def with_mixer(self, mixer: Member) -> "Block":
        """This layer with `mixer` as its only mixer: how a parallel group's member is built alone."""
        return self.replaced(attention=mixer)

    def params(self, d_model: int) -> dict[str, int]:
        """One layer's components, in the order a token meets them (a repeated pair's rows summed)."""
        rows = {k: v * self.pairs for k, v in self.pair_params(d_model).items()}
        applied = self.shared.params(d_model) if self.shared else {}
        return {**applied, **rows, **(self.shortcut.params(d_model) if self.shortcut else {})}

    def pair_params(self, d_model: int) -> dict[str, int]:
        """One mixer + MLP pair's components with their norms, in the order a token meets them."""
        norms = {NORM_COMPONENTS[p]: self.norm.params(d_model) for p in self.norms}
        hyper = self.hyper.params(d_model) if self.hyper else {}
        rows = present(hc_attn=hyper.get("hc_attn", 0))
        rows.update({k: v for k, v in norms.items() if k == "attn_norm" and v})
        rows.update(self.attention.params(d_model) if self.attention else {})
        rows.update({k: v for k, v in norms.items() if k == "attn_post_norm" and v})
        rows.update(present(hc_mlp=hyper.get("hc_mlp", 0)))
        rows.update({k: v for k, v in norms.items() if k == "mlp_norm" and v})
        rows.update(self.mlp.params(d_model) if self.mlp else {})
        rows.update({k: v for k, v in norms.items() if k == "mlp_post_norm" and v})
        return rows

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        """Each weight matrix of one layer: its input width and how many there are."""
        pair = {key: (width, n * self.pairs) for part in (self.attention, self.mlp) if part is not None
                for key, (width, n) in part.matrices(d_model).items()}
        applied = self.shared.matrices(d_model) if self.shared else {}
        return {**applied, **pair, **(self.shortcut.matrices(d_model) if self.shortcut else {})}

    def cache(self, d_model: int) -> CacheSpec:
        """What this layer keeps per sequence: its mixer's cache, once per pair (nothing for an MLP-only
        layer), after the cache of the shared block it applies (each application keeps its own)."""
        spec = self.attention.cache(d_model) if self.attention else CacheSpec()
        applied = self.shared.cache(d_model) if self.shared else CacheSpec()
        return CacheSpec(tokens=applied.tokens + spec.tokens * self.pairs,
                         states=applied.states + spec.states * self.pairs)

    @property
    def moe(self) -> MoE | None:
        """The layer's MoE: its MLP, or its shortcut (LongCat-Flash)."""
        return next((part for part in (self.mlp, self.shortcut) if part is not None and part.kind == "moe"), None)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def active_params(self, d_model: int) -> dict[str, int]:
        """What one token uses: all of it, except the experts a MoE router did not pick."""
        if not self.is_moe:
            return self.params(d_model)
        return {**self.params(d_model), **self.moe.active_params(d_model)}

    def buffers(self) -> dict[str, int]:
        """What one layer stores beside its parameters (a MoE router's score correction bias)."""
        return self.moe.buffers() if self.is_moe else {}

    def describe(self) -> str:
        where = "parallel mixer + MLP" if self.parallel else "sequential"
        at = "after each residual add (post-LN)" if self.post_ln else f"at {', '.join(self.norms)}"
        parts = "; ".join(part.describe() for part in (self.attention, self.mlp) if part is not None)
        parts = f"{self.pairs} × ({parts})" if self.pairs > 1 else parts
        shortcut = f"; shortcut beside the first MLP: {self.shortcut.describe()}" if self.shortcut else ""
        applied = f"{self.shared.describe()}, then " if self.shared else ""
        hyper = f"; {self.hyper.describe()}" if self.hyper else ""
        return f"{applied}{parts}{shortcut}; {self.norm.describe()} {at}; {where}{hyper}"


class LayerRun(Part):
    repeat: int = Field(gt=0)
    block: str


class MTP(Part):
    """Multi-token-prediction layers (DeepSeek-V3, GLM-4.5): stored in the checkpoint, not part of
    the model transformers builds. Each is a whole block (with its buffers) plus two input norms
    (enorm, hnorm), a bias-free 2d -> d projection (eh_proj), an output norm (shared_head.norm) and,
    as DeepSeek-V3 and GLM-4.5 store them, its own copies of the embedding and the head
    (model.layers.61.embed_tokens, model.layers.61.shared_head.head: DeepSeek-V3's README_WEIGHTS.md
    and tensor listing); GLM-4.6's checkpoint leaves the copies out (`copies: []`), Step-3.7's keeps a
    head only (model.layers.45.transformer.shared_head.output: vLLM's step3p5_mtp.py loads one per layer). With
    hyper-connections (DeepSeek-V4) each also collapses its residual copies with a head of its own
    (mtp.0.hc_head_fn, _base, _scale), and its 2d -> d projection is two d x d ones (e_proj, h_proj)."""

    n_layers: int = Field(gt=0)
    block: str
    copies: tuple[Literal["embedding", "head"], ...] = ("embedding", "head")
    # False where the config declares the layers but the released checkpoints leave them out (MiniMax-M3's
    # num_mtp_modules): counted apart, never added to the checkpoint's stored total.
    stored: bool = True

    def extras(self, spec: "ModelSpec") -> int:
        """One layer's parameters beside its block: enorm, hnorm, shared_head.norm, the 2d -> d projection and, with
        hyper-connections, the residual copies' head (SGLang's MTP draft holds them whole on every GPU:
        calc.analysis.memory.sglang_draft)."""
        d, block = spec.d_model, spec.blocks[self.block]
        return 3 * block.norm.params(d) + 2 * d * d + (spec.head.hyper.head(d) if spec.head.hyper else 0)

    def params(self, spec: "ModelSpec") -> dict[str, int]:
        d, block = spec.d_model, spec.blocks[self.block]
        per_layer = sum(block.params(d).values()) + sum(block.buffers().values()) + self.extras(spec)
        copies = len(self.copies) * spec.vocab_size * d
        return {"mtp_layers": self.n_layers * per_layer, **({"mtp_embedding_copies": self.n_layers * copies} if copies else {})}


class ModelSpec(Part):
    """One transformer as a calculator needs to see it: a decoder, and the towers (vision, audio
    encoders with their projectors) a multimodal checkpoint holds beside it."""

    name: str = "custom"
    source: str | None = Field(default=None, description="URL of the config this spec transcribes")
    model_type: str = Field(default="custom", description="whose tensor names: the adapter's model_type")
    architecture: str | None = Field(default=None, description="config.json's architectures[0], the class an "
                                     "engine's registry builds (TensorRT-LLM's: calc.analysis.memory.trtllm_models)")
    vocab_size: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_positions: int = Field(gt=0, description="context length")
    embedding: Embedding = Field(default_factory=Embedding)
    blocks: dict[str, Block] = Field(min_length=1)
    layers: tuple[LayerRun, ...] = Field(min_length=1, strict=False)
    final_norm: Norm | None
    head: Head
    mtp: MTP | None = None
    # A multimodal model's encoders beside the decoder ("vision", "audio"), each with its projector:
    # counted into the model's total, shown as their own rows (calc/towers).
    towers: dict[str, Tower | Conformer | MobileNet | Phi4Audio] = Field(default_factory=dict)
    # What the checkpoint holds that this spec does not count (a tower of a kind not read yet): the
    # total is then partial, and every output says so.
    uncounted: tuple[str, ...] = Field(default=(), strict=False)
    notes: tuple[str, ...] = Field(default=(), strict=False)  # what the adapter wants said (e.g. not counted)
    quant: str | None = Field(default=None, description="the weights as stored: a --quant scheme read from "
                              "config.json's quantization_config (gpt-oss: mxfp4), the default of every sizing command")
    vllm: VllmBuild = Field(default_factory=VllmBuild)  # how vLLM builds it, as the adapter states (calc/spec/vllm.py)
    sglang: SglangBuild = Field(default_factory=SglangBuild)  # how SGLang builds it, as the reader states (calc/spec/sglang.py)
    llamacpp: LlamaCppBuild = Field(default_factory=LlamaCppBuild)  # how llama.cpp builds it (calc/spec/llamacpp.py)

    @field_validator("layers", mode="before")
    @classmethod
    def _pairs(cls, layers: Any) -> Any:
        """`[[3, dense], [58, moe]]` (the YAML form) or LayerRun mappings; adjacent runs merge."""
        if not isinstance(layers, (list, tuple)):
            return layers
        runs = [{"repeat": r[0], "block": r[1]} if isinstance(r, (list, tuple)) and len(r) == 2 else r for r in layers]
        merged: list[Any] = []
        for run in runs:
            if merged and isinstance(run, dict) and isinstance(merged[-1], dict) and run.get("block") == merged[-1].get("block") \
                    and isinstance(run.get("repeat"), int) and isinstance(merged[-1].get("repeat"), int):
                merged[-1] = {**merged[-1], "repeat": merged[-1]["repeat"] + run["repeat"]}
            else:
                merged.append(run)
        return tuple(merged)

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        unknown = {run.block for run in self.layers} - set(self.blocks)
        if unknown:
            raise ValueError(f"layers: block {sorted(unknown)[0]!r} is not defined in blocks ({', '.join(self.blocks)})")
        unused = set(self.blocks) - {run.block for run in self.layers}
        if unused and not (self.mtp and unused == {self.mtp.block}):
            raise ValueError(f"blocks: {sorted(unused)[0]!r} is defined but no layer uses it")
        if self.mtp and self.mtp.block not in self.blocks:
            raise ValueError(f"mtp.block: {self.mtp.block!r} is not defined in blocks")
        copies: dict[str, SharedBlock] = {}
        for name, block in self.blocks.items():
            if block.shared is not None and copies.setdefault(block.shared.name, block.shared.block) != block.shared.block:
                raise ValueError(f"blocks.{name}.shared: copy {block.shared.name!r} is stored once, so every layer "
                                 "applying it must describe the same block")
        return self

    @property
    def n_layers(self) -> int:
        return sum(run.repeat for run in self.layers)

    def refuse_shared(self, what: str) -> None:
        """One named error where `what` (a GGUF mix) does not follow shared blocks yet:
        a result that left them out would look right and be wrong."""
        if self.shared_blocks():
            raise GptcalcError(f"{what} does not implement shared blocks yet: {self.name} applies blocks stored "
                               "once at several layers (Zamba2's shared transformer)")

    def shared_blocks(self) -> dict[str, tuple[SharedBlock, int]]:
        """Each stored copy the layers apply (Zamba2's shared blocks), with how many layers apply it:
        counted once however many apply it."""
        copies: dict[str, tuple[SharedBlock, int]] = {}
        for name, n in self.layer_counts().items():
            applied = self.blocks[name].shared
            if applied is not None:
                _, uses = copies.get(applied.name, (applied.block, 0))
                copies[applied.name] = (applied.block, uses + n)
        return copies

    def runs(self) -> list[tuple[int, Block]]:
        """(repeat, block) for each run of identical layers, bottom to top."""
        return [(run.repeat, self.blocks[run.block]) for run in self.layers]

    def layer_counts(self, first: int = 0, last: int | None = None) -> dict[str, int]:
        """How many layers of each block kind lie in [first, last) (all of them by default), in order
        of first appearance: from the runs, never layer by layer, so 10^12 layers cost nothing."""
        last = self.n_layers if last is None else last
        counts: dict[str, int] = {}
        start = 0
        for run in self.layers:
            low, high = max(start, first), min(start + run.repeat, last)
            if low < high:
                counts[run.block] = counts.get(run.block, 0) + high - low
            start += run.repeat
        return counts

    def block_at(self, layer: int) -> str:
        """The block kind of layer `layer` (0-based)."""
        for run in self.layers:
            if layer < run.repeat:
                return run.block
            layer -= run.repeat
        raise IndexError(layer)

    def attention_parts(self) -> Iterator[tuple[str, Attention | MLA]]:
        """Each used block kind's attention (MHA/GQA/MQA or MLA): the layers that cache keys per token."""
        for name in self.layer_counts():
            for part in self.blocks[name].mixers():  # a parallel group's attention member too (Falcon-H1)
                if part.cache(self.d_model).tokens:
                    yield name, part

    def with_kv_heads(self, n_kv_heads: int) -> "ModelSpec":
        """The same model with every (non-MLA) attention using `n_kv_heads` KV heads (for MHA/GQA/MQA
        comparisons); validated again, so a count that does not divide n_heads is an error."""
        data = self.model_dump()
        for block in data["blocks"].values():
            if block["attention"] and block["attention"]["kind"] == "attention":
                block["attention"]["n_kv_heads"] = n_kv_heads
        return spec_from_dict(data, self.name)


def is_flat(data: dict[str, Any]) -> bool:
    """The flat form has no `blocks`: it is one uniform stack described by `n_layers`, `n_heads`, ..."""
    return "blocks" not in data and "layers" not in data


def spec_from_dict(data: Any, origin: str) -> ModelSpec:
    """Validate `data` (flat or layered) as a spec; errors become one `GptcalcError` line naming
    origin and field."""
    if not isinstance(data, dict):
        raise GptcalcError(f"{origin}: expected a mapping of spec fields, got {type(data).__name__}")
    check_sizes(data, origin)
    from calc.spec.quick import accepted  # a plainly valid spec needs no pydantic model of its parts (start-up time)

    if not is_flat(data) and (spec := accepted(ModelSpec, data)) is not None:
        return spec
    from pydantic import ValidationError  # validating what is not plainly valid needs pydantic

    from calc.spec.validate import validated

    try:
        if is_flat(data):
            from calc.spec.flat import FlatSpec  # the flat shorthand's own model, for flat data only

            data = FlatSpec.model_validate(data).to_layered()
            if (spec := accepted(ModelSpec, data)) is not None:  # the layered form it writes is plainly valid
                return spec
        return validated(ModelSpec, data)
    except ValidationError as exc:
        raise GptcalcError(f"{origin}: {_first_error(exc)}") from None


def check_sizes(data: dict[str, Any], origin: str) -> None:
    """How many layer kinds and layer runs, counted before any validation: a spec with 40,000 kinds
    is refused in microseconds, not validated field by field (and reported 40,000 times)."""
    from calc.inputs import MAX_KINDS, MAX_LAYER_RUNS

    blocks, layers = data.get("blocks"), data.get("layers")
    if isinstance(blocks, dict) and len(blocks) > MAX_KINDS:
        raise GptcalcError(f"{origin}: blocks: {len(blocks):,} layer kinds; at most {MAX_KINDS} (models have a handful)")
    if isinstance(layers, (list, tuple)) and len(layers) > MAX_LAYER_RUNS:
        raise GptcalcError(f"{origin}: layers: {len(layers):,} runs; at most {MAX_LAYER_RUNS:,} (write a repeated "
                           "pattern as [count, kind] runs)")


def _first_error(exc: Any) -> str:
    """`field: what is wrong` for the first error (all missing fields at once), and how many more."""
    from calc.spec.flat import _DERIVED  # fields a flat spec derives: missing only with what they follow

    errors = exc.errors(include_url=False)
    missing = [_where(e["loc"]) for e in errors if e["type"] == "missing" and e["loc"]]
    others = [e for e in errors if e["type"] != "missing"]
    missing = [name for name in missing if name not in _DERIVED] or ([] if others else missing)
    if missing:
        more = f" (+{len(others)} more)" if others else ""
        return f"{', '.join(missing)}: missing (required){more}"
    first = others[0]
    where = _where(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    more = f" (+{len(others) - 1} more)" if len(others) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def _where(loc: tuple[Any, ...]) -> str:
    """A field's path, without pydantic's union tags (`blocks.moe.mlp.moe.top_k` -> `blocks.moe.mlp.top_k`)."""
    parts = [str(p) for p in loc]
    kept = [p for i, p in enumerate(parts) if not (i and parts[i - 1] in ("attention", "mlp") and p in (
        "attention", "mla", "mlp", "moe") and i >= 3)]
    return ".".join(kept)
