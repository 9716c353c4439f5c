"""How vLLM stores a sparse-attention indexer's keys, by its `indexer_kv_dtype` (vLLM 0.32:
`--attention-config '{"indexer_kv_dtype": ...}'`, config/attention.py:88-92, one of auto, bf16, fp8, mxfp4,
nvfp4; "auto" is each model's default, resolve_indexer_kv_dtype :163-167).

    model          its keys               "auto"   bytes per key of width k            allowed
    DeepSeek-V4    compressed indexer     fp8      fp8: k + k / 128 x 4 (132 for 128)   fp8, mxfp4 (SM10x only)
                                                   mxfp4: k / 2 + k / 32 (68 for 128)
    DeepSeek-V3.2  DSA indexer            fp8      k + k / 128 x 4                      fp8
    MiniMax-M3     block indexer          bf16     bf16: 2 k, fp8: k                    bf16, fp8

- DeepSeek-V4: models/deepseek_v4/attention.py:1004-1014 sizes the key by dsa_indexer_uses_fp4, which takes
  fp8 or mxfp4 only, mxfp4 on SM10x cards only (v1/attention/backends/mla/indexer.py:56-96);
- DeepSeek-V3.2: its DeepseekV32IndexerCache is k + k / 128 x 4 bytes whatever the option
  (models/deepseek_v32/attention.py:94-99): another value is refused here, not modelled;
- MiniMax-M3: models/minimax_m3/common/indexer.py:118-126 (bf16, or e4m3 without scales; anything else
  raises NotImplementedError), the model's default bf16 (nvidia/model.py:504-509).
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["INDEXER_KV_DTYPES", "block_indexer_bytes", "check_indexer_kv_dtype", "indexer_key_bytes", "key_dtype",
           "refuse_off_vllm", "resolve_indexer_kv_dtype"]

INDEXER_KV_DTYPES = ("auto", "bf16", "fp8", "mxfp4", "nvfp4")  # vLLM's IndexerKVDType (config/attention.py:13)
DSA = "DSA indexer"  # DeepSeek-V3.2's keys (calc/parts)
COMPRESSED = "compressed indexer"  # DeepSeek-V4's keys, a row per `ratio` tokens (calc/parts/compressed.py)
BLOCK_INDEXER = "block indexer"  # MiniMax-M3's index keys (calc.parts.block_indexer)
QUANT_BLOCK = 128  # an fp32 scale per 128 fp8 values (vLLM DeepseekV4Indexer.quant_block_size)
MXFP4_BLOCK = 32  # a UE8M0 scale byte per 32 fp4 values (MXFP4_BLOCK_SIZE)

# Each model's keys: its default and the values vLLM 0.32 takes for it.
CHOICES = {COMPRESSED: ("fp8", ("fp8", "mxfp4")), DSA: ("fp8", ("fp8",)), BLOCK_INDEXER: ("bf16", ("bf16", "fp8"))}


def resolve_indexer_kv_dtype(kv: KVCache, engine: str, dtype: str, capability: tuple[int, int] | None) -> str:
    """The dtype vLLM keeps `kv`'s indexer keys in under `dtype` ("auto": the model's default, fp8 where the
    model has no indexer); an error where vLLM refuses it or gptcalc does not model it."""
    kinds = [kind.kind for kind in kv.layers if kind.kind in CHOICES]
    if dtype == "auto":
        return CHOICES[kinds[0]][0] if kinds else "fp8"
    refuse_off_vllm(engine, dtype)
    if not kinds:
        raise GptcalcError(f"--indexer-kv-dtype: {kv.model} has no sparse-attention indexer whose keys it would set")
    allowed = CHOICES[kinds[0]][1]
    if dtype not in allowed:
        raise GptcalcError(f"--indexer-kv-dtype {dtype}: vLLM 0.32 keeps {kv.model}'s indexer keys as "
                           f"{' or '.join(allowed)} only")
    if dtype == "mxfp4" and capability is not None and capability[0] != 10:
        raise GptcalcError(f"--indexer-kv-dtype mxfp4: vLLM takes it on SM10x cards only (B200, GB200, B300), not on "
                           f"an SM{capability[0]}{capability[1]} card (v1/attention/backends/mla/indexer.py:91-96)")
    return dtype


def check_indexer_kv_dtype(dtype: str) -> None:
    """A value vLLM's IndexerKVDType does not name is refused first, whatever the engine or pool, so that
    memory and fit say the same of it."""
    if dtype not in INDEXER_KV_DTYPES:
        raise GptcalcError(f"--indexer-kv-dtype {dtype!r}: choose from {', '.join(INDEXER_KV_DTYPES)}")


def refuse_off_vllm(engine: str, dtype: str) -> None:
    """--indexer-kv-dtype is vLLM's option alone: another engine refuses it rather than ignore it (a value vLLM
    does not name, first, check_indexer_kv_dtype)."""
    check_indexer_kv_dtype(dtype)
    if dtype != "auto" and engine != "vllm":
        raise GptcalcError("--indexer-kv-dtype is vLLM's (its attention_config.indexer_kv_dtype): give --engine vllm")


def key_dtype(kind: str, dtype: str) -> str:
    """`dtype` for keys of `kind` (DSA_INDEXER, ...), "auto" standing for that model's default."""
    return CHOICES[kind][0] if dtype == "auto" else dtype


def indexer_key_bytes(width: int, dtype: str = "fp8") -> int:
    """A DeepSeek lightning indexer's key as vLLM stores it: fp8 values and an fp32 scale per 128 (SGLang's
    layout too), or with mxfp4 two values a byte and a scale byte per 32."""
    if dtype == "mxfp4":
        return width // 2 + width // MXFP4_BLOCK
    return width + width // QUANT_BLOCK * 4


def block_indexer_bytes(width: int, dtype: str = "bf16") -> int:
    """One MiniMax-M3 index key: bf16 whatever --kv-cache-dtype says, or e4m3 without scales; one head of
    index_head_dim in an MLAAttentionSpec that merges with the layers' K and V into one group
    (models/minimax_m3/common/indexer.py:118-121, 145-153). SGLang keeps it in the model's dtype too, beside
    the main pool: MiniMaxSparseKVPool's K-only index pool of one head (index_dtype=self.dtype), its cell
    (dense + sparse) x 2 x KV heads x head_dim x cache bytes + K-only layers x index_head_dim x model bytes
    (DefaultPoolConfigurator._compute_cell_size)."""
    return width * (1 if dtype == "fp8" else 2)
