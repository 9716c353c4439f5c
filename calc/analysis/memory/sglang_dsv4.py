"""SGLang's pools for compressed attention (DeepSeek-V4): how many tokens the memory left after the
weights holds, as SGLang's DSV4PoolConfigurator works it out (sgl-project/sglang at 29b719ba3a72,
python/sglang/srt/model_executor/model_runner_components/pool_configurator.py, DSV4PoolConfigurator).

SGLang keeps six pools beside one another: the sliding window's rows (a ring per request, sized as a
share of the full pool), each CSA layer's compressed rows (one per 4 tokens) and their indexer keys,
each HCA layer's compressed rows (one per 128), and the compressors' fp32 states of both. It sizes
them together from one figure, the bytes a token of the full pool costs over every pool:

    kv        = qk_nope + 2 x qk_rope + 8 = 584 B     fp8 NoPE, bf16 RoPE, 7 scales and a pad
                                                      (deepseek_v4_memory_pool.py DeepSeekV4SingleKVPool)
    indexer   = index_head_dim + index_head_dim / 128 x 4 = 132 B   fp8 key, one fp32 scale per 128
    per token = r x kv x L + kv / 4 x L4 + kv / 128 x L128 + indexer / 4 x L4
                + r x 8 / 128 x 2 x 2 x 512 x 4 x L4       the CSA compressor's state, ring of 8
                + r x 128 / 128 x 2 x 512 x 4 x L128       the HCA compressor's state, ring of 128
                + r x 8 / 128 x 2 x 2 x 128 x 4 x L4       the CSA indexer's compressor state

    full      = floor(floor(memory / per token) / page) x page             max_total_num_tokens
    swa       = floor(floor(full x r) / page) x page
    c4 = full // 4, c128 = full // 128, c4_state = swa // window x 8, c128_state = swa // window x 128

where L counts the entries of compress_ratios[start_layer:end_layer], the stage's layers (DSV4PoolConfigurator:
"PP-local slice"; the model's make_layers splits config.num_hidden_layers, so the MTP layer's trailing entry is never
in it: DeepSeek-V4-Flash's 44 entries give 43 on one stage), L4 and L128 those of 4 and 128, r is
--swa-full-tokens-ratio (0.1 for DeepSeek-V4: arg_groups/model_overrides/deepseek_v4.py), the page
256 tokens (the same file; SGLang asserts a multiple of 128), the window the config's sliding_window
(128), the rings those of get_compress_state_ring_size without speculative decoding and with
SGLANG_OPT_USE_ONLINE_COMPRESS off, its default (environ.py). The rows are fp8 whatever
--kv-cache-dtype says (DeepSeekV4SingleKVPool asserts its 584-byte layout) and whole on every GPU.

With speculative decoding (--speculative-num-steps, SGLang's MTP draft of one layer) the rings are 16 and
256 (get_compress_state_ring_size(ratio, is_speculative=True)) and the cost per token is raised by
(L + 1) / L for the draft worker's share (DSV4PoolConfigurator.__init__: "bytes_per_full_token *=
(target_layers + draft_layers) / target_layers", draft_layers 1; sgl-project/sglang at 29b719ba3a72,
python/sglang/srt/model_executor/model_runner_components/pool_configurator.py).

Under pipeline parallelism each stage prices its own slice and sizes full from its own memory; the stages then
agree on the least (_apply_token_constraints: all_reduce MIN over the PP ranks, model_runner_kv_cache_mixin.py at
29b719ba3a72), and every pool is sized again from that full (calculate_pool_sizes_from_max_tokens). SGLang splits
the layers with its own get_pp_indices (python/sglang/srt/distributed/utils.py at 1107be112815): n // pp each, one
more for each of the last n % pp stages. SGLang refuses an MTP draft under pipeline parallelism ("PP is not
compatible with MTP models", model_runner.py), so speculative decoding is refused with --pp.

SGLang computes in floats; the fractions here are exact, which can differ only where the quotient is
a whole number to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.parallel import Layout, stage_kv, stages
from calc.analysis.memory.weights import Weights
from calc.analysis.memory.vllm_indexer import indexer_key_bytes
from calc.analysis.memory.vllm_packed import HEAD_DIM, INDEXER, ROW_BYTES, has_compressed_rows
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["PAGE", "SOURCE", "CompressedPools", "compressed_pools", "sglang_pp_indices", "sglang_stages",
           "staged_pools"]

SOURCE = ("https://github.com/sgl-project/sglang/blob/29b719ba3a729295c7b5afcc80b4cf0adf5b45fb/python/sglang/srt/"
          "model_executor/model_runner_components/pool_configurator.py (DSV4PoolConfigurator)")
PAGE = 256  # --page-size for DeepSeek-V4 on CUDA (model_overrides/deepseek_v4.py)
SWA_RATIO = Fraction(1, 10)  # --swa-full-tokens-ratio for DeepSeek-V4 (model_overrides/deepseek_v4.py)
RINGS = {4: 8, 128: 128}  # get_compress_state_ring_size, not speculative, online compression off
SPECULATIVE_RINGS = {4: 16, 128: 256}  # get_compress_state_ring_size(ratio, is_speculative=True)
DRAFT_LAYERS = 1  # DSV4PoolConfigurator: the MTP draft worker's layers, priced per target layer
STATE_BYTES = 4  # the compressors' states are fp32 (DSv4PoolConfigurator.resolve: state_dtype = torch.float32)
SERIES = {4: 2, 128: 1}  # CSA compresses two overlapping series (kv and score each), HCA one


@dataclass(frozen=True)
class CompressedPools:
    """SGLang's DeepSeek-V4 pools on one GPU from `kv_memory` bytes."""

    layers: int  # entries of compress_ratios this stage holds (start_layer:end_layer)
    ratio_layers: dict[int, int]  # layers per compression ratio (4: CSA, 128: HCA)
    index_width: int  # index_head_dim
    window: int  # sliding_window: the state pools' page
    kv_memory: int
    page: int = PAGE
    swa_ratio: Fraction = SWA_RATIO
    speculative: bool = False  # an MTP draft beside it (--speculative-num-steps)
    agreed: int | None = None  # under --pp, the least full of all stages (None: one stage)
    stages: tuple[dict[str, object], ...] = ()  # under --pp, each stage's layers, bytes a token, memory and full

    @property
    def rings(self) -> dict[int, int]:
        return SPECULATIVE_RINGS if self.speculative else RINGS

    @property
    def bytes_per_full_token(self) -> Fraction:
        """What one token of the full pool costs over the six pools."""
        n4, n128 = self.ratio_layers.get(4, 0), self.ratio_layers.get(128, 0)
        rows = self.swa_ratio * ROW_BYTES * self.layers + Fraction(ROW_BYTES, 4) * n4 + Fraction(ROW_BYTES, 128) * n128
        indexer = Fraction(indexer_key_bytes(self.index_width), 4) * n4
        states = sum(self.swa_ratio * Fraction(self.rings[r], self.window) * self._state(r, HEAD_DIM) * n
                     for r, n in ((4, n4), (128, n128)))
        indexer_states = self.swa_ratio * Fraction(self.rings[4], self.window) * self._state(4, self.index_width) * n4
        draft = Fraction(self.layers + DRAFT_LAYERS, self.layers) if self.speculative else 1
        return (rows + indexer + states + indexer_states) * draft

    @staticmethod
    def _state(ratio: int, width: int) -> int:
        """One slot of a compressor's state: kv and score, per series, fp32."""
        return 2 * SERIES[ratio] * width * STATE_BYTES

    @property
    def own_full(self) -> int:
        """The full pool this stage's memory holds, whole pages (calculate_pool_sizes)."""
        return int(self.kv_memory / self.bytes_per_full_token) // self.page * self.page if self.kv_memory > 0 else 0

    @property
    def full(self) -> int:
        """max_total_num_tokens: this stage's, or the least of the stages' under --pp."""
        return self.own_full if self.agreed is None else self.agreed

    @property
    def swa(self) -> int:
        return int(self.full * self.swa_ratio) // self.page * self.page

    def sizes(self) -> dict[str, int]:
        """The six sizes SGLang logs ("DSV4 pool sizes: ...")."""
        swa = self.swa
        return {"full": self.full, "swa": swa, "c4": self.full // 4, "c128": self.full // 128,
                "c4_state": swa // self.window * self.rings[4], "c128_state": swa // self.window * self.rings[128]}

    def lines(self) -> list[str]:
        """SGLang's two log lines about them (DSV4PoolConfigurator.calculate_pool_sizes, _to_config)."""
        return [f"DSV4 memory calculation: bytes_per_full_token={float(self.bytes_per_full_token):.2f}, "
                f"available_bytes={self.kv_memory / 2**30:.2f} GB, full_token={self.own_full}",
                "DSV4 pool sizes: " + ", ".join(f"{k}={v}" for k, v in self.sizes().items())]

    def to_json(self) -> dict[str, object]:
        return {"layers": self.layers, "ratio_layers": {str(k): v for k, v in self.ratio_layers.items()},
                "bytes_per_full_token": str(self.bytes_per_full_token), "page_size": self.page,
                "swa_full_tokens_ratio": str(self.swa_ratio), "speculative": self.speculative, **self.sizes(),
                "pp_stages": list(self.stages), "source": SOURCE}


def compressed_pools(kv: KVCache, kv_memory: int, page: int | None = None, pp: int = 1,
                     speculative: bool = False) -> CompressedPools:
    """SGLang's pools for a model with compressed rows; `page`: --page-size (None: 256); `speculative`: an
    MTP draft beside it (--speculative-num-steps)."""
    page = page or PAGE
    if page % 128:
        raise GptcalcError(f"--block-size {page}: SGLang's DeepSeek-V4 pools take page sizes of a multiple of 128 "
                           "(DSV4PoolConfigurator.calculate_pool_sizes asserts it)")
    if pp > 1:
        raise GptcalcError(f"--pp {pp} with --engine sglang: DeepSeek-V4's pools are sized per stage from each "
                           "stage's memory (staged_pools); give --budget or --kv-memory to memory")
    kinds = kv.layers
    if any(kind.kind != INDEXER and kind.k != HEAD_DIM for kind in kinds):
        raise GptcalcError(f"--engine sglang: {kv.model}'s rows are not {HEAD_DIM} wide; SGLang's DeepSeek-V4 pools "
                           "take that head_dim only (DeepSeekV4SingleKVPool's 584-byte layout)")
    ratios: dict[int, int] = {}
    for kind in kinds:
        if kind.ratio > 1 and kind.kind != INDEXER:
            if kind.ratio not in RINGS:
                raise GptcalcError(f"--engine sglang: compressed rows every {kind.ratio} tokens; SGLang's DeepSeek-V4 "
                                   "compressor takes ratios 4 and 128 only")
            ratios[kind.ratio] = ratios.get(kind.ratio, 0) + kind.n_layers
    widths = {kind.k for kind in kinds if kind.kind == INDEXER}
    windows = {kind.window for kind in kinds if kind.window}
    if len(widths) != 1 or len(windows) != 1:
        raise GptcalcError(f"--engine sglang: {kv.model} has not one indexer width and one window; SGLang's "
                           "DeepSeek-V4 pools take one of each")
    return CompressedPools(kv.n_layers, ratios, widths.pop(), windows.pop(), kv_memory, page, speculative=speculative)


def sglang_pp_indices(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """Each stage's [start_layer, end_layer) as SGLang's get_pp_indices splits them (distributed/utils.py at
    1107be112815): n // pp layers each, one more for each of the last n % pp stages."""
    base, extra = divmod(n_layers, pp)
    bounds, start = [], 0
    for rank in range(pp):
        count = base + (rank >= pp - extra)
        bounds.append((start, start + count))
        start += count
    return bounds


def sglang_stages(spec: ModelSpec, breakdown: Breakdown, weights: Weights, whole: KVCache, layout: Layout,
                  pool_bytes: int, given: bool) -> tuple[tuple[KVCache, int], ...]:
    """SGLang's stages of a model with compressed rows under --pp, each its cache and pool bytes (none for another
    model): its layers as sglang_pp_indices splits them, its memory `pool_bytes` (the busiest GPU's, whose weights are
    `weights`) plus what its own weights take less, or with `given` (--kv-memory) that figure on every stage."""
    if not has_compressed_rows(whole):
        return ()
    parts = [end - start for start, end in sglang_pp_indices(spec.n_layers, layout.pp)]
    return tuple((stage_kv(spec, whole, st), pool_bytes if given else
                  pool_bytes + weights.total_bytes - replace(weights, params=st.params).total_bytes)
                 for st in stages(spec, breakdown, layout, parts))


def staged_pools(stages: list[tuple[KVCache, int]], page: int | None = None,
                 speculative: bool = False) -> CompressedPools:
    """The pools under --pp from each stage's cache and memory: every stage sizes its own full, they keep the least,
    and the stage that set it is the one returned (its lines are those SGLang logs once)."""
    if speculative:
        raise GptcalcError("--speculative-num-steps with --pp: SGLang refuses an MTP draft under pipeline parallelism "
                           "(\"PP is not compatible with MTP models\", model_runner.py)")
    own = [compressed_pools(kv, memory, page) for kv, memory in stages]
    agreed = min(pools.own_full for pools in own)
    binding = next(pools for pools in own if pools.own_full == agreed)
    table = tuple({"stage": i, "layers": p.layers, "bytes_per_full_token": str(p.bytes_per_full_token),
                   "kv_memory_bytes": p.kv_memory, "full": p.own_full} for i, p in enumerate(own))
    return replace(binding, agreed=agreed, stages=table)
