"""The registered models a token may use, each at its own path of the OpenAPI document.

The generic `/models/{name}` body can only say "what some task takes"; at
`/models/<model>` and `/models/<model>/<task>` the body is that task's request shape
(api.shapes.request_schemas), narrowed by what the registry knows of the task: parameters its
defaults must supply (zero-shot labels), the prompt names it defines, and the Matryoshka
sizes it serves (up to the vector length seen in an answer, or else the hidden size in the
model's config.json). /v1/embeddings gets one alternative per embedding id in the same way, and
/embed_sparse one per sparse model id (a dense model's id there is a 400).
What the tokenizer alone decides (a fill-mask input needs the model's mask token, a
target must be in its vocabulary, an input must fit its length) is said in words only.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from models_registry.api.hf import dimensions
from models_registry.api.shapes import request_schemas
from models_registry.core.paths import EMBED_SPARSE_PATH, EMBEDDINGS_PATH, openapi_path, url_path
from models_registry.core.task_key import TaskKey
from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.tasks.parameter_types import NOT_BLANK
from models_registry.tasks.task_inputs import TASK_KINDS

REF = "#/components/schemas/{}"
SIZE_KEYS = ("dimensions", "truncate_dim")
MODEL = openapi_path("model")  # the generic /models/{name} paths, replaced by one per model
NOT_NULL = ["string", "number", "boolean", "array", "object"]


@functools.lru_cache(maxsize=256)
def _hidden_size(source: str, revision: str) -> int | None:
    """The model's hidden size from its config.json, local or already in the hub cache (never the network)."""
    local = Path(source).expanduser()
    path: Any = local / "config.json" if local.is_dir() else None
    if path is None:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(source, "config.json", revision=revision or None)
    try:
        size = json.loads(Path(path).read_text()).get("hidden_size") if isinstance(path, (str, Path)) else None
    except (OSError, ValueError):
        return None
    return size if isinstance(size, int) and size > 0 else None


def native_size(spec: ModelSpec, task: TaskSpec) -> int | None:
    """The length of the task's vectors: seen in an answer, else the model's hidden size (what pooling keeps)."""
    return dimensions.known_native((spec.name, task.name, spec.load_key())) or _hidden_size(spec.source, spec.revision)


def _sizes(task: TaskSpec, native: int | None) -> dict[str, Any] | None:
    """What dimensions/truncate_dim may be for this task (api.hf.dimensions.check), None when not known yet."""
    allowed = task.parameters.get(dimensions.ALLOWED_KEY)
    if allowed:
        return {"enum": sorted({*allowed, *([native] if native else [])}) + [None]}
    if native:
        return {"anyOf": [{"type": "integer", "minimum": 1, "maximum": native}, {"type": "null"}]}
    return None


def _one_size_name() -> dict[str, Any]:
    """dimensions and truncate_dim name one size: a body gives a size under one name (two that disagree are a 400)."""
    def given(key: str) -> dict[str, Any]:
        return {"required": [key], "properties": {key: {"type": "integer"}}}

    def null(key: str) -> dict[str, Any]:
        return {"properties": {key: {"type": "null"}}}

    inside = [{"if": given("dimensions"), "then": null("truncate_dim")}]
    return {"allOf": [
        *inside,
        {"properties": {"parameters": {"allOf": inside}}},
        {"if": given("dimensions"), "then": {"properties": {"parameters": null("truncate_dim")}}},
        {"if": given("truncate_dim"), "then": {"properties": {"parameters": null("dimensions")}}},
    ]}


def narrowing(spec: ModelSpec, task: TaskSpec) -> dict[str, Any]:
    """What this task adds to its pipeline task's request shape (a schema to allOf with it)."""
    kind = TASK_KINDS[task.task]
    defaults = task.parameters or {}
    properties: dict[str, Any] = {}
    parameters: dict[str, Any] = {"properties": {}}
    narrowed: dict[str, Any] = {"properties": properties}
    missing = [name for name in kind.required if defaults.get(name) is None]
    if missing:
        narrowed["required"] = ["parameters"]
        parameters.update(type="object", required=missing)
        parameters["properties"] |= {name: {"type": NOT_NULL} for name in missing}
    if task.task == "feature-extraction":
        names = sorted(defaults.get("prompts") or {})
        fe: dict[str, Any] = {"prompt_name": {"enum": [*names, None]}}
        sparse = sparse_answer.is_sparse_task(task)  # sparse_answer.check_parameters: what each kind refuses
        sizes = {"type": "null"} if sparse else _sizes(task, native_size(spec, task))
        if sizes is not None:
            fe |= {key: sizes for key in SIZE_KEYS}
        fe |= {"normalize": {"enum": [False, None]}} if sparse else {}
        properties.update(fe)
        parameters["properties"] |= fe | ({} if sparse else {sparse_answer.PARAMETER: {"type": "null"}})
        narrowed |= _one_size_name()
    if parameters["properties"] or missing:
        properties["parameters"] = parameters
    if task.task in request_schemas.STREAM_TASKS:  # a stream answers one prompt
        streamed = {"required": ["stream"], "properties": {"stream": {"const": True}}}
        narrowed.setdefault("allOf", []).append({"if": streamed, "then": {"properties": {"inputs": {"type": "string"}}}})
    return narrowed


def _inference(generic: dict[str, Any], spec: ModelSpec, task: TaskSpec, max_inputs: int) -> dict[str, Any]:
    shape = request_schemas.inference_request(task.task, max_inputs)
    operation = copy.deepcopy(generic)
    operation.pop("parameters", None)
    operation["summary"] = f"{task.task} on {spec.name} (task {task.name!r})."
    operation["requestBody"]["content"]["application/json"] = {
        "schema": {"allOf": [{"$ref": REF.format(shape.__name__)}, narrowing(spec, task)]}}
    if task.task not in request_schemas.STREAM_TASKS:
        operation["responses"]["200"]["content"].pop("text/event-stream", None)
    kind = TASK_KINDS[task.task]
    content = operation["requestBody"]["content"]
    for media in [m for m in content if m.startswith(("image/", "audio/")) or m == "application/octet-stream"]:
        if kind.media is None or not media.startswith((kind.media, "application/")):
            content.pop(media)  # a text task takes no file; an image task no audio
    if kind.media:  # JSON inputs are base64 strings or data URIs; text/plain is one of them
        content["text/plain"]["schema"] = {"type": "string", "description": "base64 or a data URI"}
    elif kind.question_context or getattr(kind, "ranking", False):  # objects only: a text body is one string
        operation["requestBody"]["content"].pop("text/plain", None)
    elif task.task != "feature-extraction":  # a blank text is a 400 where a model needs text
        operation["requestBody"]["content"]["text/plain"]["schema"] = {"type": "string", "pattern": NOT_BLANK}
    if task.task == "fill-mask":
        operation["description"] += " Each input must hold the model's mask token (e.g. [MASK])."
    if sparse_answer.is_sparse_task(task):
        operation["description"] += (" A sparse (SPLADE) model: each input's answer is its list of non-zero "
                                     "{index, value} entries (SparseValue), at most max_active_dims of them.")
    return operation


def _embedding_ids(document: dict[str, Any], specs: dict[str, ModelSpec]) -> dict[str, Any] | None:
    """/v1/embeddings with one body alternative per embedding id (its own sizes and prompt names)."""
    from models_registry.api.openai.openai_routes import embedding_ids

    operation = copy.deepcopy(document["paths"][EMBEDDINGS_PATH]["post"])
    content = operation["requestBody"]["content"]["application/json"]
    choices = []
    for spec in specs.values():
        for model_id in embedding_ids(spec):
            task = spec.tasks[TaskKey.parse(model_id).task or spec.default_task]
            sizes = _sizes(task, native_size(spec, task))
            prompts = sorted(task.parameters.get("prompts") or {})
            choice: dict[str, Any] = {"properties": {"model": {"const": model_id},
                                                     "prompt_name": {"enum": [*prompts, None]}}}
            if not any(t.task == "image-feature-extraction" for t in spec.tasks.values()):
                choice["properties"]["modality"] = {"enum": ["text", None]}  # no image task to embed with
            if sizes is not None:
                choice["properties"]["dimensions"] = sizes
            choices.append(choice)
    if not choices:
        return None
    content["schema"] = {"allOf": [content["schema"], {"anyOf": choices}]}
    content["example"] = {"model": choices[0]["properties"]["model"]["const"], "input": "hello"}
    return operation


def _sparse_ids(document: dict[str, Any], specs: dict[str, ModelSpec]) -> dict[str, Any]:
    """/embed_sparse with one body alternative per sparse model id (its prompts), else a name no model has (404)."""
    operation = copy.deepcopy(document["paths"][EMBED_SPARSE_PATH]["post"])
    content = operation["requestBody"]["content"]["application/json"]
    choices: list[dict[str, Any]] = []
    known: list[str] = []
    for name, spec in specs.items():
        known += [name, *(str(TaskKey(name, t.name)) for t in spec.tasks.values())]
        sparse = [t for t in spec.tasks.values() if sparse_answer.is_sparse_task(t)]
        default = next((t for t in sparse if t.name == spec.default_task), sparse[0] if sparse else None)
        for model_id, task in ([(name, default)] if default else []) + [(str(TaskKey(name, t.name)), t) for t in sparse]:
            prompts = sorted(task.parameters.get("prompts") or {})
            choices.append({"properties": {"model": {"const": model_id}, "prompt_name": {"enum": [*prompts, None]}}})
    choices.append({"properties": {"model": {"not": {"enum": known}}}})  # a dense model's id is a 400
    content["schema"] = {"allOf": [content["schema"], {"anyOf": choices}]}
    return operation


def with_models(document: dict[str, Any], specs: dict[str, ModelSpec], max_inputs: int) -> dict[str, Any]:
    """The document with a path per visible model and task, and /v1/embeddings narrowed to their ids."""
    document = {**document, "paths": dict(document["paths"])}
    paths = document["paths"]
    generic = paths[MODEL]
    served = {name: spec for name, spec in sorted(specs.items())
              if any(t.task in TASK_KINDS for t in spec.tasks.values())}
    if not served:
        return document
    for name, spec in served.items():
        detail = copy.deepcopy(generic["get"])
        detail.pop("parameters", None)
        item: dict[str, Any] = {"get": detail}
        for task in spec.tasks.values():
            if task.task not in TASK_KINDS:
                continue
            operation = _inference(generic["post"], spec, task, max_inputs)
            paths[url_path("model-task", name=name, task=task.name)] = {"post": operation}
            if task.name == spec.default_task:
                item["post"] = operation
        paths[url_path("model", name=name)] = item
    # Every model this token may use has its own paths; the templates would only stand for
    # names it cannot use (404/403), with a body no task takes as a whole.
    paths.pop(MODEL, None)
    paths.pop(openapi_path("model-task"), None)
    embeddings = _embedding_ids(document, specs)
    if embeddings is not None:
        paths[EMBEDDINGS_PATH] = {"post": embeddings}
    paths[EMBED_SPARSE_PATH] = {"post": _sparse_ids(document, specs)}
    return document
