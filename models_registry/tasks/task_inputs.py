"""What each pipeline task accepts: input shapes and parameters (pure, no torch).

The view validates a request here before anything is queued, so a bad request is a 400
in the web process and never reaches a worker. The shapes are pydantic TypedDicts
(tasks.task_parameters); the same shapes generate the OpenAPI document, so what the
document allows is what this module accepts. A new task: its parameters shape in
task_parameters, one TaskKind below.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, Required

from pydantic import Field, ValidationError, with_config
from typing_extensions import TypedDict

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.tasks import task_parameters as p
from models_registry.tasks.parameter_types import (
    MAX_CANDIDATE_LABELS,
    MAX_DIMENSIONS,
    MAX_NEW_TOKENS,
    SHAPE_CONFIG,
    NonBlank,
)
from models_registry.tasks.shape_errors import Shape, adapter, explain_parameters, keys

__all__ = ["FEATURE_TOP_LEVEL_KEYS", "MAX_CANDIDATE_LABELS", "MAX_DIMENSIONS", "MAX_NEW_TOKENS", "SUPPORTED_TASKS",
           "TASK_KINDS", "TaskKind", "as_items", "check_required", "inputs_shape", "normalize_inputs",
           "validate_parameters"]

# Keys of the HF feature-extraction spec that clients send at the top level.
FEATURE_TOP_LEVEL_KEYS = ("normalize", "truncate", "truncation_direction", "prompt_name", "dimensions", "truncate_dim")
# huggingface_hub's InferenceClient.text_generation retries without the parameters named so.
_HF_RETRY_HINT = " (The following `model_kwargs` are not used by the model: {unknown})"


@with_config(SHAPE_CONFIG)
class QuestionContext(TypedDict):
    """One question-answering input."""

    question: Required[NonBlank]
    context: Required[NonBlank]


@dataclass(frozen=True)
class TaskKind:
    """A pipeline task: the shapes of its parameters and inputs, and of its answer."""

    name: str
    parameters: Shape  # what a request may send in 'parameters'
    defaults: Shape | None = None  # what the task's registered defaults may hold, when more than a request's
    required: tuple[str, ...] = ()  # after the task's defaults are merged in
    question_context: bool = False  # inputs are {"question", "context"} objects, not strings
    ranking: bool = False  # inputs are one {"source_sentence", "sentences"} object: its pairs are the items
    single_in_list: bool = False  # the answer to one string input is still a list (HF spec)
    media: str | None = None  # image or audio: inputs are files (media.envelope reads them), not text

    @property
    def defaults_shape(self) -> Shape:
        """The shape of the task's default parameters."""
        return self.defaults or self.parameters

    @property
    def defaults_only(self) -> tuple[str, ...]:
        """Parameters the task's defaults may set and a request may not."""
        return tuple(sorted(set(keys(self.defaults_shape)) - set(keys(self.parameters))))


TASK_KINDS: dict[str, TaskKind] = {
    kind.name: kind
    for kind in (
        TaskKind("feature-extraction", p.FeatureExtractionParameters, p.FeatureExtractionDefaults),
        TaskKind("fill-mask", p.FillMaskParameters),
        TaskKind("text-classification", p.TextClassificationParameters, single_in_list=True),
        TaskKind("token-classification", p.TokenClassificationParameters),
        TaskKind("question-answering", p.QuestionAnsweringParameters, question_context=True),
        TaskKind("zero-shot-classification", p.ZeroShotParameters, required=("candidate_labels",)),
        TaskKind("text-ranking", p.TextRankingParameters, ranking=True),
        TaskKind("text-generation", p.TextGenerationParameters, p.TextGenerationDefaults),
        TaskKind("summarization", p.Seq2SeqParameters, single_in_list=True),
        TaskKind("translation", p.TranslationParameters, single_in_list=True),
        TaskKind("text2text-generation", p.Seq2SeqParameters, single_in_list=True),
        TaskKind("image-classification", p.ImageClassificationParameters, media="image"),
        TaskKind("zero-shot-image-classification", p.ZeroShotImageParameters, required=("candidate_labels",),
                 media="image"),
        TaskKind("image-feature-extraction", p.ImageFeatureExtractionParameters, media="image"),
        TaskKind("object-detection", p.ObjectDetectionParameters, media="image"),
        TaskKind("image-to-text", p.ImageToTextParameters, media="image"),
        TaskKind("audio-classification", p.ImageClassificationParameters, media="audio"),
        TaskKind("automatic-speech-recognition", p.SpeechRecognitionParameters, media="audio"),
    )
}
SUPPORTED_TASKS: tuple[str, ...] = tuple(TASK_KINDS)


def validate_parameters(task: str, parameters: Any, *, from_request: bool = False) -> dict[str, Any]:
    """Check a task's default parameters, or with from_request a request's, against what the task takes."""
    if parameters is None:
        return {}
    kind = TASK_KINDS[task]
    shape = kind.parameters if from_request else kind.defaults_shape
    try:
        return adapter(shape).validate_python(parameters)
    except ValidationError as error:
        if not isinstance(parameters, dict):
            raise InvalidInput("'parameters' must be a JSON object") from None
        fixed = sorted(set(parameters) & set(kind.defaults_only)) if from_request else []
        if fixed:
            raise InvalidInput(f"parameter(s) {', '.join(fixed)} are set by the task's registration, "
                               "not per request") from None
        hint = _HF_RETRY_HINT if task == "text-generation" else ""
        raise explain_parameters(shape, task, error, hint) from None


def check_required(task: str, parameters: dict[str, Any]) -> None:
    """400 when a parameter the task needs is in neither the request nor the task's defaults."""
    missing = [name for name in TASK_KINDS[task].required if parameters.get(name) is None]
    if missing:
        raise InvalidInput(f"{task} needs parameter(s) {', '.join(missing)} in the request's 'parameters' "
                           "(or in the task's default parameters)")


@functools.cache
def _ranking_inputs(max_inputs: int) -> Any:
    shape = TypedDict("RankingInputs", {  # type: ignore[operator]
        "source_sentence": Required[str],
        "sentences": Required[Annotated[list[str], Field(min_length=1, max_length=max_inputs)]],
    })
    shape.__doc__ = "text-ranking: the query and the texts scored against it (sentence-similarity's shape)."
    return with_config(SHAPE_CONFIG)(shape)


@functools.cache
def inputs_shape(task: str, max_inputs: int) -> Any:
    """What 'inputs' takes for task: one input, or a list of 1 to max_inputs answered in order."""
    kind = TASK_KINDS[task]
    if kind.ranking:
        return _ranking_inputs(max_inputs)
    one: Any = QuestionContext if kind.question_context else str if task == "feature-extraction" else NonBlank
    return one | Annotated[list[one], Field(min_length=1, max_length=max_inputs)]


def normalize_inputs(task: str, inputs: Any, max_inputs: int) -> tuple[list[Any], bool]:
    """The request's inputs as a list (strings, or question/context objects), and whether the client sent a list."""
    try:
        value = adapter(inputs_shape(task, max_inputs)).validate_python(inputs)
    except ValidationError:
        raise explain_inputs(task, inputs, max_inputs) from None
    return as_items(task, value)


def as_items(task: str, inputs: Any) -> tuple[list[Any], bool]:
    """Valid inputs as batch items, and whether the answer is a list (the client sent one, or pairs)."""
    if TASK_KINDS[task].ranking:  # one item per pair, answered as a list of scores in sentence order
        return [{"query": inputs["source_sentence"], "text": text} for text in inputs["sentences"]], True
    return (inputs, True) if isinstance(inputs, list) else ([inputs], False)


def explain_inputs(task: str, inputs: Any, max_inputs: int) -> InvalidInput | TooLarge:
    """The one error for inputs that failed inputs_shape(task, max_inputs), naming the first bad item."""
    kind = TASK_KINDS[task]
    if inputs is None:
        return InvalidInput("'inputs' is required")
    if kind.ranking:
        return _explain_ranking(inputs, max_inputs)
    if isinstance(inputs, list):
        items = inputs
    elif isinstance(inputs, dict if kind.question_context else str):
        items = [inputs]
    elif kind.question_context:
        return InvalidInput(f"{task} takes 'inputs' as {{\"question\": ..., \"context\": ...}} or a list of them")
    else:
        return InvalidInput(f"{task} takes 'inputs' as a string or a list of strings")
    if not items:
        return InvalidInput("'inputs' must not be an empty list")
    if len(items) > max_inputs:
        return TooLarge(f"{len(items)} inputs in one request; this server takes at most {max_inputs}")
    one = adapter(inputs_shape(task, max_inputs).__args__[0])
    for position, item in enumerate(items):
        try:
            one.validate_python(item)
        except ValidationError:
            return _bad_item(kind, position, item)
    return InvalidInput("'inputs' is not valid for this task")


def _bad_item(kind: TaskKind, position: int, item: Any) -> InvalidInput:
    if kind.question_context:
        if not isinstance(item, dict) or set(item) != {"question", "context"}:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            return InvalidInput(f"inputs[{position}] must be an object with exactly 'question' and 'context', "
                                f"not {got}")
        key = next(k for k in ("question", "context") if not isinstance(item[k], str) or not item[k].strip())
        return InvalidInput(f"inputs[{position}].{key} must be a non-empty string")
    if not isinstance(item, str):
        return InvalidInput(f"inputs[{position}] must be a string, not {type(item).__name__}")
    return InvalidInput(f"inputs[{position}] is empty")


def _explain_ranking(inputs: Any, max_inputs: int) -> InvalidInput | TooLarge:
    example = '{"source_sentence": "query", "sentences": ["text", ...]}'
    if not isinstance(inputs, dict) or set(inputs) != {"source_sentence", "sentences"}:
        got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
        return InvalidInput(f"text-ranking takes 'inputs' as {example}, not {got}")
    if not isinstance(inputs["source_sentence"], str):
        return InvalidInput("inputs.source_sentence must be a string")
    sentences = inputs["sentences"]
    if not isinstance(sentences, list) or not sentences:
        return InvalidInput("inputs.sentences must be a non-empty list of strings")
    if len(sentences) > max_inputs:
        return TooLarge(f"{len(sentences)} sentences in one request; this server takes at most {max_inputs}")
    position = next((i for i, s in enumerate(sentences) if not isinstance(s, str)), 0)
    return InvalidInput(f"inputs.sentences[{position}] must be a string, not {type(sentences[position]).__name__}")
