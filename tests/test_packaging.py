"""A plain (non-editable) install ships the presets: `gptcalc count gpt2-small` works anywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from calc.spec.load import preset_names

REPO = Path(__file__).resolve().parent.parent


def test_wheel_carries_presets_and_runs_from_elsewhere(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    source = tmp_path / "source"  # a copy of the tracked files: the build leaves nothing in the checkout
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    tracked_names = list(filter(None, tracked.decode().split("\0")))
    for name in tracked_names:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("gptcalc-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"calc/presets/{name}.yaml" for name in preset_names()} | {"calc/presets/compiled.json"} <= set(names)
    assert not any(name.startswith(("tests/", "presets/")) for name in names)
    # every subpackage is listed in pyproject.toml (a missing one installs, then fails on first import)
    assert {n for n in tracked_names if n.startswith("calc/") and n.endswith("/__init__.py")} <= set(names)

    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "calc", "count", "gpt2-small", "--json"], cwd=elsewhere,
                          env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["total"] == 124_439_808
    imported = subprocess.run([sys.executable, "-c", "import calc; print(calc.__file__)"], cwd=elsewhere,
                              env=env, capture_output=True, text=True, check=True)
    assert imported.stdout.strip().startswith(str(target))
