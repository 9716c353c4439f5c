"""Answer first at any width: at 80 columns (a pipe told COLUMNS=80, or rich drawing for an 80-column
terminal) every table is stacked or sliced so that no number is cut ("…") and no line is wider."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from calc import cli

COMMANDS = [
    "count llama-3-8b", "count deepseek-v3", "kvcache llama-3-8b qwen3-8b --seq 32k", "kvcache gemma-2-9b",
    "memory llama-3-8b --seq 8k", "memory llama-3-70b --budget 2xH100-80GB --seq 32k --all",
    "memory qwen3-30b-a3b --engine vllm --budget H100", "compare llama-3-8b qwen3-8b gemma-2-9b mistral-7b",
    "flops llama-3-8b --seq 4096", "train llama-3-8b --seq 4096 --micro-batch 1", "shapes llama-3-8b --seq 16",
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("rich", [False, True], ids=["pipe", "rich"])
@pytest.mark.parametrize("command", COMMANDS)
def test_80_columns_never_cut_a_number(command: str, rich: bool) -> None:
    env = {"COLUMNS": "80", **({"FORCE_COLOR": "1"} if rich else {})}
    result = CliRunner(env=env).invoke(cli.main, command.split())
    assert result.exit_code == 0, result.output
    text = ANSI.sub("", result.output)
    assert "…" not in text
    tables = [line for line in text.splitlines() if line[:1] in "┏┃┡│├└"]
    assert tables and max(map(len, tables)) <= 80


def test_memory_answers_first_and_shows_the_budgets_gpu() -> None:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli.main, "memory llama-3-8b --budget H200".split())
    first = result.output.splitlines()[0]
    assert first.startswith("fits on H200") and "longest context at batch 1: 8,192" in result.output
    gpu_rows = {line.split("│")[1].strip() for line in result.output.splitlines() if line.count("│") >= 3
                and "GiB" in line and " B " in line and line.split("│")[1].strip() in {"H200", "B200", "RTX 4090"}}
    assert gpu_rows == {"H200"}
    every = CliRunner().invoke(cli.main, "memory llama-3-8b --all".split()).output
    assert "M3 Ultra 512GB" in every and "M3 Ultra 512GB" not in CliRunner().invoke(
        cli.main, "memory llama-3-8b".split()).output
