"""The field types task parameters are built from: bounded numbers, lists, labels, templates, and their 400 phrases.

tasks.task_parameters composes the shapes of each task from these; a bound lives in the type
(`Field(...)`), so validation and the OpenAPI document agree. `Says` gives the phrase of the 400
message where the type alone cannot say it ("parameter 'x' must <phrase>").
"""

from __future__ import annotations

import string
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

MAX_NEW_TOKENS = 512  # generation bound: one request must not hold the device for minutes
MAX_CANDIDATE_LABELS = 100  # zero-shot runs one forward pass per (input, label) pair
MAX_LABEL_CHARS = 500  # a label is a phrase in a hypothesis the model must read whole (the worker checks its tokens)
MAX_DIMENSIONS = 65_536  # beyond any model's hidden size; the model's own size is checked on its answer
MAX_ACTIVE_DIMS = 262_144  # beyond any vocabulary (XLM-R's: 250,002); the answer's size is bounded on its own

# Strict: JSON types only (no "5" for 5, no true for 1); a key nobody declared is a 400.
SHAPE_CONFIG = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
# What Python's str.strip() removes, spelled out so that every regex engine (pydantic's,
# the fuzzer's, a client's) agrees on what a blank string is.
_SPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{_SPACE}]"


class Says:
    """The phrase a 400 uses for a value of this shape: "parameter 'x' must <phrase>"."""

    def __init__(self, phrase: str) -> None:
        self.phrase = phrase


def _integral(value: Any) -> Any:
    # JSON has one number type: 2.0 is the integer 2 (JSON Schema agrees), 2.5 is not an integer.
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**64 else value


def integer(low: int, high: int) -> Any:
    """An integer from low to high (inclusive); the bounds before the float check, so the schema shows them."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_integral)]


def Int(low: int, high: int) -> Any:
    """An integer from low to high (inclusive), or null."""
    return integer(low, high) | None


def Number(low: float, high: float) -> Any:
    """A number above low, up to high (inclusive), or null."""
    return Annotated[float, Field(gt=low, le=high)] | None


def Scale(low: float, high: float) -> Any:
    """A number from low to high (inclusive), or null: a divisor of the logits, so never near zero."""
    return Annotated[float, Field(ge=low, le=high)] | None


# Sampling divides the logits by the temperature (a repetition penalty divides some): below this a float32
# logit overflows to inf and sampling fails; for greedy text leave do_sample false instead.
MIN_LOGIT_DIVISOR = 1e-3
Bool = bool | None
Text = str | None
NonBlank = Annotated[str, Field(pattern=NOT_BLANK)]


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def _labels(value: str | list[str]) -> list[str]:
    # A comma-separated string is what the transformers pipeline (and older HF clients) take.
    labels = [label.strip() for label in value.split(",") if label.strip()] if isinstance(value, str) else value
    if not labels or len(labels) > MAX_CANDIDATE_LABELS or len(set(labels)) != len(labels) \
            or max(len(label) for label in labels) > MAX_LABEL_CHARS:
        raise ValueError("labels")
    return labels


def _distinct(values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError("repeated")
    return values


def StrList(max_items: int, min_items: int = 1) -> Any:
    """A list of non-empty strings, or null."""
    return Annotated[
        Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=min_items, max_length=max_items)] | None,
        Says(f"be a list of at most {max_items} non-empty strings"),
    ]


# A stop sequence is text the model writes: no control characters (a NUL is no token of most vocabularies).
StopText = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$")]
StopList = Annotated[
    Annotated[list[StopText], Field(min_length=1, max_length=16)] | None,
    Says("be a list of at most 16 non-empty strings of at most 200 characters, without control characters "
         "(tab and newlines are fine)"),
]


# fill-mask scores every target's token ids: without a bound one request can send a million.
MAX_TARGETS, MAX_TARGET_CHARS = 1000, 100
TargetText = Annotated[str, Field(pattern=NOT_BLANK, max_length=MAX_TARGET_CHARS)]
Targets = Annotated[
    Annotated[TargetText | Annotated[list[TargetText], Field(min_length=1, max_length=MAX_TARGETS)],
              AfterValidator(_as_list)] | None,
    Says(f"be a non-empty string or a list of at most {MAX_TARGETS} non-blank strings of at most "
         f"{MAX_TARGET_CHARS} characters"),
]
Labels = Annotated[
    Annotated[
        Annotated[str, Field(pattern=f"[^,{_SPACE}]")]
        | Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_LABEL_CHARS)]],
                    Field(min_length=1, max_length=MAX_CANDIDATE_LABELS, json_schema_extra={"uniqueItems": True})],
        AfterValidator(_labels),
    ] | None,
    Says(f"be a list of at most {MAX_CANDIDATE_LABELS} distinct non-empty strings of at most {MAX_LABEL_CHARS} "
         "characters, or a comma-separated string"),
]
MAX_TEMPLATE_CHARS = 500  # a hypothesis is read by a model of a few hundred tokens
# The same rule as _template, for the schema (clients and the fuzzer): literal text and {{ }}, one {} inside.
_TEMPLATE_PATTERN = r"^(?:[^{}]|\{\{|\}\})*\{\}(?:[^{}]|\{\{|\}\})*$"


def _template(value: str) -> str:
    # Parsed as str.format will read it: exactly one bare {} and nothing else to fill in. A width
    # ("{:>10000000}"), a second field or a name would pad, fail or raise inside the pipeline.
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(value)
                  if name is not None]
    except ValueError:
        raise ValueError("template") from None
    if fields != [("", "", None)]:
        raise ValueError("template")
    return value


Template = Annotated[
    Annotated[str, Field(max_length=MAX_TEMPLATE_CHARS, pattern=_TEMPLATE_PATTERN), AfterValidator(_template)] | None,
    Says(f"be a string with {{}} where the label goes, once, and no other {{...}} field (no name, index, width or "
         f"format in it; write {{{{ and }}}} for a literal brace), of at most {MAX_TEMPLATE_CHARS} characters, "
         "e.g. 'This is {}.'"),
]
Prompts = Annotated[dict[str, str], Says("map prompt names to prefix strings")]
Dimensions = Int(1, MAX_DIMENSIONS)
ActiveDims = Int(1, MAX_ACTIVE_DIMS)
Sizes = Annotated[
    Annotated[list[integer(1, MAX_DIMENSIONS)], Field(min_length=1),
              AfterValidator(_distinct),
              Field(json_schema_extra={"uniqueItems": True})],
    Says(f"be a list of distinct sizes from 1 to {MAX_DIMENSIONS}, e.g. [768, 512, 256, 128, 64]"),
]
