"""broker.command_packing: hiredis packs exactly what redis-py's asyncio packer packs, and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from models_registry.broker.command_packing import HiredisPacking, packing_class, with_hiredis_packing

PackingConnection = packing_class(Connection)


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 2, "asgi:k1", b"asgi:k2", 0.1, 1e20, -3, 2**70, "\u00e9t\u00e9", b"\x00\xff" * 4000),
    ("CLIENT SETNAME", "web-1"),
    (b"CONFIG GET", b"maxmemory"),
    ("ZADD", "k", repr(1700000000.123456), memoryview(b"member")),
    ("SET", "k", bytearray(b"a bytearray goes to redis-py's packer")),
])
def test_packs_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours = PackingConnection().pack_command(*args)
    assert len(ours) == 1
    assert ours[0] == b"".join(bytes(part) for part in Connection().pack_command(*args))


@pytest.mark.parametrize("value", [True, None, object()])
def test_refuses_what_redis_py_refuses(value: object) -> None:
    with pytest.raises(DataError):
        PackingConnection().pack_command("SET", "k", value)


def test_the_pools_connections_pack_with_hiredis() -> None:
    class Pool:
        connection_class = UnixDomainSocketConnection

    pool = with_hiredis_packing(Pool())
    assert issubclass(pool.connection_class, HiredisPacking)
    assert issubclass(pool.connection_class, UnixDomainSocketConnection)
    assert packing_class(pool.connection_class) is pool.connection_class  # made once, never stacked
