"""Embedding families registered with no flags answer sentence-transformers' vectors over HTTP, with their prompts.

The real stack (Redis, runworker, uvicorn) serves tiny random models laid out as the families' hub repositories
(tests/hub_layouts.py); the reference is sentence-transformers' SentenceTransformer on the same directories.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from tests import hub_layouts
from tests.model.test_model_families import assert_same_vectors
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration
sentence_transformers = pytest.importorskip("sentence_transformers")

SERVED = ("bge", "qwen3", "e5", "labse")
TEXTS = ["Which Worker answers the queue?", "a short one", "the model server packs sentences into rows " * 3]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-families")
    return {name: hub_layouts.build(hub_layouts.FAMILIES[name], root / name) for name in SERVED}


@pytest.fixture(scope="module")
def families(family_dirs: dict[str, Path]) -> Iterator[Stack]:
    with Stack.serving(family_dirs) as running:
        yield running


def reference(family_dirs: dict[str, Path], name: str, prompt_name: str | None = None) -> np.ndarray:
    model = sentence_transformers.SentenceTransformer(str(family_dirs[name]), device="cpu")
    return model.encode(TEXTS, prompt_name=prompt_name)


@pytest.mark.parametrize("name, prompt_name", [("bge", None), ("bge", "query"), ("labse", None), ("e5", None),
                                               ("e5", "query"), ("qwen3", "query"), ("qwen3", None)])
def test_the_hf_route_answers_the_authors_vectors(families: Stack, family_dirs: dict[str, Path], name: str,
                                                  prompt_name: str | None) -> None:
    body = {"inputs": TEXTS, **({"prompt_name": prompt_name} if prompt_name else {})}  # HF's top-level key
    status, _, vectors = http_json("POST", f"{families.url}/models/{name}", body, token=families.tokens["all"])
    assert status == 200, vectors
    assert_same_vectors([np.asarray(v, dtype=np.float32) for v in vectors], reference(family_dirs, name, prompt_name))


def test_openai_embeddings_take_prompt_name_and_count_the_prompt(families: Stack, family_dirs: dict[str, Path]) -> None:
    client = openai.OpenAI(base_url=f"{families.url}/v1", api_key=families.tokens["all"], max_retries=0)
    query = client.embeddings.create(model="qwen3", input=TEXTS, extra_body={"prompt_name": "query"})
    assert_same_vectors([np.asarray(d.embedding, dtype=np.float32) for d in query.data],
                        reference(family_dirs, "qwen3", "query"))
    document = client.embeddings.create(model="qwen3", input=TEXTS, extra_body={"prompt_name": "document"})
    # the instruction is computed with every input, so it is charged with every input
    assert query.usage.prompt_tokens >= document.usage.prompt_tokens + 3 * 10
    with pytest.raises(openai.BadRequestError, match="prompt_name 'nope' is not defined"):
        client.embeddings.create(model="qwen3", input="x", extra_body={"prompt_name": "nope"})


def test_the_model_detail_says_which_settings_came_from_the_files(families: Stack) -> None:
    status, _, detail = http_json("GET", f"{families.url}/models/bge", token=families.tokens["all"])
    assert status == 200
    settings = detail["tasks"][0]["settings"]
    assert settings["pooling"] == {"value": "cls", "from": "files"}
    assert settings["normalize"] == {"value": "true", "from": "files"}
    assert settings["prompt query"]["from"] == "files"


def test_v1_models_tells_a_client_the_vector_size_pooling_context_and_prompts(families: Stack) -> None:
    status, _, listing = http_json("GET", f"{families.url}/v1/models", token=families.tokens["all"])
    assert status == 200
    models = {m["id"]: m for m in listing["data"]}
    assert models["labse"] | {"created": 0} == {
        "id": "labse", "object": "model", "created": 0, "owned_by": "hosting", "task": "feature-extraction",
        "max_model_len": 128, "dimensions": 16, "pooling": "cls", "normalize": True, "prompts": ["document", "query"]}
    assert (models["qwen3"]["pooling"], models["qwen3"]["dimensions"], models["qwen3"]["max_model_len"]) == (
        "lasttoken", 64, 256)
    assert models["e5"]["prompts"] == ["document", "passage", "query"]
