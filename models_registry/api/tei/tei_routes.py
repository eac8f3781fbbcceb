"""Text Embeddings Inference's routes: POST /rerank (workers), and the request shapes of /tokenize and /embed_sparse.

The model is named in the body (`model`: a registered model, or `model/task`), as TEI
clients send it to a multi-model server; errors use the one JSON shape of every route.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from models_registry.api.hf import payloads
from models_registry.api.shapes import request_schemas
from models_registry.api.pipeline import model_lookup
from models_registry.core import paths
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import error_answer
from models_registry.api.pipeline.inference_route import Work
from models_registry.broker.handoff import InferenceResult
from models_registry.core.conf import conf
from models_registry.core.errors import (
    HostingError,
    Internal,
    InvalidInput,
    NotFound,
    TooLarge,
)
from models_registry.core.task_key import TaskKey
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger("models_registry.requests")

TOKENIZE_FIELDS = ("model", "inputs", "add_special_tokens")
RERANK_FIELDS = ("model", "query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction")
EMBED_SPARSE_FIELDS = ("model", "inputs", "truncate", "truncation_direction", "prompt_name")
RANKING_TASK = "text-ranking"
HOW_TO_RANK = ("register a cross-encoder with --task text-ranking, or a multi-vector (ColBERT-style) model with "
               "--task feature-extraction")


@dataclass(frozen=True)
class RerankRequest:
    """A validated POST /rerank body."""

    model: str
    query: str
    texts: list[str]
    return_text: bool
    parameters: dict[str, Any]  # raw_scores, truncate, truncation_direction: what the worker applies


@dataclass(frozen=True)
class EmbedSparseRequest:
    """A validated POST /embed_sparse body."""

    model: str
    inputs: list[str]
    parameters: dict[str, Any]  # truncate, truncation_direction, prompt_name: what the worker applies


@dataclass(frozen=True)
class TokenizeRequest:
    """A validated POST /tokenize body."""

    model: str
    inputs: list[str]
    add_special_tokens: bool


def _fields(payload: Any, fields: tuple[str, ...], example: str) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidInput(f"request body must be a JSON object like {example}")
    unknown = sorted(set(payload) - set(fields))
    if unknown:
        raise InvalidInput(f"unknown field(s) {', '.join(unknown)}; this route takes {', '.join(fields)}")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' is required: a registered model name, or name/task (GET /models lists them)")
    return payload


def _flag(payload: dict[str, Any], name: str, default: bool) -> bool:
    value = payload.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(f"'{name}' must be true or false")
    return value


def _texts(value: Any, name: str, max_inputs: int) -> tuple[list[str], bool]:
    """A string or a non-empty list of strings, and whether it was a list."""
    if isinstance(value, str):
        return [value], False
    if not isinstance(value, list):
        raise InvalidInput(f"'{name}' must be a string or a list of strings")
    if not value:
        raise InvalidInput(f"'{name}' must not be an empty list")
    if len(value) > max_inputs:
        raise TooLarge(f"{len(value)} {name} in one request; this server takes at most {max_inputs}")
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidInput(f"{name}[{position}] must be a string, not {type(item).__name__}")
    return value, True


def _explained(check: Callable[[Any, int], Any], max_inputs: int) -> Callable[[Any, ValidationError], HostingError]:
    """check's own words for a body its shape refused: the shape decides, check only says why."""

    def explain(payload: Any, error: ValidationError) -> HostingError:
        try:
            check(payload, max_inputs)
        except HostingError as bad:
            return bad
        return InvalidInput(f"invalid request body: {error.errors()[0]['msg']}")

    return explain


def read_tokenize_request(payload: Any, max_inputs: int) -> TokenizeRequest:
    """Validate a TEI /tokenize body (pure) with request_schemas.tokenize_request."""
    shape = request_schemas.tokenize_request(max_inputs)
    request_schemas.validate(shape, payload, _explained(_read_tokenize, max_inputs))
    return _read_tokenize(payload, max_inputs)


def read_rerank_request(payload: Any, max_inputs: int) -> RerankRequest:
    """Validate a TEI /rerank body (pure) with request_schemas.rerank_request."""
    shape = request_schemas.rerank_request(max_inputs)
    request_schemas.validate(shape, payload, _explained(_read_rerank, max_inputs))
    return _read_rerank(payload, max_inputs)


def read_embed_sparse_request(payload: Any, max_inputs: int) -> EmbedSparseRequest:
    """Validate a TEI /embed_sparse body (pure) with request_schemas.embed_sparse_request."""
    shape = request_schemas.embed_sparse_request(max_inputs)
    request_schemas.validate(shape, payload, _explained(_read_embed_sparse, max_inputs))
    return _read_embed_sparse(payload, max_inputs)


def _read_tokenize(payload: Any, max_inputs: int) -> TokenizeRequest:
    body = _fields(payload, TOKENIZE_FIELDS, '{"model": "...", "inputs": "..."}')
    inputs, _ = _texts(body.get("inputs"), "inputs", max_inputs)
    return TokenizeRequest(model=body["model"], inputs=inputs,
                           add_special_tokens=_flag(body, "add_special_tokens", True))


def _read_rerank(payload: Any, max_inputs: int) -> RerankRequest:
    body = _fields(payload, RERANK_FIELDS, '{"model": "...", "query": "...", "texts": ["...", "..."]}')
    query = body.get("query")
    if not isinstance(query, str):
        raise InvalidInput("'query' is required: a string")
    texts, is_list = _texts(body.get("texts"), "texts", max_inputs)
    if not is_list:
        raise InvalidInput("'texts' must be a list of strings")
    # Only what the request says: the task's default parameters fill in the rest.
    parameters = {name: _flag(body, name, False) for name in ("raw_scores", "truncate") if body.get(name) is not None}
    return RerankRequest(model=body["model"], query=query, texts=texts, return_text=_flag(body, "return_text", False),
                         parameters={**parameters, **_direction(body)})


def _read_embed_sparse(payload: Any, max_inputs: int) -> EmbedSparseRequest:
    body = _fields(payload, EMBED_SPARSE_FIELDS, '{"model": "...", "inputs": "..."}')
    inputs, _ = _texts(body.get("inputs"), "inputs", max_inputs)
    prompt_name = body.get("prompt_name")
    if prompt_name is not None and not isinstance(prompt_name, str):
        raise InvalidInput("'prompt_name' must be the name of one of the model's prompts")
    # Only what the request says: the task's default parameters fill in the rest.
    parameters = {"truncate": _flag(body, "truncate", True)} if body.get("truncate") is not None else {}
    parameters |= {"prompt_name": prompt_name} if prompt_name is not None else {}
    return EmbedSparseRequest(model=body["model"], inputs=inputs, parameters={**parameters, **_direction(body)})


def _direction(body: dict[str, Any]) -> dict[str, str]:
    """{"truncation_direction": ...} where the body names one (left or right, either case), else {}."""
    direction = body.get("truncation_direction")
    if direction is None:
        return {}
    if direction not in ("left", "right", "Left", "Right"):
        raise InvalidInput("'truncation_direction' must be left or right")
    return {"truncation_direction": direction}


def ranks(scores: list[float], texts: list[str], return_text: bool) -> list[dict[str, Any]]:
    """TEI's answer: every text's index and score, best first (ties keep input order)."""
    if any(math.isnan(score) for score in scores):
        raise Internal("the model scored a pair as NaN")
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [{"index": i, "score": scores[i], **({"text": texts[i]} if return_text else {})} for i in order]


def body_of(call: ApiCall) -> Any:
    """The request's JSON body (text/plain has no model name, so it is refused)."""
    if call.content_type.strip().lower() == "text/plain":
        raise InvalidInput('send a JSON body (Content-Type: application/json) like {"model": "...", ...}')
    return payloads.parse_body(call.body, call.content_type, conf.MAX_BODY_BYTES)


def resolve(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec | None]:
    """The model named model_id ("name" or "name/task") and the task it names (None: not named)."""
    return model_lookup.model_and_named_task(*TaskKey.parse(model_id), specs, paths.shown_path("model-list"))


def can_rank(task: TaskSpec) -> bool:
    """Whether /rerank runs on task: a cross-encoder's text-ranking, or a ColBERT-style model's token vectors (MaxSim)."""
    return task.task == RANKING_TASK or (task.task == "feature-extraction" and task.layout.multi_vector is not None)


def ranking_task(spec: ModelSpec, named: TaskSpec | None) -> TaskSpec:
    """The task /rerank runs (can_rank): the one named, else the default, else the model's first one."""
    if named is not None:
        if not can_rank(named):
            raise NotFound(f"{spec.name}/{named.name} is a {named.task} task and cannot serve /rerank; {HOW_TO_RANK}")
        return named
    candidates = [spec.tasks[spec.default_task]] if spec.default_task in spec.tasks else []
    candidates += list(spec.tasks.values())
    for task in candidates:
        if can_rank(task):
            return task
    raise NotFound(f"model {spec.name!r} has no text-ranking task, so it cannot serve /rerank; {HOW_TO_RANK}")


class RerankRoute:
    """TEI's POST /rerank: each (query, text) pair is one batch item of the model's text-ranking task.

    Over a multi-vector model's feature-extraction task the worker scores a pair by MaxSim (inference.multi_vector);
    its score is the MaxSim itself, so raw_scores changes nothing there.
    """

    label = "rerank"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, RerankRequest]:
        """The validated body and the model it names."""
        wanted = read_rerank_request(body_of(call), conf.MAX_INPUTS)
        return TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: RerankRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The task of the model named that ranks (can_rank)."""
        spec, named = resolve(wanted.model, specs)
        return spec, ranking_task(spec, named)

    async def prepare(self, call: ApiCall, wanted: RerankRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """The pairs, as any client list (split across batches), and TEI's ranks as the answer."""
        pairs = [{"query": wanted.query, "text": text} for text in wanted.texts]
        parameters = {**{k: v for k, v in task.parameters.items() if v is not None}, **wanted.parameters}

        def shape(result: InferenceResult) -> Any:
            return ranks([float(score) for score in result.outputs], wanted.texts, wanted.return_text)

        return Work(pairs, parameters, len(wanted.texts), call.priority, shape)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The API's one error shape."""
        return error_answer(error, request_id)


RERANK = RerankRoute()

