"""Which inference route serves a path: the API's ASGI handler and the batch-job lines ask here."""

from __future__ import annotations

from models_registry.api import hf_route, openai_generation, openai_routes, sparse_route, tei_routes, tokenize_route
from models_registry.api.inference_route import InferenceRoute
from models_registry.core import paths

Match = tuple[InferenceRoute, dict[str, str]]  # the route, and its path's arguments

_FIXED: dict[str, InferenceRoute] = {
    paths.EMBEDDINGS_PATH: openai_routes.EMBEDDINGS,
    paths.CHAT_COMPLETIONS_PATH: openai_generation.CHAT,
    paths.COMPLETIONS_PATH: openai_generation.COMPLETIONS,
    paths.RERANK_PATH: tei_routes.RERANK,
    paths.TOKENIZE_PATH: tokenize_route.TOKENIZE,
    paths.EMBED_SPARSE_PATH: sparse_route.EMBED_SPARSE,
}
MODEL_PREFIX = paths.MODELS_PATH + "/"  # every /models/<name>[/<task>] path starts so


def match(path: str) -> Match | None:
    """(the route, its path arguments) of an inference path, else None."""
    fixed = _FIXED.get(path)
    if fixed is not None:
        return fixed, {}
    if not path.startswith(MODEL_PREFIX):  # /v1/files, /v1/batches...: no pattern to run for them
        return None
    found = paths.model_path(path)
    if found is None:
        return None
    name, task = found
    return hf_route.ROUTE, {"name": name, "task": task} if task else {"name": name}
