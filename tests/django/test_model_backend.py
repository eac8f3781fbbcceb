"""The backend setting: registered by command, shown with what the workers chose in the API and the admin."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from models_registry.models import RegisteredModel
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

INT8_STATE = {"state": "ready", "error": "", "device": "cpu", "backend": "onnxruntime",
              "backend_reason": "int8: every matrix product", "int8_cosine": {"min": 0.9912, "median": 0.9957}}


def test_register_model_sets_the_backend_and_refuses_int8_on_torch(tmp_path: Any) -> None:
    call_command("register_model", "emb", "--source", "org/emb", "--task", "feature-extraction",
                 "--backend", "onnxruntime", "--dtype", "int8", stdout=StringIO())
    model = RegisteredModel.objects.get(name="emb")
    assert (model.backend, model.dtype) == ("onnxruntime", "int8")
    with pytest.raises(CommandError, match="int8 runs on ONNX Runtime"):
        call_command("register_model", "emb", "--source", "org/emb", "--task", "feature-extraction",
                     "--backend", "torch", stdout=StringIO())
    assert RegisteredModel.objects.get(name="emb").backend == "onnxruntime"  # the refused change left no trace
    assert RegisteredModel.objects.create(name="plain", source="org/plain").backend == "auto"


async def test_model_detail_shows_the_configured_and_the_active_backend(
        make_model: Callable[..., Any], make_token: Callable[..., str], heartbeat: Callable[..., Any]) -> None:
    await sync_to_async(make_model)("emb", task="feature-extraction")
    token = await sync_to_async(make_token)("all")
    await sync_to_async(heartbeat)({"emb": INT8_STATE})
    headers = {"Authorization": f"Bearer {token}"}
    body = (await AsyncClient().get("/models/emb", headers=headers)).json()
    assert (body["backend"], body["active_backend"]) == ("auto", "onnxruntime")
    assert body["int8_cosine"] == {"min": 0.9912, "median": 0.9957}
    assert "backend_reason" not in body  # the reason may name local paths: the admin shows it
    assert [w["backend"] for w in body["workers"]] == ["onnxruntime"]
    listed = (await AsyncClient().get("/models", headers=headers)).json()["models"]
    assert listed[0]["active_backend"] == "onnxruntime"


def test_admin_shows_the_backend_in_use_with_its_reason_and_cosine(admin_client: Client,
                                                                  make_model: Callable[..., Any],
                                                                  heartbeat: Callable[..., Any]) -> None:
    model = make_model("emb", task="feature-extraction")
    make_model("waiting", task="feature-extraction")
    heartbeat({"emb": INT8_STATE})
    html = admin_client.get("/admin/models_registry/registeredmodel/").content.decode()
    assert "default · auto · onnxruntime" in html and "default · auto · auto?" in html  # the list stays narrow
    change = admin_client.get(f"/admin/models_registry/registeredmodel/{model.pk}/change/").content.decode()
    assert ("onnxruntime (int8: every matrix product), cosine to fp32 min 0.9912 / median 0.9957") in change
    assert 'name="backend"' in change
    waiting = RegisteredModel.objects.get(name="waiting")
    assert "auto (not loaded yet)" in admin_client.get(
        f"/admin/models_registry/registeredmodel/{waiting.pk}/change/").content.decode()


HALF_STATE = {"state": "ready", "error": "", "device": "cuda", "backend": "torch", "active_dtype": "float16",
              "dtype_reason": "auto: float16 matches float32 on 32 probe texts (min cosine 0.99991)",
              "half_min_cosine": 0.99991}


async def test_model_detail_shows_the_dtype_auto_chose_and_why(
        make_model: Callable[..., Any], make_token: Callable[..., str], heartbeat: Callable[..., Any]) -> None:
    await sync_to_async(make_model)("emb", task="feature-extraction")
    token = await sync_to_async(make_token)("all")
    await sync_to_async(heartbeat)({"emb": HALF_STATE})
    body = (await AsyncClient().get("/models/emb", headers={"Authorization": f"Bearer {token}"})).json()
    assert (body["dtype"], body["active_dtype"]) == ("auto", "float16")
    assert body["dtype_reason"] == HALF_STATE["dtype_reason"] and body["half_min_cosine"] == 0.99991


def test_admin_shows_the_dtype_auto_chose_and_why(admin_client: Client, make_model: Callable[..., Any],
                                                 heartbeat: Callable[..., Any]) -> None:
    model = make_model("emb", task="feature-extraction")
    heartbeat({"emb": HALF_STATE})
    change = admin_client.get(f"/admin/models_registry/registeredmodel/{model.pk}/change/").content.decode()
    assert "dtype float16 (auto: float16 matches float32 on 32 probe texts (min cosine 0.99991))" in change
