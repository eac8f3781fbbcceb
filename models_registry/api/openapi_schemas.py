"""JSON Schemas of the API's bodies (the `components` of the OpenAPI document)."""

from __future__ import annotations

from typing import Any

from models_registry.api.errors import ERROR_CLASSES
from models_registry.registry.shape_errors import keys
from models_registry.registry.task_inputs import FEATURE_TOP_LEVEL_KEYS, TASK_KINDS

JsonSchema = dict[str, Any]

STRING, INTEGER, NUMBER, BOOLEAN = ({"type": t} for t in ("string", "integer", "number", "boolean"))


def ref(name: str) -> JsonSchema:
    """A reference to components/schemas/name."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: JsonSchema, description: str = "") -> JsonSchema:
    """schema, or JSON null (the server treats null as not sent)."""
    return {"anyOf": [schema, {"type": "null"}], **({"description": description} if description else {})}


def obj(properties: dict[str, JsonSchema], required: tuple[str, ...] = (), closed: bool = False,
        description: str = "") -> JsonSchema:
    """An object schema; closed: no other keys (the server answers 400 to unknown ones)."""
    schema: JsonSchema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def text_inputs(max_inputs: int, what: str) -> JsonSchema:
    """One string, or a non-empty list of strings (a batch answered in order)."""
    return {
        "description": f"{what}: one string, or a list of up to {max_inputs} strings answered in the same order.",
        "oneOf": [STRING, {"type": "array", "items": STRING, "minItems": 1, "maxItems": max_inputs}],
    }


def task_inputs(max_inputs: int) -> JsonSchema:
    """What `inputs` takes over every task (question-answering: question/context objects)."""
    question = obj({"question": STRING, "context": STRING}, ("question", "context"), closed=True)
    one = {"anyOf": [STRING, question]}
    return {
        "description": f"One input, or a list of up to {max_inputs} answered in the same order. A string for "
                       "most tasks; {question, context} for question-answering.",
        "anyOf": [one, {"type": "array", "items": one, "minItems": 1, "maxItems": max_inputs}],
    }


# The types of the parameters whose type is the same in every task that takes them.
_PARAMETER_TYPES: dict[str, JsonSchema] = {
    "top_k": INTEGER, "normalize": BOOLEAN, "truncate": BOOLEAN, "prompt_name": STRING, "prompt": STRING,
    "truncation_direction": {"enum": ["left", "right", "Left", "Right"]},
    "function_to_apply": {"enum": ["sigmoid", "softmax", "none"]},
    "targets": {"oneOf": [STRING, {"type": "array", "items": STRING, "minItems": 1}]},
    "prompts": {"type": "object", "additionalProperties": STRING},  # not nullable
    "dimensions": {**INTEGER, "minimum": 1},
    "truncate_dim": {**INTEGER, "minimum": 1},
}


def _parameters() -> JsonSchema:
    """Every parameter some task takes; a task answers 400 to one it does not take, or to a bad value."""
    takers: dict[str, list[str]] = {}
    for kind in TASK_KINDS.values():
        for name in keys(kind.parameters):
            if name not in kind.defaults_only:  # set at registration; a request carrying it is a 400
                takers.setdefault(name, []).append(kind.name)
    properties: JsonSchema = {}
    for name, kinds in takers.items():
        taken_by = f"taken by {', '.join(kinds)}"
        if name == "prompts" or name not in _PARAMETER_TYPES:  # any JSON value: the task checks it
            properties[name] = {**_PARAMETER_TYPES.get(name, {}), "description": taken_by}
        else:
            properties[name] = nullable(_PARAMETER_TYPES[name], taken_by)
    return nullable(obj(properties, closed=True, description="Task parameters, merged over the task's defaults."))


def _feature_keys() -> dict[str, JsonSchema]:
    return {name: nullable(_PARAMETER_TYPES[name], "feature-extraction (a top-level key of the HF spec)")
            for name in FEATURE_TOP_LEVEL_KEYS}


def _outputs() -> dict[str, JsonSchema]:
    """The answers of the HF Inference API task specification, as named schemas."""
    named = {
        "FillMaskPrediction": obj({"score": NUMBER, "token": INTEGER, "token_str": STRING, "sequence": STRING},
                                  ("score", "token", "token_str", "sequence"), description="fill-mask"),
        "LabelScore": obj({"label": STRING, "score": NUMBER}, ("label", "score"),
                          description="text-classification, zero-shot-classification"),
        "TokenEntity": obj({"entity_group": STRING, "entity": STRING, "score": NUMBER, "word": STRING,
                            "start": INTEGER, "end": INTEGER}, ("score", "word"), description="token-classification"),
        "Answer": obj({"answer": STRING, "score": NUMBER, "start": INTEGER, "end": INTEGER},
                      ("answer", "score", "start", "end"), description="question-answering"),
        "GeneratedText": {"type": "object", "minProperties": 1, "additionalProperties": STRING,
                          "description": "generated_text, summary_text or translation_text"},
    }
    item = {"anyOf": [ref(name) for name in named]}
    vector = {"type": "array", "items": NUMBER}
    named["TaskOutput"] = {
        "description": "The answer to one input: a vector (pooled), one vector per token (pooling none), "
                       "an answer, or a list of predictions (a list per [MASK] when there are several).",
        "anyOf": [vector, {"type": "array", "items": vector}, item, {"type": "array", "items": item},
                  {"type": "array", "items": {"type": "array", "items": item}}],
    }
    named["InferenceResponse"] = {
        "description": "One string input: its answer (text-classification and the text-to-text tasks: a list of "
                       "one answer). A list input: one answer per input, in order.",
        "anyOf": [ref("TaskOutput"), {"type": "array", "items": ref("TaskOutput")}],
    }
    return named


def schemas(max_inputs: int) -> dict[str, JsonSchema]:
    """Every named schema of the document."""
    vector = {"type": "array", "items": NUMBER}
    task_settings = obj({
        "name": STRING, "task": STRING, "parameters": {"type": "object"},
        "pooling": nullable({"enum": ["mean", "cls", "none"]}), "normalize": nullable(BOOLEAN),
        "max_batch_size": INTEGER, "max_batch_tokens": INTEGER, "max_batch_delay_ms": INTEGER,
        "max_queue_size": INTEGER, "timeout_s": NUMBER,
        "queue_depth": {**INTEGER, "description": "admitted, not yet answered; -1 when the broker is down"},
        "waiting_on_workers": INTEGER,
    }, ("name", "task", "max_batch_size", "max_queue_size", "timeout_s", "queue_depth"))
    summary_props: dict[str, JsonSchema] = {
        "name": STRING, "source": STRING, "revision": STRING, "device": STRING, "dtype": STRING,
        "enabled": BOOLEAN, "state": {"enum": ["loading", "ready", "error", "disabled"]},
        "error": {**STRING, "description": "why the model is not ready (empty when it is)"},
        "default_task": STRING,
    }
    return {
        "Error": obj({
            "error": {**STRING, "description": "a human message (never a stack trace)"},
            "error_type": {"enum": list(ERROR_CLASSES)},
        }, ("error", "error_type"), closed=True),
        "OpenAIError": obj({
            "error": obj({
                "message": STRING,
                "type": {"enum": ["invalid_request_error", "server_error"]},
                "param": nullable(STRING),
                "code": {"enum": list(ERROR_CLASSES), "description": "our error_type"},
            }, ("message", "type", "param", "code")),
            "error_type": {"enum": list(ERROR_CLASSES)},
        }, ("error", "error_type"), description="OpenAI's error shape, with our error_type beside it."),
        "InferenceRequest": obj({
            "inputs": task_inputs(max_inputs),
            "parameters": _parameters(),
            "options": {"type": "object", "description": "Accepted from Hugging Face clients and ignored."},
            **_feature_keys(),
        }, ("inputs",), closed=True, description="The Hugging Face Inference API request. feature-extraction "
                                                 "also takes its spec's keys at the top level."),
        **_outputs(),
        "ModelSummary": obj({**summary_props, "tasks": {"type": "array", "items": STRING}},
                            ("name", "source", "enabled", "state", "error", "default_task", "tasks")),
        "ModelList": obj({"models": {"type": "array", "items": ref("ModelSummary")}}, ("models",)),
        "ModelDetail": obj({
            **summary_props,
            "tasks": {"type": "array", "items": task_settings},
            "workers": {"type": "array", "description": "live workers that hold this model"},
        }, ("name", "source", "enabled", "state", "error", "default_task", "tasks")),
        "Health": obj({"status": {"const": "ok"}}, ("status",)),
        "Readiness": obj({
            "status": {"enum": ["ready", "not_ready"]},
            "checks": {"type": "object", "description": "database, broker, workers_alive, models_ready, ..."},
            "missing": {"type": "array", "items": STRING},
        }, ("status", "checks", "missing")),
        "EmbeddingRequest": obj({
            "model": {**STRING, "minLength": 1,
                      "description": "a model id from GET /v1/models: a name, or name/task for a named task"},
            "input": text_inputs(max_inputs, "Text to embed (token-id arrays are answered 400)"),
            "encoding_format": nullable({"enum": ["float", "base64"]},
                                        "base64: little-endian float32, as the openai SDK asks by default; "
                                        "default float"),
            "dimensions": nullable({**INTEGER, "minimum": 1},
                                   "Matryoshka: the first d components of each embedding, renormalized when the "
                                   "task normalizes; 1 to the model's size, and one of the task's "
                                   "matryoshka_dimensions when it declares them (else 400)"),
            "user": nullable(STRING, "accepted and ignored"),
        }, ("model", "input"), closed=True),
        "EmbeddingResponse": obj({
            "object": {"const": "list"},
            "data": {"type": "array", "items": obj({
                "object": {"const": "embedding"}, "index": INTEGER,
                "embedding": {"oneOf": [vector, {**STRING, "contentEncoding": "base64"}]},
            }, ("object", "index", "embedding"))},
            "model": STRING,
            "usage": obj({"prompt_tokens": INTEGER, "total_tokens": INTEGER}, ("prompt_tokens", "total_tokens")),
        }, ("object", "data", "model", "usage")),
        "OpenAIModelList": obj({
            "object": {"const": "list"},
            "data": {"type": "array", "items": obj({
                "id": STRING, "object": {"const": "model"}, "created": INTEGER, "owned_by": STRING,
            }, ("id", "object", "created", "owned_by"))},
        }, ("object", "data")),
    }
