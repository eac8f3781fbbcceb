"""Fixtures of the Django tier: the test database, a registered model, tokens, heartbeats, a stub worker, Redis.

The async views reach the ORM from asgiref's executor thread, which has its own database
connection: rows a test writes must be committed to be seen there, so API fixtures use
`transactional_db` rather than the per-test transaction of `db`.
"""

from __future__ import annotations

import datetime as dt
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.utils import timezone

from models_registry.broker.handoff import InferenceResult
from models_registry.models import ApiToken, ModelTask, RegisteredModel, WorkerHeartbeat
from models_registry.policy import auth
from models_registry.catalog import lookups
from tests.stack import RedisServer

LABELS = [[{"label": "POSITIVE", "score": 0.875}, {"label": "NEGATIVE", "score": 0.125}]]


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    """No registry, worker or token lookup cached by an earlier test leaks into this one."""
    lookups.reset()
    auth.reset_cache()
    yield
    lookups.reset()
    auth.reset_cache()


@pytest.fixture(autouse=True)
def no_ledger_flusher(settings: Any) -> None:
    """No web flusher thread in this tier: a test flushes the usage ledger by hand (observe.ledger_flush.flush)."""
    settings.HOSTING_USAGE_FLUSH_S = 0


@pytest.fixture
def require_tokens(settings: Any) -> None:
    """Token checks on, whatever the environment running the tests says."""
    settings.HOSTING_REQUIRE_API_TOKEN = True


@pytest.fixture
def make_model(transactional_db: None) -> Callable[..., RegisteredModel]:
    """Register a model with one task straight in the database (no source is loaded)."""

    def make(name: str, task: str = "text-classification", enabled: bool = True, **task_fields: Any) -> RegisteredModel:
        model = RegisteredModel.objects.create(name=name, source=f"example/{name}", enabled=enabled)
        ModelTask.objects.create(model=model, name=task_fields.pop("name", task), task=task, **task_fields)
        return model

    return make


@pytest.fixture
def make_token(transactional_db: None) -> Callable[..., str]:
    """Create an API token (optionally limited to some models) and return the raw string."""

    def make(name: str, models: list[RegisteredModel] | None = None, **fields: Any) -> str:
        raw = ApiToken.generate()
        token = ApiToken(name=name, **fields)
        token.set_token(raw)
        token.save()
        token.allowed_models.set(models or [])
        return raw

    return make


@pytest.fixture
def heartbeat(transactional_db: None) -> Callable[..., WorkerHeartbeat]:
    """Write a worker heartbeat as a live (or, with age_s, a stale) worker would have."""

    def beat(models_state: dict[str, Any], queue_depths: dict[str, int] | None = None, age_s: float = 0.0,
             worker_id: str = "w1", draining: bool = False, serve_models: list[str] | None = None) -> WorkerHeartbeat:
        now = timezone.now()
        return WorkerHeartbeat.objects.create(
            worker_id=worker_id, host="test-host", pid=4242, device="cpu", models_state=models_state,
            queue_depths=queue_depths or {}, started_at=now - dt.timedelta(seconds=60),
            last_seen=now - dt.timedelta(seconds=age_s), draining=draining, serve_models=serve_models or [],
        )

    return beat


async def _charge_as_the_handoff_does(plan: Any) -> None:
    """Run the hand-off's own script with only its charge part (the stub admits and sends nothing).

    With no broker in the test, the window reads as empty: the request is charged and let through.
    """
    from channels.layers import get_channel_layer

    from models_registry.broker import enqueue

    if plan is None:
        return
    try:
        status, _ = await enqueue.run(get_channel_layer().connection(0), plan)
    except Exception:
        plan.outcome = (enqueue.DONE, 0, [1, plan.tokens, plan.tokens])
        return
    if status == enqueue.RATE_REFUSED:
        raise enqueue.ChargeRefused()


@pytest.fixture
def stub_worker(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[dict[str, Any]], Any]], list[dict[str, Any]]]:
    """Serve every model from a stub: stub_worker(answer) records each hand-off and answers answer(kwargs).

    answer may be a plain function or a coroutine function (to sleep or raise as a worker would).
    """

    def install(answer: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
        from models_registry.policy import dispatch, serving

        seen: list[dict[str, Any]] = []

        def serves(spec: Any, task: str, wire: str, workers: Any) -> float:
            return 0.0

        async def infer(**kwargs: Any) -> Any:
            await _charge_as_the_handoff_does(kwargs.get("charge"))  # a refused request never reaches a worker
            seen.append(kwargs)
            result = answer(kwargs)
            result = await result if inspect.isawaitable(result) else result
            # The hand-off states the version its wire name stands for on the result.
            return dataclasses.replace(result, version=kwargs["version"]) if kwargs.get("version") else result

        monkeypatch.setattr(serving, "serving_rate", serves)
        monkeypatch.setattr(dispatch.handoff, "infer", infer)
        return seen

    return install


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every hand-off to a (stub) worker, which answers a classification with 7 input tokens."""

    def answer(kwargs: dict[str, Any]) -> InferenceResult:
        return InferenceResult(outputs=LABELS * len(kwargs["inputs"]), queue_ms=1.0, compute_ms=2.0,
                               batch_size=1, tokens=7)

    return stub_worker(answer)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server for the module asking for it (the Django tier has no broker of its own)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def layer_on_redis(redis_server: RedisServer, settings: Any) -> Callable[..., str]:
    """layer_on_redis(**config): the channel layer on the module's private Redis, emptied first; its URL.

    config joins the layer's CONFIG beside its hosts (batch_delay_s, for one).
    """

    def point(**config: Any) -> str:
        redis.Redis.from_url(redis_server.url).flushdb()
        settings.CHANNEL_LAYERS = {"default": {
            "BACKEND": "models_registry.broker.layer.HostingChannelLayer",
            "CONFIG": {"hosts": [{"address": redis_server.url, "socket_timeout": None}], **config},
        }}
        return redis_server.url

    return point


@pytest.fixture
def broker(layer_on_redis: Callable[..., str], settings: Any) -> str:
    """The channel layer and the admin's usage reads on the module's private Redis, emptied."""
    settings.REDIS_URL = url = layer_on_redis(batch_delay_s=5.0)
    return url
