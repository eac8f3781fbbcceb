"""SECRET_KEY strength, and var/ private to the server's user (the key, the SQLite file)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hosting import secret_key, var_dir

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("key", ["change-me-to-a-long-random-string", "django-insecure-" + "x7" * 30, "short",
                                 "a" * 60, "CHANGEME" + "q1w2e3r4t5y6u7i8o9p0" * 2])
def test_weak_keys_are_named(key: str) -> None:
    assert secret_key.weakness(key) is not None


def test_a_generated_key_is_fit() -> None:
    import secrets

    assert secret_key.weakness(secrets.token_urlsafe(50)) is None


def test_the_kubernetes_example_does_not_ship_a_usable_key() -> None:
    text = (ROOT / "deploy" / "k8s" / "secret.example.yaml").read_text()
    value = next(line.split(":", 1)[1].strip().strip('"') for line in text.splitlines()
                 if line.strip().startswith("SECRET_KEY:"))
    assert secret_key.weakness(value) is not None


def _check(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "HOSTING_VAR_DIR": str(tmp_path / "var"),
                                            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", **env})


def test_debug_off_with_an_example_key_refuses_to_start(tmp_path: Path) -> None:
    refused = _check({"DEBUG": "0", "SECRET_KEY": "change-me-to-a-long-random-string"}, tmp_path)
    assert refused.returncode != 0
    assert "SECRET_KEY contains the placeholder 'change-me'" in refused.stderr
    assert _check({"DEBUG": "1", "SECRET_KEY": "change-me-to-a-long-random-string"}, tmp_path).returncode == 0


def test_var_the_generated_key_and_the_sqlite_file_are_private(tmp_path: Path) -> None:
    started = _check({"DEBUG": "0", "SECRET_KEY": ""}, tmp_path)
    assert started.returncode == 0, started.stderr
    assert mode(tmp_path / "var") == 0o700
    assert mode(tmp_path / "var" / "secret_key") == 0o600
    assert mode(tmp_path / "db.sqlite3") == 0o600


def test_an_older_install_is_tightened(tmp_path: Path) -> None:
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    database = var / "db.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o644)
    var_dir.prepare(var)
    var_dir.private_file(database)
    assert (mode(var), mode(database)) == (0o700, 0o600)


def test_processes_starting_together_read_one_whole_key(tmp_path: Path) -> None:
    """Eight processes creating the key at once all read the same full key (none reads a file being written)."""
    var = tmp_path / "var"
    script = "import sys; from pathlib import Path; from hosting import secret_key; " \
             "print(secret_key.load(Path(sys.argv[1]), ''))"
    started = [subprocess.Popen([sys.executable, "-c", script, str(var)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
               for _ in range(8)]
    keys = {process.communicate(timeout=60)[0].strip() for process in started}
    assert len(keys) == 1 and secret_key.weakness(keys.pop()) is None
    assert [p.name for p in var.iterdir() if p.name.startswith(".secret_key")] == []
    assert mode(var / "secret_key") == 0o600
