"""The dtype of SGLang's SSM states, which sizes its Mamba pool (calc/analysis/memory/sglang_states.py).

SGLang's mamba2_state_dtype (configs/mamba_utils.py at sgl-project/sglang@02e208de): --mamba-ssm-dtype (through
SGLANG_MAMBA_SSM_DTYPE) over the config's mamba_ssm_dtype, where the model's config class passes itself, over
float32. KimiLinearConfig passes nothing (@008b79d2); on SM100 arg_groups/kimi_k3_hook.py
apply_kimi_k3_linear_attn_defaults (newer than @9aab5589) defaults the flag to bfloat16 where its KDA heads are 128 wide
and the TP size divides them. Every byte count below is worked from the config by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calc.analysis.memory.engines import kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.sglang_states import sglang_ssm_dtype
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from cli_checks import check_run

GIB = 2**30
KIMI = "tests/configs/model_types/kimi_linear.json"
NEXT = "tests/configs/model_types/qwen3_next.json"
B200, H100 = (10, 0), (9, 0)
# Kimi-Linear-48B-A3B (kimi_linear.json): 20 kda_layers, linear_attn_config num_heads 32, head_dim 128, conv kernel 4.
# KimiLinearStateShape.create at tp 1: conv (kernel - 1, 32 x 128 + 2 x 32 x 128) in bf16, temporal (32, 128, 128).
KIMI_CONV = 20 * 3 * (3 * 32 * 128) * 2
KIMI_SSM_ELEMENTS = 20 * 32 * 128 * 128


@pytest.mark.parametrize(("capability", "tp", "dtype"), [
    (B200, 1, "bfloat16"),  # is_sm100, 32 % 1 == 0
    (B200, 4, "bfloat16"),
    (B200, 3, "float32"),  # 32 heads do not split 3 ways: the hook leaves the flag unset
    (H100, 1, "float32"),  # not SM100
    (None, 1, "float32"),  # no GPU named: SGLang's default
])
def test_kimi_linear_default(capability: tuple[int, int] | None, tp: int, dtype: str) -> None:
    assert sglang_ssm_dtype(load_spec(KIMI).sglang, None, capability, tp) == dtype


def test_flag_wins() -> None:
    build = load_spec(KIMI).sglang
    assert sglang_ssm_dtype(build, "float32", B200, 1) == "float32"
    assert sglang_ssm_dtype(load_spec(NEXT).sglang, "float16", H100, 1) == "float16"
    with pytest.raises(GptcalcError, match="float32, bfloat16, float16"):
        sglang_ssm_dtype(build, "fp8", B200, 1)


def test_config_key_read_where_sglang_reads_it(tmp_path: Path) -> None:
    """Qwen3-Next's config class passes itself: a config saying bfloat16 gets bf16 states; Qwen3.5's float32
    is SGLang's default, and its tower reader's prefill-graph list stays beside the adapter's fact."""
    config = json.loads(Path(NEXT).read_text(encoding="utf-8"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "mamba_ssm_dtype": "bfloat16"}), encoding="utf-8")
    assert load_spec(str(path)).sglang.ssm_dtype == "bfloat16"
    assert load_spec(NEXT).sglang.ssm_dtype == "float32"
    qwen35 = load_spec("tests/configs/model_types/qwen3_5.json").sglang
    assert (qwen35.ssm_dtype, qwen35.prefill_graph_allowlists) == ("float32", ("breakable",))
    kimi = json.loads(Path(KIMI).read_text(encoding="utf-8"))
    path.write_text(json.dumps({**kimi, "mamba_ssm_dtype": "bfloat16"}), encoding="utf-8")
    assert load_spec(str(path)).sglang.ssm_dtype == "float32"  # KimiLinearConfig does not read it


@pytest.mark.parametrize(("ssm_bytes", "per_request"), [(4, 43_417_600), (2, 22_446_080)])
def test_kimi_linear_pool(ssm_bytes: int, per_request: int) -> None:
    assert KIMI_CONV + KIMI_SSM_ELEMENTS * ssm_bytes == per_request
    memory = 40 * GIB
    pool = kv_pool(kv_cache(load_spec(KIMI), 131072), "sglang", memory, 131072, sglang_ssm_bytes=ssm_bytes)
    assert pool.mamba is not None
    assert (pool.mamba.conv_bytes, pool.mamba.ssm_bytes) == (KIMI_CONV, KIMI_SSM_ELEMENTS * ssm_bytes)
    assert pool.mamba.slots == int(memory * 0.9 / 1.9 // per_request)  # handle_max_mamba_cache


def test_cli_b200_halves_kimi_linear_states() -> None:
    """On a B200 the default is bf16, and max_mamba_cache_size follows from the pool's memory by hand."""
    args = ["memory", KIMI, "--engine", "sglang", "--budget", "B200", "--seq", "128k", "--json"]
    engines = [json.loads(check_run(args + extra).stdout)["engine"] for extra in ([], ["--mamba-ssm-dtype", "float32"])]
    pools = [engine["mamba_pool"] for engine in engines]
    assert [p["ssm_bytes_per_request"] for p in pools] == [KIMI_SSM_ELEMENTS * 2, KIMI_SSM_ELEMENTS * 4]
    memory = engines[0]["kv_memory_bytes"]
    assert pools[0]["max_mamba_cache_size"] == int(memory * 0.9 / 1.9 // (KIMI_CONV + KIMI_SSM_ELEMENTS * 2))


@pytest.mark.parametrize("args", [
    ["memory", KIMI, "--mamba-ssm-dtype", "bfloat16"],
    ["memory", KIMI, "--engine", "vllm", "--kv-memory", "40GiB", "--mamba-ssm-dtype", "bfloat16"],
])
def test_flag_is_sglangs(args: list[str]) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and "--mamba-ssm-dtype sets SGLang's Mamba pool" in result.stderr


def test_fit_takes_the_models_default() -> None:
    """fit sizes each candidate's Mamba pool as memory does: Kimi-Linear's states in bf16 on a B200, fp32 on
    an H200 (per GPU at tp N without pipeline stages: the 32 KDA heads split N ways)."""
    from calc.analysis.count import count
    from calc.analysis.fit import fit as fit_layouts
    from calc.analysis.memory import GPUS

    spec = load_spec(KIMI)
    for name, ssm_bytes in (("B200", 2), ("H200", 4)):
        found = fit_layouts(spec, count(spec), 131072, tuple(g for g in GPUS if g.name.startswith(name)), "sglang")[0]
        whole = [c for c in found if c.layout.pp == 1]  # every KDA layer on each GPU
        assert whole and all(c.pool.mamba.ssm_bytes == KIMI_SSM_ELEMENTS * ssm_bytes // c.layout.tp for c in whole)


def test_fit_takes_the_flag_as_memory_does() -> None:
    """fit --mamba-ssm-dtype float32 on a B200 keeps Kimi-Linear's states in fp32 (the flag over the SM100
    default), as memory does with the same flag; under vLLM it is refused once, not skipped as every layout."""
    from calc.analysis.count import count
    from calc.analysis.fit import fit as fit_layouts
    from calc.analysis.memory import GPUS
    from calc.analysis.memory.pool_settings import PoolSettings

    spec = load_spec(KIMI)
    b200 = tuple(g for g in GPUS if g.name.startswith("B200"))
    found = fit_layouts(spec, count(spec), 131072, b200, "sglang", pool_settings=PoolSettings(mamba_ssm_dtype="float32"))[0]
    whole = [c for c in found if c.layout.pp == 1]
    assert whole and all(c.pool.mamba.ssm_bytes == KIMI_SSM_ELEMENTS * 4 // c.layout.tp for c in whole)
    args = ["fit", KIMI, "--seq", "128k", "--gpus", "B200", "--top", "1", "--json"]
    served = ["memory", KIMI, "--engine", "sglang", "--budget", "B200", "--seq", "128k", "--json"]
    for flag in ([], ["--mamba-ssm-dtype", "float32"]):  # one B200 at tp 1: fit's first candidate is memory's layout
        first = json.loads(check_run([*args, "--engine", "sglang", *flag]).stdout)["candidates"][0]
        engine = json.loads(check_run([*served, *flag]).stdout)["engine"]
        assert (first["gpus"], first["kv_memory_bytes"], first["tokens"]) == (1, engine["kv_memory_bytes"],
                                                                              engine["tokens"])
    refused = check_run([*args, "--mamba-ssm-dtype", "float32"])
    assert refused.exit_code == 2 and "--mamba-ssm-dtype sets SGLang's Mamba pool: give --engine sglang" in refused.stderr


def test_python_api_takes_the_same_settings() -> None:
    """calc.memory's pool_settings is the object the CLI builds from its flags: the same Mamba pool."""
    import calc

    settings = calc.PoolSettings(mamba_ssm_dtype="float32")
    pool = calc.memory(load_spec(KIMI), seq=131072, engine="sglang", budget="B200", pool_settings=settings).pool
    cli = json.loads(check_run(["memory", KIMI, "--engine", "sglang", "--budget", "B200", "--seq", "128k",
                                "--mamba-ssm-dtype", "float32", "--json"]).stdout)["engine"]["mamba_pool"]
    assert pool.mamba.ssm_bytes == cli["ssm_bytes_per_request"] == KIMI_SSM_ELEMENTS * 4
