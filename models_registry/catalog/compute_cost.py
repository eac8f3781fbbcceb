"""What a request makes the model compute, in tokens, and the window parameters a model cannot hold (pure).

A request's cost is not its inputs' length: a feature-extraction prompt is computed with
every input, zero-shot runs one pair per (input, label), question answering and
token-classification with a stride run one window per slice of a long text, and
generation computes its new tokens. The worker counts with the model's tokenizer (exact);
the web counts with an estimate before admission (UTF-8 bytes / 4), and the rate limits
are settled to the worker's count once the answer is in. Both use these functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

GENERATION_TASKS = ("text-generation", "summarization", "translation", "text2text-generation")
DEFAULT_MAX_NEW_TOKENS = 100  # as inference.generation: when neither the request nor the model sets a length
QA_MAX_SEQ_LEN, QA_DOC_STRIDE = 384, 128  # the question-answering run's defaults
ZERO_SHOT_TEMPLATE = "This example is {}."  # the zero-shot pipeline's default hypothesis
PAIR_SPECIALS = 3  # [CLS] question [SEP] context [SEP]
SPECIALS = 2  # [CLS] text [SEP]
ASSUMED_MAX_TOKENS = 512  # the web does not know a model's length: the usual encoder's


@dataclass(frozen=True)
class TokenCounter:
    """How to count: tokens of one text with its special tokens (uncapped), and the model's length."""

    tokens: Callable[[str], int]
    max_tokens: int = ASSUMED_MAX_TOKENS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # the model's default generation length
    exact: bool = True  # the model's own tokenizer (the web's estimate is not: it refuses nothing by length)


def estimated_tokens(text: str) -> int:
    """The web's estimate of one text's tokens without a tokenizer: UTF-8 bytes / 4, plus specials."""
    return math.ceil(len(text.encode()) / 4) + SPECIALS


ESTIMATE = TokenCounter(estimated_tokens, exact=False)


def is_plain_length(task: str, params: dict[str, Any]) -> bool:
    """Whether each item costs just its own tokens (capped), so a count made for batching is the cost."""
    if task == "feature-extraction":
        return not _prompt(params)
    if task == "token-classification":
        return not params.get("stride")
    return task not in ("zero-shot-classification", "question-answering", *GENERATION_TASKS)


def request_cost(task: str, items: list[Any], params: dict[str, Any], counter: TokenCounter) -> list[int]:
    """Tokens each item makes the model compute (raises InvalidInput for windows the model cannot hold)."""
    return [item_cost(task, item, params, counter) for item in items]


def item_cost(task: str, item: Any, params: dict[str, Any], counter: TokenCounter) -> int:
    """Tokens one item (a string or a pair object) makes the model compute under params (merged defaults)."""
    cap = counter.max_tokens
    if task == "question-answering" and isinstance(item, dict):
        return _qa_cost(str(item.get("question", "")), str(item.get("context", "")), params, counter)
    if isinstance(item, dict):  # text-ranking pairs: both texts in one sequence
        return min(sum(counter.tokens(str(v)) for v in item.values()), cap)
    text = str(item)
    if task == "feature-extraction":
        return min(counter.tokens(_prompt(params) + text), cap)
    if task == "zero-shot-classification":
        labels = _labels(params.get("candidate_labels"))
        template = params.get("hypothesis_template") or ZERO_SHOT_TEMPLATE
        own = counter.tokens(text)
        hypotheses = [counter.tokens(template.format(label)) for label in labels]
        _check_hypotheses(labels, hypotheses, counter)
        return sum(min(own + hypothesis - 1, cap) for hypothesis in hypotheses) or min(own, cap)
    if task == "token-classification" and params.get("stride"):
        return _strided_cost(counter.tokens(text), int(params["stride"]), counter)
    if task in GENERATION_TASKS:
        asked = params.get("max_new_tokens") or params.get("max_length")
        new_tokens = min(int(asked or counter.max_new_tokens or DEFAULT_MAX_NEW_TOKENS), MAX_NEW_TOKENS)
        return min(counter.tokens(text), cap) + new_tokens
    return min(counter.tokens(text), cap)


def _check_hypotheses(labels: list[str], hypotheses: list[int], counter: TokenCounter) -> None:
    """400 for a label whose hypothesis leaves no room for the text in the model's length (a 500 in the pipeline)."""
    if not counter.exact or not hypotheses:
        return
    longest = max(range(len(hypotheses)), key=hypotheses.__getitem__)
    # [CLS] text [SEP] hypothesis [SEP]: a hypothesis counted with its 2 specials, one more, and one text token.
    if hypotheses[longest] + 2 > counter.max_tokens:
        raise InvalidInput(f"the hypothesis of label {labels[longest][:50]!r} takes {hypotheses[longest]} tokens; "
                           f"this model reads {counter.max_tokens} tokens for the text and the hypothesis together: "
                           "send a shorter label or hypothesis_template")


def _prompt(params: dict[str, Any]) -> str:
    name = params.get("prompt_name")
    prompts = params.get("prompts") or {}
    if name is not None and isinstance(prompts, dict) and name in prompts:
        return str(prompts[name])
    return str(params.get("prompt") or "")


def _labels(value: Any) -> list[str]:
    if isinstance(value, str):
        return [label.strip() for label in value.split(",") if label.strip()]
    return [str(label) for label in value] if isinstance(value, list) else []


def _qa_cost(question: str, context: str, params: dict[str, Any], counter: TokenCounter) -> int:
    """Windows over the context times the tokens of each: as the question-answering run slices it."""
    max_seq_len = min(int(params.get("max_seq_len") or QA_MAX_SEQ_LEN), counter.max_tokens)
    doc_stride = params.get("doc_stride")
    stride = min(QA_DOC_STRIDE if doc_stride is None else int(doc_stride), max_seq_len // 2)
    question_tokens = counter.tokens(question) - SPECIALS
    context_tokens = counter.tokens(context) - SPECIALS
    room = max_seq_len - question_tokens - PAIR_SPECIALS  # context tokens one window holds
    if context_tokens > room and room <= stride:
        # tokenizers panics here ("stride must be strictly less than max_len"): refuse it before queueing.
        raise InvalidInput(
            f"the question takes {question_tokens} of the {max_seq_len} tokens of a window (max_seq_len), leaving "
            f"{max(room, 0)} for the context, which must be more than doc_stride {stride}: send a shorter question, "
            "a smaller doc_stride or a larger max_seq_len")
    windows = 1 if context_tokens <= room else 1 + math.ceil((context_tokens - room) / (room - stride))
    return windows * min(max_seq_len, question_tokens + context_tokens + PAIR_SPECIALS)


def check_stride(stride: int, counter: TokenCounter) -> None:
    """400 for a token-classification stride the model's window cannot hold (tokenizers would panic)."""
    room = counter.max_tokens - SPECIALS
    if stride >= room:
        raise InvalidInput(f"parameter 'stride' is {stride}; this model's windows hold {room} tokens besides its "
                           f"special tokens, so stride must be less than {room}")


def _strided_cost(tokens: int, stride: int, counter: TokenCounter) -> int:
    """Windows of the model's length overlapping by stride, times the tokens of each."""
    check_stride(stride, counter)
    room = counter.max_tokens - SPECIALS
    text_tokens = tokens - SPECIALS
    windows = 1 if text_tokens <= room else 1 + math.ceil((text_tokens - room) / (room - stride))
    return windows * min(counter.max_tokens, tokens)
