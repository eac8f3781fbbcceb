"""HOSTING_LOG_FORMAT=json: every log line one JSON object (python-json-logger), the request lines included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.stack import ROOT

LOGS = """
import logging, os
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
import django
django.setup()
logging.getLogger("models_registry.requests").info("request id=%s status=%d", "r1", 200)
logging.getLogger("uvicorn.error").warning("a server line")
"""


def _stderr(tmp_path: Path, log_format: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", LOGS], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOSTING_VAR_DIR": str(tmp_path), "HOSTING_LOG_FORMAT": log_format,
                                 "REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.returncode == 0, result.stderr
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_json_makes_every_line_one_object(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in _stderr(tmp_path, "json")]
    assert [(x["logger"], x["level"], x["message"]) for x in lines] == [
        ("models_registry.requests", "INFO", "request id=r1 status=200"), ("uvicorn.error", "WARNING", "a server line")]
    assert all("time" in x for x in lines)


def test_plain_stays_plain(tmp_path: Path) -> None:
    lines = _stderr(tmp_path, "plain")
    assert lines and lines[0].endswith("INFO models_registry.requests request id=r1 status=200")
