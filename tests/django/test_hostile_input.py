"""What an attacker sends the web process: hostile bodies, scoped tokens, headers (no worker, no broker)."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from models_registry.core import sources
from models_registry.models import RegisteredModel
from models_registry.policy import auth
from tests.asgi_client import AsyncClient
from tests.django.test_api_views import bearer, db, error_of, post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

DEEP = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_OBJECTS = b'{"inputs": "x", "parameters": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}"
HUGE_INT = b'{"inputs": "x", "parameters": {"top_k": ' + b"9" * 5_000 + b"}}"
INT_OVER_64_BITS = b'{"inputs": "x", "parameters": {"top_k": ' + b"9" * 30 + b"}}"
DEEP_BUT_PARSEABLE = b'{"inputs": "x", "parameters": {"a": ' + b"[" * 40 + b"]" * 40 + b"}}"


@pytest.fixture
def client() -> AsyncClient:
    return AsyncClient()


@pytest.fixture
def emb(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    """A feature-extraction model (serves both the HF and the OpenAI route)."""
    return make_model("emb", task="feature-extraction", pooling="mean")


@pytest.fixture
def token(make_token: Callable[..., str], emb: RegisteredModel) -> str:
    return make_token("all")


# --- deep or huge JSON --------------------------------------------------------------------
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECTS, HUGE_INT, INT_OVER_64_BITS, DEEP_BUT_PARSEABLE],
                         ids=["deep-lists", "deep-objects", "huge-int", "int-over-64-bits", "deep-but-parseable"])
async def test_deep_or_huge_json_is_a_400_without_a_traceback(client: AsyncClient, token: str, body: bytes,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = await post(client, "/models/emb", body, token)
    message = error_of(response, 400, "invalid_input")
    assert "nests deeper than 32" in message or "digits" in message
    assert not [r for r in caplog.records if r.exc_info], "a hostile body must not log a traceback"


@pytest.mark.parametrize("body", [
    b'{"model": "emb", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"model": "emb", "input": "x", "dimensions": ' + b"9" * 5_000 + b"}",
], ids=["deep", "huge-int"])
async def test_deep_or_huge_json_on_the_openai_route_is_a_400(client: AsyncClient, token: str, body: bytes,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = await post(client, "/v1/embeddings", body, token)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_input"
    assert not [r for r in caplog.records if r.exc_info]


# --- a flood of bad tokens ------------------------------------------------------------------
async def test_a_flood_of_random_bad_tokens_costs_no_database_lookup_each(
        client: AsyncClient, token: str, make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"token": 0, "all": 0}
    real_lookup, real_all = auth._lookup, auth._all_hashes

    def counted_lookup(digest: str) -> Any:
        calls["token"] += 1
        return real_lookup(digest)

    def counted_all() -> Any:
        calls["all"] += 1
        return real_all()

    monkeypatch.setattr(auth, "_lookup", counted_lookup)
    monkeypatch.setattr(auth, "_all_hashes", counted_all)
    started = time.monotonic()
    for i in range(200):
        response = await client.get("/models", headers=bearer(f"hst_random-{i}"))
        error_of(response, 401, "unauthorized")
    elapsed = time.monotonic() - started
    assert calls["token"] == 0, "an unknown token must not cost a lookup of its own"
    assert calls["all"] <= 1 + elapsed / auth._KNOWN_TTL_S, (calls, elapsed)  # one load per 0.5 s at most
    assert calls["all"] < 50, calls
    assert (await client.get("/models", headers=bearer(token))).status_code == 200
    # A token created now is known once the short negative window has passed.
    raw = await db(make_token, "new")
    await asyncio.sleep(auth._KNOWN_TTL_S)
    assert (await client.get("/models", headers=bearer(raw))).status_code == 200


# --- scoped tokens, and what clients see of sources and load errors ----------------------------
async def test_a_token_limited_to_one_model_lists_only_that_model(
        client: AsyncClient, emb: RegisteredModel, make_model: Callable[..., RegisteredModel],
        make_token: Callable[..., str]) -> None:
    other = await db(make_model, "other")
    await db(make_model, "secret")
    raw = await db(make_token, "other-only", models=[other])
    listed = (await client.get("/models", headers=bearer(raw))).json()["models"]
    assert [m["name"] for m in listed] == ["other"]
    error_of(await client.get("/models/secret", headers=bearer(raw)), 403, "forbidden")
    everything = await db(make_token, "all")
    assert [m["name"] for m in (await client.get("/models", headers=bearer(everything))).json()["models"]] == [
        "emb", "other", "secret"]


async def test_local_paths_and_load_errors_stay_out_of_api_answers(
        client: AsyncClient, token: str, make_model: Callable[..., RegisteredModel],
        heartbeat: Callable[..., Any]) -> None:
    model = await db(make_model, "local")
    model.source = "/etc"
    await db(model.save)
    raw_error = "loading '/etc' failed: OSError: /etc does not appear to have a file named config.json"
    await db(heartbeat, {"local": {"state": "error", "error": raw_error}, "emb": {"state": "ready"}})
    answers = [await client.get("/models", headers=bearer(token)),
               await client.get("/models/local", headers=bearer(token)),
               await post(client, "/models/local", {"inputs": "x"}, token)]
    for response in answers:
        assert "/etc" not in response.content.decode(), response.content
    listed = {m["name"]: m for m in answers[0].json()["models"]}
    assert listed["local"]["source"] == sources.HIDDEN_SOURCE
    assert (listed["local"]["state"], listed["local"]["error"]) == ("error", sources.LOAD_FAILED)
    assert listed["emb"]["source"] == "example/emb"  # hub ids are shown as they are
    assert sources.LOAD_FAILED in error_of(answers[2], 503, "unavailable")


@pytest.mark.parametrize("source", ["../../../etc", "models/../../etc", "foo--bar", "a/b/c", "/no/such/dir"])
def test_register_model_refuses_a_source_that_is_neither_a_directory_nor_a_hub_id(source: str) -> None:
    with pytest.raises(CommandError, match="source"):
        call_command("register_model", "m", "--source", source, "--task", "fill-mask", stdout=io.StringIO())
    assert not RegisteredModel.objects.filter(name="m").exists()


def test_register_model_takes_hub_ids_and_absolute_directories(tmp_path: Any) -> None:
    for source in ("google-bert/bert-base-uncased", "gpt2", str(tmp_path)):
        call_command("register_model", "m", "--source", source, "--task", "fill-mask", stdout=io.StringIO())
        assert RegisteredModel.objects.get(name="m").source == source


def test_make_run_and_the_image_serve_with_the_slow_client_guards() -> None:
    from pathlib import Path

    from hosting.management.commands.serve import Command

    guarded = "hosting.http_protocol:GuardedHttpToolsProtocol"
    assert guarded in Command()._web_command("uvicorn", "127.0.0.1", 8000)
    assert guarded in (Path(__file__).resolve().parents[2] / "docker" / "entrypoint.sh").read_text()


def test_register_model_sets_the_per_request_token_budget() -> None:
    from models_registry.models import DEFAULT_MAX_REQUEST_TOKENS, ModelTask

    call_command("register_model", "m", "--source", "org/m", "--task", "fill-mask", stdout=io.StringIO())
    assert ModelTask.objects.get(model__name="m").max_request_tokens == DEFAULT_MAX_REQUEST_TOKENS == 16384
    call_command("register_model", "m", "--source", "org/m", "--task", "fill-mask", "--max-request-tokens", "0",
                 stdout=io.StringIO())
    assert ModelTask.objects.get(model__name="m").max_request_tokens == 0


# --- issue 27: client mistakes that were 500s, and what one request may make a worker hold ----------------
def _wav(samples: int, rate: int) -> bytes:
    """A 16-bit mono WAV of samples zeros whose header says rate (4 samples: the issue's 52 bytes)."""
    import struct

    data = b"\0\0" * samples
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate,
            rate * 2 % 2**32, 2, 16) + b"data" + struct.pack("<I", len(data)) + data)


@pytest.fixture
def zero_shot(make_model: Callable[..., RegisteredModel]) -> RegisteredModel:
    return make_model("nli", task="zero-shot-classification")


@pytest.mark.parametrize("template", ["{{}}{:>10000000}", "This is {} {}", "{} {x}", "{} {", "{0}", "{!r}",
                                      "{:>9}", "x" * 600 + " {}"])
async def test_a_hypothesis_template_with_anything_but_one_bare_field_is_a_400(
        client: AsyncClient, token: str, zero_shot: RegisteredModel, template: str) -> None:
    # The check looked for the text "{}" only: "{{}}{:>10000000}" padded each hypothesis to 10 million characters.
    body = {"inputs": "the cat sat", "parameters": {"candidate_labels": ["a", "b"], "hypothesis_template": template}}
    message = error_of(await post(client, "/models/nli", body, token), 400, "invalid_input")
    assert "'hypothesis_template' must be a string with {} where the label goes, once" in message


async def test_a_label_longer_than_a_hypothesis_can_be_is_a_400(client: AsyncClient, token: str,
                                                                zero_shot: RegisteredModel) -> None:
    body = {"inputs": "the cat sat", "parameters": {"candidate_labels": ["x " * 3000, "b"]}}
    message = error_of(await post(client, "/models/nli", body, token), 400, "invalid_input")
    assert "at most 500 characters" in message


@pytest.mark.parametrize("parameters", [{"do_sample": True, "temperature": 1e-300},
                                        {"do_sample": True, "temperature": 1e-45},
                                        {"do_sample": True, "repetition_penalty": 1e-300},
                                        {"stop": ["\u0000"]}])
@pytest.mark.parametrize("stream", [False, True])
async def test_generation_values_that_break_sampling_are_a_400(
        client: AsyncClient, make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
        parameters: dict[str, Any], stream: bool) -> None:
    await db(make_model, "gen", task="text-generation")
    raw = await db(make_token, "gen")
    body = {"inputs": "Once", "parameters": parameters, **({"stream": True} if stream else {})}
    message = error_of(await post(client, "/models/gen", body, raw), 400, "invalid_input")
    assert "must be" in message


@pytest.mark.parametrize(("wav", "says"), [(_wav(4, 16_000), "at least 100 ms"),
                                           (_wav(4, 2**31 - 1), "from 1 to 768000 Hz"),
                                           (_wav(16_000, 2**31 - 1), "from 1 to 768000 Hz")],
                         ids=["4-samples", "rate-2^31-1", "rate-2^31-1-long"])
async def test_a_clip_no_model_can_hear_is_a_400_sent_alone(
        client: AsyncClient, make_model: Callable[..., RegisteredModel], make_token: Callable[..., str],
        wav: bytes, says: str) -> None:
    await db(make_model, "ast", task="audio-classification")
    raw = await db(make_token, "ast")
    response = await post(client, "/models/ast", wav, raw, content_type="audio/wav")
    assert says in error_of(response, 400, "invalid_input")


async def test_images_over_the_request_pixel_budget_are_a_413_before_any_is_decoded(
        client: AsyncClient, make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> None:
    import base64

    from PIL import Image

    await db(make_model, "vit", task="image-classification")
    raw = await db(make_token, "vit")
    out = io.BytesIO()
    Image.new("1", (6000, 6000)).save(out, format="PNG")  # 36 MP, under the 40 MP per image
    big = base64.b64encode(out.getvalue()).decode()
    assert len(big) < 50_000  # the 35 KB
    response = await post(client, "/models/vit", {"inputs": [big] * 20}, raw)
    message = error_of(response, 413, "too_large")
    assert "720000000 pixels together" in message and "HOSTING_MAX_REQUEST_PIXELS" in message


def test_decoded_pixels_and_large_answers_are_charged_and_bounded(settings: Any) -> None:
    from models_registry.core.errors import TooLarge
    from models_registry.catalog import answer_size
    from models_registry.media.item import media_of
    from models_registry.worker.intake import media_tokens

    image = {"media": "image", "data": b"x", "width": 6000, "height": 6000}
    # A 224-pixel image costs its patches; a 36 MP one what decoding and holding its pixels weighs.
    assert media_tokens(media_of([{**image, "width": 224, "height": 224}]), [197]) == 197
    assert media_tokens(media_of([image]), [197]) == answer_size.pixel_tokens(36_000_000) == 8790
    settings.HOSTING_MAX_REQUEST_PIXELS = 100_000_000
    with pytest.raises(TooLarge, match="HOSTING_MAX_REQUEST_PIXELS"):
        media_tokens(media_of([image] * 3), [197] * 3)  # 108 MP: refused before the worker decodes any
    params = {"top_k": 100}
    assert answer_size.fill_mask_bytes("Paris is the [MASK].", "[MASK]", {}) == 5 * (160 + 20)
    with pytest.raises(TooLarge, match="33 mask tokens"):
        answer_size.fill_mask_bytes("[MASK] " * 33, "[MASK]", params)
    with pytest.raises(TooLarge, match="HOSTING_MAX_ANSWER_BYTES"):
        answer_size.check_answer_bytes(32 * answer_size.fill_mask_bytes("[MASK] " * 30, "[MASK]", params), 16 << 20)
    assert answer_size.answer_tokens(16 << 20) == 16_384  # an answer at the budget is charged 16 K tokens
