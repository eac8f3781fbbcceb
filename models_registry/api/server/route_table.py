"""Which inference route serves a path: the API's ASGI handler and the batch-job lines ask here."""

from __future__ import annotations

from models_registry.api.hf import hf_route
from models_registry.api.openai import openai_generation, openai_routes, responses_route, transcriptions
from models_registry.api.tei import sparse_route, tei_routes, tokenize_route
from models_registry.api.pipeline.inference_route import InferenceRoute
from models_registry.core import paths

Match = tuple[InferenceRoute, dict[str, str]]  # the route, and its path's arguments

# URL name (core.paths.ROUTES) -> the inference route on its path: the one place a route is declared. The front
# door serves a POST to these paths with it, batch-job lines call it, and Django's URLconf makes its one view of it.
ROUTES: dict[str, InferenceRoute] = {
    "model": hf_route.ROUTE,
    "model-task": hf_route.ROUTE,
    "openai-embeddings": openai_routes.EMBEDDINGS,
    "openai-chat-completions": openai_generation.CHAT,
    "openai-completions": openai_generation.COMPLETIONS,
    "openai-responses": responses_route.RESPONSES,
    "openai-audio-transcriptions": transcriptions.TRANSCRIPTIONS,
    "tei-rerank": tei_routes.RERANK,
    "tei-tokenize": tokenize_route.TOKENIZE,
    "tei-embed-sparse": sparse_route.EMBED_SPARSE,
}
_FIXED: dict[str, InferenceRoute] = {  # the paths without parameters, for a lookup by path
    paths.url_path(name): route for name, route in ROUTES.items() if not paths.PARAMETER.search(paths.ROUTES[name])}
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
