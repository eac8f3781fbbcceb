"""A text cut to what the model can read, before any tokenizer sees it (pure).

An encoder reads its first max_tokens tokens (its last, truncating on the left) and drops
the rest, yet a tokenizer handed a 1 MB string tokenizes all of it first, on the worker's
intake and again in the compute thread. No natural text spends more than MAX_CHARS_PER_TOKEN
characters a token, so a text cut to max_tokens * MAX_CHARS_PER_TOKEN characters reads the same
tokens, is refused the same way where truncation is off (it still holds more than max_tokens),
and costs what max_tokens tokens cost. Fill-mask does not truncate (an over-long text is a 400), so it keeps
both ends of a text, where its mask token may be, and is still refused as too long. Seq2seq models read
the head of their input, as encoders do. Tasks that read a whole text in windows (question answering,
token classification with a stride) are never cut; a decoder's prompt is never cut either (it would answer
another question): one longer than its positions can hold is refused before any tokenizer or chat
template sees it (check_prompt_chars).
"""

from __future__ import annotations

from typing import Any

from models_registry.core.errors import InvalidInput

MAX_CHARS_PER_TOKEN = 32  # English averages about 4; a WordPiece word of over 100 characters is one [UNK]
SEQ2SEQ_TASKS = ("summarization", "translation", "text2text-generation")
CUT_TASKS = ("feature-extraction", "text-classification", "zero-shot-classification", "text-ranking", "fill-mask",
             *SEQ2SEQ_TASKS)


def readable_chars(max_tokens: int) -> int:
    """How many characters of a text a model of max_tokens tokens can read, at most."""
    return max(1, max_tokens) * MAX_CHARS_PER_TOKEN


def cut_inputs(task: str, inputs: list[Any], params: dict[str, Any], max_tokens: int) -> list[Any]:
    """inputs with each text (and each text of a pair) cut to readable_chars; the same list if nothing is cut."""
    if task not in CUT_TASKS:
        return inputs
    limit = readable_chars(max_tokens)
    if not any(_longer(item, limit) for item in inputs):
        return inputs
    if task == "fill-mask":  # not truncated: an over-long text is refused, and its mask may sit at either end
        return [_keep_ends(item, limit) for item in inputs]
    from_left = str(params.get("truncation_direction") or "right").lower() == "left"
    return [_cut(item, limit, from_left) for item in inputs]


def _longer(item: Any, limit: int) -> bool:
    if isinstance(item, str):
        return len(item) > limit
    if isinstance(item, dict) and "media" not in item:
        return any(isinstance(value, str) and len(value) > limit for value in item.values())
    return False


def _keep_ends(item: Any, limit: int) -> Any:
    """Its first and last limit/2 characters: still longer than the model reads, with a mask at either end kept."""
    if isinstance(item, str) and len(item) > limit:
        return item[:limit // 2] + " " + item[-(limit // 2):]
    return item


def _cut(item: Any, limit: int, from_left: bool) -> Any:
    if isinstance(item, str):
        if len(item) <= limit:
            return item
        return item[-limit:] if from_left else item[:limit]
    if isinstance(item, dict) and "media" not in item:
        return {key: _cut(value, limit, from_left) if isinstance(value, str) else value for key, value in item.items()}
    return item


def check_prompt_chars(inputs: list[Any], params: dict[str, Any], positions: int) -> None:
    """400 for a text-generation prompt (or chat messages, together) no model of positions tokens can hold."""
    limit = readable_chars(positions)
    chars = max((len(item) for item in inputs if isinstance(item, str)), default=0)
    messages = params.get("messages")
    if isinstance(messages, list):
        chars = max(chars, sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict)))
    if chars > limit:
        raise InvalidInput(f"the prompt has {chars} characters; this model reads {positions} tokens, and no text of "
                           f"over {limit} characters fits in them: shorten it")
