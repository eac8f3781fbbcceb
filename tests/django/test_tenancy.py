"""Tenancy: a token's scope never widens by itself, and the response cache is per token and per live model."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps as django_apps
from django.core.management import call_command

from models_registry.models import ApiToken, ModelTask, RegisteredModel
from models_registry.catalog import lookups
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


def create_token(name: str, *args: str) -> str:
    out = StringIO()
    call_command("create_api_token", name, *args, stdout=out)
    return out.getvalue()


def scope(name: str) -> frozenset[str] | None:
    return ApiToken.objects.get(name=name).scope()


async def get(client: AsyncClient, path: str, token: str) -> Any:
    return await client.get(path, headers={"Authorization": f"Bearer {token}"})


async def post(client: AsyncClient, token: str, text: str, path: str = "/models/cls") -> Any:
    return await client.post(path, data=json.dumps({"inputs": text}), content_type="application/json",
                             headers={"Authorization": f"Bearer {token}"})


# --- scope --------------------------------------------------------------------------------


async def test_deleting_a_tokens_last_model_leaves_it_allowed_nothing(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
) -> None:
    a = await sync_to_async(make_model)("a")
    await sync_to_async(make_model)("b")
    token = await sync_to_async(make_token)("scoped", models=[a])
    client = AsyncClient()
    assert [m["name"] for m in (await get(client, "/models", token)).json()["models"]] == ["a"]
    await sync_to_async(a.delete)()
    lookups.reset()
    from models_registry.policy import auth
    auth.reset_cache()
    assert (await get(client, "/models", token)).json()["models"] == []
    refused = await post(client, token, "hello", path="/models/b")
    assert refused.status_code == 403 and refused.json()["error_type"] == "forbidden"


def test_rotation_keeps_the_scope_unless_told(transactional_db: None) -> None:
    for name in ("a", "b"):
        RegisteredModel.objects.create(name=name, source=f"org/{name}")
    create_token("svc", "--models", "a")
    first = ApiToken.objects.get(name="svc").token_hash
    out = create_token("svc")
    assert ApiToken.objects.get(name="svc").token_hash != first  # rotated
    assert scope("svc") == {"a"} and "for a," in out
    create_token("svc", "--models", "b")
    assert scope("svc") == {"b"}
    out = create_token("svc", "--all-models")
    assert scope("svc") is None and "every model" in out
    create_token("svc")
    assert scope("svc") is None  # an all-models token stays one when rotated
    create_token("new")
    assert scope("new") is None  # a new token without --models: every model, as before


def test_existing_tokens_keep_their_meaning_through_the_migration(transactional_db: None) -> None:
    import importlib

    migration = importlib.import_module("models_registry.migrations.0009_tenancy_and_quarantine")
    a = RegisteredModel.objects.create(name="a", source="org/a")
    listed, unlisted = ApiToken(name="listed", token_hash="1"), ApiToken(name="unlisted", token_hash="2")
    listed.save()
    unlisted.save()
    listed.allowed_models.set([a])
    ApiToken.objects.update(all_models=True)  # as the column's default left every existing row
    migration.keep_existing_scopes(django_apps, None)
    assert scope("listed") == {"a"} and scope("unlisted") is None


def test_adding_models_in_the_admin_limits_the_token(admin_client: Any) -> None:
    a = RegisteredModel.objects.create(name="a", source="org/a")
    response = admin_client.post("/admin/models_registry/apitoken/add/", {
        "name": "from-admin", "all_models": "on", "allowed_models": [a.pk], "priority": "interactive"})
    assert response.status_code == 302
    assert scope("from-admin") == {"a"}


# --- the response cache --------------------------------------------------------------------


@pytest.mark.usefixtures("broker")
async def test_the_cache_is_per_token_unless_the_task_shares_it(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(make_model)("cls", cache_ttl_s=60)
    alice, bob = await sync_to_async(make_token)("alice"), await sync_to_async(make_token)("bob")
    client = AsyncClient()
    assert (await post(client, alice, "my secret diagnosis"))["X-Cache"] == "miss"
    assert (await post(client, bob, "my secret diagnosis"))["X-Cache"] == "miss"  # bob learns nothing
    assert (await post(client, alice, "my secret diagnosis"))["X-Cache"] == "hit"
    assert len(calls) == 2
    await sync_to_async(ModelTask.objects.update)(cache_shared=True)
    lookups.reset()
    assert (await post(client, alice, "shared text"))["X-Cache"] == "miss"
    assert (await post(client, bob, "shared text"))["X-Cache"] == "hit"


@pytest.mark.usefixtures("broker")
async def test_the_cache_never_answers_for_a_disabled_model(
    make_model: Callable[..., RegisteredModel], make_token: Callable[..., str], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(make_model)("cls", cache_ttl_s=60)
    token = await sync_to_async(make_token)("alice")
    client = AsyncClient()
    await post(client, token, "cached")
    assert (await post(client, token, "cached"))["X-Cache"] == "hit"
    await sync_to_async(RegisteredModel.objects.filter(name="cls").update)(enabled=False)
    lookups.reset()
    refused = await post(client, token, "cached")
    assert refused.status_code == 503 and refused.json()["error_type"] == "unavailable"
