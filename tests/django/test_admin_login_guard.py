"""The admin login is throttled (django-axes), and behind TLS the deploy checks pass."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_the_right_password_after_twenty_wrong_ones_does_not_log_in(django_user_model: Any, settings: Any) -> None:
    django_user_model.objects.create_superuser("root", "root@localhost", "right-password-1")
    client = Client()
    statuses = [client.post("/admin/login/", {"username": "root", "password": f"wrong-{i}", "next": "/admin/"})
                .status_code for i in range(20)]
    assert statuses[0] == 200  # the form again, with its error: not locked yet
    assert statuses[-1] == 429  # locked out
    after = client.post("/admin/login/", {"username": "root", "password": "right-password-1", "next": "/admin/"})
    assert after.status_code == 429 and "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_right_password_logs_in_before_the_limit(django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "root@localhost", "right-password-1")
    client = Client()
    for i in range(2):
        client.post("/admin/login/", {"username": "root", "password": f"wrong-{i}", "next": "/admin/"})
    response = client.post("/admin/login/", {"username": "root", "password": "right-password-1", "next": "/admin/"})
    assert response.status_code == 302 and response["Location"] == "/admin/"


@functools.cache
def _deploy_warnings(behind_tls: str) -> str:
    env = {"HOSTING_BEHIND_TLS": behind_tls}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SECRET_KEY": "a-long-random-deploy-check-key-" + "x7Q9" * 10, "DEBUG": "0", **env},
    )
    return result.stdout + result.stderr


@pytest.mark.parametrize("warning", ["W004", "W008", "W012", "W016"])
def test_behind_tls_the_deploy_check_has_no_transport_warnings(warning: str) -> None:
    assert warning not in _deploy_warnings("1")


def test_without_tls_the_deploy_check_still_names_them() -> None:
    output = _deploy_warnings("0")
    assert "W004" in output and "W012" in output  # the check is real: it sees the settings change
