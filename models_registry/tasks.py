"""What each pipeline task accepts: input shapes and parameters (pure, no torch).

The view validates a request here before anything is queued, so a bad request is a 400
in the web process and never reaches a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models_registry.errors import InvalidInput, TooLarge

# Keys of the HF feature-extraction spec that clients send at the top level.
FEATURE_TOP_LEVEL_KEYS = ("normalize", "truncate", "truncation_direction", "prompt_name")


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
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"parameter {name!r} must be a non-empty string or list of strings")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"parameter {name!r} must be a string")
    return value


def _prompts(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidInput(f"parameter {name!r} must map prompt names to prefix strings")
    return value


@dataclass(frozen=True)
class TaskKind:
    """A pipeline task: the parameters it takes, each with its validator."""

    name: str
    parameters: dict[str, Callable[[str, Any], Any]]


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
        }),
        TaskKind("fill-mask", {
            "top_k": _optional(_int_range(1, 100)),
            "targets": _optional(_str_or_list),
        }),
        TaskKind("text-classification", {
            "top_k": _optional(_int_range(1, 1000)),
            "function_to_apply": _optional(_choice("sigmoid", "softmax", "none")),
        }),
    )
}
SUPPORTED_TASKS: tuple[str, ...] = tuple(TASK_KINDS)


def validate_parameters(task: str, parameters: Any) -> dict[str, Any]:
    """Check request parameters against what the task takes; unknown ones are a 400."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    kind = TASK_KINDS[task]
    unknown = sorted(set(parameters) - set(kind.parameters))
    if unknown:
        allowed = ", ".join(sorted(kind.parameters)) or "none"
        raise InvalidInput(f"{task} does not take parameter(s) {', '.join(unknown)}; it takes: {allowed}")
    return {name: kind.parameters[name](name, value) for name, value in parameters.items()}


def normalize_inputs(task: str, inputs: Any, max_inputs: int) -> tuple[list[str], bool]:
    """The request's inputs as a list of strings, and whether the client sent a list."""
    if isinstance(inputs, str):
        items, is_batch = [inputs], False
    elif isinstance(inputs, list):
        items, is_batch = inputs, True
    elif inputs is None:
        raise InvalidInput("'inputs' is required")
    else:
        raise InvalidInput(f"{task} takes 'inputs' as a string or a list of strings")
    if not items:
        raise InvalidInput("'inputs' must not be an empty list")
    if len(items) > max_inputs:
        raise TooLarge(f"{len(items)} inputs in one request; this server takes at most {max_inputs}")
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidInput(f"inputs[{position}] must be a string, not {type(item).__name__}")
        if not item.strip() and task != "feature-extraction":
            raise InvalidInput(f"inputs[{position}] is empty")
    return items, is_batch
