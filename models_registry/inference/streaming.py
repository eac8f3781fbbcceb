"""Token-by-token generation for a batch of prompts decoding together: token events, and TGI's answers with details.

The batch runs through the model's own generate(), so several sequences share each
forward pass; three hooks watch it: a last logits processor keeps the log-probabilities
each token is drawn from, a streamer sees every step's tokens (decoded incrementally and
handed to the request's sink at once), and a stopping criterion ends a sequence whose
client went away, or that produced a stop sequence, at the next token. The events are
core.token_events' (no API's shape: each route shapes them on the web side); the whole
answer is TGI's, its details listing each token as TGI's token dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from models_registry.core import token_events
from models_registry.core.errors import InvalidInput
from models_registry.inference.compute_deadline import StopAtDeadline
from models_registry.inference.generation import DEFAULT_MAX_NEW_TOKENS, task_settings
from models_registry.inference.incremental_text import IncrementalText
from models_registry.inference.seeding import seeded
from models_registry.inference.task_common import ModelBundle, max_positions
from models_registry.tasks.task_inputs import MAX_NEW_TOKENS

SAMPLING = ("temperature", "top_k", "top_p", "typical_p", "repetition_penalty")
TASKS = ("text-generation", "text2text-generation")


class TokenSink(Protocol):
    """Where one request's events go as they are produced (the worker sends them to its client)."""

    def put(self, event: dict[str, Any]) -> None:
        """One token event (core.token_events; called from the compute thread)."""

    def cancelled(self) -> bool:
        """True once the client has gone: stop generating for it."""


@dataclass
class GeneratedSequence:
    """What one prompt has generated so far."""

    sink: TokenSink | None
    prompt_tokens: int
    ids: list[int] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""  # decoded so far (special tokens left out)
    spelled: IncrementalText | None = field(default=None, repr=False)  # how text grows, a few tokens decoded at a time
    emitted: int = 0  # characters of text already handed out in token events
    finish_reason: str | None = None


class LogProbKeeper(LogitsProcessor):
    """The last processor: keeps the log-probabilities of the distribution each token is drawn from."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.last = torch.log_softmax(scores.float(), dim=-1)
        return scores


class StepDecoder(BaseStreamer, StoppingCriteria):
    """Sees each step's tokens, builds the events, and tells generate() which sequences are done."""

    def __init__(self, tokenizer: Any, sequences: list[GeneratedSequence], logprobs: LogProbKeeper, max_new_tokens: int,
                 stop: list[str], eos_ids: set[int], seed: int | None) -> None:
        self.tokenizer = tokenizer
        self.sequences = sequences
        self.logprobs = logprobs
        self.max_new_tokens = max_new_tokens
        self.stop = stop
        self.eos_ids = eos_ids
        self.seed = seed
        self.special_ids = set(tokenizer.all_special_ids)
        self.prompt_seen = False
        self.token_extras: dict[str, Any] | None = None  # merged into the next token's event (inference.row_shaping)

    def put(self, value: torch.Tensor) -> None:
        """generate() hands the prompt first, then one token per sequence per step."""
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        chosen = value.reshape(-1).tolist()
        for row, (sequence, token_id) in enumerate(zip(self.sequences, chosen)):
            if sequence.finish_reason is None:
                self.take(row, sequence, int(token_id))

    def end(self) -> None:
        """generate() has finished: every sequence still open ran out of length."""
        for sequence in self.sequences:
            if sequence.finish_reason is None:
                sequence.finish_reason = "length"
                if sequence.tokens and sequence.sink is not None:  # its summary comes in an end-only event
                    sequence.sink.put(self._last(sequence, None))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        done = [s.finish_reason is not None or (s.sink is not None and s.sink.cancelled()) for s in self.sequences]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def take(self, row: int, sequence: GeneratedSequence, token_id: int, logprob: float | None = None) -> None:
        """Add the token row drew to its sequence: its text, its event, and whether it ends the sequence.

        logprob: the token's, when the caller has it (the decode batch); else read from the keeper (generate()).
        """
        if logprob is None:
            logprob = float(self.logprobs.last[row, token_id]) if self.logprobs.last is not None else 0.0
        special = token_id in self.special_ids
        sequence.ids.append(token_id)
        before = sequence.text
        if not special:
            if sequence.spelled is None:
                sequence.spelled = IncrementalText(self._decode)
            sequence.text = sequence.spelled.add(token_id)
        if token_id in self.eos_ids:
            sequence.finish_reason = "eos_token"
        elif self.stop and _stops(before, sequence.text, self.stop):
            sequence.finish_reason = "stop_sequence"
        elif len(sequence.ids) >= self.max_new_tokens:
            sequence.finish_reason = "length"
        if special:
            piece = self.tokenizer.convert_ids_to_tokens(token_id)
        else:
            # Hold back a partly decoded character (byte-level BPE): it comes with a later token.
            partial = sequence.finish_reason is None and sequence.text.endswith("\ufffd")
            ready = len(sequence.text) - (1 if partial else 0)
            piece, sequence.emitted = sequence.text[sequence.emitted:ready], max(sequence.emitted, ready)
        token = {"id": token_id, "text": piece, "logprob": logprob, "special": special}
        if self.token_extras:
            token.update(self.token_extras)
            self.token_extras = None
        sequence.tokens.append(token)
        if sequence.sink is not None:
            if sequence.sink.cancelled():
                sequence.finish_reason = sequence.finish_reason or "cancelled"
                return
            sequence.sink.put(token_events.token_event(token) if sequence.finish_reason is None
                              else self._last(sequence, token))

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _last(self, sequence: GeneratedSequence, token: token_events.Token | None) -> token_events.Event:
        """The sequence's last event: token (None: end-only), the summary, and its text where the pieces differ."""
        return token_events.last_event(token, self.summary(sequence), sequence.text,
                                       token_events.spelled(sequence.tokens))

    def summary(self, sequence: GeneratedSequence) -> token_events.Summary:
        """How the sequence ended (also the details of TGI's whole answer)."""
        return token_events.Summary(finish_reason=sequence.finish_reason or "length",
                                    generated_tokens=len(sequence.ids), seed=self.seed,
                                    input_length=sequence.prompt_tokens)


def _stops(before: str, text: str, stops: list[str]) -> bool:
    """Whether text holds a stop sequence, before (its text a token ago) having held none.

    A stop that text holds but before did not ends past their common part: only the tail is
    searched when text extends before (the usual token), so a long answer's check stays short.
    """
    common = len(before) if text.startswith(before) else 0
    return any(text.find(stop, min(max(0, common - len(stop) + 1), len(text))) >= 0 for stop in stops)


def _sampling(model: Any, params: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: options[k] for k in SAMPLING if options.get(k) is not None}
    do_sample = options.get("do_sample")
    kwargs["do_sample"] = bool(model.generation_config.do_sample) if do_sample is None else do_sample
    return kwargs


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end a sequence: the generation config's and the tokenizer's end-of-sequence tokens."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def chat_prompt(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """messages (and tools, OpenAI's function dicts) rendered with the tokenizer's chat template, ready for the
    assistant's turn; 400 without a template, or with tools for a template that never reads them."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise InvalidInput("this model has no chat template: send a prompt to /v1/completions instead")
    if tools and "tools" not in (template if isinstance(template, str) else str(template)):
        raise InvalidInput("this model's chat template does not use tools: leave 'tools' out")
    try:
        return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True)
    except Exception as error:  # a template that raises on these messages (e.g. roles it does not take)
        raise InvalidInput(f"the model's chat template does not take these messages: {error}") from None


def decode_batch_only(params: dict[str, Any]) -> bool:
    """Whether a request's parameters need the decode batch (logprobs, a grammar: this static path has neither)."""
    return params.get("logprobs") is not None or bool(params.get("grammar"))


def generate(task: str, loaded: Any, texts: list[str], params: dict[str, Any],
             sinks: list[TokenSink | None]) -> list[dict[str, Any]]:
    """Generate for every prompt in one batch; stream each to its sink; TGI's answer (with details) per prompt.

    task is text-generation (loaded: a pipeline) or text2text-generation (a ModelBundle).
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    seq2seq = task != "text-generation"
    options = dict(params.get("generate_parameters") or {}) if seq2seq else dict(params)
    prefix = ""
    if seq2seq:
        prefix, defaults, _ = task_settings(task, ModelBundle(model=model, tokenizer=tokenizer), params)
        options = {**defaults, **options}
    if decode_batch_only(params):  # OpenAI's options
        raise InvalidInput("logprobs and response_format need continuous batching, which this model does not run "
                           "(seq2seq, sliding-window attention, or HOSTING_CONTINUOUS_BATCHING=0)")
    texts = [chat_prompt(tokenizer, params["messages"], params.get("tools"))
             for _ in texts] if params.get("messages") else texts
    limit = max_positions(model, tokenizer)
    encoded = tokenizer([prefix + t for t in texts], padding=True, return_token_type_ids=False, return_tensors="pt",
                        truncation=seq2seq and limit is not None, max_length=limit if seq2seq else None)
    prompt_tokens = encoded["attention_mask"].sum(dim=1).tolist()
    asked = options.get("max_new_tokens")
    max_new_tokens = min(asked or model.generation_config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS, MAX_NEW_TOKENS)
    if limit is not None and not seq2seq:
        room = limit - max(prompt_tokens)
        if room < 1 or (asked and asked > room):
            raise InvalidInput(f"the prompt has {max(prompt_tokens)} tokens; with max_new_tokens {max_new_tokens} "
                               f"it exceeds the model's {limit} positions: shorten it or lower max_new_tokens")
        max_new_tokens = min(max_new_tokens, room)
    sequences = [GeneratedSequence(sink=sink, prompt_tokens=int(n)) for sink, n in zip(sinks, prompt_tokens)]
    logprobs = LogProbKeeper()
    decoder = StepDecoder(tokenizer, sequences, logprobs, max_new_tokens, list(params.get("stop") or []),
                          eos_token_ids(model, tokenizer), params.get("seed"))
    inputs = {k: v.to(model.device) for k, v in encoded.items()}
    with torch.inference_mode(), seeded(params.get("seed"), model.device):
        model.generate(**inputs, max_new_tokens=max_new_tokens, streamer=decoder,
                       logits_processor=LogitsProcessorList([logprobs]),
                       stopping_criteria=StoppingCriteriaList([decoder, StopAtDeadline()]),
                       **_sampling(model, params, options))
    full = not seq2seq and params.get("return_full_text") is True
    return [{"generated_text": (text if full else "") + s.text,
             "details": {**decoder.summary(s), "prefill": [], "tokens": s.tokens}}
            for text, s in zip(texts, sequences)]
