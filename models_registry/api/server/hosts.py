"""ALLOWED_HOSTS for requests that bypass Django's request object (the API handler's inference routes)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.http.request import split_domain_port, validate_host

_MAX_REMEMBERED = 64  # a client can send any Host: remember a few answers, not every one
_answers: dict[str, bool] = {}


def host_allowed(host: str | None, server: tuple[str, int] | None) -> bool:
    """Whether Django's get_host() would accept this Host header (or, without one, the server's address)."""
    if host is None:
        if server is None:
            return False
        host = f"{server[0]}:{server[1]}"
    known = _answers.get(host)
    if known is not None:
        return known
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host)
    answer = bool(domain) and validate_host(domain, allowed)
    if len(_answers) < _MAX_REMEMBERED:
        _answers[host] = answer
    return answer


def _forget(*, setting: str, **_: Any) -> None:
    if setting in ("ALLOWED_HOSTS", "DEBUG"):
        _answers.clear()


setting_changed.connect(_forget)
