"""The request bodies of the API as pydantic shapes: the views validate with them, api.openapi.openapi documents them.

One definition per body, so the document cannot drift from what the server accepts.
Adding a route's body:

1. Declare its shape here: a TypedDict decorated `@with_config(SHAPE_CONFIG)` (strict JSON
   types, unknown keys refused), bounds in `Field(...)`; a shape whose bound is a setting
   (HOSTING_MAX_INPUTS) is built by a cached function of that setting.
2. In the view: `body = validate(shape, payload, explain)`; `explain(payload, error)` turns a
   failure into the route's one clear error (shape_errors helps with parameters).
3. In api.openapi.openapi: one `Operation(...)` naming the shape (and the response shape of
   api.shapes.response_schemas); the document, its examples' checks and the drift tests follow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, Required

from pydantic import Field, ValidationError, with_config
from typing_extensions import TypedDict

from models_registry.core.errors import HostingError, InvalidInput
from models_registry.tasks import task_inputs
from models_registry.tasks.parameter_types import MAX_DIMENSIONS, SHAPE_CONFIG, Says, integer
from models_registry.tasks.shape_errors import Shape, adapter, phrase, unknown_keys
from models_registry.tasks.task_parameters import FeatureExtractionParameters, TextGenerationParameters


def validate(shape: Shape, payload: Any, explain: Callable[[Any, ValidationError], HostingError]) -> Any:
    """payload checked against shape (a plain dict back); explain(payload, error) is raised when it fails."""
    try:
        return adapter(shape).validate_python(payload)
    except ValidationError as error:
        raise explain(payload, error) from None


STREAM_TASKS = ("text-generation", "text2text-generation")  # "stream": true answers TGI's events
STREAM_DESCRIPTION = ("true: answer text/event-stream, Text Generation Inference's events token by token (one "
                      "string input); text-generation also takes TGI's parameters.details")


@with_config(SHAPE_CONFIG)
class TgiParameters(TextGenerationParameters, total=False):
    """text-generation's parameters at the HTTP route: also TGI's, answered by the token-level path."""

    details: Annotated[bool | None, Field(description="TGI's details: each token with its id and logprob")]
    decoder_input_details: Annotated[bool | None, Field(description="TGI's details of the prompt's tokens")]


def _title(task: str) -> str:
    return "".join(part.capitalize() for part in task.replace("2", "-2-").split("-"))


@functools.cache
def inference_request(task: str, max_inputs: int) -> Shape:
    """The Hugging Face Inference API body for a pipeline task ({"inputs", "parameters"}; feature-extraction's
    spec keys also at the top level; "options" from HF clients accepted and ignored)."""
    kind = task_inputs.TASK_KINDS[task]
    fields: dict[str, Any] = {
        "inputs": Required[task_inputs.inputs_shape(task, max_inputs)],
        "parameters": NotRequired[(TgiParameters if task == "text-generation" else kind.parameters) | None],
        "options": NotRequired[dict[str, Any]],
    }
    if task == "feature-extraction":
        top_level = task_inputs.keys(FeatureExtractionParameters)
        fields.update({key: NotRequired[top_level[key]] for key in task_inputs.FEATURE_TOP_LEVEL_KEYS})
    if task in STREAM_TASKS:
        fields["stream"] = NotRequired[Annotated[bool | None, Field(description=STREAM_DESCRIPTION)]]
    else:  # the route reads "stream" before the task's shape: false or null mean "no stream" everywhere
        fields["stream"] = NotRequired[Annotated[Literal[False] | None, Field(
            description=f"only {' and '.join(STREAM_TASKS)} stream")]]
    shape = TypedDict(f"{_title(task)}Request", fields)  # type: ignore[operator]
    shape.__doc__ = f"The {task} request (Hugging Face Inference API shape)."
    return with_config(SHAPE_CONFIG)(shape)


def explain_inference(task: str, max_inputs: int) -> Callable[[Any, ValidationError], HostingError]:
    """The one error for a body that failed inference_request(task, max_inputs), in the order a reader fixes it."""

    def explain(payload: Any, error: ValidationError) -> HostingError:
        if not isinstance(payload, dict):
            return InvalidInput("request body must be a JSON object like {\"inputs\": ...}")
        errors = error.errors()
        unknown = unknown_keys(errors)
        if unknown:
            return InvalidInput(f"unknown field(s) {', '.join(unknown)}; send 'inputs' and 'parameters'")
        where = [str(e["loc"][0]) for e in errors if e["loc"]]
        if "options" in where:
            return InvalidInput("'options' must be a JSON object")
        if "inputs" in where:
            return task_inputs.explain_inputs(task, payload.get("inputs"), max_inputs)
        if "parameters" in where:
            try:
                task_inputs.validate_parameters(task, payload["parameters"], from_request=True)
            except InvalidInput as bad:
                return bad
        shape = inference_request(task, max_inputs)
        return InvalidInput(f"parameter {where[0]!r} must {phrase(shape, where[0])}")

    return explain


@functools.cache
def embedding_request(max_inputs: int) -> Shape:
    """OpenAI's POST /v1/embeddings body."""
    inputs = str | Annotated[list[str], Field(min_length=1, max_length=max_inputs)]
    shape = TypedDict("EmbeddingRequest", {  # type: ignore[operator]
        "model": Required[Annotated[str, Field(min_length=1, description="a model id from GET /v1/models: a name, "
                                                                         "or name/task for a named task")]],
        "input": Required[Annotated[inputs, Field(description=f"Text to embed: a string, or a list of up to "
                                                              f"{max_inputs} strings answered in the same order "
                                                              "(token-id arrays are answered 400)")]],
        "encoding_format": NotRequired[Annotated[Literal["float", "base64"] | None, Field(
            description="base64: little-endian float32, as the openai SDK asks by default; default float")]],
        "dimensions": NotRequired[Annotated[integer(1, MAX_DIMENSIONS) | None, Field(
            description="Matryoshka: the first d components (1 to the model's size)"),
            Says(f"be a positive integer (at most {MAX_DIMENSIONS})")]],
        "user": NotRequired[Annotated[str | None, Field(description="accepted and ignored")]],
        "prompt_name": NotRequired[Annotated[str | None, Field(
            max_length=200, description="one of the model's prompts (GET /v1/models lists them: sentence-transformers' "
                                        "prompts, such as query and document), prefixed to every input; default: "
                                        "the model's default prompt, if it has one (the openai SDK sends it through "
                                        "extra_body)")]],
        "modality": NotRequired[Annotated[Literal["text", "image"] | None, Field(
            description="Infinity's: image inputs are data URIs (data:image/png;base64,...) or base64, embedded by "
                        "the model's image-feature-extraction task (a CLIP model: the same space as its text); "
                        "no audio embedding task is served yet")]],
    })
    shape.__doc__ = "OpenAI's embeddings request."
    return with_config(SHAPE_CONFIG)(shape)


MODEL_FIELD = Annotated[str, Field(min_length=1, description="a registered model name, or name/task to pick one of "
                                                             "its tasks (GET /models)")]


def texts(max_inputs: int, what: str) -> Any:
    """One string, or a list of 1 to max_inputs strings answered in the same order."""
    return Annotated[str | Annotated[list[str], Field(min_length=1, max_length=max_inputs)],
                     Field(description=f"{what}: one string, or a list of up to {max_inputs} (answered in order)")]


@functools.cache
def tokenize_request(max_inputs: int) -> Shape:
    """Text Embeddings Inference's POST /tokenize body."""
    shape = TypedDict("TokenizeRequest", {  # type: ignore[operator]
        "model": Required[MODEL_FIELD],
        "inputs": Required[texts(max_inputs, "Text to tokenize")],
        "add_special_tokens": NotRequired[Annotated[bool | None, Field(
            description="add the model's special tokens ([CLS], [SEP]...); default true")]],
    })
    shape.__doc__ = "TEI's tokenize request."
    return with_config(SHAPE_CONFIG)(shape)


@functools.cache
def rerank_request(max_inputs: int) -> Shape:
    """Text Embeddings Inference's POST /rerank body."""
    shape = TypedDict("RerankRequest", {  # type: ignore[operator]
        "model": Required[Annotated[str, Field(min_length=1, description="a model with a text-ranking task or a "
                                                                         "multi-vector (ColBERT-style) one, or "
                                                                         "name/task")]],
        "query": Required[str],
        "texts": Required[Annotated[list[str], Field(min_length=1, max_length=max_inputs)]],
        "raw_scores": NotRequired[Annotated[bool | None, Field(description="the model's logit instead of its "
                                                                           "sigmoid; default false (a multi-vector "
                                                                           "model's MaxSim is always raw)")]],
        "return_text": NotRequired[Annotated[bool | None, Field(description="echo each text in its rank; default "
                                                                            "false")]],
        "truncate": NotRequired[Annotated[bool | None, Field(description="cut pairs longer than the model takes "
                                                                         "(false: 400); default true")]],
        "truncation_direction": NotRequired[Annotated[Literal["left", "right", "Left", "Right"] | None, Field(
            description="the side cut when truncating; default right")]],
    })
    shape.__doc__ = "TEI's rerank request."
    return with_config(SHAPE_CONFIG)(shape)


@functools.cache
def embed_sparse_request(max_inputs: int) -> Shape:
    """Text Embeddings Inference's POST /embed_sparse body."""
    shape = TypedDict("EmbedSparseRequest", {  # type: ignore[operator]
        "model": Required[Annotated[str, Field(min_length=1, description="a sparse (SPLADE) model, or name/task")]],
        "inputs": Required[texts(max_inputs, "Text to embed")],
        "truncate": NotRequired[Annotated[bool | None, Field(description="cut inputs longer than the model takes "
                                                                         "(false: 400); default true")]],
        "truncation_direction": NotRequired[Annotated[Literal["left", "right", "Left", "Right"] | None, Field(
            description="the side cut when truncating; default right")]],
        "prompt_name": NotRequired[Annotated[str | None, Field(
            description="one of the model's prompts (config_sentence_transformers.json), put before every input")]],
    })
    shape.__doc__ = "TEI's embed_sparse request."
    return with_config(SHAPE_CONFIG)(shape)
