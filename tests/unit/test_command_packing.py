"""broker.command_packing: hiredis packs exactly what redis-py's asyncio packer packs, and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from models_registry.broker.command_packing import packing_class, with_hiredis_packing

PackingConnection = packing_class(Connection)


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 2, "asgi:k1", b"asgi:k2", 0.1, 1e20, -3, 2**70, "\u00e9t\u00e9", b"\x00\xff" * 4000),
    ("CLIENT SETNAME", "web-1"),
    (b"CONFIG GET", b"maxmemory"),
    ("ZADD", "k", repr(1700000000.123456), memoryview(b"member")),
    ("SET", "k", bytearray(b"a bytearray")),
    ("BZPOPMIN", "asgispecific.abc!", 5),
])
def test_packs_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours = PackingConnection().pack_command(*args)
    assert b"".join(ours) == b"".join(bytes(part) for part in Connection().pack_command(*args))


@pytest.mark.parametrize("value", [True, None, object()])
def test_refuses_what_redis_py_refuses(value: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)
    with pytest.raises(DataError):
        PackingConnection().pack_command("SET", "k", value)


def test_no_function_of_ours_packs() -> None:
    """redis-py calls the packer back: it must not be our code (a path would return to this package)."""
    packer = PackingConnection.pack_command
    assert not getattr(packer, "__module__", "").startswith("models_registry")
    assert type(packer.__self__).__module__ == "redis.connection"


def test_the_pools_connections_pack_with_hiredis() -> None:
    class Pool:
        connection_class = UnixDomainSocketConnection

    pool = with_hiredis_packing(Pool())
    assert issubclass(pool.connection_class, UnixDomainSocketConnection)
    assert pool.connection_class.pack_command == PackingConnection.pack_command
    assert packing_class(pool.connection_class) is pool.connection_class  # made once, never stacked
