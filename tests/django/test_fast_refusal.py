"""A queue known full is refused 503 before the request's body is read (issue 19: a 503 as cheap as /health)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from models_registry.api.server.front_door import ApiASGIHandler
from models_registry.broker import admission, queue_state
from models_registry.models import RegisteredModel
from tests.admitting import admit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens", "broker")]
TASK = "feature-extraction"


@pytest.fixture
def broker(layer_on_redis: Callable[..., str]) -> Iterator[str]:
    """The channel layer on the private Redis, emptied; no queue marks from earlier tests."""
    url = layer_on_redis()
    queue_state.reset()
    yield url
    queue_state.reset()


class Exchange:
    """One request through the API's ASGI handler, counting what it read of the body."""

    def __init__(self, token: str, path: str = "/models/emb") -> None:
        self.body = json.dumps({"inputs": "a sentence"}).encode()
        self.scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
                      "root_path": "", "scheme": "http", "http_version": "1.1", "server": ("127.0.0.1", 80),
                      "client": ("127.0.0.1", 5000),
                      "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                                  (b"content-length", str(len(self.body)).encode()),
                                  (b"authorization", f"Bearer {token}".encode())]}
        self.reads = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads == 1:
            return {"type": "http.request", "body": self.body, "more_body": False}
        await asyncio.sleep(3600)  # the disconnect listener: the client stays
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def run(self) -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
        await ApiASGIHandler()(self.scope, self.receive, self.send)
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return start["status"], {k.lower(): v for k, v in start["headers"]}, json.loads(body)


@pytest.fixture
def full_queue(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
               heartbeat: Callable[..., Any]) -> str:
    """Model emb (queue of 2) served by a live worker, its queue taken by another client; a token for it."""
    model = make_model("emb", task=TASK, max_queue_size=2, timeout_s=0.3)
    heartbeat({"emb": {"state": "ready"}})
    return make_token("t", [model])


async def test_a_queue_known_full_is_refused_before_the_body_is_read(full_queue: str) -> None:
    layer = get_channel_layer()
    await admit(layer, "emb", TASK, "other-client", 2, time.time() + 60, 2)

    first = Exchange(full_queue)
    status, _, body = await first.run()
    assert status == 503 and body["error_type"] == "overloaded"
    assert first.reads >= 1  # the broker refused it: its body was read and parsed

    second = Exchange(full_queue)
    status, headers, body = await second.run()
    assert status == 503 and body["error_type"] == "overloaded"
    assert second.reads == 0  # refused from the mark: not one byte of the body was asked for
    assert int(headers[b"retry-after"]) >= 1 and headers[b"x-request-id"]

    stranger = Exchange("not-a-token")
    assert (await stranger.run())[0] == 401  # the mark tells nothing to a bad token


async def test_the_mark_expires_and_an_admitted_request_clears_it(full_queue: str, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    layer = get_channel_layer()
    await admit(layer, "emb", TASK, "other-client", 2, time.time() + 60, 2)
    monkeypatch.setattr(queue_state, "FULL_FOR_S", 0.05)
    assert (await Exchange(full_queue).run())[0] == 503
    assert queue_state.known_full("emb", TASK) is not None
    await admission.leave(layer, "emb", TASK, "other-client", 2)
    await sync_to_async(time.sleep)(0.06)
    assert queue_state.known_full("emb", TASK) is None  # stale: this request asks the broker,
    assert queue_state.known_full("emb", TASK) is not None  # the others wait for its answer
    await sync_to_async(time.sleep)(0.06)  # that one never answered: another is let through
    assert (await Exchange(full_queue).run())[0] == 504  # admitted (no worker here: it times out)
    assert queue_state.known_full("emb", TASK) is None  # and its admission cleared the mark
    queue_state.note_full("emb", TASK, 2, 2, 1)
    queue_state.note_admitted("emb", TASK)
    assert queue_state.known_full("emb", TASK) is None


async def test_a_versioned_models_full_queue_is_refused_from_its_versions_mark(
        make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], heartbeat: Callable[..., Any]) -> None:
    """Issue 35: every model registered by register_model or the admin has versions; the broker marks "emb.v1"
    full, and the fast path looked for "emb": each 503 of a burst read its body and asked Redis."""
    from models_registry.catalog import version_changes

    model = await sync_to_async(make_model)("emb", task=TASK, max_queue_size=2, timeout_s=0.3)
    await sync_to_async(version_changes.record)(model)
    await sync_to_async(heartbeat)({"emb.v1": {"state": "ready"}})
    token = await sync_to_async(make_token)("t", [model])
    await admit(get_channel_layer(), "emb.v1", TASK, "other-client", 2, time.time() + 60, 2)
    first = Exchange(token)
    assert (await first.run())[0] == 503 and first.reads >= 1
    second = Exchange(token)
    status, headers, body = await second.run()
    assert status == 503 and body["error_type"] == "overloaded" and second.reads == 0


async def test_the_fast_503_never_waits_for_a_refresh_of_the_registry_or_the_token(
        full_queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: in a burst, the fast path waited for the registry's cached refresh (a database read on a busy
    executor): some of its 503s took 0.9 s. It answers from what is cached and refreshes behind."""
    import threading

    from models_registry.catalog import lookups
    from models_registry.policy import auth

    await admit(get_channel_layer(), "emb", TASK, "other-client", 2, time.time() + 60, 2)
    assert (await Exchange(full_queue).run())[0] == 503  # marks the queue, caches the registry and the token
    released = threading.Event()
    real = lookups._specs.loader

    def held_loader() -> Any:
        released.wait(30)  # the database "busy" until the test is done
        return real()

    monkeypatch.setattr(lookups._specs, "loader", held_loader)
    lookups._specs.loaded_at = float("-inf")  # stale: the next read refreshes
    for cached in list(auth._cache):
        auth._cache[cached] = (time.monotonic() - auth._CACHE_TTL_S - 0.1, auth._cache[cached][1])  # stale too
    try:
        fast = Exchange(full_queue)
        status, _, body = await asyncio.wait_for(fast.run(), 10)  # would wait the 30 s if it waited for the refresh
        assert status == 503 and body["error_type"] == "overloaded" and fast.reads == 0
    finally:
        released.set()
