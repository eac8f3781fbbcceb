"""Task runs that generate text: text-generation (decoder pipelines) and seq2seq (summarization,
translation, text2text-generation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import StoppingCriteriaList

from models_registry.core.errors import InvalidInput
from models_registry.inference.compute_deadline import StopAtDeadline
from models_registry.inference.seeding import seeded
from models_registry.inference.task_common import ModelBundle, max_positions, per_input, to_plain
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

DEFAULT_MAX_NEW_TOKENS = 100  # when neither the request nor the model's generation config sets a length (TGI's)
SEQ2SEQ_OUTPUT_KEYS = {"summarization": "summary_text", "translation": "translation_text",
                       "text2text-generation": "generated_text"}


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
    limit = max_positions(pipe.model, pipe.tokenizer)
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
    with seeded(params.get("seed"), pipe.model.device):
        raw = pipe(texts, batch_size=len(texts), max_new_tokens=max_new_tokens,
                   stopping_criteria=StoppingCriteriaList([StopAtDeadline()]), **kwargs)
    return [to_plain(r) for r in per_input(raw, len(texts))]


def seq2seq(task: str) -> Callable[[ModelBundle, list[str], dict[str, Any]], list[Any]]:
    """The runner of summarization, translation or text2text-generation: {<key>_text} per input."""
    key = SEQ2SEQ_OUTPUT_KEYS[task]

    def run(bundle: ModelBundle, texts: list[str], params: dict[str, Any]) -> list[Any]:
        tokenizer, model = bundle.tokenizer, bundle.model
        prefix, generate, source_lang = task_settings(task, bundle, params)
        limit = max_positions(model, tokenizer)
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
        generated = model.generate(**encoded, **options, stopping_criteria=StoppingCriteriaList([StopAtDeadline()]))
        decoded = tokenizer.batch_decode(generated, skip_special_tokens=True,
                                         clean_up_tokenization_spaces=bool(params.get("clean_up_tokenization_spaces")))
        return [{key: text} for text in decoded]

    return run


def task_settings(task: str, bundle: ModelBundle, params: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
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
