"""The OpenAPI description of TEI's routes (/tokenize, /rerank): their paths and schemas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models_registry.api.openapi_schemas import BOOLEAN, INTEGER, NUMBER, STRING, nullable, obj, ref

JsonSchema = dict[str, Any]
MODEL_FIELD = {**STRING, "minLength": 1,
               "description": "a registered model name, or name/task to pick one of its tasks (GET /models)"}


def _texts(max_inputs: int, what: str) -> JsonSchema:
    return {"description": what, "anyOf": [STRING, {"type": "array", "items": STRING, "minItems": 1,
                                                    "maxItems": max_inputs}]}


def schemas(max_inputs: int) -> dict[str, JsonSchema]:
    """The request and answer schemas of /tokenize and /rerank."""
    return {
        "TokenizeRequest": obj({
            "model": MODEL_FIELD,
            "inputs": _texts(max_inputs, "One text, or a list of texts (answered in the same order)."),
            "add_special_tokens": nullable(BOOLEAN, "add the model's special tokens ([CLS], [SEP]...); default true"),
        }, ("model", "inputs"), closed=True),
        "SimpleToken": obj({
            "id": INTEGER,
            "text": {**STRING, "description": "the input's characters start:stop, or a special token's string"},
            "special": BOOLEAN,
            "start": nullable(INTEGER, "character offset in the input (null for a special token)"),
            "stop": nullable(INTEGER, "character offset after the token (null for a special token)"),
        }, ("id", "text", "special", "start", "stop")),
        "TokenizeResponse": {"type": "array", "description": "One token list per input, even for one string.",
                             "items": {"type": "array", "items": ref("SimpleToken")}},
        "RerankRequest": obj({
            "model": {**MODEL_FIELD, "description": "a model with a text-ranking task, or name/task"},
            "query": STRING,
            "texts": {"type": "array", "items": STRING, "minItems": 1, "maxItems": max_inputs},
            "raw_scores": nullable(BOOLEAN, "the model's logit instead of its sigmoid; default false"),
            "return_text": nullable(BOOLEAN, "echo each text in its rank; default false"),
            "truncate": nullable(BOOLEAN, "cut pairs longer than the model takes (false: 400); default true"),
            "truncation_direction": nullable({"enum": ["left", "right", "Left", "Right"]},
                                             "the side cut when truncating; default right"),
        }, ("model", "query", "texts"), closed=True),
        "Rank": obj({"index": INTEGER, "score": NUMBER, "text": STRING}, ("index", "score")),
        "RerankResponse": {"type": "array", "items": ref("Rank"),
                           "description": "Every text's rank, highest score first."},
    }


def paths(operation: Callable[..., JsonSchema], ok: Callable[..., JsonSchema],
          errors: tuple[int, ...]) -> dict[str, Any]:
    """The path items of /tokenize and /rerank, built with openapi.py's helpers."""
    tokenize_body = {"application/json": {"schema": ref("TokenizeRequest"),
                                          "example": {"model": "all-minilm-l6-v2", "inputs": "Hello world"}}}
    rerank_body = {"application/json": {"schema": ref("RerankRequest"), "example": {
        "model": "my-reranker", "query": "What is Django?", "texts": ["A web framework.", "A guitarist."]}}}
    return {
        "/rerank": {"post": operation(
            "Text Embeddings Inference's rerank over a text-ranking task: (query, text) pairs scored in batches.",
            ok("The texts' ranks, best first.", ref("RerankResponse"), timings=True), errors, body=rerank_body,
            tags=["tei"])},
        "/tokenize": {"post": operation(
            "Text Embeddings Inference's tokenize: ids, strings and character offsets (no worker involved).",
            ok("The tokens of each input.", ref("TokenizeResponse")), errors, body=tokenize_body, tags=["tei"])},
    }
