"""The attention backend vLLM picks on a CUDA card, and the tokens a KV block holds that follow from it.

vLLM 0.32.0 (the release gptcalc models) first picks a backend for the model's attention, then the block:

    backend = the first in the card's priority list whose validate_configuration takes the card's compute
              capability, the cache dtype, the head size and the model's dimensions, and --block-size when it
              is given (CudaPlatform.get_attn_backend_cls, vllm/platforms/cuda.py:418-516; the lists:
              _get_backend_priorities, :83-179)
    block   = --block-size, or the backend's get_preferred_block_size(16): 16 (CacheConfig.DEFAULT_BLOCK_SIZE,
              config/cache.py:72) where a kernel block divides it, else its smallest kernel block
              (v1/attention/backend.py:119-159; Platform.update_block_size_for_backend,
              platforms/interface.py:750-795, which then logs "Setting kv cache block size to N for B backend(s).")

    MLA backend       cards     cache          kernel blocks  head sizes     block
    FLASHINFER_MLA    SM10x     16-bit, fp8    32, 64         320, 512, 576  32   (qk_nope_head_dim 64, 128 or 192)
    CUTLASS_MLA       SM10x     16-bit, fp8    128            320, 512, 576  128
    FLASH_ATTN_MLA    SM90      16-bit         16n            320, 512, 576  16
    FLASHMLA          SM90-10x  16-bit, fp8    64             320, 512, 576  64
    TRITON_MLA        any       16-bit, fp8    16n            any            16

in the order SM10x: FlashInfer, CUTLASS, FlashAttention, FlashMLA, Triton; SM12x: Triton; others (SM8x, SM90):
FlashAttention, FlashMLA, FlashInfer, Triton. TOKENSPEED_MLA (second on SM10x) needs a package vLLM does not
install (tokenspeed_mla.py:145-153) and DeepSeek-R1's dimensions, which FlashInfer MLA takes before it.
Dense attention (MHA, GQA, MQA, sliding windows) runs on FLASH_ATTN, FLASHINFER or TRITON_ATTN, whose kernels
all take 16 (flash_attn.py:355-365, flashinfer.py:460-479, triton_attn.py:315-316): 16 whichever is picked.
DSA's sparse MLA and MiniMax-M3's sparse attention set their own blocks (calc.analysis.memory.engines).
No --budget GPU: vLLM's default 16, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["BlockChoice", "vllm_block"]

DEFAULT_BLOCK = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py:72)
SOURCE = "vllm 0.32.0 platforms/cuda.py _get_backend_priorities, v1/attention/backend.py get_preferred_block_size"
MLA_HEADS = frozenset({320, 512, 576})  # MLACommonBackend.get_supported_head_sizes (mla_attention.py:1600-1602)


@dataclass(frozen=True)
class Backend:
    """One of vLLM's MLA backends: what validate_configuration asks of the card and the model, and its kernels."""

    name: str
    kernels: tuple[int, ...]  # kernel blocks; a block is supported where one of them divides it (backend.py:119-134)
    majors: frozenset[int] | None  # compute-capability majors (None: any)
    fp8: bool  # takes an fp8 (e4m3) cache besides the model's 16-bit dtype
    heads: frozenset[int] | None = MLA_HEADS  # head sizes, kv_lora_rank + qk_rope_head_dim (None: any)
    nope: frozenset[int] | None = None  # qk_nope_head_dim its kernel takes (None: any)
    source: str = ""

    def supports(self, block: int) -> bool:
        return any(block % kernel == 0 for kernel in self.kernels)

    @property
    def preferred(self) -> int:
        """get_preferred_block_size(16): 16 where it is supported, else the smallest kernel block."""
        return DEFAULT_BLOCK if self.supports(DEFAULT_BLOCK) else min(self.kernels)

    def takes(self, major: int, fp8: bool, head: int, nope: int) -> bool:
        """validate_configuration's checks that a model can fail here: the card, the dtype, the head, qk_nope."""
        return ((self.majors is None or major in self.majors) and (self.fp8 or not fp8)
                and (self.heads is None or head in self.heads) and (self.nope is None or nope in self.nope))


FLASHINFER_MLA = Backend("FLASHINFER_MLA", (32, 64), frozenset({10}), True, nope=frozenset({64, 128, 192}),
                         source="v1/attention/backends/mla/flashinfer_mla.py:195-250")
CUTLASS_MLA = Backend("CUTLASS_MLA", (128,), frozenset({10}), True,
                      source="v1/attention/backends/mla/cutlass_mla.py:38-66")
FLASH_ATTN_MLA = Backend("FLASH_ATTN_MLA", (16,), frozenset({9}), False,
                         source="v1/attention/backends/mla/flashattn_mla.py:41-88 (FA3, fa_utils.py:325-336)")
FLASHMLA = Backend("FLASHMLA", (64,), frozenset({9, 10}), True, source="v1/attention/backends/mla/flashmla.py:47-98")
TRITON_MLA = Backend("TRITON_MLA", (16,), None, True, heads=None,
                     source="v1/attention/backends/mla/triton_mla.py:95-137")

# _get_backend_priorities(use_mla=True), platforms/cuda.py:96-151, less the sparse backends and TOKENSPEED_MLA.
MLA_PRIORITIES = {10: (FLASHINFER_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA), 12: (TRITON_MLA,)}
OTHER_MLA = (FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA)
DENSE = "FLASH_ATTN, FLASHINFER or TRITON_ATTN"


@dataclass(frozen=True)
class BlockChoice:
    """The backend vLLM is taken to run and the block it pages the cache in."""

    block: int
    backend: str
    why: str  # the rule, with its source
    given: bool = False  # set by --block-size
    single: bool = True  # one backend named (the sparse models' pairs are named loosely: no log line for them)

    @property
    def logged(self) -> str | None:
        """vLLM's own line where it moves one backend off its default 16 by itself (platforms/interface.py:771-781)."""
        if self.given or self.block == DEFAULT_BLOCK or not self.single:
            return None
        return f"Setting kv cache block size to {self.block} for {self.backend} backend(s)."

    def to_json(self) -> dict[str, object]:
        return {"block_size": self.block, "attention_backend": self.backend, "rule": self.why,
                "block_size_given": self.given}


def vllm_block(kv: KVCache, capability: tuple[int, int] | None, block: int | None = None) -> BlockChoice:
    """vLLM's backend and block for `kv` on a card of `capability` (None: no GPU named) with `block` from
    --block-size (None: vLLM's choice); an MLA cache no backend of the card takes is refused, as vLLM refuses it."""
    mla = [kind for kind in kv.layers if kind.kind == "MLA" and not kind.v]  # the latent; expanded K and V: dense
    given = block is not None
    if capability is None:
        return BlockChoice(block or DEFAULT_BLOCK, "not known without a --budget GPU",
                           "--block-size" if given else "vLLM's default block (config/cache.py:72)", given)
    if not mla:
        return BlockChoice(block or DEFAULT_BLOCK, DENSE, "--block-size" if given else
                           f"their kernels take {DEFAULT_BLOCK} (flash_attn.py, flashinfer.py, triton_attn.py)", given)
    kind, major = mla[0], capability[0]
    fp8 = kv.format.name.startswith("fp8")
    if kv.format.name not in ("bf16", "fp16", "fp8_e4m3"):
        raise GptcalcError(f"--engine vllm: its MLA backends keep a 16-bit or fp8 (e4m3) cache, not {kv.format.name}")
    for backend in MLA_PRIORITIES.get(major, OTHER_MLA):
        if backend.takes(major, fp8, kind.k, kind.head_dim - kind.rope) and (block is None or backend.supports(block)):
            rule = "--block-size" if given else f"its preferred block ({SOURCE})"
            return BlockChoice(block or backend.preferred, backend.name,
                               f"{rule}; vLLM's first MLA backend for SM{major}x, {kv.format.name} ({backend.source})",
                               given)
    raise GptcalcError(f"--block-size {block}: none of vLLM's MLA backends on compute capability {major}.x takes it "
                       f"with the {kv.format.name} cache ({SOURCE}); TRITON_MLA takes any multiple of 16")
