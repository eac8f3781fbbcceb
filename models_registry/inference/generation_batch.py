"""Continuous batching of one decoder model, the executor: rows join, are prefilled in chunks, decode together, leave.

What runs at each step is inference.decode_scheduler's alone (admission, fair share, the
prefill budget and chunks, prefix reuse, the fast lane): this module prepares each request's
row, runs the scheduler's plans against the KV cache and the model, and reports how long
each forward took. Every forward is one pass of the model over the tokens of every row it
computes, flattened into one sequence (inference.kv_slots, inference.generation_step); each
row has a slot of a cache preallocated for it and written in place. Rows draw their tokens in
inference.row_drawing, each with its own parameters. A row may name a LoRA adapter of the model:
a forward computes every row with its own adapter (inference.batched_lora, per position).
Token events (core.token_events) and whole answers (TGI's) are built as inference.streaming builds them.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList

from models_registry.catalog.readable_text import readable_chars
from models_registry.catalog.specs import AdapterSpec
from models_registry.core.batch_types import ItemFailure
from models_registry.core.errors import Conflict, HostingError, InvalidInput
from models_registry.inference import generation_step, kv_slots, row_drawing
from models_registry.inference.adapter_cache import AdapterCache
from models_registry.inference.batched_lora import LoraWeights
from models_registry.inference.decode_plan import Forward
from models_registry.inference.decode_scheduler import DecodeScheduler
from models_registry.inference.generation import DEFAULT_MAX_NEW_TOKENS
from models_registry.inference.intake_tokens import TokenizedText
from models_registry.inference.kv_slots import SlotCache
from models_registry.inference.row_processors import logits_processors
from models_registry.inference.row_shaping import RowShaping
from models_registry.inference.streaming import (GeneratedSequence, LogProbKeeper, StepDecoder, TokenSink,
                                                 chat_prompt, eos_token_ids)
from models_registry.inference.task_common import max_positions
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

KEEP_IDLE_S = 5.0  # an idle batch keeps its cache (and the heads it holds) this long


@dataclass(eq=False)
class Row:
    """One sequence: what it was asked, what it generated, how it samples, where its cache is."""

    id: str
    prompt: str
    ids: list[int]  # the prompt's tokens
    max_new_tokens: int
    decoder: StepDecoder
    sequence: GeneratedSequence
    processors: LogitsProcessorList
    sample: bool
    generator: torch.Generator | None
    full_text: bool
    details: bool = True  # TGI's answer with details (streams, details asked); else the pipeline's
    token_logprob: bool = True  # whether its tokens' logprobs are read (OpenAI's answers read their own entries)
    last: int = 0  # the token to feed next
    cached: int = 0  # tokens in its cache slot
    history: list[int] = field(default_factory=list)  # the prompt and its tokens, once it has drawn one
    slot: int = -1
    fill: list[int] = field(default_factory=list)  # what its cache must hold before it decodes
    shaping: RowShaping | None = None  # OpenAI's logprobs and structured output (inference.row_shaping)
    joined: float = field(default_factory=time.time)  # when it arrived (time.time(): the scheduler's clock)
    failure: HostingError | None = None  # why it ended without finishing (its grammar could not go on)
    adapter: LoraWeights | None = None  # the LoRA adapter that computes it (None: the base)

    @property
    def tag(self) -> str:
        """Whose weights compute its keys and values: its adapter's identity ("" for the base)."""
        return "" if self.adapter is None else "\0".join((self.adapter.name, *self.adapter.identity))

    @property
    def tokens(self) -> int:
        """KV-cache tokens it may need at most."""
        return len(self.ids) + self.max_new_tokens

    @property
    def done(self) -> bool:
        """Finished (EOS, stop sequence, length), failed or cancelled."""
        sink = self.sequence.sink
        return (self.sequence.finish_reason is not None or self.failure is not None
                or (sink is not None and sink.cancelled()))

    @property
    def decoding(self) -> bool:
        """Prefilled: it feeds its last token at each step."""
        return bool(self.history) and self.cached >= len(self.fill)

    def held(self) -> list[int]:
        """The tokens whose keys and values its slot holds."""
        return (self.history or self.fill)[:self.cached]

    def answer(self) -> list[dict[str, Any]] | ItemFailure:
        """The text-generation answer (with TGI's details), as inference.streaming gives it; or its failure."""
        if self.failure is not None:
            return ItemFailure(self.failure)
        sequence = self.sequence
        if sequence.finish_reason is None:
            sequence.finish_reason = "cancelled" if sequence.sink is not None and sequence.sink.cancelled() else "length"
        text = (self.prompt if self.full_text else "") + sequence.text
        if not self.details:
            return [{"generated_text": text}]
        return [{"generated_text": text,
                 "details": {**self.decoder.summary(sequence), "prefill": [], "tokens": sequence.tokens}}]


class GenerationBatch:
    """The rows of one model and the cache they share; every method blocks (the compute thread)."""

    def __init__(self, pipe: Any, max_rows: int = 64, kv_bytes: int | None = None,
                 adapters: AdapterCache | None = None) -> None:
        self.model, self.tokenizer = pipe.model, pipe.tokenizer
        self.adapters = adapters  # the model's LoRA adapters (None: it serves the base only)
        self.eos = eos_token_ids(self.model, self.tokenizer)
        self.limit = max_positions(self.model, self.tokenizer)
        text = self.model.config.get_text_config(decoder=True)
        self.kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.layers = text.num_hidden_layers
        self.cache = SlotCache(self.layers, self.kv_heads, self.head_dim, self.model.dtype, self.model.device,
                               self.limit, max_rows, kv_bytes)  # kv_bytes: what it may take (a GPU's is committed)
        self.configs = kv_slots.configs_of(self.model)
        budget = kv_bytes // self.bytes_per_token() if kv_bytes is not None else 0  # tokens (0: rows alone bound it)
        self.scheduler = DecodeScheduler(max_rows, budget)  # what runs at each step
        self.prompts: OrderedDict[str, list[int]] = OrderedDict()  # rendered chat prompts, tokenized once
        self.idle_since: float | None = None  # monotonic time the last row left (None: rows are in)

    def bytes_per_token(self) -> int:
        """KV-cache bytes one token of one row takes (keys and values of every layer)."""
        size = torch.finfo(self.model.dtype).bits // 8 if self.model.dtype.is_floating_point else 4
        return 2 * self.layers * self.kv_heads * self.head_dim * size

    def prepare(self, request_id: str, text: str, params: dict[str, Any], sink: TokenSink | None,
                waited_s: float = 0.0, adapter: AdapterSpec | None = None) -> Row:
        """A row for one prompt, checked (400 when it does not fit the model); waited_s: its wait so far.

        adapter: the LoRA adapter that computes it, loaded now where this model does not hold it (a
        HostingError when it cannot be: this row's alone).
        """
        weights = self._adapter(adapter) if adapter is not None else None
        ids = self._prompt_ids(text, params)
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
        sequence = GeneratedSequence(sink=sink, prompt_tokens=len(ids))
        decoder = StepDecoder(self.tokenizer, [sequence], LogProbKeeper(), max_new, list(params.get("stop") or []),
                              self.eos, params.get("seed"))
        generator = None
        if sample and params.get("seed") is not None:
            generator = torch.Generator(device=self.model.device).manual_seed(int(params["seed"]))
        shaping = RowShaping.of(self.tokenizer, self.model.config.get_text_config(decoder=True).vocab_size, self.eos,
                                params)
        # As TGI: a stream (and details) without the prompt unless asked; as the pipeline: a whole answer with it.
        details = bool(params.get("stream") or params.get("details"))
        full_text = params.get("return_full_text") is True if details else params.get("return_full_text") is not False
        return Row(id=request_id, prompt=str(text), ids=list(ids), max_new_tokens=max_new, decoder=decoder,
                   sequence=sequence, processors=logits_processors(config, params, sample), sample=sample,
                   generator=generator, full_text=full_text, details=details, shaping=shaping,
                   token_logprob=params.get("token_logprob") is not False,
                   joined=time.time() - max(0.0, waited_s), adapter=weights)

    def _adapter(self, adapter: AdapterSpec) -> LoraWeights:
        """The adapter's weights; the least recently used others unloaded past the budget (never a running row's).

        A row keeps its adapter's tensors: one unloaded while it runs is held by it until it leaves.
        """
        if self.adapters is None:
            raise Conflict(f"adapter {adapter.name!r}: this model's decode batch serves the base only")
        weights = self.adapters.get(adapter)
        self.adapters.evict([adapter.name, *(r.adapter.name for r in self.rows if r.adapter is not None)])
        return weights

    def add(self, row: Row, arrival: float | None = None, priority: str = "interactive", client: str = "") -> None:
        """Queue row for the scheduler (arrival: when its request arrived, time.time(); now when not given)."""
        self.scheduler.add(row, time.time() if arrival is None else arrival, priority, client)

    def step(self, joining: list[Row] | tuple[()] = (), preempted: list[Row] | tuple[()] = ()) -> list[Row]:
        """One step as the scheduler plans it (joining: rows to queue; preempted: rows told to yield their slots
        first, waiting again); the rows that ended in it (gone)."""
        for row in joining:
            self.add(row)
        for row in preempted:
            self.scheduler.preempt(row)
        plan = self.scheduler.schedule(time.time())
        for row, seat in plan.seats:
            self.cache.reserve(seat.slot + 1, row.tokens)
            if seat.source is not None:
                self.cache.copy(seat.source, seat.slot, seat.reused)
        forward = plan.forward
        with torch.inference_mode():
            while forward is not None:
                took = self._run(forward)
                forward = self.scheduler.computed(forward, took, time.time())
        finished = plan.finished + self.scheduler.settle()
        # Idle: the cache is kept KEEP_IDLE_S (release_idle), so that a head outlives a moment with no rows
        # (closed-loop clients sending one request each, all finished at one step, then the next).
        self.idle_since = (self.idle_since or time.monotonic()) if not self.scheduler.busy() else None
        return finished

    @property
    def rows(self) -> list[Row]:
        """The rows running (seated in the cache), in the order they joined."""
        return self.scheduler.rows

    def release_idle(self, now: float) -> float | None:
        """Give the cache's memory back once idle KEEP_IDLE_S (monotonic now); when to ask again (None: never)."""
        if self.idle_since is None or not self.cache.keys:
            return None
        if now - self.idle_since < KEEP_IDLE_S:
            return self.idle_since + KEEP_IDLE_S
        self.cache.release()
        self.scheduler.clear()
        return None

    def _run(self, forward: Forward) -> float:
        """Run one planned forward: its heads copied, the model over its tokens, its rows' draws; seconds it took."""
        for copy in forward.copies:
            self.cache.copy(copy.source, copy.target, copy.tokens)
        device = self.model.device
        step = generation_step.inputs(forward, self.cache, device)
        started = time.perf_counter()
        with kv_slots.slot_attention(self.configs), self._adapter_rows(forward):
            logits = self.model(input_ids=torch.tensor([step.ids], device=device),
                                position_ids=step.plan.positions[None], use_cache=False,
                                logits_to_keep=torch.tensor(step.keep, dtype=torch.long, device=device),
                                slot_plan=step.plan).logits[0]
        for chunk in forward.chunks:
            if chunk.draws:
                chunk.row.history = list(chunk.row.ids)
        self._draw(forward.drawing, logits)
        return time.perf_counter() - started

    def _adapter_rows(self, forward: Forward) -> Any:
        """The forward's adapters active on the model, each position computed by its row's (nothing: base rows only)."""
        rows = [*forward.decoding, *(chunk.row for chunk in forward.chunks)]
        if self.adapters is None or all(r.adapter is None for r in rows):
            return contextlib.nullcontext()
        counts = [1] * len(forward.decoding) + [chunk.count for chunk in forward.chunks]  # positions, in token order
        return self.adapters.lora.row_positions([r.adapter for r in rows], counts)

    def _prompt_ids(self, text: str, params: dict[str, Any]) -> list[int]:
        """The prompt's tokens: counted at intake, or the chat messages rendered and tokenized once per prompt."""
        if not params.get("messages"):
            if isinstance(text, TokenizedText):
                return list(text.ids)
            prompt = str(text)
        else:
            prompt = chat_prompt(self.tokenizer, params["messages"], params.get("tools"))
            if prompt in self.prompts:
                self.prompts.move_to_end(prompt)
                return self.prompts[prompt]
        if self.limit is not None and len(prompt) > readable_chars(self.limit):
            raise InvalidInput(f"the prompt has {len(prompt)} characters; this model reads {self.limit} tokens, and "
                               f"no text of over {readable_chars(self.limit)} characters fits in them: shorten it")
        ids = list(self.tokenizer(prompt, return_token_type_ids=False)["input_ids"])
        if params.get("messages"):
            self.prompts[prompt] = ids
            while len(self.prompts) > 32:
                self.prompts.popitem(last=False)
        return ids

    def _draw(self, rows: list[Row], logits: torch.Tensor) -> None:
        """Each row's next token from its row of logits (generation_check watches this)."""
        row_drawing.draw(rows, logits)


