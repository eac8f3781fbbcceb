"""Reading inference request bodies and shaping responses (HF Inference API shapes)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from models_registry.api.shapes import request_schemas
from models_registry.catalog.sparse_answer import SparseVector, is_sparse_output
from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.tasks import task_inputs

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
VECTOR_TASKS = ("feature-extraction", "image-feature-extraction")  # outputs are [float32 bytes, shape] (or sparse)
_LONG_NUMBER = re.compile(r"[0-9]{19}")
MAX_JSON_DEPTH = 32  # task inputs nest 3 deep at most; deeper only costs recursion
_INT_LIMIT = 2**63  # msgpack carries 64-bit integers only


@dataclass(frozen=True)
class InferenceRequest:
    """A validated inference request."""

    inputs: list[Any]  # strings, or {"question", "context"} objects for question-answering
    is_batch: bool
    parameters: dict[str, Any]


def parse_body(body: bytes, content_type: str, max_bytes: int) -> Any:
    """The request's JSON value, or its text for a text/plain body."""
    if len(body) > max_bytes:
        raise TooLarge(f"request body is {len(body)} bytes; the limit is {max_bytes}")
    media = content_type.split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(f"request body is not valid UTF-8 (byte {error.start})") from None
    if media == "text/plain":
        return {"inputs": text}
    if media == "application/x-www-form-urlencoded":
        # What `curl -d` sends: JSON when it parses as an object, else the text itself.
        if text.lstrip().startswith("{"):
            try:
                return _loads(text)
            except json.JSONDecodeError:
                pass
        return {"inputs": text}
    if media not in ("", "application/json") and not media.endswith("+json"):
        raise InvalidInput(f"unsupported content type {media!r}: send application/json or text/plain")
    if not text.strip():
        raise InvalidInput("request body is empty: send {\"inputs\": ...}")
    try:
        return _loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"malformed JSON: {error.msg} at line {error.lineno} column {error.colno}") from None


def _loads(text: str) -> Any:
    """json.loads, refusing what a worker message cannot carry: lone UTF-16 surrogate escapes,
    nesting deeper than MAX_JSON_DEPTH, integers beyond 64 bits.

    orjson parses first (several times faster); it refuses lone surrogates, integers beyond
    64 bits, NaN and deep nesting itself, and whatever it refuses goes through json below,
    so that what is accepted and every error message stay json's.
    """
    if not _LONG_NUMBER.search(text):  # orjson reads an integer beyond 64 bits as a float: json's path refuses it
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
        else:
            _check_shape(value)
            return value
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidInput(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as error:
        if isinstance(error, json.JSONDecodeError):
            raise
        raise InvalidInput(f"request body has a number with too many digits ({error})"[:200]) from None
    _check_shape(value)
    if _SURROGATE_ESCAPE.search(text):  # only then pay for the check (paired escapes are fine)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("request body has an unpaired UTF-16 surrogate escape (\\ud800-\\udfff); "
                               "send valid Unicode text") from None
    return value


def _check_shape(value: Any) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH and integers msgpack cannot carry (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise InvalidInput(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, int)))
        elif isinstance(item, int) and not -_INT_LIMIT <= item < _INT_LIMIT:
            raise InvalidInput("request body has an integer beyond 64 bits (too many digits)")


def read_request(payload: Any, task: str, defaults: dict[str, Any], max_inputs: int) -> InferenceRequest:
    """Validate the HF-shaped payload for task and merge the task's default parameters under it."""
    shape = request_schemas.inference_request(task, max_inputs)
    body = request_schemas.validate(shape, payload, request_schemas.explain_inference(task, max_inputs))
    inputs, is_batch = task_inputs.as_items(task, body["inputs"])
    parameters = dict(body.get("parameters") or {})
    if task == "feature-extraction":
        for key in task_inputs.FEATURE_TOP_LEVEL_KEYS:
            if parameters.get(key) is None and key in body:  # a null in 'parameters' must not hide the top level
                parameters[key] = body[key]
    # Drop nulls so they do not mask the task's defaults.
    merged = {**defaults, **{k: v for k, v in parameters.items() if v is not None}}
    task_inputs.check_required(task, merged)
    return InferenceRequest(inputs=inputs, is_batch=is_batch, parameters=merged)


def decode_vector(output: Any) -> np.ndarray:
    """A worker's [float32 bytes, shape] pair as a float32 array (answer.dump_json writes it as numbers)."""
    data, shape = output
    return np.frombuffer(data, dtype="<f4").reshape(shape)


def decode_sparse(output: Any) -> list[dict[str, Any]]:
    """A worker's sparse vector (catalog.sparse_answer) as TEI's entries, [{"index", "value"}] in index order.

    The values stay float32 scalars: answer.dump_json writes them as their shortest round-tripping numbers.
    """
    vector = SparseVector.from_wire(output)
    values = np.frombuffer(vector.values, dtype="<f4")
    return [{"index": index, "value": value}
            for index, value in zip(np.frombuffer(vector.indices, dtype="<u4").tolist(), values)]


def shape_response(task: str, outputs: list[Any], is_batch: bool) -> Any:
    """The HF Inference API response for task: one entry per input, in input order.

    One string input is answered with its entry alone, except for the tasks whose HF answer
    is a list even then (text-classification, summarization, translation, text2text-generation).
    A sparse model's vector is its list of {"index", "value"} entries.
    """
    if task in VECTOR_TASKS:
        outputs = [decode_sparse(o) if is_sparse_output(o) else decode_vector(o) for o in outputs]
    if is_batch or task_inputs.TASK_KINDS[task].single_in_list:
        return outputs
    return outputs[0]
