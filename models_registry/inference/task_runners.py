"""Per-task model runs and output shaping, torch side (the runner's helpers).

Each runner takes a task's loaded model (a transformers pipeline, or a ModelBundle for the
tasks transformers 5 has no pipeline for), a batch of inputs that share parameters and the
validated parameters; it returns one msgpack-safe output per input, in input order, in
the Hugging Face Inference API shape of that task's per-input answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForQuestionAnswering, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from models_registry.api.errors import InvalidInput
from models_registry.registry.task_inputs import MAX_NEW_TOKENS

DEFAULT_MAX_NEW_TOKENS = 100  # when neither the request nor the model's generation config sets a length (TGI's)
ZERO_SHOT_PAIRS_PER_FORWARD = 256  # (input, label) pairs in one forward pass
QA_WINDOWS_PER_FORWARD = 64  # question+context windows in one forward pass
SEQ2SEQ_OUTPUT_KEYS = {"summarization": "summary_text", "translation": "translation_text",
                       "text2text-generation": "generated_text"}
_BUNDLE_CLASSES: dict[str, Any] = {"question-answering": AutoModelForQuestionAnswering,
                                   **{task: AutoModelForSeq2SeqLM for task in SEQ2SEQ_OUTPUT_KEYS}}


@dataclass
class ModelBundle:
    """A model and its tokenizer, for the tasks transformers 5 removed from pipeline()."""

    model: Any
    tokenizer: Any


def load(task: str, source: str, revision: str | None, device: str, dtype: Any) -> Any:
    """A ready pipeline (or ModelBundle) for one task kind of a model (blocking, may raise)."""
    if task in _BUNDLE_CLASSES:
        tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
        if task == "question-answering" and not tokenizer.is_fast:
            raise ValueError("question-answering needs a fast tokenizer (tokenizer.json) for answer offsets")
        model = _BUNDLE_CLASSES[task].from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
        return ModelBundle(model=model, tokenizer=tokenizer)
    pipe = pipeline(task, model=source, revision=revision, device=device, dtype=dtype)
    pipe.model.eval()
    if task == "text-generation" and pipe.tokenizer is not None:
        # Batched prompts of a decoder-only model must be padded on the left.
        pipe.tokenizer.padding_side = "left"
        if pipe.tokenizer.pad_token is None:
            pipe.tokenizer.pad_token = pipe.tokenizer.eos_token
    return pipe


def to_plain(value: Any) -> Any:
    """numpy and torch scalars to Python ones, tuples to lists, keys to str (msgpack-safe)."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def _per_input(raw: Any, count: int) -> list[Any]:
    """A pipeline's answer as one entry per input: the answer to one input may come back unwrapped.

    One fill-mask text with two masks gives a list per mask, but one text it remains.
    """
    if count == 1 and not (len(raw) == 1 and isinstance(raw[0], list)):
        return [raw]
    return list(raw)


def _max_positions(model: Any, tokenizer: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 100_000 else None


# --- classification-like pipelines ---------------------------------------------------------


def fill_mask(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{score, token, token_str, sequence}, ...] per input."""
    mask = pipe.tokenizer.mask_token
    limit = _max_positions(pipe.model, pipe.tokenizer) or 512
    for text in texts:
        if mask not in text:
            raise InvalidInput(f"fill-mask input must contain the mask token {mask}")
        # Truncating could cut the mask away: refuse clearly instead of failing in the model.
        if len(pipe.tokenizer(text)["input_ids"]) > limit:
            raise InvalidInput(f"fill-mask input is longer than the model's {limit} tokens")
    kwargs = {k: params[k] for k in ("top_k", "targets") if params.get(k) is not None}
    try:
        raw = pipe(texts, batch_size=len(texts), **kwargs)
    except ValueError as error:  # e.g. targets that tokenize to nothing
        if "target" in str(error).lower():
            raise InvalidInput(f"parameter 'targets': {error}") from None
        raise
    return [to_plain(r) for r in _per_input(raw, len(texts))]


def text_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per input (every label unless top_k)."""
    kwargs: dict[str, Any] = {"top_k": params.get("top_k")}  # None = every label, as the HF API
    if params.get("function_to_apply"):
        kwargs["function_to_apply"] = params["function_to_apply"]
    raw = pipe(texts, batch_size=len(texts), truncation=True, **kwargs)
    return [to_plain(r if isinstance(r, list) else [r]) for r in _per_input(raw, len(texts))]


def token_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{entity_group (or entity and index), score, word, start, end}, ...] per input."""
    # "simple" by default, as the hosted HF Inference API: whole words and entities, not word pieces.
    strategy = params.get("aggregation_strategy") or "simple"
    kwargs: dict[str, Any] = {"aggregation_strategy": strategy}
    if params.get("ignore_labels") is not None:
        kwargs["ignore_labels"] = params["ignore_labels"]
    if params.get("stride") is not None:
        if strategy == "none":
            raise InvalidInput("token-classification 'stride' needs an aggregation_strategy other than none")
        kwargs["stride"] = params["stride"]
    raw = pipe(texts, batch_size=len(texts), **kwargs)
    return [to_plain(r) for r in _per_input(raw, len(texts))]


def zero_shot_classification(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per input, best first (the HF spec's list, not the pipeline's dict)."""
    labels = params.get("candidate_labels")
    if not labels:
        raise InvalidInput("zero-shot-classification needs parameter candidate_labels")
    kwargs: dict[str, Any] = {"candidate_labels": labels, "multi_label": bool(params.get("multi_label"))}
    if params.get("hypothesis_template"):
        kwargs["hypothesis_template"] = params["hypothesis_template"]
    pairs = min(len(texts) * len(labels), max(ZERO_SHOT_PAIRS_PER_FORWARD, len(labels)))
    raw = pipe(texts, batch_size=pairs, **kwargs)
    per_text = [raw] if isinstance(raw, dict) else raw
    return [[{"label": label, "score": float(score)} for label, score in zip(r["labels"], r["scores"])]
            for r in per_text]


# --- question answering --------------------------------------------------------------------


def question_answering(bundle: ModelBundle, items: list[dict[str, str]], params: dict[str, Any]) -> list[Any]:
    """{answer, score, start, end} per input, or a list of them best first when top_k > 1."""
    tokenizer, model = bundle.tokenizer, bundle.model
    top_k = params.get("top_k") or 1
    limit = _max_positions(model, tokenizer) or 512
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
    except Exception as error:  # tokenizers refuses a question that leaves no room for the context
        raise InvalidInput(f"the question is too long for max_seq_len {max_seq_len}: {error}") from None
    names = [n for n in tokenizer.model_input_names if n in encoded]
    start_logits, end_logits = [], []
    for first in range(0, len(encoded["input_ids"]), QA_WINDOWS_PER_FORWARD):
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


# --- generation ----------------------------------------------------------------------------


def text_generation(pipe: Any, texts: list[str], params: dict[str, Any]) -> list[Any]:
    """[{generated_text}] per input (the prompt included unless return_full_text is false).

    Greedy unless the request or the model's generation config asks for sampling (as TGI),
    rather than the transformers 5 pipeline's own default of sampling at temperature 0.7.
    """
    kwargs = {k: params[k] for k in ("temperature", "top_k", "top_p", "typical_p",
                                     "repetition_penalty", "return_full_text") if params.get(k) is not None}
    do_sample = params.get("do_sample")
    kwargs["do_sample"] = bool(pipe.model.generation_config.do_sample) if do_sample is None else do_sample
    if params.get("stop"):
        kwargs["stop_sequence"] = params["stop"]
    limit = _max_positions(pipe.model, pipe.tokenizer)
    asked = params.get("max_new_tokens")
    max_new_tokens = min(asked or pipe.model.generation_config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                         MAX_NEW_TOKENS)
    if limit is not None:
        longest = max(len(ids) for ids in pipe.tokenizer(texts)["input_ids"])
        room = limit - longest
        if room < 1 or (asked and asked > room):
            raise InvalidInput(f"the prompt has {longest} tokens; with max_new_tokens {max_new_tokens} it exceeds "
                               f"the model's {limit} positions: shorten it or lower max_new_tokens")
        max_new_tokens = min(max_new_tokens, room)
    if params.get("seed") is not None:
        torch.manual_seed(params["seed"])
    raw = pipe(texts, batch_size=len(texts), max_new_tokens=max_new_tokens, **kwargs)
    return [to_plain(r) for r in _per_input(raw, len(texts))]


def seq2seq(task: str) -> Callable[[ModelBundle, list[str], dict[str, Any]], list[Any]]:
    """The runner of summarization, translation or text2text-generation: {<key>_text} per input."""
    key = SEQ2SEQ_OUTPUT_KEYS[task]

    def run(bundle: ModelBundle, texts: list[str], params: dict[str, Any]) -> list[Any]:
        tokenizer, model = bundle.tokenizer, bundle.model
        prefix, generate, source_lang = _task_settings(task, bundle, params)
        limit = _max_positions(model, tokenizer)
        truncate = params.get("truncation") != "do_not_truncate"
        previous_lang = getattr(tokenizer, "src_lang", None)
        if source_lang:
            tokenizer.src_lang = source_lang
        try:
            encoded = tokenizer([prefix + t for t in texts], padding=True, truncation=truncate and limit is not None,
                                max_length=limit, return_token_type_ids=False, return_tensors="pt")
        finally:
            if source_lang:
                tokenizer.src_lang = previous_lang
        if not truncate and limit is not None and encoded["input_ids"].shape[1] > limit:
            raise InvalidInput(f"input is longer than the model's {limit} tokens and truncation is do_not_truncate")
        encoded = {k: v.to(model.device) for k, v in encoded.items()}
        options = {**generate, **params.get("generate_parameters", {})}
        config = model.generation_config
        if not {"max_length", "max_new_tokens"} & set(options) and config.max_length is config.max_new_tokens is None:
            options["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS  # not generate()'s model-agnostic 20
        generated = model.generate(**encoded, **options)
        decoded = tokenizer.batch_decode(generated, skip_special_tokens=True,
                                         clean_up_tokenization_spaces=bool(params.get("clean_up_tokenization_spaces")))
        return [{key: text} for text in decoded]

    return run


def _task_settings(task: str, bundle: ModelBundle, params: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """Input prefix, generate() defaults and the tokenizer's source language for this task and request.

    T5-style models name a prefix and settings in config.task_specific_params (e.g. "summarize: ");
    multilingual ones take src_lang on the tokenizer and the target language as the first token.
    """
    specific = getattr(bundle.model.config, "task_specific_params", None) or {}
    source, target = params.get("src_lang"), params.get("tgt_lang")
    entry: dict[str, Any] = {}
    generate: dict[str, Any] = {}
    source_lang = None
    if task == "summarization":
        entry = specific.get("summarization", {})
    elif task == "translation":
        pairs = [k for k in specific if k.startswith("translation_")]
        if f"translation_{source}_to_{target}" in specific:
            entry = specific[f"translation_{source}_to_{target}"]
        elif source or target:
            tokenizer = bundle.tokenizer
            if target:
                target_id = tokenizer.convert_tokens_to_ids(target)
                if target_id is None or target_id == tokenizer.unk_token_id:
                    raise InvalidInput(f"this model knows no target language {target!r}")
                generate["forced_bos_token_id"] = target_id
            if source:
                if not hasattr(tokenizer, "src_lang"):
                    raise InvalidInput(f"this model takes no source language (src_lang {source!r})")
                source_lang = source
        elif len(pairs) == 1:
            entry = specific[pairs[0]]
    prefix = entry.get("prefix") or ""
    generate.update({k: v for k, v in entry.items() if k != "prefix" and hasattr(bundle.model.generation_config, k)})
    return prefix, generate, source_lang


RUNNERS: dict[str, Callable[[Any, list[Any], dict[str, Any]], list[Any]]] = {
    "fill-mask": fill_mask,
    "text-classification": text_classification,
    "token-classification": token_classification,
    "zero-shot-classification": zero_shot_classification,
    "question-answering": question_answering,
    "text-generation": text_generation,
    **{task: seq2seq(task) for task in SEQ2SEQ_OUTPUT_KEYS},
}
