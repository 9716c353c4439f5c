"""The output shown in README.md and docs/*.md is what the commands print today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _regenerate():  # noqa: ANN202 - the docs/regenerate.py module
    spec = importlib.util.spec_from_file_location("regenerate", DOCS / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGENERATE = _regenerate()


@pytest.mark.parametrize("path", REGENERATE.documents(), ids=lambda p: p.name)
def test_shown_output_is_current(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert REGENERATE.refreshed(text) == text, f"run: python docs/regenerate.py ({path.name} is stale)"


def test_every_command_appears_in_the_readme() -> None:
    from calc.cli import main

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    for name in main.list_commands(None):
        assert f"gptcalc {name}" in readme, name


def test_readme_spec_example_counts_as_published() -> None:
    """The README's own YAML example is TinyLlama-1.1B's shape; its count must stay right."""
    import yaml

    from calc.analysis.count import count
    from calc.spec.model import spec_from_dict

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    example = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    # source: TinyLlama/TinyLlama-1.1B's config (hidden 2048, 22 layers, 32 heads, 4 KV heads,
    # intermediate 5632, vocab 32000, untied): 2*V*d + L*(2d^2 + 2*d*256 + 3*d*5632 + 2d) + d
    d = 2048
    expected = 2 * 32000 * d + 22 * (2 * d * d + 2 * d * 256 + 3 * d * 5632 + 2 * d) + d
    assert count(spec_from_dict(example, "README.md")).total == expected == 1_100_048_384


# The architectures table's examples that are files: model_type -> the config it was counted from.
TABLE_FILES = {
    "gpt_bigcode": "tests/configs/model_types/gpt_bigcode.json", "gpt_neox": "tests/configs/model_types/gpt_neox.json",
    "gptj": "tests/configs/model_types/gptj.json", "phi": "tests/configs/model_types/phi.json",
"stablelm": "tests/configs/model_types/stablelm-3b.json",
    "starcoder2": "tests/configs/model_types/starcoder2.json", "cohere": "tests/configs/model_types/cohere.json",
"gemma": "tests/configs/model_types/gemma.json",
    "ministral3": "tests/configs/model_types/mistral3.json", "llama4_text": "tests/configs/model_types/llama4-maverick.json",
    "qwen2_moe": "tests/configs/model_types/qwen2_moe.json", "falcon": "tests/configs/model_types/falcon.json",
    "olmo3": "tests/configs/model_types/olmo3.json", "exaone4": "tests/configs/model_types/exaone4.json",
    "smollm3": "tests/configs/model_types/smollm3.json", "bloom": "tests/configs/model_types/bloom.json",
    "mpt": "tests/configs/model_types/mpt.json", "olmo": "tests/configs/model_types/olmo.json",
    "olmoe": "tests/configs/model_types/olmoe.json", "glm4_moe": "tests/configs/model_types/glm4_moe.json",
    "kimi_k2": "tests/configs/model_types/kimi_k2.json", "glm4_moe_lite": "tests/configs/model_types/glm4_moe_lite.json",
    "mimo_v2_flash": "tests/configs/model_types/mimo_v2_flash.json", "laguna": "tests/configs/model_types/laguna.json",
    "deepseek_v32": "tests/configs/model_types/deepseek_v32.json", "glm_moe_dsa": "tests/configs/model_types/glm_moe_dsa.json",
    "ernie4_5": "tests/configs/model_types/ernie4_5.json", "jamba": "tests/configs/model_types/jamba.json",
    "kimi_linear": "tests/configs/model_types/kimi_linear.json", "kimi_k25": "tests/configs/model_types/kimi_k25.json",
    "minimax_m1": "tests/configs/model_types/minimax_m1.json",
    "qwen3_5_text": "tests/configs/model_types/qwen3_5.json",
    "qwen2_5_vl": "tests/configs/model_types/qwen2_5_vl.json", "qwen3_vl": "tests/configs/model_types/qwen3_vl.json",
    "qwen3_vl_moe": "tests/configs/model_types/qwen3_vl_moe.json",
    "qwen3_5_moe_text": "tests/configs/model_types/qwen3_5_moe-397b.json",
    "nemotron_h": "tests/configs/model_types/nemotron_h.json",
    "gemma3n_text": "tests/configs/model_types/gemma3n_text-e2b.json",
    "gemma4_text": "tests/configs/model_types/gemma4-26b-a4b.json",
    "minimax_m3_vl_text": "tests/configs/model_types/minimax_m3_vl.json",
    "minimax_m2": "tests/configs/model_types/minimax_m2.json", "afmoe": "tests/configs/model_types/afmoe.json",
    "falcon_h1": "tests/configs/model_types/falcon_h1.json", "longcat_flash": "tests/configs/model_types/longcat_flash.json",
    "zamba2": "tests/configs/model_types/zamba2.json", "olmo_hybrid": "tests/configs/model_types/olmo_hybrid.json",
    "deepseek_v4": "tests/configs/model_types/deepseek_v4.json",
    "granitemoehybrid": "tests/configs/model_types/granitemoehybrid.json",
    "granitemoe": "tests/configs/model_types/granitemoe.json",
}


def _table_spec(model_type: str, example: str):  # noqa: ANN202 - a ModelSpec
    """The spec a table row was counted from: a preset, a config file, or a test's model-card config."""
    from calc.spec.hf import HFConfig
    from calc.spec.load import load_spec, spec_from_config
    from test_arch_dense import OPT_350M
    from test_arch_moe import DBRX_INSTRUCT, DOTS_LLM1, ERNIE_4_5_21B_A3B, HUNYUAN_A13B

    inline = {"opt": OPT_350M, "ernie4_5_moe": ERNIE_4_5_21B_A3B, "hunyuan_v1_moe": HUNYUAN_A13B, "dots1": DOTS_LLM1,
              "dbrx": DBRX_INSTRUCT}
    if model_type in inline:
        return spec_from_config(HFConfig(inline[model_type], model_type))
    if "(preset)" in example:
        return load_spec(example.split(" (preset)")[0])
    return load_spec(str(DOCS.parent / TABLE_FILES[model_type]))


def test_architectures_table_shows_what_count_prints() -> None:
    """Every total and active figure in docs/architectures.md's table is the count of its example."""
    from calc.analysis.count import count

    text = (DOCS / "architectures.md").read_text(encoding="utf-8").split("## Supported model_types", 1)[1]
    checked = 0
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 6 or not cells[3][:1].isdigit():
            continue
        model_type, example = cells[0].strip("`"), cells[2]
        b = count(_table_spec(model_type, example))
        assert cells[3] == f"{b.total:,}", model_type
        assert cells[4] == (f"{b.active:,}" if b.active else ""), model_type
        checked += 1
    assert checked >= 25


def test_memory_md_gpu_table_is_the_catalog() -> None:
    """docs/memory.md's GPU table (written by hand) says what calc/analysis/memory/gpus.py holds, card by card."""
    from decimal import Decimal

    from calc.analysis.memory.gpus import GPUS

    rows = {cells[0]: cells for line in (DOCS / "memory.md").read_text(encoding="utf-8").splitlines()
            if len(cells := [c.strip() for c in line.strip("|").split("|")]) == 9}

    def rate(cell: str) -> Decimal | None:
        return Decimal(cell.removesuffix(" TFLOP/s").replace(",", "")) * 10**12 if cell != "-" else None

    for gpu in GPUS:
        _, marketed, mib, nbytes, bandwidth, bf16, fp8, fp4, source = rows[gpu.name]
        assert (marketed, int(mib.removesuffix(" MiB").replace(",", "")), int(nbytes.replace(",", ""))) == \
            (gpu.marketed, gpu.mib, gpu.bytes), gpu.name
        assert bandwidth == (f"{gpu.bandwidth // 10**9:,} GB/s" if gpu.bandwidth else "-"), gpu.name
        assert (rate(bf16), rate(fp8), rate(fp4)) == (gpu.bf16_flops, gpu.fp8_flops, gpu.fp4_flops), gpu.name
        assert source == gpu.source, gpu.name
