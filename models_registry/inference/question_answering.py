"""The question-answering task run: windows over long contexts, best spans as the transformers 4 pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np

from models_registry.core.errors import InvalidInput
from models_registry.inference import compute_deadline
from models_registry.inference.containment import contained, describe
from models_registry.inference.task_common import ModelBundle, max_positions

QA_WINDOWS_PER_FORWARD = 64  # question+context windows in one forward pass


def question_answering(bundle: ModelBundle, items: list[dict[str, str]], params: dict[str, Any]) -> list[Any]:
    """{answer, score, start, end} per input, or a list of them best first when top_k > 1."""
    tokenizer, model = bundle.tokenizer, bundle.model
    top_k = params.get("top_k") or 1
    limit = max_positions(model, tokenizer) or 512
    max_seq_len = min(params.get("max_seq_len") or 384, limit)
    doc_stride = min(128 if params.get("doc_stride") is None else params["doc_stride"], max_seq_len // 2)
    question_first = tokenizer.padding_side == "right"
    questions = [item["question"] for item in items]
    contexts = [item["context"] for item in items]
    try:
        encoded = tokenizer(
            questions if question_first else contexts, contexts if question_first else questions,
            truncation="only_second" if question_first else "only_first", max_length=max_seq_len,
            stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding=True,
            return_tensors="pt",
        )
    except BaseException as error:  # tokenizers panics on a question that leaves no room for the context
        if not contained(error):
            raise
        raise InvalidInput(f"the question is too long for max_seq_len {max_seq_len} with doc_stride "
                           f"{doc_stride}: {describe(error)}") from None
    names = [n for n in tokenizer.model_input_names if n in encoded]
    start_logits, end_logits = [], []
    for first in range(0, len(encoded["input_ids"]), QA_WINDOWS_PER_FORWARD):
        compute_deadline.check()  # many windows: stop between forwards once nobody waits
        window = {n: encoded[n][first:first + QA_WINDOWS_PER_FORWARD].to(model.device) for n in names}
        output = model(**window)
        start_logits.append(output.start_logits.float().cpu().numpy())
        end_logits.append(output.end_logits.float().cpu().numpy())
    starts, ends = np.concatenate(start_logits), np.concatenate(end_logits)
    answers: list[list[dict[str, Any]]] = [[] for _ in items]
    null_scores = [1.0] * len(items)
    context_id = 1 if question_first else 0
    for window, sample in enumerate(encoded["overflow_to_sample_mapping"].tolist()):
        spans, null = _best_spans(encoded, window, starts[window], ends[window], context_id, top_k,
                                  params.get("max_answer_len") or 15, tokenizer.cls_token_id)
        null_scores[sample] = min(null_scores[sample], null)
        for start, end, score in spans:
            first_char, last_char = _char_span(encoded, window, start, end, context_id,
                                               params.get("align_to_words", True))
            context = contexts[sample]
            answers[sample].append({"score": score, "start": first_char, "end": last_char,
                                    "answer": context[first_char:last_char]})
    results: list[Any] = []
    for sample, found in enumerate(answers):
        if params.get("handle_impossible_answer"):
            found.append({"score": null_scores[sample], "start": 0, "end": 0, "answer": ""})
        found = sorted(found, key=lambda a: a["score"], reverse=True)[:top_k] or [
            {"score": 0.0, "start": 0, "end": 0, "answer": ""}]
        results.append(found[0] if top_k == 1 else found)
    return results


def _best_spans(encoded: Any, window: int, start_logits: np.ndarray, end_logits: np.ndarray, context_id: int,
                top_k: int, max_answer_len: int, cls_id: int | None) -> tuple[list[tuple[int, int, float]], float]:
    """The top_k (start, end, score) token spans of one window inside its context, and its null score.

    As the transformers 4 pipeline: softmax over the context tokens and CLS, score = p(start) * p(end).
    """
    ids = encoded["input_ids"][window].numpy()
    in_context = np.array([s == context_id for s in encoded.sequence_ids(window)])
    in_context &= encoded["attention_mask"][window].numpy().astype(bool)
    cls = (ids == cls_id) if cls_id is not None else np.zeros_like(in_context)
    scored = in_context | cls
    start = _softmax(np.where(scored, start_logits, -10000.0))
    end = _softmax(np.where(scored, end_logits, -10000.0))
    null = float(start[0] * end[0])
    start, end = start * in_context, end * in_context
    candidates = np.tril(np.triu(np.outer(start, end)), max_answer_len - 1)
    flat = candidates.flatten()
    best = np.argsort(-flat, kind="stable")[:top_k]
    spans = [(int(i // len(end)), int(i % len(end)), float(flat[i])) for i in best if flat[i] > 0]
    return spans, null


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def _char_span(encoded: Any, window: int, start: int, end: int, context_id: int, align: bool) -> tuple[int, int]:
    """Character offsets in the context of a token span, widened to whole words when align."""
    if align:
        try:
            first = encoded.word_to_chars(window, encoded.token_to_word(window, start), sequence_index=context_id)
            last = encoded.word_to_chars(window, encoded.token_to_word(window, end), sequence_index=context_id)
            return int(first.start), int(last.end)
        except Exception:  # tokenizers without word ids: token offsets
            pass
    offsets = encoded["offset_mapping"][window]
    return int(offsets[start][0]), int(offsets[end][1])
