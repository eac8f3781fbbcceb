"""The admin's test input for media tasks: a sample image from the action, an uploaded file on the model's page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from models_registry.broker import handoff
from models_registry.broker.handoff import InferenceResult
from models_registry.media.item import is_media
from tests import media_factory

CHANGELIST = "/admin/models_registry/registeredmodel/"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What reaches the (stub) worker, which answers one label."""
    seen: list[dict[str, Any]] = []

    async def infer(**kwargs: Any) -> InferenceResult:
        seen.append(kwargs)
        return InferenceResult(outputs=[[{"label": "cat", "score": 0.75}]], queue_ms=1.0, compute_ms=2.0, batch_size=1)

    monkeypatch.setattr(handoff, "infer", infer)
    return seen


@pytest.fixture
def vit(make_model: Callable[..., Any], heartbeat: Callable[..., Any]) -> Any:
    model = make_model("vit", task="image-classification")
    heartbeat({"vit": {"state": "ready", "error": "", "device": "cpu", "tasks": ["image-classification"]}})
    return model


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def test_the_action_sends_a_media_task_a_sample_image(admin_client: Client, vit: Any, sent: list[dict]) -> None:
    response = admin_client.post(CHANGELIST, {"action": "run_test_input", "_selected_action": [vit.pk]}, follow=True)
    [(level, message)] = messages_of(response)
    assert level == "success" and "cat" in message and "image file" in message
    assert is_media(sent[0]["inputs"][0]) and sent[0]["inputs"][0]["data"].startswith(b"\x89PNG")


def test_an_uploaded_file_runs_through_the_chosen_task(admin_client: Client, vit: Any, sent: list[dict]) -> None:
    page = f"{CHANGELIST}{vit.pk}/test-input/"
    assert "Run a test input" in admin_client.get(f"{CHANGELIST}{vit.pk}/change/").content.decode()
    assert admin_client.get(page).status_code == 200
    image = media_factory.png(30, 20)
    response = admin_client.post(page, {"task": "image-classification",
                                        "file": SimpleUploadedFile("cat.png", image, "image/png")}, follow=True)
    [(level, message)] = messages_of(response)
    assert level == "success", message
    assert sent[0]["inputs"][0]["data"] == image and sent[0]["inputs"][0]["width"] == 30
    response = admin_client.post(page, {"task": "image-classification",
                                        "file": SimpleUploadedFile("song.wav", media_factory.tone(0.1))}, follow=True)
    [(level, message)] = messages_of(response)
    assert level == "error" and "not an image" in message and len(sent) == 1
