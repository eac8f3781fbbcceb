"""POST /tokenize: TEI's shape from the web process alone (the bundled MiniLM tokenizer, no worker)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from models_registry.api.tei import tokenization
from models_registry.models import RegisteredModel
from tests import model_factory
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]


@pytest.fixture
def token(make_model: Callable[..., RegisteredModel], make_token: Callable[..., str]) -> str:
    minilm = make_model("minilm", task="feature-extraction")
    RegisteredModel.objects.filter(pk=minilm.pk).update(source=str(model_factory.minilm_path()))
    make_model("off", task="feature-extraction", enabled=False)
    make_model("remote", task="feature-extraction")
    return make_token("all")


async def tokenize(body: Any, token: str | None, content_type: str = "application/json") -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return await AsyncClient().post("/tokenize", data=data, content_type=content_type, headers=headers)


async def test_ids_strings_and_character_offsets(token: str) -> None:
    text = "Héllo wörld, naïve café!"
    response = await tokenize({"model": "minilm", "inputs": text}, token)
    assert response.status_code == 200, response.content
    [tokens] = response.json()
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[-1] == {"id": 102, "text": "[SEP]", "special": True, "start": None, "stop": None}
    words = tokens[1:-1]
    assert [t["text"] for t in words] == ["Héllo", "wörld", ",", "naïve", "café", "!"]
    assert all(text[t["start"]:t["stop"]] == t["text"] for t in words)  # characters, not bytes
    assert words[0]["id"] == 7592 and not any(t["special"] for t in words)


async def test_a_list_without_special_tokens_in_order(token: str) -> None:
    response = await tokenize({"model": "minilm/feature-extraction", "inputs": ["hello", "hello world"],
                               "add_special_tokens": False}, token)
    assert [[t["text"] for t in tokens] for tokens in response.json()] == [["hello"], ["hello", "world"]]


async def test_the_models_truncation_applies(token: str) -> None:
    response = await tokenize({"model": "minilm", "inputs": "word " * 1000}, token)
    assert len(response.json()[0]) == 256  # MiniLM's max_seq_length (sentence_bert_config.json), as the worker truncates


async def test_the_tokenizer_is_loaded_once(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenization._cache.clear()
    loads: list[str] = []
    real = tokenization.load
    monkeypatch.setattr(tokenization, "load", lambda source, revision: loads.append(source) or real(source, revision))
    for _ in range(3):
        assert (await tokenize({"model": "minilm", "inputs": "x"}, token)).status_code == 200
    assert len(loads) == 1


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"inputs": "x"}, 400, "'model' is required"),
    ({"model": "minilm"}, 400, "'inputs' must be a string or a list"),
    ({"model": "minilm", "inputs": []}, 400, "must not be an empty list"),
    ({"model": "minilm", "inputs": ["a", 3]}, 400, "inputs[1] must be a string"),
    ({"model": "minilm", "inputs": "a", "add_special_tokens": "yes"}, 400, "true or false"),
    ({"model": "minilm", "inputs": "a", "prompt_name": "q"}, 400, "unknown field(s) prompt_name"),
    ({"model": "nope", "inputs": "a"}, 404, "no model named 'nope'"),
    ({"model": "minilm/nope", "inputs": "a"}, 404, "has no task 'nope'"),
    ({"model": "off", "inputs": "a"}, 503, "disabled"),
])
async def test_bad_requests_are_clear(token: str, body: Any, status: int, words: str) -> None:
    response = await tokenize(body, token)
    assert response.status_code == status and words in response.json()["error"], response.content


async def test_text_plain_is_refused_and_a_token_is_needed(token: str) -> None:
    assert (await tokenize("hello", token, content_type="text/plain")).status_code == 400
    assert (await tokenize({"model": "minilm", "inputs": "a"}, None)).status_code == 401


async def test_a_model_without_a_reachable_tokenizer_is_503(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # read once, at import: without this the hub is tried (and retried: 20 s in a CI run) first
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    response = await tokenize({"model": "remote", "inputs": "a"}, token)
    assert response.status_code in (404, 503) and "tokenizer" in response.json()["error"], response.content


async def test_a_token_limited_to_another_model_is_403(token: str, make_token: Callable[..., str]) -> None:
    from asgiref.sync import sync_to_async

    off = await sync_to_async(RegisteredModel.objects.get)(name="off")
    limited = await sync_to_async(make_token)("off-only", models=[off])
    response = await tokenize({"model": "minilm", "inputs": "a"}, limited)
    assert response.status_code == 403 and response.json()["error_type"] == "forbidden"


async def test_errors_never_show_a_local_source_path(token: str, tmp_path: Any) -> None:
    from asgiref.sync import sync_to_async

    empty, broken = tmp_path / "secret-dir-empty", tmp_path / "secret-dir-broken"
    empty.mkdir()
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    await sync_to_async(RegisteredModel.objects.filter(name="remote").update)(source=str(empty))
    await sync_to_async(RegisteredModel.objects.filter(name="off").update)(source=str(broken), enabled=True)
    from models_registry.catalog import lookups
    lookups.reset()
    for model, status in (("remote", 404), ("off", 503)):
        response = await tokenize({"model": model, "inputs": "a"}, token)
        assert response.status_code == status, response.content
        assert "secret-dir" not in response.content.decode() and str(tmp_path) not in response.content.decode()
        assert "(local directory)" in response.json()["error"]


async def test_a_long_text_is_cut_before_it_is_tokenized(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 MB text: the tokenizer sees only what its truncation keeps (the same tokens), the offsets stay the text's."""
    seen: list[int] = []
    tokenizer = await tokenization.get(str(model_factory.minilm_path()), "")
    real = type(tokenizer).encode_batch
    monkeypatch.setattr(tokenization, "Tokenizer", type(tokenizer))

    class Watched:
        truncation = tokenizer.truncation

        def encode_batch(self, texts: list[str], add_special_tokens: bool) -> Any:
            seen.extend(len(t) for t in texts)
            return real(tokenizer, texts, add_special_tokens=add_special_tokens)

    text = "naive words and more " * 45_000  # about 1 MB (the body limit is 1 MiB)
    short = await tokenize({"model": "minilm", "inputs": text[:5000]}, token)
    key = (str(model_factory.minilm_path()), "")
    tokenization._cache[key] = Watched()  # type: ignore[assignment]
    try:
        response = await tokenize({"model": "minilm", "inputs": text}, token)
    finally:
        tokenization._cache[key] = tokenizer
    assert response.status_code == 200, response.content
    assert seen == [256 * 32]  # MiniLM's 256 tokens (its max_seq_length), at most 32 characters each
    assert response.json() == short.json()  # the first 256 tokens either way

    tokenizer_left = tokenization.load(str(model_factory.minilm_path()), "")
    tokenizer_left.enable_truncation(8, direction="left")
    long_text = "alpha beta " * 100 + "the end"
    [found] = tokenization.tokenize(tokenizer_left, [long_text], add_special_tokens=False)
    assert [t.text for t in found][-2:] == ["the", "end"]
    assert all(long_text[t.start:t.stop] == t.text for t in found)  # offsets into the whole text
