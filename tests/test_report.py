"""`report`: one self-contained HTML page, read as text and opened in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main

# source: tests/test_count.py GOLDEN (HF num_parameters of Llama-3.1-8B and Mistral-7B-v0.1)
LLAMA31_8B, MISTRAL_7B = 8_030_261_248, 7_241_732_096
# source: independent arithmetic: fp16 weights (2 B each) + 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 B
# x 32,768 tokens (both models: 32 layers, 8 KV heads of 128 in their config.json files)
LLAMA31_8B_MEMORY = 2 * LLAMA31_8B + 2 * 32 * 8 * 128 * 2 * 32768
ARGS = ["report", "llama-3.1-8b", "mistral-7b", "--seq", "32k", "--gpus", "H100,4090"]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("matplotlib")
    path = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(main, [*ARGS, "-o", str(path)])
    assert result.exit_code == 0 and result.output == f"wrote {path}\n", result.output
    return path


def test_page_has_the_numbers_and_both_pictures(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert f"{LLAMA31_8B:,}" in text and f"{MISTRAL_7B:,}" in text
    assert f"{LLAMA31_8B_MEMORY:,} B" in text
    assert text.count("<svg") == 2 and "H100-80GB: 79.6 GiB" in text and "where the parameters sit" in text
    assert "gptcalc report llama-3.1-8b mistral-7b --seq 32768 --kv-dtype fp16" in text


def test_page_is_self_contained(page: Path) -> None:
    from test_injection import own_scripts_removed

    text = own_scripts_removed(page.read_text(encoding="utf-8"))  # its scripts fetch nothing (no src)
    # url(#clip) and href="#id" point inside the page
    assert not re.search(r"<script|<link|<iframe|<img|@import|url\((?!#)", text, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", text, re.I)  # only links inside the page
    # the only URLs are XML namespace names, which browsers never fetch
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_same_input_same_page(page: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.html"
    assert CliRunner().invoke(main, [*ARGS, "-o", str(again)]).exit_code == 0
    assert again.read_bytes() == page.read_bytes()


def test_chromium_renders_the_page(page: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    dom = done.stdout
    assert done.returncode == 0 and "<body>" in dom, done.stderr[-2000:]
    assert f"{LLAMA31_8B:,}" in dom and f"{MISTRAL_7B:,}" in dom and f"{LLAMA31_8B_MEMORY:,} B" in dom
    assert dom.count("<svg") == 2 and "llama-3.1-8b (weights 15.0 GiB)" in dom


def test_without_matplotlib_the_page_keeps_its_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "gpt2-small", "-o", str(path)])
    assert result.exit_code == 0 and "no pictures: pip install 'gptcalc[plot]'" in result.output
    text = path.read_text(encoding="utf-8")
    assert "124,439,808" in text and "<svg" not in text and "No pictures: they need matplotlib" in text


@pytest.mark.parametrize(("args", "message"), [
    (["report", "gpt2-small", "-o", "no/such/dir/r.html"], "Error: no/such/dir/r.html: cannot write"),
    (["report", "gpt2-small", "--gpus", "Z999", "-o", "r.html"], "Error: --gpus: unknown GPU 'Z999'"),
    (["report", "gpt2-small"], "Missing option '-o' / '--output'"),
])
def test_report_bad_input_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
