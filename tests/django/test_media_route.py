"""The media tasks' bodies at the HF route (worker stubbed): what reaches the worker, and the document."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.broker.handoff import InferenceResult
from models_registry.media.item import is_media
from models_registry.models import RegisteredModel
from tests import media_factory
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

IMAGE = media_factory.png(40, 30)
LABELS = [[{"label": "cat", "score": 0.9}]]


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    make_model("vit", task="image-classification", parameters={"top_k": 1})
    make_model("asr", task="automatic-speech-recognition")
    return make_token("all")


@pytest.fixture
def calls(stub_worker: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return stub_worker(lambda kwargs: InferenceResult(outputs=LABELS * len(kwargs["inputs"]), queue_ms=1.0,
                                                      compute_ms=1.0, batch_size=1, tokens=17))


async def send(path: str, body: bytes, content_type: str, token: str) -> Any:
    return await AsyncClient().post(path, data=body, content_type=content_type,
                                    headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(("body", "content_type"), [
    (IMAGE, "image/png"),
    (IMAGE, "application/octet-stream"),
    (base64.b64encode(IMAGE), "text/plain"),
    (json.dumps({"inputs": base64.b64encode(IMAGE).decode()}).encode(), "application/json"),
    (json.dumps({"inputs": "data:image/png;base64," + base64.b64encode(IMAGE).decode()}).encode(), ""),
])
async def test_every_envelope_hands_the_worker_the_same_bytes(token: str, calls: list[dict[str, Any]], body: bytes,
                                                              content_type: str) -> None:
    response = await send("/models/vit", body, content_type, token)
    assert response.status_code == 200, response.content
    assert response.json() == LABELS[0]  # one file: its answer alone
    (item,) = calls[0]["inputs"]
    assert is_media(item) and item["data"] == IMAGE and (item["width"], item["height"]) == (40, 30)
    assert calls[0]["parameters"] == {"top_k": 1}  # the task's defaults under the request's


async def test_a_list_is_answered_in_order_and_parameters_are_checked(token: str, calls: list[dict[str, Any]]) -> None:
    encoded = base64.b64encode(IMAGE).decode()
    body = json.dumps({"inputs": [encoded, encoded], "parameters": {"top_k": 2}}).encode()
    response = await send("/models/vit", body, "application/json", token)
    assert response.status_code == 200 and response.json() == LABELS * 2
    assert calls[0]["parameters"] == {"top_k": 2}
    bad = json.dumps({"inputs": encoded, "parameters": {"top_k": "two"}}).encode()
    response = await send("/models/vit", bad, "application/json", token)
    assert response.status_code == 400 and "top_k" in response.json()["error"]


async def test_refusals_happen_in_the_web_before_any_hand_off(token: str, calls: list[dict[str, Any]],
                                                              settings: Any) -> None:
    settings.HOSTING_MAX_IMAGE_PIXELS = 1000  # 40 x 30 = 1200 pixels
    response = await send("/models/vit", IMAGE, "image/png", token)
    assert response.status_code == 413 and response.json()["error_type"] == "too_large"
    response = await send("/models/asr", IMAGE, "image/png", token)
    assert response.status_code == 400 and "audio" in response.json()["error"]
    assert calls == []


async def test_the_document_shows_each_media_task_its_own_binary_bodies(token: str) -> None:
    response = await AsyncClient().get("/api/openapi.json", headers={"Authorization": f"Bearer {token}"})
    paths = response.json()["paths"]
    image = paths["/models/vit"]["post"]["requestBody"]["content"]
    audio = paths["/models/asr"]["post"]["requestBody"]["content"]
    assert image["image/*"]["schema"]["format"] == "binary" and "audio/*" not in image
    assert audio["audio/*"]["schema"]["format"] == "binary" and "image/*" not in audio
    assert "application/octet-stream" in image and "application/json" in image


async def test_the_dashboard_counts_the_files_accepted(token: str, calls: list[dict[str, Any]]) -> None:
    from asgiref.sync import sync_to_async

    from models_registry.staff import dashboard

    def vit_media() -> dict[str, int]:
        row = next(t for t in dashboard.snapshot()["tasks"] if t["model"] == "vit")
        return row["media"] or {"items": 0, "bytes": 0}

    before = await sync_to_async(vit_media)()
    await send("/models/vit", IMAGE, "image/png", token)
    after = await sync_to_async(vit_media)()
    assert (after["items"] - before["items"], after["bytes"] - before["bytes"]) == (1, len(IMAGE))
