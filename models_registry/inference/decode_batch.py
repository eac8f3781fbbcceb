"""Continuous batching of one decoder model: sequences join after their prefill and leave when done.

Each running sequence is one row of a KV cache they share, left-padded to the longest
(an attention mask hides the padding; each row has its own position ids), so one
forward pass gives every row its next token. A new sequence is prefilled alone and its
cache joins as a new row; a finished or cancelled row is cut out at once, and columns of
padding that no row needs any more are trimmed. Every row samples with its own
parameters and, with a seed, its own generator: a seeded answer does not depend on what
else runs beside it. Events and answers are TGI's, built as inference.streaming builds them.

transformers' own engine (`generate_batch`, `init_continuous_batching`) runs on CPU too,
but in a thread of its own, with one generation config for all requests and no
per-request seed; this loop runs one step per call in the worker's compute thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    DynamicCache,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from models_registry.core.errors import InvalidInput
from models_registry.inference.generation import DEFAULT_MAX_NEW_TOKENS
from models_registry.inference.streaming import TokenSink, _Decoder, _eos_ids, _LogProbs, _Sequence, chat_prompt
from models_registry.inference.task_common import max_positions
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS


def supports(model: Any) -> bool:
    """Whether the model decodes with a plain per-layer KV cache this loop can pad and cut (no sliding window)."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config(decoder=True)
    if getattr(text, "sliding_window", None) or any(t != "full_attention" for t in getattr(text, "layer_types", None)
                                                    or []):
        return False
    return type(model).__name__.endswith("ForCausalLM") or type(model).__name__.endswith("LMHeadModel")


@dataclass(eq=False)
class Row:
    """One sequence: what it was asked, what it generated, how it samples."""

    id: str
    prompt: str
    ids: list[int]  # the prompt's tokens
    max_new_tokens: int
    decoder: _Decoder
    sequence: _Sequence
    processors: LogitsProcessorList
    sample: bool
    generator: torch.Generator | None
    full_text: bool
    last: int = 0  # the token to feed next
    cached: int = 0  # real tokens in its cache row
    history: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """KV-cache tokens it may need at most."""
        return len(self.ids) + self.max_new_tokens

    @property
    def done(self) -> bool:
        """Finished (EOS, stop sequence, length) or cancelled."""
        sink = self.sequence.sink
        return self.sequence.finish_reason is not None or (sink is not None and sink.cancelled())

    def answer(self) -> list[dict[str, Any]]:
        """The text-generation answer (with TGI's details), as inference.streaming gives it."""
        sequence = self.sequence
        if sequence.finish_reason is None:
            sequence.finish_reason = "cancelled" if sequence.sink is not None and sequence.sink.cancelled() else "length"
        return [{"generated_text": (self.prompt if self.full_text else "") + sequence.text,
                 "details": {**self.decoder.summary(sequence), "prefill": [], "tokens": sequence.tokens}}]


class DecodeBatch:
    """The running rows of one model and the cache they share; every method blocks (the compute thread)."""

    def __init__(self, pipe: Any) -> None:
        self.model, self.tokenizer = pipe.model, pipe.tokenizer
        self.rows: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, columns]: 1 for a real token, 0 for padding
        self.eos = _eos_ids(self.model, self.tokenizer)
        self.limit = max_positions(self.model, self.tokenizer)

    def bytes_per_token(self) -> int:
        """KV-cache bytes one token of one row takes (keys and values of every layer)."""
        text = self.model.config.get_text_config(decoder=True)
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        size = torch.finfo(self.model.dtype).bits // 8 if self.model.dtype.is_floating_point else 4
        return 2 * text.num_hidden_layers * heads * head_dim * size

    def prepare(self, request_id: str, text: str, params: dict[str, Any], sink: TokenSink | None) -> Row:
        """A row for one prompt, checked (400 when it does not fit the model); nothing computed yet."""
        prompt = chat_prompt(self.tokenizer, params["messages"]) if params.get("messages") else text
        ids = self.tokenizer(prompt, return_token_type_ids=False)["input_ids"]
        if not ids:
            ids = [next(iter(self.eos))] if self.eos else [0]  # an empty prompt starts from EOS, as TGI
        config = self.model.generation_config
        asked = params.get("max_new_tokens")
        max_new = min(asked or config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS, MAX_NEW_TOKENS)
        if self.limit is not None:
            room = self.limit - len(ids)
            if room < 1 or (asked and asked > room):
                raise InvalidInput(f"the prompt has {len(ids)} tokens; with max_new_tokens {max_new} it exceeds "
                                   f"the model's {self.limit} positions: shorten it or lower max_new_tokens")
            max_new = min(max_new, room)
        do_sample = params.get("do_sample")
        sample = bool(config.do_sample) if do_sample is None else bool(do_sample)
        sequence = _Sequence(sink=sink, prompt_tokens=len(ids))
        decoder = _Decoder(self.tokenizer, [sequence], _LogProbs(), max_new, list(params.get("stop") or []),
                           self.eos, params.get("seed"))
        generator = None
        if sample and params.get("seed") is not None:
            generator = torch.Generator(device=self.model.device).manual_seed(int(params["seed"]))
        return Row(id=request_id, prompt=text, ids=list(ids), max_new_tokens=max_new, decoder=decoder,
                   sequence=sequence, processors=_processors(config, params, sample), sample=sample,
                   generator=generator, full_text=params.get("return_full_text") is True)

    def prefill(self, row: Row) -> bool:
        """Run the prompt, emit the first token; the row joins unless already done (True when it joined).

        A row that yielded its place (preempt) computes its prompt and its tokens so far again;
        its next token was chosen before it yielded.
        """
        if row.done:
            return False
        with torch.inference_mode():
            if row.history:
                ids = torch.tensor([row.history[:-1]], device=self.model.device)
                out = self.model(input_ids=ids, use_cache=True)
                row.cached = ids.shape[1]
            else:
                ids = torch.tensor([row.ids], device=self.model.device)
                out = self.model(input_ids=ids, use_cache=True)
                row.history = list(row.ids)
                self._emit(row, out.logits[0, -1])
                row.cached = len(row.ids)
                if row.done:
                    return False
            self._join(row, out.past_key_values)
        return True

    def preempt(self, rows: list[Row]) -> None:
        """rows yield their places: their cache goes, their prompt and tokens stay for prefill to resume them."""
        self.cut([r for r in rows if r in self.rows])
        for row in rows:
            row.cached = 0

    def step(self, joining: list[Row] = (), preempted: list[Row] = ()) -> list[Row]:  # type: ignore[assignment]
        """One step: preempted rows leave, joining rows are prefilled, every row gets a token; the finished rows."""
        self.preempt(list(preempted))
        done = [row for row in joining if not self.prefill(row)]
        return done + self._decode()

    def _decode(self) -> list[Row]:
        gone = [r for r in self.rows if r.done]  # cancelled since the last step
        self.cut(gone)
        if not self.rows:
            return gone
        assert self.cache is not None and self.mask is not None
        with torch.inference_mode():
            device = self.model.device
            ids = torch.tensor([[r.last] for r in self.rows], device=device)
            mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
            positions = torch.tensor([[r.cached] for r in self.rows], device=device)
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=self.cache,
                             use_cache=True)
            self.mask = mask
            for n, row in enumerate(self.rows):
                row.cached += 1
                self._emit(row, out.logits[n, -1])
        finished = [r for r in self.rows if r.done]
        self.cut(finished)
        return gone + finished

    def cut(self, rows: list[Row]) -> None:
        """Take rows out of the batch now, and the padding columns no row needs."""
        if not rows:
            return
        gone = {id(r) for r in rows}
        keep = [n for n, r in enumerate(self.rows) if id(r) not in gone]
        self.rows = [self.rows[n] for n in keep]
        if not self.rows:
            self.cache, self.mask = None, None
            return
        assert self.cache is not None and self.mask is not None
        index = torch.tensor(keep, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        lead = int((mask.cumsum(dim=1) == 0).sum(dim=1).min())  # columns that are padding in every row
        self.mask = mask[:, lead:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, lead:]
            layer.values = layer.values.index_select(0, index)[:, :, lead:]

    def _join(self, row: Row, cache: DynamicCache) -> None:
        if self.cache is None or self.mask is None:
            self.cache, self.mask = cache, torch.ones((1, row.cached), dtype=torch.long, device=self.model.device)
            self.rows = [row]
            return
        width, own = self.mask.shape[1], row.cached
        total = max(width, own)
        self.mask = torch.cat([_pad(self.mask, total - width),
                               _pad(self.mask.new_ones((1, own)), total - own)], dim=0)
        for mine, theirs in zip(self.cache.layers, cache.layers):
            mine.keys = torch.cat([_pad_kv(mine.keys, total - width), _pad_kv(theirs.keys, total - own)], dim=0)
            mine.values = torch.cat([_pad_kv(mine.values, total - width), _pad_kv(theirs.values, total - own)], dim=0)
        self.rows.append(row)

    def _emit(self, row: Row, logits: torch.Tensor) -> None:
        history = torch.tensor([row.history], device=logits.device)
        scores = row.processors(history, logits.float()[None])
        logprobs = torch.log_softmax(scores, dim=-1)
        if row.sample:
            token = int(torch.multinomial(logprobs.exp(), 1, generator=row.generator)[0, 0])
        else:
            token = int(scores.argmax(dim=-1)[0])
        row.decoder.logprobs.last = logprobs
        row.decoder._step(0, row.sequence, token)
        row.history.append(token)
        row.last = token


def _processors(config: Any, params: dict[str, Any], sample: bool) -> LogitsProcessorList:
    """The row's logits processors, from its parameters over the model's generation config (as generate())."""
    processors = LogitsProcessorList()
    penalty = params.get("repetition_penalty") or config.repetition_penalty
    if penalty and penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(penalty=float(penalty)))
    if not sample:
        return processors
    temperature = params.get("temperature") or config.temperature
    if temperature and temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(temperature)))
    top_k = params.get("top_k") or config.top_k
    if top_k:
        processors.append(TopKLogitsWarper(top_k=int(top_k)))
    top_p = params.get("top_p") or config.top_p
    if top_p and top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=float(top_p)))
    typical = params.get("typical_p") or config.typical_p
    if typical and typical < 1.0:
        processors.append(TypicalLogitsWarper(mass=float(typical)))
    return processors


def _pad(mask: torch.Tensor, left: int) -> torch.Tensor:
    return torch.nn.functional.pad(mask, (left, 0)) if left else mask


def _pad_kv(tensor: torch.Tensor, left: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, 0, left, 0)) if left else tensor
