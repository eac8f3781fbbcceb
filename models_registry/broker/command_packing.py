"""Commands packed by hiredis, in C, on the channel layer's asyncio connections (as redis-py's sync client does).

redis-py's asyncio connection packs every command in Python: an encode call, a few isinstance
and len calls and a join per argument. An enqueue script carries about 30 arguments, so a web
process spent some 300 function calls per request (18 us) packing what hiredis.pack_command
packs in one call (3 us). Anything hiredis does not take (a bytearray; a bool or None, which
redis-py refuses with DataError) goes to redis-py's own packer, so errors read the same.
"""

from __future__ import annotations

from typing import Any

import hiredis


class HiredisPacking:
    """A mixin for a redis.asyncio Connection class: pack_command by hiredis (redis-py's on what it refuses)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        """The command in the Redis protocol, in one piece."""
        first = args[0]
        if isinstance(first, str):
            command = (*first.encode().split(), *args[1:])  # "CLIENT SETNAME" is two arguments on the wire
        elif b" " in first:
            command = (*first.split(), *args[1:])
        else:
            command = args
        try:
            return [hiredis.pack_command(command)]
        except TypeError:
            return super().pack_command(*args)  # type: ignore[misc]


_packing_classes: dict[type, type] = {}


def packing_class(connection_class: type) -> type:
    """connection_class with HiredisPacking mixed in (one subclass per class, made once)."""
    if issubclass(connection_class, HiredisPacking):
        return connection_class
    found = _packing_classes.get(connection_class)
    if found is None:
        found = _packing_classes[connection_class] = type(
            f"HiredisPacking{connection_class.__name__}", (HiredisPacking, connection_class), {})
    return found


def with_hiredis_packing(pool: Any) -> Any:
    """pool (a redis.asyncio connection pool), its new connections packing commands with hiredis."""
    pool.connection_class = packing_class(pool.connection_class)
    return pool
