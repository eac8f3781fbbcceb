"""GET /api/openapi.json and GET /api/docs: every route described, its errors too, docs served offline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders

from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("require_tokens")]

INFERENCE_ERRORS = {"400", "401", "403", "404", "405", "413", "429", "500", "503", "504"}


@pytest.fixture
async def schema() -> dict[str, Any]:
    response = await AsyncClient().get("/api/openapi.json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    return response.json()


def node_ref_parts(ref: str) -> list[str]:
    return ref.removeprefix("#/").split("/")


def refs_in(node: Any) -> list[str]:
    """Every $ref string anywhere under node."""
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in refs_in(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs_in(v)]
    return []


def test_every_spec_route_is_described(schema: dict[str, Any]) -> None:
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
    assert operations == {
        ("/models", "get"), ("/models/{name}", "get"), ("/models/{name}", "post"),
        ("/models/{name}/{task}", "post"), ("/v1/embeddings", "post"), ("/v1/models", "get"),
        ("/v1/chat/completions", "post"), ("/v1/completions", "post"), ("/health", "get"), ("/ready", "get"), ("/metrics", "get"),
        ("/api/openapi.json", "get"), ("/api/docs", "get"), ("/tokenize", "post"), ("/embed_sparse", "post"),
        ("/rerank", "post"), ("/v1/files", "post"), ("/v1/files", "get"), ("/v1/files/{file_id}", "get"),
        ("/v1/files/{file_id}", "delete"),
        ("/v1/files/{file_id}/content", "get"), ("/v1/batches", "post"), ("/v1/batches", "get"),
        ("/v1/batches/{batch_id}", "get"), ("/v1/batches/{batch_id}/cancel", "post"), ("/v1/usage", "get"),
        ("/v1/responses", "post"), ("/v1/responses/{response_id}", "get"), ("/v1/responses/{response_id}", "delete"),
        ("/v1/audio/transcriptions", "post"),
    }
    assert schema["openapi"] == "3.1.0"


def test_every_reference_resolves(schema: dict[str, Any]) -> None:
    for ref in set(refs_in(schema)):
        node: Any = schema
        for part in node_ref_parts(ref):
            assert part in node, f"dangling {ref}"
            node = node[part]


@pytest.mark.parametrize(("path", "method"), [
    ("/models/{name}", "post"), ("/models/{name}/{task}", "post"), ("/v1/embeddings", "post"),
    ("/v1/chat/completions", "post"), ("/v1/completions", "post"), ("/v1/responses", "post"),
])
def test_inference_routes_document_every_error_and_both_bodies(schema: dict[str, Any], path: str,
                                                                method: str) -> None:
    operation = schema["paths"][path][method]
    assert set(operation["responses"]) == {"200"} | INFERENCE_ERRORS
    content = operation["requestBody"]["content"]
    files = {"image/*", "audio/*", "application/octet-stream"}  # the media tasks' raw bodies
    assert set(content) == ({"application/json"} if path.startswith("/v1") else {"application/json", "text/plain", *files})
    shape = "OpenAIError" if path.startswith("/v1") else "Error"
    for status in INFERENCE_ERRORS:
        response = schema["components"]["responses"][operation["responses"][status]["$ref"].rsplit("/", 1)[1]]
        assert response["content"]["application/json"]["schema"]["allOf"][0]["$ref"].endswith(shape)
        assert "X-Request-Id" in response["headers"]
    retry = schema["components"]["responses"][f"{shape}503"]["headers"]
    assert "Retry-After" in retry


def test_security_is_bearer_except_on_the_public_routes(schema: dict[str, Any]) -> None:
    bearer = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    assert schema["security"] == [{"bearerAuth": []}]
    public = {path for path, item in schema["paths"].items() for op in item.values() if op.get("security") == []}
    assert public == {"/health", "/ready", "/api/openapi.json", "/api/docs"}
    metrics = schema["paths"]["/metrics"]["get"]
    assert metrics["security"] == [{}, {"metricsToken": []}] and "401" in metrics["responses"]
    for path in ("/models", "/models/{name}", "/v1/models"):
        assert "401" in schema["paths"][path]["get"]["responses"]


def test_error_statuses_name_their_error_types(schema: dict[str, Any]) -> None:
    narrowed = schema["components"]["responses"]["Error503"]["content"]["application/json"]["schema"]["allOf"][1]
    assert narrowed["properties"]["error_type"]["enum"] == ["overloaded", "unavailable"]
    enum = schema["components"]["schemas"]["Error"]["properties"]["error_type"]["enum"]
    assert {"invalid_input", "unauthorized", "forbidden", "not_found", "too_large", "overloaded", "unavailable",
            "timeout", "internal", "method_not_allowed", "rate_limited", "conflict"} == set(enum)


async def test_schema_route_refuses_post_with_allow() -> None:
    response = await AsyncClient().post("/api/openapi.json")
    assert response.status_code == 405 and response["Allow"] == "GET"
    assert response.json()["error_type"] == "method_not_allowed"


async def test_docs_page_loads_only_local_static_files() -> None:
    response = await AsyncClient().get("/api/docs")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    assert 'data-schema-url="/api/openapi.json"' in page
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), f"{asset} is not among the app's static files"
    assert finders.find("models_registry/vendor/swagger-ui/LICENSE")
    script = Path(finders.find("models_registry/api_docs.js")).read_text()
    assert "validatorUrl: null" in script  # no call to validator.swagger.io


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("put", "/models/anything/fill-mask", "POST"),
    ("get", "/models/anything/fill-mask", "POST"),
    ("delete", "/models/anything", "POST, GET"),
    ("post", "/health", "GET"),
])
async def test_405s_carry_allow(method: str, path: str, allow: str) -> None:
    response = await getattr(AsyncClient(), method)(path)
    assert response.status_code == 405 and response["Allow"] == allow
