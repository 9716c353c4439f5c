"""The dtype SGLang keeps a hybrid's SSM states in, which sizes its Mamba pool (engines.MambaPool).

SGLang's mamba2_state_dtype (configs/mamba_utils.py at sgl-project/sglang@02e208de) takes, highest first, the
SGLANG_MAMBA_SSM_DTYPE variable, which --mamba-ssm-dtype sets (arg_groups handle_environment_variables), then
the config's mamba_ssm_dtype where the model's config class passes itself, then float32. Server-argument hooks
may default the flag per model (Kimi-Linear's bfloat16 on SM100). Which of these a model takes is its adapter's
fact in the spec (calc/spec/sglang.py); conv states stay bf16 (SGLANG_MAMBA_CONV_DTYPE's default).
"""

from __future__ import annotations

from calc.analysis.memory.pool_settings import WITH_POOL
from calc.errors import GptcalcError
from calc.spec.sglang import SglangBuild

__all__ = ["NOT_SGLANG", "SSM_BYTES", "sglang_ssm_bytes", "sglang_ssm_dtype"]

SSM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # mamba2_state_dtype's dtype_map, torch itemsize
NOT_SGLANG = "--mamba-ssm-dtype sets SGLang's Mamba pool: give --engine sglang"  # memory's adds WITH_POOL


def sglang_ssm_dtype(build: SglangBuild, flag: str | None, capability: tuple[int, int] | None, tp: int) -> str:
    """The SSM state dtype SGLang resolves: `flag` (--mamba-ssm-dtype) if given; else bfloat16 where the model
    defaults it so on SM100 (kimi_k3_hook.py apply_kimi_k3_linear_attn_defaults, newer than @9aab5589: is_sm100, the
    KDA heads divisible by the TP size); else what its config class hands mamba2_state_dtype."""
    if flag is not None:
        if flag not in SSM_BYTES:
            raise GptcalcError(f"--mamba-ssm-dtype {flag!r}: SGLang takes {', '.join(SSM_BYTES)}")
        return flag
    heads = build.sm100_bf16_ssm_heads
    if heads is not None and capability is not None and capability[0] == 10 and heads % tp == 0:
        return "bfloat16"
    return build.ssm_dtype


def sglang_ssm_bytes(build: SglangBuild, engine: str | None, flag: str | None, capability: tuple[int, int] | None,
                     tp: int) -> int:
    """One SSM state element of SGLang's Mamba pool (4 outside SGLang, where kv_pool does not read it);
    --mamba-ssm-dtype is SGLang's flag, so another engine refuses it rather than ignore it."""
    if engine != "sglang":
        if flag is not None:
            raise GptcalcError(NOT_SGLANG + WITH_POOL)
        return SSM_BYTES["float32"]
    return SSM_BYTES[sglang_ssm_dtype(build, flag, capability, tp)]
