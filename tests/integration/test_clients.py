"""The clients people already use, as a user would: huggingface_hub's InferenceClient and openai's SDK."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import numpy as np
import openai
import pytest

from tests.integration.conftest import CLS, MINILM, MINILM_ORT, MLM
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

TEXTS = ["The river runs past the old mill.", "A queue of requests waits for the worker."]


@pytest.fixture
def hub_online(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """InferenceClient refuses every call, even to 127.0.0.1, while HF_HUB_OFFLINE is on."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read once, at import
    yield


@pytest.fixture
def oai(stack: Stack, token: str) -> openai.OpenAI:
    """The openai SDK pointed at this server (no retries: a failure shows at once)."""
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=token, max_retries=0)


def hf_route_vectors(stack: Stack, token: str, texts: list[str]) -> np.ndarray:
    """What POST /models/minilm answers for texts."""
    status, _, body = http_json("POST", f"{stack.url}/models/{MINILM}", {"inputs": texts}, token=token)
    assert status == 200, body
    return np.array(body, dtype=np.float32)


# --- huggingface_hub.InferenceClient ----------------------------------------------------------


def test_hf_feature_extraction_matches_the_route(stack: Stack, token: str, hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{stack.url}/models/{MINILM}", token=token)
    vector = client.feature_extraction(TEXTS[0])
    assert vector.shape == (384,)
    np.testing.assert_allclose(vector, hf_route_vectors(stack, token, TEXTS[:1])[0], rtol=0, atol=1e-6)


def test_hf_fill_mask_parses_predictions(stack: Stack, token: str, hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{stack.url}/models/{MLM}", token=token)
    predictions = client.fill_mask("Paris is the [MASK] of France.", top_k=3)
    assert len(predictions) == 3
    assert all(p.sequence and p.token_str and isinstance(p.token, int) for p in predictions)
    assert [p.score for p in predictions] == sorted((p.score for p in predictions), reverse=True)


def test_hf_text_classification_parses_every_label(stack: Stack, token: str, hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{stack.url}/models/{CLS}", token=token)
    labels = client.text_classification("I love it")
    assert {label.label for label in labels} == {"negative", "positive"}  # all labels, not just the first
    assert sum(label.score for label in labels) == pytest.approx(1.0, abs=1e-4)


def test_hf_client_surfaces_our_error_text(stack: Stack, token: str, hub_online: None) -> None:
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as raised:
        InferenceClient(model=f"{stack.url}/models/{MLM}", token=token).fill_mask("no mask here")
    assert raised.value.response.status_code == 400 and "[MASK]" in str(raised.value)


# --- openai SDK -----------------------------------------------------------------------------


def test_openai_str_input_by_default_base64_matches_the_route(stack: Stack, token: str, oai: openai.OpenAI) -> None:
    answer = oai.embeddings.create(model=MINILM, input=TEXTS[0])  # the SDK asks for base64 and decodes it
    assert answer.object == "list" and answer.model == MINILM
    assert [(d.object, d.index) for d in answer.data] == [("embedding", 0)]
    got = np.array(answer.data[0].embedding, dtype=np.float32)
    np.testing.assert_allclose(got, hf_route_vectors(stack, token, TEXTS[:1])[0], rtol=0, atol=1e-6)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 2  # [CLS] ... [SEP] at least


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_openai_list_input_in_order(stack: Stack, token: str, oai: openai.OpenAI, encoding: str) -> None:
    answer = oai.embeddings.create(model=MINILM, input=TEXTS, encoding_format=encoding, user="someone")
    assert [d.index for d in answer.data] == [0, 1]
    if encoding == "base64":  # explicitly asked for: the SDK hands back the string
        vectors = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in answer.data])
    else:
        vectors = np.array([d.embedding for d in answer.data], dtype=np.float32)
    expected = hf_route_vectors(stack, token, TEXTS)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)
    assert answer.usage.prompt_tokens > 4


def test_openai_named_task_and_native_dimensions(oai: openai.OpenAI) -> None:
    answer = oai.embeddings.create(model=f"{MINILM}/feature-extraction", input="x", dimensions=384)
    assert len(answer.data[0].embedding) == 384


def test_openai_matryoshka_dimensions_match_the_hf_route(stack: Stack, token: str, oai: openai.OpenAI) -> None:
    answer = oai.embeddings.create(model=MINILM, input=TEXTS, dimensions=64)  # base64 by default
    got = np.array([d.embedding for d in answer.data], dtype=np.float32)
    full = hf_route_vectors(stack, token, TEXTS)[:, :64]
    np.testing.assert_allclose(got, full / np.linalg.norm(full, axis=1, keepdims=True), rtol=0, atol=1e-6)
    status, _, body = http_json("POST", f"{stack.url}/models/{MINILM}", {"inputs": TEXTS, "truncate_dim": 64},
                                token=token)
    assert status == 200 and np.allclose(np.array(body, dtype=np.float32), got, atol=1e-6)


def test_openai_dimensions_over_the_models_size_are_a_clear_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        oai.embeddings.create(model=MINILM, input="x", dimensions=385)
    assert "384" in str(raised.value) and raised.value.param == "dimensions"
    assert raised.value.code == "invalid_input"


def test_openai_token_id_arrays_are_a_clear_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="token-id arrays are not supported"):
        oai.embeddings.create(model=MINILM, input=[[101, 7592, 102]])


def test_openai_a_non_embedding_model_is_a_clear_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="fill-mask task, not an embedding model"):
        oai.embeddings.create(model=MLM, input="x")


def test_openai_unknown_model_is_not_found(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="no model named 'nope'"):
        oai.embeddings.create(model="nope", input="x")


def test_openai_bad_key_is_an_authentication_error(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="invalid, revoked or expired API token"):
        client.embeddings.create(model=MINILM, input="x")


def test_openai_token_limited_to_another_model_is_denied(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens["cls-only"], max_retries=0)
    with pytest.raises(openai.PermissionDeniedError, match="not allowed to use model 'minilm'"):
        client.embeddings.create(model=MINILM, input="x")
    assert [m.id for m in client.models.list()] == []  # tiny-cls has no embedding task


def test_openai_models_list(oai: openai.OpenAI) -> None:
    models = list(oai.models.list())
    # the feature-extraction models only: the fill-mask, classification and ranking models embed nothing
    assert sorted(m.id for m in models) == sorted([MINILM, MINILM_ORT])
    assert all(m.object == "model" and m.created > 0 and m.owned_by for m in models)
