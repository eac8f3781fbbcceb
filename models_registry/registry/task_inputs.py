"""What each pipeline task accepts: input shapes and parameters (pure, no torch).

The view validates a request here before anything is queued, so a bad request is a 400
in the web process and never reaches a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models_registry.api.errors import InvalidInput, TooLarge

# Keys of the HF feature-extraction spec that clients send at the top level.
FEATURE_TOP_LEVEL_KEYS = ("normalize", "truncate", "truncation_direction", "prompt_name", "dimensions", "truncate_dim")
MAX_DIMENSIONS = 65_536  # beyond any model's hidden size; the model's own size is checked on its answer


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"parameter {name!r} must be true or false")
    return value


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"parameter {name!r} must be an integer from {low} to {high}")
        return value

    return check


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else check(name, value)


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if value not in choices:
            raise InvalidInput(f"parameter {name!r} must be one of {', '.join(choices)}")
        return value

    return check


def _str_or_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidInput(f"parameter {name!r} must be a non-empty string or list of non-blank strings")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"parameter {name!r} must be a string")
    return value


def _prompts(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidInput(f"parameter {name!r} must map prompt names to prefix strings")
    return value


def _number(low: float, high: float, *, above_low: bool = False) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not (low < value if above_low else low <= value) or value > high:
            bound = f"above {low:g}" if above_low else f"from {low:g}"
            raise InvalidInput(f"parameter {name!r} must be a number {bound} to {high:g}")
        return value

    return check


def _str_list(max_items: int, allow_empty: bool = False) -> Callable[[str, Any], list[str]]:
    def check(name: str, value: Any) -> list[str]:
        if (not isinstance(value, list) or (not value and not allow_empty) or len(value) > max_items
                or not all(isinstance(v, str) and v for v in value)):
            raise InvalidInput(f"parameter {name!r} must be a list of at most {max_items} non-empty strings")
        return value

    return check


def _labels(name: str, value: Any) -> list[str]:
    # A comma-separated string is what the transformers pipeline (and older HF clients) take.
    if isinstance(value, str):
        value = [label.strip() for label in value.split(",") if label.strip()]
    labels = _str_list(MAX_CANDIDATE_LABELS)(name, value)
    if len(set(labels)) != len(labels):
        raise InvalidInput(f"parameter {name!r} must not repeat a label")
    return labels


def _template(name: str, value: Any) -> str:
    if not isinstance(value, str) or "{}" not in value:
        raise InvalidInput(f"parameter {name!r} must be a string with {{}} where the label goes, e.g. 'This is {{}}.'")
    return value


def _sizes(name: str, value: Any) -> list[int]:
    if (not isinstance(value, list) or not value or len(set(value)) != len(value)
            or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_DIMENSIONS for v in value)):
        raise InvalidInput(f"parameter {name!r} must be a list of distinct sizes from 1 to {MAX_DIMENSIONS}, "
                           "e.g. [768, 512, 256, 128, 64]")
    return value


def _early_stopping(name: str, value: Any) -> bool | str:
    if not isinstance(value, bool) and value != "never":
        raise InvalidInput(f"parameter {name!r} must be true, false or \"never\"")
    return value


MAX_NEW_TOKENS = 512  # generation bound: one request must not hold the device for minutes
MAX_CANDIDATE_LABELS = 100  # zero-shot runs one forward pass per (input, label) pair

# generate() options of the seq2seq tasks, sent as parameters.generate_parameters (HF spec).
GENERATE_PARAMETERS: dict[str, Callable[[str, Any], Any]] = {
    "do_sample": _optional(_bool),
    "early_stopping": _optional(_early_stopping),
    "max_length": _optional(_int_range(1, MAX_NEW_TOKENS)),
    "max_new_tokens": _optional(_int_range(1, MAX_NEW_TOKENS)),
    "min_length": _optional(_int_range(0, MAX_NEW_TOKENS)),
    "min_new_tokens": _optional(_int_range(0, MAX_NEW_TOKENS)),
    "no_repeat_ngram_size": _optional(_int_range(0, 100)),
    "num_beams": _optional(_int_range(1, 16)),
    "repetition_penalty": _optional(_number(0, 100, above_low=True)),
    "temperature": _optional(_number(0, 100, above_low=True)),
    "top_k": _optional(_int_range(0, 10_000)),
    "top_p": _optional(_number(0, 1, above_low=True)),
    "typical_p": _optional(_number(0, 1, above_low=True)),
}


def _generate_parameters(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"parameter {name!r} must be a JSON object")
    checked = _checked(name, value, GENERATE_PARAMETERS)
    return {k: v for k, v in checked.items() if v is not None}


SEQ2SEQ_PARAMETERS: dict[str, Callable[[str, Any], Any]] = {
    "clean_up_tokenization_spaces": _optional(_bool),
    "truncation": _optional(_choice("do_not_truncate", "longest_first", "only_first", "only_second")),
    "generate_parameters": _optional(_generate_parameters),
}


@dataclass(frozen=True)
class TaskKind:
    """A pipeline task: its parameters with their validators, and the shape of its inputs and answer."""

    name: str
    parameters: dict[str, Callable[[str, Any], Any]]
    required: tuple[str, ...] = ()  # after the task's defaults are merged in
    question_context: bool = False  # inputs are {"question", "context"} objects, not strings
    single_in_list: bool = False  # the answer to one string input is still a list (HF spec)
    defaults_only: tuple[str, ...] = ()  # parameters the task's defaults may set, a request may not


TASK_KINDS: dict[str, TaskKind] = {
    kind.name: kind
    for kind in (
        TaskKind("feature-extraction", {
            "normalize": _optional(_bool),
            "truncate": _optional(_bool),
            "truncation_direction": _optional(_choice("left", "right", "Left", "Right")),
            "prompt_name": _optional(_str),
            "prompt": _optional(_str),  # a prefix added to every input (task default)
            "prompts": _prompts,  # named prefixes that prompt_name picks from
            "dimensions": _optional(_int_range(1, MAX_DIMENSIONS)),  # Matryoshka: the first d components
            "truncate_dim": _optional(_int_range(1, MAX_DIMENSIONS)),  # sentence-transformers' name for it
            "matryoshka_dimensions": _sizes,  # the sizes a task allows (task default only)
        }, defaults_only=("matryoshka_dimensions",)),
        TaskKind("fill-mask", {
            "top_k": _optional(_int_range(1, 100)),
            "targets": _optional(_str_or_list),
        }),
        TaskKind("text-classification", {
            "top_k": _optional(_int_range(1, 1000)),
            "function_to_apply": _optional(_choice("sigmoid", "softmax", "none")),
        }, single_in_list=True),
        TaskKind("token-classification", {
            "aggregation_strategy": _optional(_choice("none", "simple", "first", "average", "max")),
            "ignore_labels": _optional(_str_list(1000, allow_empty=True)),
            "stride": _optional(_int_range(1, 4096)),
        }),
        TaskKind("question-answering", {
            "top_k": _optional(_int_range(1, 100)),
            "doc_stride": _optional(_int_range(0, 4096)),
            "max_answer_len": _optional(_int_range(1, 4096)),
            "max_seq_len": _optional(_int_range(16, 8192)),
            "handle_impossible_answer": _optional(_bool),
            "align_to_words": _optional(_bool),
        }, question_context=True),
        TaskKind("zero-shot-classification", {
            "candidate_labels": _optional(_labels),
            "multi_label": _optional(_bool),
            "hypothesis_template": _optional(_template),
        }, required=("candidate_labels",)),
        TaskKind("text-generation", {
            "do_sample": _optional(_bool),
            "max_new_tokens": _optional(_int_range(1, MAX_NEW_TOKENS)),
            "repetition_penalty": _optional(_number(0, 100, above_low=True)),
            "return_full_text": _optional(_bool),
            "seed": _optional(_int_range(0, 2**63 - 1)),
            "stop": _optional(_str_list(16)),
            "temperature": _optional(_number(0, 100, above_low=True)),
            "top_k": _optional(_int_range(1, 10_000)),
            "top_p": _optional(_number(0, 1, above_low=True)),
            "typical_p": _optional(_number(0, 1, above_low=True)),
        }),
        TaskKind("summarization", SEQ2SEQ_PARAMETERS, single_in_list=True),
        TaskKind("translation", {
            **SEQ2SEQ_PARAMETERS,
            "src_lang": _optional(_str),
            "tgt_lang": _optional(_str),
        }, single_in_list=True),
        TaskKind("text2text-generation", SEQ2SEQ_PARAMETERS, single_in_list=True),
    )
}
SUPPORTED_TASKS: tuple[str, ...] = tuple(TASK_KINDS)


def _checked(what: str, parameters: dict[str, Any], validators: dict[str, Callable[[str, Any], Any]]) -> dict[str, Any]:
    unknown = sorted(set(parameters) - set(validators))
    if unknown:
        allowed = ", ".join(sorted(validators)) or "none"
        hint = ""
        if what == "text-generation":
            # huggingface_hub's InferenceClient.text_generation retries without the parameters named so.
            hint = f" (The following `model_kwargs` are not used by the model: {unknown})"
        raise InvalidInput(f"{what} does not take parameter(s) {', '.join(unknown)}; it takes: {allowed}{hint}")
    return {name: validators[name](name, value) for name, value in parameters.items()}


def validate_parameters(task: str, parameters: Any, *, from_request: bool = False) -> dict[str, Any]:
    """Check a task's default parameters, or with from_request a request's, against what the task takes."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    fixed = sorted(set(parameters) & set(TASK_KINDS[task].defaults_only)) if from_request else []
    if fixed:
        raise InvalidInput(f"parameter(s) {', '.join(fixed)} are set by the task's registration, not per request")
    return _checked(task, parameters, TASK_KINDS[task].parameters)


def check_required(task: str, parameters: dict[str, Any]) -> None:
    """400 when a parameter the task needs is in neither the request nor the task's defaults."""
    missing = [name for name in TASK_KINDS[task].required if parameters.get(name) is None]
    if missing:
        raise InvalidInput(f"{task} needs parameter(s) {', '.join(missing)} in the request's 'parameters' "
                           "(or in the task's default parameters)")


def _question_context(position: int, item: Any) -> dict[str, str]:
    if not isinstance(item, dict) or set(item) != {"question", "context"}:
        got = sorted(item) if isinstance(item, dict) else type(item).__name__
        raise InvalidInput(f"inputs[{position}] must be an object with exactly 'question' and 'context', not {got}")
    for key in ("question", "context"):
        if not isinstance(item[key], str) or not item[key].strip():
            raise InvalidInput(f"inputs[{position}].{key} must be a non-empty string")
    return {"question": item["question"], "context": item["context"]}


def normalize_inputs(task: str, inputs: Any, max_inputs: int) -> tuple[list[Any], bool]:
    """The request's inputs as a list (strings, or question/context objects), and whether the client sent a list."""
    kind = TASK_KINDS[task]
    single = dict if kind.question_context else str
    if isinstance(inputs, single):
        items, is_batch = [inputs], False
    elif isinstance(inputs, list):
        items, is_batch = inputs, True
    elif inputs is None:
        raise InvalidInput("'inputs' is required")
    elif kind.question_context:
        raise InvalidInput(f"{task} takes 'inputs' as {{\"question\": ..., \"context\": ...}} or a list of them")
    else:
        raise InvalidInput(f"{task} takes 'inputs' as a string or a list of strings")
    if not items:
        raise InvalidInput("'inputs' must not be an empty list")
    if len(items) > max_inputs:
        raise TooLarge(f"{len(items)} inputs in one request; this server takes at most {max_inputs}")
    if kind.question_context:
        return [_question_context(position, item) for position, item in enumerate(items)], is_batch
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidInput(f"inputs[{position}] must be a string, not {type(item).__name__}")
        if not item.strip() and task != "feature-extraction":
            raise InvalidInput(f"inputs[{position}] is empty")
    return items, is_batch
