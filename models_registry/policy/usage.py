"""Token usage for the admin: read from the same Redis counters the rate limits keep."""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer

from models_registry.core.conf import conf
from models_registry.policy.rate_limits import Usage, read_usage

logger = logging.getLogger(__name__)

_clients: dict[str, Any] = {}


def _client() -> Any:
    """A sync client of the broker's Redis (the admin is sync), one per URL and process."""
    import redis

    url = conf.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return _clients[url]


def token_usage(token_ids: list[int]) -> dict[int, tuple[Usage, Usage]]:
    """(today, this month) per token id; empty when the broker does not answer."""
    if not token_ids:
        return {}
    try:
        return read_usage(_client(), get_channel_layer().prefix, token_ids)
    except Exception as error:
        logger.warning("token usage unavailable: %s", error)
        return {}
