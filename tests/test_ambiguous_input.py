"""Input that could mean two things is refused, not read one way silently (issue 25).

- a tensor-parallel degree no server runs (it must divide the query heads): memory, budgets,
  kvcache and train share one check;
- an empty option or argument (`--quant ''`, usually an unset shell variable) is an error, never
  "none", "all" or the current directory: every free-text parameter of every command is tried;
- YAML merges as strict as mappings: `<<` given twice, or two merged mappings giving one key, is a
  key given twice; and an override inside a merged mapping is kept (PyYAML loses it).
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from calc.cli import COMMANDS, main
from calc.cli.options import TEXT
from cli_checks import check_run

# source: meta-llama/Llama-2-7b-hf config.json: num_attention_heads 32 (and 32 KV heads);
# Llama-2-70b-hf: 64 query heads, 8 KV heads
NOT_DIVIDING = [
    ["memory", "llama-2-7b", "--tp", "64"],
    ["memory", "llama-2-7b", "--budget", "64xH100-80GB"],
    ["memory", "llama-2-7b", "--tp", "3"],
    ["kvcache", "llama-2-7b", "--tp", "64"],
    ["train", "llama-2-7b", "--seq", "8", "--micro-batch", "1", "--tp", "64", "--gpus", "64"],
]


@pytest.mark.parametrize("args", NOT_DIVIDING, ids=" ".join)
def test_a_tp_that_does_not_divide_the_query_heads_is_refused(args: list[str]) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and "--tp " in result.stderr and "does not divide llama-2-7b's 32 query" in result.stderr


def test_a_tp_past_the_kv_heads_is_served_with_replicated_heads() -> None:
    """64 query heads split 16 ways; the 8 KV heads are replicated twice (vLLM), not refused."""
    assert check_run(["memory", "llama-2-70b", "--tp", "16"]).exit_code == 0
    assert check_run(["memory", "llama-2-70b", "--budget", "16xH100-80GB"]).exit_code == 0


def _commands() -> dict[str, click.Command]:
    """Every command by its full name (`plot memory`), groups opened."""
    found: dict[str, click.Command] = {}
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        subcommands = getattr(command, "commands", None)
        found.update({f"{name} {sub}": c for sub, c in subcommands.items()} if subcommands else {name: command})
    return found


def _text_parameters() -> list[tuple[str, click.Parameter]]:
    return [(name, param) for name, command in _commands().items() for param in command.params
            if param.type is TEXT]


def test_every_free_text_parameter_is_checked() -> None:
    """Each command's options and arguments that take free text (no type of their own) are TEXT."""
    untyped = [(name, param.name) for name, command in _commands().items() for param in command.params
               if isinstance(param.type, click.types.StringParamType)]
    assert not untyped
    assert len(_text_parameters()) >= 15


@pytest.mark.parametrize("name, param", _text_parameters(), ids=lambda v: v if isinstance(v, str) else v.name)
def test_an_empty_value_is_an_error(name: str, param: click.Parameter, tmp_path: Path) -> None:
    """`--quant ''` is not "no quantisation", `--cpu-experts ''` not "none", `count ''` not the directory."""
    model = [] if isinstance(param, click.Argument) and param.name in ("model", "models") else ["mixtral-8x7b"]
    value = [""] if isinstance(param, click.Argument) else [param.opts[0], ""]
    needs = {"train": ["--seq", "8", "--micro-batch", "1"], "plot memory": ["-o", str(tmp_path / "x.svg")],
             "plot params": ["-o", str(tmp_path / "x.svg")], "report": ["-o", str(tmp_path / "x.html")],
             "inspect": ["tests/data"] if param.name != "checkpoint" else []}.get(name, [])
    model = [] if name == "inspect" else model
    result = check_run([*name.split(), *model, *needs, *value])
    assert result.exit_code == 2 and "empty" in result.stderr, result.stderr


def test_lora_targets_with_an_empty_name_are_an_error() -> None:
    result = check_run(["train", "gpt2", "--seq", "8", "--micro-batch", "1", "--lora-rank", "4", "--lora-targets", "q,,v"])
    assert result.exit_code == 2 and "--lora-targets: unknown ''" in result.stderr


# --- YAML merges ---------------------------------------------------------------------------------

SPEC = "vocab_size: 11\nn_layers: 1\nn_heads: 1\nn_positions: 8\n"


@pytest.mark.parametrize("merge, message", [
    ("a: &a {d_model: 4}\nb: &b {d_model: 8}\n<<: [*a, *b]\n", "key 'd_model' is given twice (by two merged mappings"),
    ("a: &a {d_model: 4}\nb: &b {d_ff: 16}\n<<: *a\n<<: *b\n", "the merge key '<<' is given twice"),
    ("a: &a {d_model: 4}\nb: &b {<<: *a, d_ff: 16}\nc: &c {d_model: 8}\n<<: [*b, *c]\n", "key 'd_model' is given twice"),
    ("a: &a {d_model: 4, d_model: 8}\n<<: *a\n", "key 'd_model' is given twice"),
])
def test_ambiguous_yaml_merges_are_errors(tmp_path: Path, merge: str, message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + "family: gpt2\n" + merge.replace("a: &a", "x-a: &a").replace("b: &b", "x-b: &b")
                    .replace("c: &c", "x-c: &c"))
    result = check_run(["count", str(path)])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_an_override_inside_a_merged_mapping_is_kept() -> None:
    """`wide` overrides d_model over `base`, and the spec merges `wide`: d_model is 8, as written
    (PyYAML 6 keeps the first pair of a key when it flattens, which gave 4)."""
    from calc.spec.yamlfile import load_yaml

    data = load_yaml("base: &base {d_model: 4, d_ff: 16}\nwide: &wide {<<: *base, d_model: 8}\nspec: {<<: *wide}\n", "t")
    assert data["spec"] == {"d_model": 8, "d_ff": 16} and data["wide"] == data["spec"]
    assert load_yaml("base: &base {d_model: 4}\nspec: {<<: *base, d_model: 8}\n", "t")["spec"] == {"d_model": 8}
