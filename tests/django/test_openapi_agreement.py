"""The OpenAPI document and the validation agree: what the document allows is accepted, what it refuses is a 4xx.

The document's request schemas are checked with a JSON Schema validator (jsonschema_rs,
schemathesis' own) against the server's validators on the same bodies: hand-picked
edge cases per task, and random bodies mixing every key some task takes.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models_registry.api.hf import dimensions, tgi_stream
from models_registry.api.openapi import openapi
from models_registry.api.openai.openai_routes import read_embedding_request
from models_registry.api.hf.payloads import read_request
from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.catalog import lookups
from models_registry.tasks.parameter_types import MAX_DIMENSIONS
from models_registry.tasks.shape_errors import keys
from models_registry.tasks.task_inputs import SUPPORTED_TASKS, TASK_KINDS
from tests.asgi_client import AsyncClient

MAX_INPUTS = 4
DEFAULTS = {"zero-shot-classification": {"candidate_labels": ["a", "b"]}}  # its one required parameter


def document() -> dict[str, Any]:
    return openapi.build_schema(MAX_INPUTS)


def validator(schema: dict[str, Any], doc: dict[str, Any] | None = None) -> Any:
    """A validator of schema with the document's components in reach of its $refs."""
    return jsonschema_rs.validator_for({**schema, "components": (doc or document())["components"]})


def request_schema(task: str) -> dict[str, Any]:
    name = next(n for n in document()["components"]["schemas"] if n == f"{openapi.request_schemas._title(task)}Request")
    return {"$ref": f"#/components/schemas/{name}"}


def server_accepts(task: str, body: Any) -> bool:
    try:
        body, _, _ = tgi_stream.split(body, task)  # as the view: TGI's keys first, then the task's shape
        read_request(body, task, DEFAULTS.get(task, {}), MAX_INPUTS)
    except (InvalidInput, TooLarge):
        return False
    return True


def agree(task: str, body: Any) -> None:
    documented = validator(request_schema(task)).is_valid(body)
    assert documented == server_accepts(task, body), f"{task}: document says {documented} for {body!r}"


EDGES: list[tuple[str, Any]] = [
    ("feature-extraction", {"inputs": "x", "parameters": {"top_k": 2}}),
    ("feature-extraction", {"inputs": "x", "dimensions": 1}),
    ("feature-extraction", {"inputs": "x", "dimensions": 0}),
    ("feature-extraction", {"inputs": "x", "parameters": {"dimensions": MAX_DIMENSIONS + 1}}),
    ("feature-extraction", {"inputs": "x", "parameters": {"matryoshka_dimensions": [8]}}),
    ("feature-extraction", {"inputs": ""}),
    ("feature-extraction", {"inputs": "x", "normalize": 1}),
    ("feature-extraction", {"inputs": "x", "truncation_direction": "middle"}),
    ("feature-extraction", {"inputs": ["x"] * MAX_INPUTS}),
    ("feature-extraction", {"inputs": ["x"] * (MAX_INPUTS + 1)}),
    ("feature-extraction", {"inputs": []}),
    ("fill-mask", {"inputs": " \t"}),
    ("fill-mask", {"inputs": "\u3000"}),
    ("fill-mask", {"inputs": "a [MASK]", "normalize": True}),
    ("fill-mask", {"inputs": "a [MASK]", "parameters": {"top_k": True}}),
    ("fill-mask", {"inputs": "a [MASK]", "parameters": {"top_k": 100, "targets": ["x", " "]}}),
    ("fill-mask", {"inputs": "a [MASK]", "options": None}),
    ("text-classification", {"inputs": "x", "parameters": {"top_k": 1000, "function_to_apply": "none"}}),
    ("text-classification", {"inputs": "x", "parameters": {"top_k": 1001}}),
    ("text-generation", {"inputs": "x", "parameters": {"temperature": 0}}),
    ("text-generation", {"inputs": "x", "parameters": {"temperature": 1, "seed": 2**63}}),
    ("summarization", {"inputs": "x", "parameters": {"generate_parameters": {"num_beams": 17}}}),
    ("summarization", {"inputs": "x", "parameters": {"generate_parameters": {"early_stopping": "never"}}}),
    ("question-answering", {"inputs": {"question": "q", "context": " "}}),
    ("question-answering", {"inputs": [{"question": "q", "context": "c"}]}),
    ("zero-shot-classification", {"inputs": "x", "parameters": {"candidate_labels": ["a", "a"]}}),
    ("zero-shot-classification", {"inputs": "x", "parameters": {"hypothesis_template": "no placeholder"}}),
    ("fill-mask", {"inputs": "a [MASK]", "stream": False}),
    ("fill-mask", {"inputs": "a [MASK]", "stream": True}),
    ("text-generation", {"inputs": "x", "stream": True, "parameters": {"details": True}}),
    ("text-generation", {"inputs": "x", "parameters": {"details": 1}}),
]


@pytest.mark.parametrize(("task", "body"), EDGES)
def test_edge_cases_agree(task: str, body: Any) -> None:
    agree(task, body)


def test_the_document_names_each_tasks_own_parameters() -> None:
    schemas = document()["components"]["schemas"]
    for task, kind in TASK_KINDS.items():
        name = f"{openapi.request_schemas._title(task)}Request"
        parameters = schemas[name]["properties"]["parameters"]["anyOf"][0]["$ref"].rsplit("/", 1)[1]
        tgi = {"details", "decoder_input_details"} if task == "text-generation" else set()  # read by the route
        assert set(schemas[parameters]["properties"]) == set(keys(kind.parameters)) | tgi, task
    fe = schemas["FeatureExtractionParameters"]["properties"]
    assert "top_k" not in fe and "matryoshka_dimensions" not in fe
    assert fe["dimensions"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": MAX_DIMENSIONS}


def test_max_items_is_the_413_limit() -> None:
    schemas = document()["components"]["schemas"]
    for task in SUPPORTED_TASKS:
        inputs = schemas[f"{openapi.request_schemas._title(task)}Request"]["properties"]["inputs"]
        if "$ref" in inputs:  # one object holding the list (text-ranking)
            inputs = schemas[inputs["$ref"].rsplit("/", 1)[1]]["properties"]["sentences"]
        arrays = [s for s in inputs.get("anyOf", [inputs]) if s.get("type") == "array"]
        assert [s.get("maxItems") for s in arrays] == [MAX_INPUTS], task
    with pytest.raises(TooLarge):
        read_request({"inputs": ["x"] * (MAX_INPUTS + 1)}, "fill-mask", {}, MAX_INPUTS)
    embedding = validator(document()["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]
                          ["application/json"]["schema"])
    assert embedding.is_valid({"model": "m", "input": ["x"] * MAX_INPUTS})
    assert not embedding.is_valid({"model": "m", "input": ["x"] * (MAX_INPUTS + 1)})
    with pytest.raises(TooLarge):
        read_embedding_request({"model": "m", "input": ["x"] * (MAX_INPUTS + 1)}, MAX_INPUTS)


# Random bodies: keys every task knows of, values of every JSON kind near the bounds.
ALL_KEYS = sorted({k for kind in TASK_KINDS.values() for k in keys(kind.defaults_shape)} | {"inputs", "options"})
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 1100), st.sampled_from([0.5, 1.5, 100.0, 2**63]),
                    st.sampled_from(["", " ", "x", "a,b", "Left", "none", "never", "This is {}.", "\x1c", "\u3000"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=MAX_INPUTS + 1),
    st.dictionaries(st.sampled_from(["question", "context", "x", *ALL_KEYS[:6]]), inner, max_size=3)), max_leaves=6)
BODIES = st.fixed_dictionaries(
    {"inputs": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=MAX_INPUTS + 1), VALUES)},
    optional={"parameters": st.one_of(st.none(), st.dictionaries(st.sampled_from(ALL_KEYS), VALUES, max_size=3)),
              **{k: VALUES for k in ("normalize", "truncate", "dimensions", "prompt_name", "options", "top_k",
                                     "stream")}})


@pytest.mark.parametrize("task", [t for t in SUPPORTED_TASKS if not TASK_KINDS[t].required])  # zero-shot: labels
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(body=BODIES)
def test_random_bodies_agree(task: str, body: dict[str, Any]) -> None:
    agree(task, body)


# --- the document a token gets: each of its models at its own path ---------------------

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def per_model(make_model: Any, make_token: Any, require_tokens: None) -> tuple[dict[str, Any], str]:
    minilm = make_model("mini", task="feature-extraction", pooling="mean", normalize=True)
    make_model("zs", task="zero-shot-classification")
    make_model("other", task="fill-mask")
    token = make_token("mini-and-zs", models=[minilm, type(minilm).objects.get(name="zs")])
    return minilm, token


async def get_document(token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await AsyncClient().get("/api/openapi.json", headers=headers)
    assert response.status_code == 200
    return response.json()


def body_validator(doc: dict[str, Any], path: str) -> Any:
    return validator(doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"], doc)


async def test_a_token_sees_its_own_models_with_their_exact_bodies(per_model: Any) -> None:
    _, token = per_model
    spec = (await lookups.get_specs())["mini"]
    dimensions._native[("mini", "feature-extraction", spec.load_key())] = 384  # as after its first answer
    doc = await get_document(token)
    assert {"/models/mini", "/models/mini/feature-extraction", "/models/zs"} <= set(doc["paths"])
    assert "/models/{name}" not in doc["paths"] and "get" in doc["paths"]["/models/mini"]
    assert not any(p.startswith("/models/other") for p in doc["paths"])  # not this token's model
    fe = body_validator(doc, "/models/mini")
    assert fe.is_valid({"inputs": "x", "dimensions": 384}) and not fe.is_valid({"inputs": "x", "dimensions": 385})
    assert not fe.is_valid({"inputs": "x", "parameters": {"top_k": 2}})
    assert not fe.is_valid({"inputs": "x", "dimensions": 8, "truncate_dim": 16})
    zs = body_validator(doc, "/models/zs")
    assert not zs.is_valid({"inputs": "x"})  # no candidate_labels in the task's defaults: the request must send them
    assert zs.is_valid({"inputs": "x", "parameters": {"candidate_labels": "a, b"}})
    embeddings = body_validator(doc, "/v1/embeddings")
    assert embeddings.is_valid({"model": "mini", "input": "x", "dimensions": 384})
    assert not embeddings.is_valid({"model": "mini", "input": "x", "dimensions": 385})


async def test_without_a_token_the_document_names_no_model(per_model: Any) -> None:
    doc = await get_document(None)
    assert not any(p.startswith(("/models/mini", "/models/zs")) for p in doc["paths"])
    assert await get_document("not-a-token") == doc


def test_an_integral_float_is_an_integer_as_in_json_schema() -> None:
    agree("fill-mask", {"inputs": "a [MASK]", "parameters": {"top_k": 2.0}})
    agree("fill-mask", {"inputs": "a [MASK]", "parameters": {"top_k": 2.5}})
    assert read_request({"inputs": "a [MASK]", "parameters": {"top_k": 2.0}}, "fill-mask", {}, 4).parameters == {
        "top_k": 2}


@pytest.mark.parametrize(("path", "body"), [
    ("/tokenize", {"model": "m", "inputs": "x"}),
    ("/tokenize", {"model": "m", "inputs": []}),
    ("/tokenize", {"model": "m", "inputs": ["x"] * (MAX_INPUTS + 1)}),
    ("/tokenize", {"model": "", "inputs": "x"}),
    ("/tokenize", {"model": "m", "inputs": "x", "add_special_tokens": 1}),
    ("/rerank", {"model": "m", "query": "q", "texts": ["a"], "raw_scores": None, "truncation_direction": "Left"}),
    ("/rerank", {"model": "m", "query": "q", "texts": "a"}),
    ("/rerank", {"model": "m", "query": 1, "texts": ["a"]}),
    ("/rerank", {"model": "m", "query": "q", "texts": ["a"], "top_n": 1}),
    ("/rerank", {"model": "m", "query": "q", "texts": ["a"], "truncation_direction": "middle"}),
    ("/embed_sparse", {"model": "m", "inputs": "x"}),
    ("/embed_sparse", {"model": "m", "inputs": ["x", ""], "truncate": False, "truncation_direction": "Left",
                       "prompt_name": "query"}),
    ("/embed_sparse", {"model": "m", "inputs": ["x"], "truncate": None, "prompt_name": None}),
    ("/embed_sparse", {"model": "m", "inputs": []}),
    ("/embed_sparse", {"model": "m", "inputs": ["x"] * (MAX_INPUTS + 1)}),
    ("/embed_sparse", {"model": "m", "inputs": "x", "normalize": True}),
    ("/embed_sparse", {"model": "m", "inputs": "x", "prompt_name": 3}),
    ("/embed_sparse", {"model": "m", "inputs": "x", "truncation_direction": "middle"}),
    ("/embed_sparse", {"inputs": "x"}),
])
def test_tei_bodies_agree(path: str, body: Any) -> None:
    from models_registry.api.tei.tei_routes import read_embed_sparse_request, read_rerank_request, read_tokenize_request

    read = {"/tokenize": read_tokenize_request, "/rerank": read_rerank_request,
            "/embed_sparse": read_embed_sparse_request}[path]
    try:
        read(body, MAX_INPUTS)
        accepted = True
    except (InvalidInput, TooLarge):
        accepted = False
    schema = document()["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert validator(schema).is_valid(body) == accepted, body


async def test_answers_have_their_documented_shapes(per_model: Any) -> None:
    from models_registry.api.shapes import response_schemas as r
    from models_registry.tasks.shape_errors import adapter

    _, token = per_model
    client, auth_header = AsyncClient(), {"Authorization": f"Bearer {token}"}
    answers = [
        (r.Health, await client.get("/health")),
        (r.ModelList, await client.get("/models", headers=auth_header)),
        (r.ModelDetail, await client.get("/models/mini", headers=auth_header)),
        (r.OpenAIModelList, await client.get("/v1/models", headers=auth_header)),
        (r.Error, await client.post("/models/no-such-model", {"inputs": "x"}, "application/json",
                                    headers=auth_header)),
        (r.Error, await client.get("/models")),
        (r.OpenAIError, await client.post("/v1/embeddings", {"model": "mini"}, "application/json",
                                          headers=auth_header)),
    ]
    for shape, response in answers:
        adapter(shape).validate_python(response.json())  # raises on an undocumented shape
    # A token limited to some models is refused any other name (403) before it could learn which exist.
    assert [response.status_code for _, response in answers] == [200, 200, 200, 200, 403, 401, 400]


@pytest.fixture
def generation_token(make_model: Any, make_token: Any, require_tokens: None) -> str:
    make_model("gen", task="text-generation")
    return make_token("all")


async def test_a_stream_is_one_prompt_in_the_models_document(generation_token: str) -> None:
    doc = await get_document(generation_token)
    body = body_validator(doc, "/models/gen")
    assert body.is_valid({"inputs": "x", "stream": True}) and body.is_valid({"inputs": ["x", "y"], "stream": False})
    assert not body.is_valid({"inputs": ["x"], "stream": True})
    assert "text/event-stream" in doc["paths"]["/models/gen"]["post"]["responses"]["200"]["content"]


def test_the_generation_bodies_are_documented_by_the_shapes_that_validate_them() -> None:
    """One definition: the chat and completions operations name the shapes whose adapters the routes validate with."""
    from models_registry.api.openai import generation_bodies, generation_schemas
    from models_registry.tasks.shape_errors import adapter

    bodies = {op.route: op.body for op in generation_schemas.operations(openapi.Operation, ())}
    schemas = document()["components"]["schemas"]
    for chat, route in ((True, "openai-chat-completions"), (False, "openai-completions")):
        shape = generation_bodies.SHAPES[chat]
        assert bodies[route] is shape and generation_bodies.ADAPTERS[chat] is adapter(shape)
        assert schemas[shape.__name__] == openapi.schemas_of({"body": shape})[1][shape.__name__]
        assert set(schemas[shape.__name__]["properties"]) == set(keys(shape))


def test_the_responses_body_is_documented_by_the_shape_that_validates_it() -> None:
    from models_registry.api.openai import responses_bodies, responses_schemas
    from models_registry.tasks.shape_errors import adapter

    bodies = {(op.route, op.method): op.body for op in responses_schemas.operations(openapi.Operation, ())}
    shape = responses_bodies.ResponseRequest
    assert bodies[("openai-responses", "post")] is shape and responses_bodies.ADAPTER is adapter(shape)
    assert document()["components"]["schemas"]["ResponseRequest"] == openapi.schemas_of({"body": shape})[1][
        "ResponseRequest"]
