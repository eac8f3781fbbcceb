"""The parameters each pipeline task takes, as typed shapes (pydantic TypedDicts, no torch).

These shapes are the one definition of a task's parameters: the web validates requests
with them (tasks.task_inputs), the admin validates a task's defaults with them, and
the OpenAPI document is generated from them (api.openapi.openapi). To add a parameter, add a key
here with its type and bounds; a bound goes in `Field(...)` so that validation and the
document agree. `Says` gives the phrase of the 400 message where the type alone cannot
say it ("parameter 'x' must <phrase>"); simple types get theirs from the schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, with_config
from typing_extensions import TypedDict

from models_registry.tasks.parameter_types import (
    MAX_NEW_TOKENS,
    MIN_LOGIT_DIVISOR,
    SHAPE_CONFIG,
    ActiveDims,
    Bool,
    Dimensions,
    Int,
    Labels,
    Number,
    Prompts,
    Says,
    Scale,
    Sizes,
    StopList,
    StrList,
    Targets,
    Template,
    Text,
)


@with_config(SHAPE_CONFIG)
class FeatureExtractionParameters(TypedDict, total=False):
    """feature-extraction (pooled vectors, or one per token with pooling none)."""

    normalize: Bool
    truncate: Bool
    truncation_direction: Literal["left", "right", "Left", "Right"] | None
    prompt_name: Text
    prompt: Text  # a prefix added to every input (usually a task default)
    prompts: Prompts  # named prefixes that prompt_name picks from (not nullable)
    dimensions: Dimensions  # Matryoshka: the first d components
    truncate_dim: Dimensions  # sentence-transformers' name for dimensions
    max_active_dims: ActiveDims  # sparse (SPLADE) models only: the most non-zero entries per vector


@with_config(SHAPE_CONFIG)
class FeatureExtractionDefaults(FeatureExtractionParameters, total=False):
    """feature-extraction defaults: also the sizes a Matryoshka model serves."""

    matryoshka_dimensions: Sizes


@with_config(SHAPE_CONFIG)
class FillMaskParameters(TypedDict, total=False):
    """fill-mask."""

    top_k: Int(1, 100)
    targets: Targets


@with_config(SHAPE_CONFIG)
class TextClassificationParameters(TypedDict, total=False):
    """text-classification."""

    top_k: Int(1, 1000)
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None


@with_config(SHAPE_CONFIG)
class TokenClassificationParameters(TypedDict, total=False):
    """token-classification."""

    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] | None
    ignore_labels: StrList(1000, min_items=0)
    stride: Int(1, 4096)


@with_config(SHAPE_CONFIG)
class QuestionAnsweringParameters(TypedDict, total=False):
    """question-answering."""

    top_k: Int(1, 100)
    doc_stride: Int(0, 4096)
    max_answer_len: Int(1, 4096)
    max_seq_len: Int(16, 8192)
    handle_impossible_answer: Bool
    align_to_words: Bool


@with_config(SHAPE_CONFIG)
class ZeroShotParameters(TypedDict, total=False):
    """zero-shot-classification (candidate_labels from the request or the task's defaults)."""

    candidate_labels: Labels
    multi_label: Bool
    hypothesis_template: Template


@with_config(SHAPE_CONFIG)
class TextRankingParameters(TypedDict, total=False):
    """text-ranking: a cross-encoder's score per (query, text) pair."""

    raw_scores: Bool  # the logit itself instead of its sigmoid
    truncate: Bool  # false: a pair over the model's length is a 400
    truncation_direction: Literal["left", "right", "Left", "Right"] | None


@with_config(SHAPE_CONFIG)
class TextGenerationParameters(TypedDict, total=False):
    """text-generation."""

    do_sample: Bool
    max_new_tokens: Int(1, MAX_NEW_TOKENS)
    repetition_penalty: Scale(MIN_LOGIT_DIVISOR, 100)
    return_full_text: Bool
    seed: Int(0, 2**63 - 1)
    stop: StopList
    temperature: Scale(MIN_LOGIT_DIVISOR, 100)
    top_k: Int(1, 10_000)
    top_p: Number(0, 1)
    typical_p: Number(0, 1)


ReasoningFormat = Literal["think", "think-open", "none"]
ToolCallFormat = Literal["hermes", "llama3-json", "mistral", "none"]


@with_config(SHAPE_CONFIG)
class TextGenerationDefaults(TextGenerationParameters, total=False):
    """text-generation defaults: also how a chat answer's reasoning and tool calls are told from its content."""

    reasoning_format: ReasoningFormat | None  # absent: what the chat template implies (core.model_layout)
    tool_call_format: ToolCallFormat | None  # how tool calls are read from a chat answer (api.openai.tool_calls)


def _drop_nulls(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


@with_config(SHAPE_CONFIG)
class GenerateParameters(TypedDict, total=False):
    """generate() options of the seq2seq tasks (HF spec: parameters.generate_parameters)."""

    do_sample: Bool
    early_stopping: Annotated[bool | Literal["never"] | None, Says('be true, false or "never"')]
    max_length: Int(1, MAX_NEW_TOKENS)
    max_new_tokens: Int(1, MAX_NEW_TOKENS)
    min_length: Int(0, MAX_NEW_TOKENS)
    min_new_tokens: Int(0, MAX_NEW_TOKENS)
    no_repeat_ngram_size: Int(0, 100)
    num_beams: Int(1, 16)
    repetition_penalty: Scale(MIN_LOGIT_DIVISOR, 100)
    temperature: Scale(MIN_LOGIT_DIVISOR, 100)
    top_k: Int(0, 10_000)
    top_p: Number(0, 1)
    typical_p: Number(0, 1)


@with_config(SHAPE_CONFIG)
class Seq2SeqParameters(TypedDict, total=False):
    """summarization and text2text-generation."""

    clean_up_tokenization_spaces: Bool
    truncation: Literal["do_not_truncate", "longest_first", "only_first", "only_second"] | None
    generate_parameters: Annotated[Annotated[GenerateParameters, AfterValidator(_drop_nulls)] | None,
                                   Says("be a JSON object")]


@with_config(SHAPE_CONFIG)
class TranslationParameters(Seq2SeqParameters, total=False):
    """translation: the seq2seq options and the languages."""

    src_lang: Text
    tgt_lang: Text


# Media tasks: the inputs are files (raw bytes, base64 or data URIs), the parameters as the HF spec's.
Threshold = Annotated[float, Field(ge=0, le=1)] | None


@with_config(SHAPE_CONFIG)
class ImageClassificationParameters(TypedDict, total=False):
    """image-classification and audio-classification."""

    top_k: Int(1, 1000)
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None


@with_config(SHAPE_CONFIG)
class ZeroShotImageParameters(TypedDict, total=False):
    """zero-shot-image-classification (candidate_labels from the request or the task's defaults)."""

    candidate_labels: Labels
    hypothesis_template: Template


@with_config(SHAPE_CONFIG)
class ImageFeatureExtractionParameters(TypedDict, total=False):
    """image-feature-extraction (a CLIP model's image vectors are in its text vectors' space)."""

    normalize: Bool
    pooling: Literal["cls", "mean"] | None


@with_config(SHAPE_CONFIG)
class ObjectDetectionParameters(TypedDict, total=False):
    """object-detection: boxes scoring at least threshold (default 0.5)."""

    threshold: Threshold


@with_config(SHAPE_CONFIG)
class ImageToTextParameters(TypedDict, total=False):
    """image-to-text (captioning)."""

    max_new_tokens: Int(1, MAX_NEW_TOKENS)


@with_config(SHAPE_CONFIG)
class SpeechRecognitionParameters(TypedDict, total=False):
    """automatic-speech-recognition."""

    max_new_tokens: Int(1, MAX_NEW_TOKENS)
