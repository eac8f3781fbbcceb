"""The answers of the API as pydantic shapes, for the OpenAPI document (api.openapi.openapi) and the tests.

The views build these answers as plain dicts (orjson writes them, no model per request);
the Django tier checks real answers against these shapes, so the document cannot drift
from what is sent. A new route's answer: a TypedDict here, named in its `Operation`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from models_registry.core.errors import ERROR_CLASSES

ErrorType = Literal[tuple(ERROR_CLASSES)]  # type: ignore[valid-type]
OPEN = ConfigDict(extra="allow")  # answers may grow keys; clients ignore unknown ones
Vector = list[float]


@with_config(ConfigDict(extra="forbid"))
class Error(TypedDict):
    """SPEC's error: a human message (never a stack trace) and the kind of error."""

    error: str
    error_type: ErrorType


@with_config(OPEN)
class OpenAIErrorDetail(TypedDict):
    """OpenAI's error object: the openai SDK reads message into its exception."""

    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None
    code: Annotated[ErrorType, Field(description="our error_type")]


@with_config(OPEN)
class OpenAIError(TypedDict):
    """OpenAI's error shape, with our error_type beside it."""

    error: OpenAIErrorDetail
    error_type: ErrorType


@with_config(OPEN)
class FillMaskPrediction(TypedDict):
    """fill-mask: one candidate for the mask."""

    score: float
    token: int
    token_str: str
    sequence: str


@with_config(OPEN)
class LabelScore(TypedDict):
    """text-classification, zero-shot-classification: one label."""

    label: str
    score: float


@with_config(OPEN)
class TokenEntity(TypedDict):
    """token-classification: one entity (entity_group when aggregated, entity when not)."""

    entity_group: NotRequired[str]
    entity: NotRequired[str]
    score: float
    word: str
    start: NotRequired[int | None]
    end: NotRequired[int | None]


@with_config(OPEN)
class Answer(TypedDict):
    """question-answering: the span of the context that answers."""

    answer: str
    score: float
    start: int
    end: int


@with_config(OPEN)
class Box(TypedDict):
    """object-detection: a box in the image's pixels."""

    xmin: int
    ymin: int
    xmax: int
    ymax: int


@with_config(OPEN)
class DetectedObject(TypedDict):
    """object-detection: one object found."""

    label: str
    score: float
    box: Box


@with_config(OPEN)
class SparseValue(TypedDict):
    """A sparse (SPLADE) model's vector: one non-zero entry, the weight of the vocabulary's word at index."""

    index: int
    value: float


SparseVector = Annotated[list[SparseValue], Field(description="A sparse model's vector: its non-zero entries, "
                                                              "in index order")]
GeneratedText = Annotated[dict[str, str], Field(min_length=1, description="generated_text, summary_text, "
                                                                          "translation_text, or text (speech)")]
Prediction = FillMaskPrediction | DetectedObject | LabelScore | TokenEntity | Answer | GeneratedText
TaskOutput = Annotated[
    Vector | list[Vector] | SparseVector | Prediction | list[Prediction] | list[list[Prediction]],
    Field(description="The answer to one input: a vector (pooled), one vector per token (pooling none), a sparse "
                      "model's {index, value} entries, an answer, or a list of predictions (a list per [MASK] when "
                      "there are several)."),
]
InferenceResponse = Annotated[
    TaskOutput | list[TaskOutput],
    Field(description="One string input: its answer (text-classification and the text-to-text tasks: a list of "
                      "one answer). A list input: one answer per input, in order."),
]


@with_config(OPEN)
class ModelSummary(TypedDict):
    """A registered model in GET /models."""

    name: str
    base: NotRequired[Annotated[str, Field(description="an adapter's base model (its source: the adapter's)")]]
    source: str
    revision: NotRequired[str]
    device: NotRequired[str]
    dtype: NotRequired[str]
    enabled: bool
    state: Literal["loading", "ready", "available", "error", "disabled"]
    error: Annotated[str, Field(description="why the model is not ready (empty when it is)")]
    default_task: str
    tasks: list[str]


@with_config(OPEN)
class ModelList(TypedDict):
    """GET /models."""

    models: list[ModelSummary]


@with_config(OPEN)
class TaskSettings(TypedDict):
    """One task of GET /models/{name}: its settings and live queue."""

    name: str
    task: str
    parameters: NotRequired[dict[str, Any]]
    pooling: NotRequired[Literal["mean", "cls", "none"] | None]
    normalize: NotRequired[bool | None]
    max_batch_size: int
    max_batch_tokens: NotRequired[int]
    max_batch_delay_ms: NotRequired[int]
    max_queue_size: int
    timeout_s: float
    queue_depth: Annotated[int, Field(description="admitted, not yet answered; -1 when the broker is down")]
    waiting_on_workers: NotRequired[int]


@with_config(OPEN)
class ModelDetail(TypedDict):
    """GET /models/{name}."""

    name: str
    base: NotRequired[Annotated[str, Field(description="an adapter's base model (its source: the adapter's)")]]
    source: str
    revision: NotRequired[str]
    device: NotRequired[str]
    dtype: NotRequired[str]
    enabled: bool
    state: Literal["loading", "ready", "available", "error", "disabled"]
    error: str
    default_task: str
    tasks: list[TaskSettings]
    workers: NotRequired[Annotated[list[dict[str, Any]], Field(description="live workers that hold this model")]]


@with_config(ConfigDict(extra="forbid"))
class Health(TypedDict):
    """GET /health."""

    status: Literal["ok"]


@with_config(OPEN)
class Readiness(TypedDict):
    """GET /ready: what is missing, when something is."""

    status: Literal["ready", "not_ready"]
    checks: Annotated[dict[str, Any], Field(description=(
        "database, broker, workers_alive, models_ready, models_loadable_on_demand, models_not_ready (these hold "
        "/ready at 503), models_not_served (names, or *_count without a token that may see them)"))]
    missing: list[str]


@with_config(OPEN)
class Embedding(TypedDict):
    """One input's embedding: floats, or base64 of little-endian float32."""

    object: Literal["embedding"]
    index: int
    embedding: Vector | Annotated[str, Field(json_schema_extra={"contentEncoding": "base64"})]


@with_config(OPEN)
class Usage(TypedDict):
    """Tokens the inputs took."""

    prompt_tokens: int
    total_tokens: int


@with_config(OPEN)
class EmbeddingResponse(TypedDict):
    """OpenAI's embeddings answer, in input order."""

    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage


@with_config(OPEN)
class OpenAIModel(TypedDict):
    """One /v1 model id."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


@with_config(OPEN)
class OpenAIModelList(TypedDict):
    """GET /v1/models."""

    object: Literal["list"]
    data: list[OpenAIModel]


@with_config(OPEN)
class SimpleToken(TypedDict):
    """One token of TEI's /tokenize answer."""

    id: int
    text: Annotated[str, Field(description="the input's characters start:stop, or a special token's string")]
    special: bool
    start: Annotated[int | None, Field(description="character offset in the input (null for a special token)")]
    stop: Annotated[int | None, Field(description="character offset after the token (null for a special token)")]


TokenizeResponse = Annotated[list[list[SimpleToken]], Field(description="One token list per input, even for one "
                                                                        "string.")]


@with_config(OPEN)
class Rank(TypedDict):
    """One text's place in TEI's /rerank answer."""

    index: int
    score: float
    text: NotRequired[str]


RerankResponse = Annotated[list[Rank], Field(description="Every text's rank, highest score first.")]
EmbedSparseResponse = Annotated[list[SparseVector], Field(description="One vector per input, even for one string.")]
