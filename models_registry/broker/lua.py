"""Lua scripts run by EVALSHA: one atomic round trip for what would otherwise take several commands."""

from __future__ import annotations

import hashlib
from typing import Any

from redis.exceptions import NoScriptError


class LuaScript:
    """A Lua script run by EVALSHA, loaded on first use on each server."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, conn: Any, keys: list[Any], args: list[Any]) -> Any:
        try:
            return await conn.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await conn.eval(self.source, len(keys), *keys, *args)
