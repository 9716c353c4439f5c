"""`gptcalc verify`: the table, --json, exit codes 0/1/2, and that a wrong formula is caught by name."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.breakdown import Breakdown, compare
from calc.cli import main
from calc.analysis.count import count
from calc.spec.load import load_spec
from calc.render.verify import difference_columns, verify_table

from calc.parts import Attention, Head
from checkpoint_files import gpt2_file  # noqa: F401  (a fixture)

pytest.importorskip("torch")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", ["gpt2-small", "llama-70b", "qwen2-72b", "mistral-7b"])
def test_presets_agree_and_exit_0(name: str) -> None:
    code, output = run(name, "--json")
    data = json.loads(output)
    assert code == 0 and data["ok"] and data["mismatches"] == []
    with_config = name == "mistral-7b"  # transcribes its config.json: transformers' own model is a column too
    assert data["sources"] == ["analytic", "torch", *(["transformers"] if with_config else [])]
    assert all(row["ok"] and row["analytic"] == row["torch"] for row in data["components"])
    assert sum(row["torch"] for row in data["components"]) == data["totals"]["torch"] == count(load_spec(name)).total


def test_table_rows_add_up_to_the_printed_total() -> None:
    code, output = run("llama-3-8b")
    assert code == 0
    rows = re.findall(r"│ [^│]*\(\w+\)\s*│\s*([\d,]+) │\s*([\d,]+) │\s*0 │ ✓ │", output)
    total = re.search(r"│ total\s*│\s*([\d,]+) │\s*([\d,]+) │\s*0 │ ✓ │", output)
    assert rows and total
    # source: Meta-Llama-3-8B num_parameters() = 8,030,261,248
    assert total.groups() == ("8,030,261,248", "8,030,261,248")
    assert sum(int(a.replace(",", "")) for a, _ in rows) == 8_030_261_248
    # token embedding, attn norm, Q, K, V, WO, MLP norm, gate, up, down, final norm, LM head
    assert len(rows) == 12 and "all 12 components and the total agree" in output


def test_tied_head_is_explained() -> None:
    code, output = run("gpt2-small")
    assert code == 0
    assert "LM head tied to the token embedding in analytic, torch: counted once" in output
    assert "124,439,808" in output  # source: openai-community/gpt2 num_parameters()


def test_wrong_analytic_component_exits_1_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A K formula that forgot GQA (d_model * d_model instead of d_model * kv_dim) must be caught."""
    real = Attention.params
    monkeypatch.setattr(Attention, "params", lambda self, d: {**real(self, d), "k": d * d})
    code, output = run("llama-70b")
    assert code == 1
    assert re.search(r"│ K weight \(k\)\s*│ .* │ ✗ │", output)
    assert "✗ mismatch: K weight (k): analytic 5,368,709,120, torch 671,088,640" in output  # 80·8192·8192 vs 80·8192·1024
    assert "1 of 12 components disagree" in output
    code, output = run("llama-70b", "--json")
    data = json.loads(output)
    assert code == 1 and data["ok"] is False and data["mismatches"] == ["k"]


def test_forgotten_lm_head_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Head, "params", lambda self, vocab, d, proj_dim=None: {"lm_head": 0})
    code, output = run("llama-7b")
    assert code == 1 and "✗ mismatch: LM head (lm_head): analytic 0, torch 131,072,000" in output  # 32000·4096


def test_overrides_yaml_and_config_json(tmp_path: Path) -> None:
    assert run("qwen2-7b", "--set", "n_kv_heads=2", "--set", "tie_embeddings=true")[0] == 0
    spec = tmp_path / "odd.yaml"
    spec.write_text("family: llama\nvocab_size: 100\nn_positions: 64\nd_model: 48\nn_layers: 3\n"
                    "n_heads: 6\nn_kv_heads: 3\nhead_dim: 10\nmlp: gelu\nnorm: layernorm\n")
    assert run(str(spec))[0] == 0
    config = {"model_type": "qwen2", "vocab_size": 1000, "max_position_embeddings": 128, "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 96}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, output = run(str(tmp_path), "--json")
    assert code == 0 and {row["component"] for row in json.loads(output)["components"]} >= {"q_bias", "k_bias"}


@pytest.mark.parametrize("args, message", [
    (["no-such-model"], "unknown model 'no-such-model'"),
    (["gpt2-small", "--set", "n_heads=5"], "n_heads"),
    (["gpt2-small", "--set", "bogus=1"], "--set bogus: unknown field"),
    (["someone/not-cached"], "not in the local Hugging Face cache"),  # hub ids work offline only from the cache
])
def test_bad_input_exits_2_with_one_error_line(args: list[str], message: str) -> None:
    code, output = run(*args)
    assert code == 2 and output.startswith("Error: ") and message in output and "Traceback" not in output


def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("calc.reference.count", "calc.reference.model", "calc.checkpoint.load"):  # modules importing torch
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError


def test_without_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    without_torch(monkeypatch)
    code, output = run("gpt2-small")
    assert code == 2 and output.startswith("Error: verify: needs torch")
    # a torch build first (a bare `torch` requirement may pull a multi-GB CUDA build), then the extra
    assert "install the torch build you want first (pip install torch==2.13.0" in output
    assert output.index("torch==2.13.0") < output.index("pip install 'gptcalc[torch]'")


def test_without_torch_a_checkpoint_is_still_checked_by_its_headers(gpt2_file: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    without_torch(monkeypatch)
    code, output = run("gpt2-small", "--checkpoint", str(gpt2_file))
    assert code == 0, output
    assert "gpt2-small: analytic vs checkpoint (all agree)" in output
    assert "every checkpoint tensor has the name and shape gpt2-small implies" in output
    assert "note: torch is not installed, so this compared the formulas with the checkpoint's headers only" in output
    assert "--load loads the weights into it (strict) and runs a forward pass" in output
    code, output = run("gpt2-small", "--checkpoint", str(gpt2_file), "--json")
    data = json.loads(output)
    assert code == 0 and data["sources"] == ["analytic", "checkpoint"] and "not_compared" in data
    code, output = run("gpt2-small", "--checkpoint", str(gpt2_file), "--load")
    assert code == 2 and output.startswith("Error: --load: needs torch")


def test_without_torch_a_wrong_checkpoint_still_exits_1(gpt2_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without_torch(monkeypatch)
    code, output = run("gpt2-medium", "--checkpoint", str(gpt2_file))
    assert code == 1 and "wte.weight: shape [50257, 768], spec expects [50257, 1024]" in output


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(main, ["verify", "--help"])
    assert result.exit_code == 0 and "gptcalc verify gpt2-small" in result.output


def test_a_third_source_gets_its_own_column() -> None:
    """The table follows the Diff: a checkpoint source adds a count column and a difference column."""
    analytic = count(load_spec("gpt2-small"))
    checkpoint = Breakdown("gpt2-small", 12, {**analytic.components, "q": analytic.get("q") - 5}, source="checkpoint")
    diff = compare({"analytic": analytic, "torch": analytic, "checkpoint": checkpoint})
    assert difference_columns(diff) == ["torch − analytic", "checkpoint − analytic"]
    text = "\n".join(verify_table("gpt2-small", diff).lines(160))
    assert "checkpoint − analytic" in text and "1 of 17 components disagree" in text
    assert re.search(r"│ Q weight \(q\)\s*│\s*7,077,888 │\s*7,077,888 │\s*7,077,883 │\s*0 │\s*-5 │ ✗ │", text)


def test_a_spec_the_torch_reference_cannot_build_is_refused_by_name(tmp_path) -> None:
    """An option the torch reference does not implement (sparsemixer routing to 3 experts; Phi-3.5-MoE's
    routes to 2): verify says which, exit 2, rather than comparing against a model that computes
    something else."""
    spec = {"name": "tiny-moe", "vocab_size": 100, "d_model": 64, "n_positions": 128,
            "blocks": {"moe": {"attention": {"n_heads": 4, "head_dim": 16},
                               "mlp": {"kind": "moe", "n_experts": 8, "top_k": 3, "d_ff": 32, "scoring": "sparsemixer"},
                               "norm": {"kind": "rmsnorm"}}},
            "layers": [[2, "moe"]], "final_norm": {"kind": "rmsnorm"}, "head": {"tied": False}}
    path = tmp_path / "moe.yaml"
    path.write_text(json.dumps(spec))
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == ("Error: tiny-moe: MoE routing 'sparsemixer' with top_k 3 is not implemented by the "
                                     "torch reference (Phi-3.5-MoE's is top-2); count, kvcache, memory and shapes work "
                                     "for every spec")


def test_verify_compares_analytic_and_torch_for_a_layered_preset() -> None:
    """DeepSeek-V3 (MLA, MoE with shared experts, dense then MoE layers): the torch model on the meta
    device counts every component as the formulas do."""
    result = CliRunner().invoke(main, ["verify", "deepseek-v3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # source: transformers 5.23 builds 671,026,404,352 parameters from the config (presets/deepseek-v3.yaml)
    assert data["ok"] and data["totals"]["analytic"] == data["totals"]["torch"] == 671_026_404_352
