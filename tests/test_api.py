"""The Python API (calc/api.py, docs/python.md): each function's to_dict() is its command's --json."""

from __future__ import annotations

import dataclasses
import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import calc
from calc.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"
DSA = str(Path(__file__).resolve().parent / "configs" / "model_types" / "deepseek_v32.json")


def _cli(*args: str) -> object:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_docs_python_md_examples_run() -> None:
    failures, tried = doctest.testfile(str(DOCS / "python.md"), module_relative=False,
                                       optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
    assert tried >= 20 and failures == 0


@pytest.mark.parametrize("call, command", [
    (lambda s: calc.count(s), "count llama-3-8b"),
    (lambda s: calc.kvcache(s, seq=8192, tp=2), "kvcache llama-3-8b --seq 8192 --tp 2"),
    (lambda s: calc.memory(s, seq=32768, budget="2xH100-80GB", engine="vllm"),
     "memory llama-3-8b --seq 32768 --budget 2xH100-80GB --engine vllm"),
    (lambda s: calc.memory(calc.load(DSA), seq=32768, budget="8xH200", engine="vllm", kv_dtype="fp8"),
     f"memory {DSA} --seq 32768 --budget 8xH200 --engine vllm --kv-dtype fp8"),
    (lambda s: calc.memory(s, quant="awq-int4", kv_dtype="fp8_e4m3", batch=4),
     "memory llama-3-8b --quant awq-int4 --kv-dtype fp8_e4m3 --batch 4"),
    (lambda s: calc.flops(s, seq=2048, decode=True, gpus=("h200",), mfu="0.4"),
     "flops llama-3-8b --seq 2048 --decode --gpu h200 --mfu 0.4"),
    (lambda s: calc.train(s, seq=2048, micro_batch=2, lora_rank=16, qlora=True),
     "train llama-3-8b --seq 2048 --micro-batch 2 --lora-rank 16 --qlora"),
    (lambda s: calc.compare(s, calc.load("gpt-oss-20b"), seq=4096, tp=2),
     "compare llama-3-8b gpt-oss-20b --seq 4096 --tp 2"),
])
def test_to_dict_is_the_commands_json(call, command: str) -> None:  # type: ignore[no-untyped-def]
    assert call(calc.load("llama-3-8b")).to_dict() == _cli(*command.split())


def test_import_calc_stays_light() -> None:
    code = ("import sys, calc; spec = calc.load('llama-3-8b'); calc.memory(spec, seq=4096); "
            "print(sorted(m for m in ('torch', 'transformers', 'safetensors', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=DOCS.parent).stdout
    assert out.strip() == "[]"


def test_train_refuses_an_unknown_option() -> None:
    with pytest.raises(calc.GptcalcError, match="unknown option 'micro'"):
        calc.train(calc.load("llama-3-8b"), seq=16, micro_batch=1, micro=2)


def test_python_md_names_every_pool_setting() -> None:
    """The sentence introducing calc.PoolSettings lists its fields: one added to the dataclass must reach it."""
    text = " ".join((DOCS / "python.md").read_text().split())
    listed = re.search(r"`calc\.PoolSettings` the CLI builds from them \(([^;]*);", text)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == [f.name for f in dataclasses.fields(calc.PoolSettings)]
