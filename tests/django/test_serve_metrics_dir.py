"""`manage.py serve` gives its web processes one emptied prometheus_client multiprocess directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hosting.management.commands.serve import Command


def test_the_web_processes_share_an_emptied_directory_under_var(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.HOSTING_PROMETHEUS_MULTIPROC_DIR = ""
    stale = tmp_path / "prometheus" / "counter_12345.db"
    stale.parent.mkdir()
    stale.write_bytes(b"counts of a server that ran before")
    env = Command()._web_env()
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "prometheus")
    assert (tmp_path / "prometheus").is_dir() and not stale.exists()


def test_an_operators_directory_is_used(settings: Any, tmp_path: Path) -> None:
    settings.HOSTING_PROMETHEUS_MULTIPROC_DIR = str(tmp_path / "mine")
    assert Command()._web_env()["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "mine")
    assert (tmp_path / "mine").is_dir()
