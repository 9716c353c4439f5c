"""`plot memory` and `plot params`: the numbers behind them, and the files they write, opened and read."""

from __future__ import annotations

import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.pictures import GROUPS, groups, memory_curves, parse_gpus
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec

# source: tests/test_count.py GOLDEN (HF num_parameters) and independent arithmetic: 2 (K and V) x 32 layers
# x 32 KV heads x 128 head_dim x 2 B (fp16), from Llama-2-7b-hf's config.json
LLAMA2_7B = 6_738_415_616
LLAMA2_7B_KV = 2 * 32 * 32 * 128 * 2


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def svg_texts(path: Path) -> list[str]:
    """Every text in the SVG (it must parse as XML)."""
    root = ET.parse(path).getroot()
    return [" ".join(element.itertext()) for element in root.iter("{http://www.w3.org/2000/svg}text")]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_memory_curves_are_weights_plus_the_cache_at_each_context() -> None:
    (curve,) = memory_curves([load_spec("llama-2-7b")], 8192, points=9)
    assert curve.weights_bytes == 2 * LLAMA2_7B and curve.context == 4096
    assert curve.seqs == (1, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192)
    assert curve.total_bytes == tuple(2 * LLAMA2_7B + s * LLAMA2_7B_KV for s in curve.seqs)


def test_memory_curves_include_each_models_own_context() -> None:
    (curve,) = memory_curves([load_spec("gpt2-small")], 3000, points=4)
    assert curve.seqs == (1, 1000, 1024, 2000, 3000)  # 1,024: GPT-2's context, where its line turns dotted


def test_memory_curves_turn_at_sliding_windows() -> None:
    # Mistral-7B-v0.1: every layer slides over 4,096 tokens (config.json "sliding_window": 4096), so its cache
    # stops growing there; 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token until then
    (curve,) = memory_curves([load_spec("mistral-7b")], 10_000, points=3)
    assert curve.seqs == (1, 4096, 5000, 10_000)
    weights = curve.weights_bytes
    assert [t - weights for t in curve.total_bytes] == [131_072, 4096 * 131_072, 4096 * 131_072, 4096 * 131_072]


def test_groups_add_up_and_follow_the_parts() -> None:
    gpt2 = groups(count(load_spec("gpt2-small")))
    # source: docs/counting.md's GPT-2 small term by term (wte 50,257 x 768, wpe 1,024 x 768; tied head)
    assert gpt2["embedding"] == 50257 * 768 + 1024 * 768 and gpt2["LM head"] == 0
    assert gpt2["attention"] == 12 * (4 * 768 * 768 + 4 * 768) and gpt2["norms"] == 25 * 2 * 768
    assert sum(gpt2.values()) == 124_439_808 and gpt2["other"] == 0
    mixtral = groups(count(load_spec("mixtral-8x7b")))
    assert mixtral["MLP"] == 0 and mixtral["experts and router (MoE)"] == 32 * (8 * 3 * 4096 * 14336 + 8 * 4096)
    assert not set(GROUPS["attention"]) & set(GROUPS["MLP"])


def test_parse_gpus() -> None:
    assert [g.name for g in parse_gpus("H100, 4090")] == ["H100-80GB", "RTX 4090"] and parse_gpus(None) == []
    with pytest.raises(GptcalcError, match="--gpus: unknown GPU 'Z999' \\(known: .*H100-80GB"):
        parse_gpus("H100,Z999")


def test_plot_memory_svg_has_the_models_gpus_and_axes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "memory.svg"
    code, out = run("plot", "memory", "llama-3.1-8b", "llama-2-7b", "--seq-max", "128k", "--gpus", "H100,4090",
                    "-o", str(path))
    assert code == 0 and out == f"wrote {path}\n"
    texts = svg_texts(path)
    assert "llama-3.1-8b (weights 15.0 GiB)" in texts and "llama-2-7b (weights 12.6 GiB)" in texts
    assert "H100-80GB: 79.6 GiB" in texts and "RTX 4090: 24.0 GiB" in texts  # 81,559 and 24,564 MiB
    assert {"0", "16k", "64k", "128k"} <= set(texts)
    assert "context (tokens per sequence, batch 1)" in texts and "memory (GiB = 2^30 bytes)" in texts
    assert "weights (as stored) + KV cache (fp16) against context" in texts  # both models are 16-bit as stored


def test_plot_memory_turns_logarithmic_when_sizes_differ_by_more_than_20x(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "memory.svg"
    code, _ = run("plot", "memory", "deepseek-v3", "gemma-2-9b", "--dtype", "int4", "-o", str(path))
    texts = svg_texts(path)
    # int4 weights: 671,026,404,352 / 2 B = 312.5 GiB against Gemma-2-9B's 9,241,705,984 / 2 B = 4.3 GiB
    assert code == 0 and "deepseek-v3 (weights 312.5 GiB)" in texts and "gemma-2-9b (weights 4.3 GiB)" in texts
    assert "memory (GiB = 2^30 bytes), log scale" in texts and {"5", "10", "20", "50", "100", "200"} <= set(texts)


def test_plot_params_png_and_svg(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png, svg = tmp_path / "params.png", tmp_path / "params.svg"
    for path in (png, svg):
        code, _ = run("plot", "params", "gpt2-small", "mixtral-8x7b", "-o", str(path))
        assert code == 0
    width, height = png_size(png)
    assert (width, height) == (9 * 150, int((1.2 + 0.55 * 2) * 150))  # figsize x dpi 150
    assert png.stat().st_size > 20_000  # drawn, not blank: bars, labels and a legend
    texts = svg_texts(svg)
    assert {"gpt2-small", "124.44 M", "mixtral-8x7b", "46.70 B"} <= set(texts)  # each name over its total
    assert {"embedding", "attention", "MLP", "experts and router (MoE)", "where the parameters sit"} <= set(texts)
    assert "46%" in texts  # GPT-2 small's MLP: 56,669,184 of 124,439,808


def test_plot_params_draws_a_bar_per_argument_even_of_one_name(tmp_path: Path) -> None:
    """Bars are placed by argument position: the same model twice is two bars (by name, one)."""
    pytest.importorskip("matplotlib")
    svg = tmp_path / "params.svg"
    assert run("plot", "params", "gpt2-small", "gpt2-small", "-o", str(svg))[0] == 0
    texts = svg_texts(svg)
    assert texts.count("gpt2-small") == 2 and texts.count("46%") == 2


def test_same_input_same_svg(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    for path in (first, second):
        run("plot", "params", "gpt2-small", "-o", str(path))
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(("args", "message"), [
    (["plot", "memory", "gpt2-small", "-o", "x.pdf"], "Error: x.pdf: the picture's format comes from its suffix: .png or .svg"),
    (["plot", "memory", "gpt2-small", "--gpus", "Z999", "-o", "x.png"], "Error: --gpus: unknown GPU 'Z999'"),
    (["plot", "params", "gpt2-small", "-o", "no/such/dir/x.png"], "Error: no/such/dir/x.png: cannot write"),
    (["plot", "params", "gpt2-smal", "-o", "x.png"], "Error: unknown model 'gpt2-smal'"),
    (["plot", "memory", "gpt2-small"], "Missing option '-o' / '--output'"),
])
def test_plot_bad_input_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, out = run(*args)
    assert code == 2 and message in out and "Traceback" not in out


def test_without_matplotlib_one_error_line_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out = run("plot", "params", "gpt2-small", "-o", str(tmp_path / "p.png"))
    assert code == 2 and out.count("\n") == 1
    assert out == "Error: pictures need matplotlib, which is not installed: pip install 'gptcalc[plot]' " \
                  "(or pip install matplotlib)\n"
    assert not (tmp_path / "p.png").exists()
