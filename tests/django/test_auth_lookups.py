"""Token lookups under load: one database lookup per token at a time, shared by every waiting request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.core.errors import Unauthorized
from models_registry.policy import auth


async def test_concurrent_requests_share_one_lookup(make_token: Callable[..., str], require_tokens: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    raw = await asyncio.to_thread(make_token, "load")
    calls: list[str] = []
    real = auth._lookup

    def counting(digest: str) -> Any:
        calls.append(digest)
        return real(digest)

    monkeypatch.setattr(auth, "_lookup", counting)
    grants = await asyncio.gather(*(auth.authorize(f"Bearer {raw}", None) for _ in range(50)))
    assert len(calls) == 1
    assert all(g is not None and g.token_id == grants[0].token_id for g in grants)
    auth._cache.clear()  # expired: the next wave looks it up once more
    await asyncio.gather(*(auth.authorize(f"Bearer {raw}", None) for _ in range(50)))
    assert len(calls) == 2


async def test_a_waiter_that_leaves_does_not_cancel_the_lookup(make_token: Callable[..., str],
                                                               require_tokens: None) -> None:
    raw = await asyncio.to_thread(make_token, "leaver")
    first = asyncio.ensure_future(auth.authorize(f"Bearer {raw}", None))
    second = asyncio.ensure_future(auth.authorize(f"Bearer {raw}", None))
    await asyncio.sleep(0)
    first.cancel()
    grant = await second
    assert grant is not None


async def test_unknown_tokens_share_a_lookup_and_are_refused(transactional_db: None, require_tokens: None) -> None:
    results = await asyncio.gather(*(auth.authorize("Bearer nope", None) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, Unauthorized) for r in results)
