"""Bearer-token checks for the inference routes (tokens stored hashed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models.signals import post_save
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.core.errors import Forbidden, Unauthorized
from models_registry.models import ApiToken, hash_token
from models_registry.policy.rate_limits import Limits
from models_registry.catalog.lookups import fresh_connection

_CACHE_TTL_S = 2.0
# Every stored token hash, reloaded at most this often and only when an unknown token comes:
# a flood of random bad tokens costs one query per interval, not one per token. A token
# created a moment ago may be refused for up to this long.
_KNOWN_TTL_S = 0.5
_LAST_USED_EVERY_S = 60.0
STALE_GRANT_S = 4 * _CACHE_TTL_S  # how old a cached grant the fast 503 still takes (refreshing it meanwhile)


@dataclass(frozen=True)
class TokenGrant:
    """What a valid token may use."""

    token_id: int
    models: frozenset[str]  # the models it may use when not all_models (empty: none)
    name: str = ""
    limits: Limits = field(default_factory=Limits)
    priority: str = "interactive"
    all_models: bool = False

    def allows(self, model: str) -> bool:
        """Whether this token may call model."""
        return self.all_models or model in self.models


_cache: dict[str, tuple[float, TokenGrant | None]] = {}
_last_used_written: dict[int, float] = {}
# One database lookup per token at a time: when a cached grant expires under load, every
# request holding that token waits for the same lookup instead of starting its own (N
# concurrent clients would otherwise queue N lookups on the executor thread).
_lookups: dict[str, asyncio.Task[TokenGrant | None]] = {}
_known: tuple[float, frozenset[str]] = (float("-inf"), frozenset())
_known_refresh: asyncio.Task[frozenset[str]] | None = None


def _all_hashes() -> frozenset[str]:
    return frozenset(ApiToken.objects.values_list("token_hash", flat=True))


def _forget_known(**_: object) -> None:
    """A token saved in this process (the admin) is known at once, not after _KNOWN_TTL_S."""
    global _known
    _known = (float("-inf"), frozenset())


post_save.connect(_forget_known, sender=ApiToken, dispatch_uid="auth-known-hashes")


def _lookup(token_hash: str) -> TokenGrant | None:
    token = ApiToken.objects.filter(token_hash=token_hash).prefetch_related("allowed_models", "allowed_adapters").first()
    if token is None or not token.is_active():
        return None
    now = time.monotonic()
    if now - _last_used_written.get(token.id, float("-inf")) > _LAST_USED_EVERY_S:
        ApiToken.objects.filter(id=token.id).update(last_used_at=timezone.now())
        _last_used_written[token.id] = now
    limits = Limits(token.requests_per_minute, token.tokens_per_minute, token.tokens_per_day)
    scope = token.scope()
    return TokenGrant(token.id, scope or frozenset(), token.name, limits, token.priority, all_models=scope is None)


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if that is what it is."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


async def authorize(authorization: str | None, model: str | None,
                    acting_token_id: int | None = None, staff: bool = False) -> TokenGrant | None:
    """Check the request's token (if tokens are required) and that it may use model.

    acting_token_id: a batch job's line runs, inside a worker process, as the token record that
    created the job (nothing an HTTP client sends sets it): the job goes on under its owner's
    current scope and limits when the token is rotated, and stops when it is revoked.
    staff: the admin's sample request, sent by a logged-in staff user (nothing an HTTP client
    sends sets it either): no token needed, and no grant, so no scope or rate limit, as with tokens off.
    """
    if staff or not conf.REQUIRE_API_TOKEN:
        return None
    if acting_token_id is not None:
        grant = await _acting_grant(acting_token_id)
    else:
        raw = bearer_token(authorization or "")
        if raw is None:
            raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
        grant = await _grant(hash_token(raw))
    if grant is None:
        raise Unauthorized("invalid, revoked or expired API token")
    if model is not None:
        require_allowed(grant, model)
    return grant


def require_allowed(grant: TokenGrant | None, model: str) -> None:
    """403 when the request's token may not use model (None: tokens are off)."""
    if grant is not None and not grant.allows(model):
        raise Forbidden(f"this API token is not allowed to use model {model!r}")


def known_allowed(authorization: str | None, model: str) -> bool:
    """Whether the token is cached as valid and allowed for model (tokens off: yes), never waiting for a lookup.

    For the fast 503 (api.server.before_body): a burst must not wait on the database. A grant up
    to STALE_GRANT_S old still counts, and starts its lookup in the background; an unknown
    token (or an older grant) is not known here, and goes the normal way.
    """
    if not conf.REQUIRE_API_TOKEN:
        return True
    raw = bearer_token(authorization or "")
    digest = hash_token(raw) if raw is not None else ""
    cached = _cache.get(digest)
    if cached is None or time.monotonic() - cached[0] > STALE_GRANT_S:
        return False
    if time.monotonic() - cached[0] > _CACHE_TTL_S:
        _start_lookup(digest, _lookup, digest)  # refreshed in the background: nobody waits for it
    return cached[1] is not None and cached[1].allows(model)


async def _grant(digest: str) -> TokenGrant | None:
    """The token's grant from the cache, or from the one lookup in flight for it."""
    cached = _cache.get(digest)
    if cached is not None and time.monotonic() - cached[0] <= _CACHE_TTL_S:
        return cached[1]
    if not await _maybe_known(digest):
        return None
    return await _one_lookup(digest, _lookup, digest)


async def _one_lookup(key: str, look_up: Callable[[Any], TokenGrant | None], argument: Any) -> TokenGrant | None:
    """look_up(argument), cached under key; concurrent callers share the one lookup in flight."""
    # shield: a client that leaves must not cancel the lookup the others wait on.
    return await asyncio.shield(_start_lookup(key, look_up, argument))


def _start_lookup(key: str, look_up: Callable[[Any], TokenGrant | None], argument: Any) -> asyncio.Task[Any]:
    """The lookup in flight for key, started now if there is none."""
    lookup = _lookups.get(key)
    if lookup is None:
        lookup = asyncio.ensure_future(_look_up_and_cache(key, look_up, argument))
        _lookups[key] = lookup
        lookup.add_done_callback(lambda _: _lookups.pop(key, None))
    return lookup


def _lookup_id(token_id: int) -> TokenGrant | None:
    digest = ApiToken.objects.filter(id=token_id).values_list("token_hash", flat=True).first()
    return _lookup(digest) if digest else None


async def _acting_grant(token_id: int) -> TokenGrant | None:
    """The grant of a batch job's owner, by its record id (whatever its current secret)."""
    key = f"#{token_id}"
    cached = _cache.get(key)
    if cached is not None and time.monotonic() - cached[0] <= _CACHE_TTL_S:
        return cached[1]
    return await _one_lookup(key, _lookup_id, token_id)


async def _maybe_known(digest: str) -> bool:
    """Whether digest is among the stored hashes (reloaded, one load at a time, when stale)."""
    global _known, _known_refresh
    loaded_at, hashes = _known
    if digest in hashes or time.monotonic() - loaded_at < _KNOWN_TTL_S:
        return digest in hashes
    if _known_refresh is None or _known_refresh.done():
        _known_refresh = asyncio.ensure_future(sync_to_async(fresh_connection(_all_hashes))())
    refresh = _known_refresh
    hashes = await asyncio.shield(refresh)  # a client that leaves must not cancel the others' load
    _known = (time.monotonic(), hashes)
    return digest in hashes


async def _look_up_and_cache(key: str, lookup: Callable[[Any], TokenGrant | None], arg: Any) -> TokenGrant | None:
    grant = await sync_to_async(fresh_connection(lookup))(arg)
    if len(_cache) > 10_000:
        _cache.clear()  # bound the memory random bad tokens could take
    _cache[key] = (time.monotonic(), grant)
    return grant


def reset_cache() -> None:
    """Forget cached token lookups (tests)."""
    global _known, _known_refresh
    _cache.clear()
    _last_used_written.clear()
    _lookups.clear()
    _known, _known_refresh = (float("-inf"), frozenset()), None
