"""The report's controls: the page's own script, given each model's embedded coefficients, computes the
integers `gptcalc memory --json` prints (run under node when it is installed, and in a headless
Chromium loaded with a URL fragment when that is). Neither is needed by the default run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.coefficients import coefficients
from calc.analysis.memory import GPUS
from calc.cli import main
from calc.render.interactive import SCRIPT, interactive_section
from calc.spec.load import load_spec

MODELS = ["llama-3-8b", "gpt-oss-20b", "gemma-2-9b", "deepseek-v2-lite", "bamba-9b"]
# (seq, batch, weights, kv, count, engine): sliding windows capped and not, MLA, a hybrid's states, llama.cpp padding
STATES = [(131072, 4, "fp8", "fp16", 2, "none"), (1000, 3, "as stored", "q8_0", 1, "llamacpp"),
          (4096, 1, "q4_k_m", "fp8_e4m3", 4, "vllm"), (77, 9, "awq-int4", "q4_0", 8, "none")]
OPTIONS = {"as stored": [], "fp8": ["--dtype", "fp8_e4m3"], "q4_k_m": ["--quant", "q4_k_m"],
           "awq-int4": ["--quant", "awq-int4"]}


def _memory(model: str, seq: int, batch: int, weights: str, kv: str, count: int, engine: str) -> dict | None:  # type: ignore[type-arg]
    args = ["memory", model, "--seq", str(seq), "--batch", str(batch), "--kv-dtype", kv, "--tp", str(count),
            *OPTIONS[weights], *(["--engine", engine] if engine != "none" else []), "--json"]
    result = CliRunner().invoke(main, args)
    if result.exit_code == 2 and ("does not divide" in result.output or "is not modelled" in result.output):
        return None
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture(scope="module")
def data() -> dict:  # type: ignore[type-arg]
    return {"models": [coefficients(load_spec(m)) for m in MODELS],
            "gpus": [{"name": g.name, "bytes": str(g.bytes)} for g in GPUS]}


def test_the_pages_arithmetic_is_the_clis(data: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    pure = SCRIPT.split("//! end of sizes")[0]
    states = [dict(seq=s, batch=b, weights=w, kv=k, count=c, engine=e, gpu="H100-80GB") for s, b, w, k, c, e in STATES]
    program = pure + f"""
const data = {json.dumps(data)}, states = {json.dumps(states)};
console.log(JSON.stringify(states.map(s => sizes(data, s).map(r => r.refused ? null :
  [r.weights.toString(), r.total.toString(), r.headroom.toString()]))));"""
    script = tmp_path / "sizes.js"
    script.write_text(program, encoding="utf-8")
    got = json.loads(subprocess.run([node, str(script)], capture_output=True, text=True, check=True).stdout)
    gpu = next(g.bytes for g in GPUS if g.name == "H100-80GB")
    for state, rows in zip(STATES, got):
        for model, row in zip(MODELS, rows):
            want = _memory(model, *state)
            expected = None if want is None else [str(want["weights"]["total_bytes"]), str(want["total_bytes"]),
                                                  str(gpu - want["total_bytes"])]
            assert row == expected, (model, state)


def test_names_and_data_cannot_leave_their_elements() -> None:
    spec = load_spec("llama-3-8b")
    section = interactive_section([{**coefficients(spec), "name": "</script><script>alert(1)</script>"}], list(GPUS),
                                  4096, "fp16")
    assert section.count("<script") == 2 and "alert(1)</script>" not in section
    assert "\\u003c/script>\\u003cscript>alert(1)\\u003c/script>" in section


def test_chromium_computes_the_figures_from_the_fragment(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    page = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", "llama-3-8b", "gemma-2-9b", "-o", str(page)]).exit_code == 0
    fragment = "#seq=100000&batch=2&gpus=2xB200&weights=fp8&kv=q8_0&engine=llamacpp"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           page.as_uri() + fragment], capture_output=True, text=True, timeout=180)
    body = re.search(r'<tbody id="sizing-body">(.*?)</tbody>', done.stdout, re.S)
    assert body, done.stderr[-2000:]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1))]
    b200 = next(g.bytes for g in GPUS if g.name == "B200")
    for model, cells in zip(["llama-3-8b", "gemma-2-9b"], rows):
        want = _memory(model, 100000, 2, "fp8", "q8_0", 2, "llamacpp")
        assert want is not None and cells[0] == model
        assert cells[1] == f"{want['weights']['total_bytes']:,} B" and cells[3].startswith(f"{want['total_bytes']:,} B")
        assert cells[5] == f"{b200 - want['total_bytes']:,} B"
