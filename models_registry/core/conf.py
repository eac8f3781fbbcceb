"""The HOSTING_* settings, read through one object: `conf.MAX_BODY_BYTES` is settings.HOSTING_MAX_BODY_BYTES.

hosting/settings.py reads the environment (the only place it is read) and sets the defaults; this object
caches each value on first use, so the hot paths pay one attribute lookup, and forgets them when a test
changes a setting (Django's setting_changed), as channels and django-prometheus do.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

PREFIX = "HOSTING_"


class HostingConf:
    """Attribute access to the HOSTING_* settings without the prefix, cached until a setting changes."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(settings, PREFIX + name)
        self.__dict__[name] = value
        return value

    def reset(self) -> None:
        """Forget every cached value (the next read asks Django's settings again)."""
        self.__dict__.clear()


conf = HostingConf()


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting.startswith(PREFIX):
        conf.reset()


setting_changed.connect(_on_setting_changed)
