"""Commands packed by hiredis, in C, on the channel layer's asyncio connections (as redis-py's sync client does).

redis-py's asyncio connection packs every command in Python: an encode call, a few isinstance
and len calls and a join per argument. An enqueue script carries about 30 arguments: 23 us
of a web process's CPU per request, where hiredis packs the same bytes in 3 us. The packer
is redis-py's own (redis.connection.HiredisRespSerializer, the sync client's), set on the
connection class as it is: no function of ours runs when redis-py packs a command, so a
request's path never comes back into this package from redis-py (tests/broker/test_worker_path.py).
It refuses what redis-py's refuses (a bool, None) with the same DataError.
"""

from __future__ import annotations

from typing import Any

from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

_PACKER = HiredisRespSerializer()
_packing_classes: dict[type, type] = {}


def packing_class(connection_class: type) -> type:
    """connection_class whose pack_command is hiredis' (one subclass per class, made once)."""
    if connection_class in _packing_classes.values():
        return connection_class
    found = _packing_classes.get(connection_class)
    if found is None:
        # A bound method of redis-py's object, not a function of this module (see the docstring).
        found = _packing_classes[connection_class] = type(
            f"HiredisPacking{connection_class.__name__}", (connection_class,),
            {"pack_command": staticmethod(_PACKER.pack)})
    return found


def with_hiredis_packing(pool: Any) -> Any:
    """pool (a redis.asyncio connection pool), its new connections packing commands with hiredis when installed."""
    if HIREDIS_AVAILABLE:
        pool.connection_class = packing_class(pool.connection_class)
    return pool


class HiredisPools:
    """A channels_redis layer mixin: its pools' connections pack commands with hiredis (made once per server)."""

    def create_pool(self, index: int) -> Any:
        """channels_redis' pool for server index, its commands packed by hiredis."""
        return with_hiredis_packing(super().create_pool(index))  # type: ignore[misc]
