"""The app's settings (core.conf): the project's Django setting, else the environment, else the app's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models_registry.core.conf import DEFAULTS, conf, size


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Any:
    """conf with its cache emptied now and after (an environment change fires no setting_changed)."""
    conf.reset()
    yield settings
    conf.reset()


def test_a_django_setting_wins_over_the_environment(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTING_MAX_INPUTS", "7")
    fresh.HOSTING_MAX_INPUTS = 9
    assert conf.MAX_INPUTS == 9


def test_the_environment_wins_over_the_default(fresh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    del fresh.HOSTING_MAX_INPUTS  # hosting/settings.py sets none of the app's settings, but a test might
    monkeypatch.setenv("HOSTING_MAX_INPUTS", "7")
    monkeypatch.setenv("HOSTING_WORKER_MODELS", " a, ,b ")
    monkeypatch.setenv("HOSTING_CACHE_MAX_BYTES", "2M")
    assert (conf.MAX_INPUTS, conf.WORKER_MODELS, conf.CACHE_MAX_BYTES) == (7, ["a", "b"], 2 * 1024 * 1024)


def test_unset_empty_and_zero_where_zero_means_unset_give_the_default(fresh: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTING_MAX_INPUTS", raising=False)
    monkeypatch.setenv("HOSTING_DEVICE", "")
    monkeypatch.setenv("HOSTING_CACHE_MAX_TOKEN_BYTES", "0")
    monkeypatch.setenv("HOSTING_FILE_STORAGE_BYTES", "0")  # here 0 means no quota
    assert (conf.MAX_INPUTS, conf.DEVICE) == (256, "cpu")
    assert (conf.CACHE_MAX_TOKEN_BYTES, conf.FILE_STORAGE_BYTES) == (64 * 1024 * 1024, 0)


def test_a_default_may_follow_another_setting(fresh: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HOSTING_MEDIA_FETCH_MAX_BYTES", raising=False)
    monkeypatch.delenv("HOSTING_ONNX_CACHE_DIR", raising=False)
    fresh.HOSTING_MAX_BODY_BYTES = 1234
    fresh.HOSTING_VAR_DIR = tmp_path
    assert (conf.MEDIA_FETCH_MAX_BYTES, conf.ONNX_CACHE_DIR) == (1234, tmp_path / "onnx")


def test_a_changed_setting_is_read_again_and_an_unknown_name_is_refused(fresh: Any) -> None:
    fresh.HOSTING_MAX_INPUTS = 3
    assert conf.MAX_INPUTS == 3
    fresh.HOSTING_MAX_INPUTS = 4  # setting_changed empties the cache
    assert conf.MAX_INPUTS == 4
    with pytest.raises(AttributeError):
        conf.NO_SUCH_SETTING  # noqa: B018


def test_every_setting_is_read_from_a_django_setting_of_its_own() -> None:
    assert len({entry.setting for entry in DEFAULTS.values()}) == len(DEFAULTS)


def test_sizes_take_binary_suffixes() -> None:
    assert size("1.5K") == 1536 and size("3GiB") == 3 * 1024 ** 3 and size("0") == 0
