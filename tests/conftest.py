"""Shared test setup: no test may reach the network, so the Hub client is always offline."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """HF_HUB_OFFLINE=1 and an empty private cache: hub code paths run for real, never online."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
