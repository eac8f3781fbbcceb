"""Which inference route serves a path: the API's ASGI handler and the batch-job lines ask here."""

from __future__ import annotations

from models_registry.api import hf_route, openai_generation, openai_routes, tei_routes
from models_registry.api.inference_route import InferenceRoute
from models_registry.jobs.lines import MODEL_URL

_FIXED: dict[str, InferenceRoute] = {
    "/v1/embeddings": openai_routes.EMBEDDINGS,
    "/rerank": tei_routes.RERANK,
    "/v1/chat/completions": openai_generation.CHAT,
    "/v1/completions": openai_generation.COMPLETIONS,
}


def match(path: str) -> tuple[InferenceRoute, dict[str, str]] | None:
    """(the route, its path arguments) of an inference path, else None."""
    fixed = _FIXED.get(path)
    if fixed is not None:
        return fixed, {}
    found = MODEL_URL.match(path)
    if found is None:
        return None
    name, task = found.groups()
    return hf_route.ROUTE, {"name": name, "task": task} if task else {"name": name}
