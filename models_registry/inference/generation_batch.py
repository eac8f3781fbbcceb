"""Continuous batching of one decoder model: rows join, are prefilled in chunks, decode together and leave.

Every step is one forward of the model over the tokens of every row flattened into one
sequence (inference.kv_slots): one token per decoding row, and the next chunk of each
prompt being prefilled, within a token budget measured so that a step's prefill takes
about STEP_S (the pace per token of the steps so far). Each row has a slot of a cache
preallocated for it and written in place; a row whose prompt starts like a cached one (a shared
system prompt, the n choices of one prompt, a preempted row coming back) starts from that head
(inference.slot_table). Short prompts that join together are computed whole in one step
(JOIN_TOKENS); a row asking a few tokens that riding the batch would make late takes a fast
lane (inference.fast_lane). Rows draw their tokens in inference.row_drawing, each with its own
parameters. A row may name a LoRA adapter of the model: the step's one forward computes every row
with its own adapter (inference.batched_lora, per position), and rows share cached heads only with
rows of the same adapter. Events and answers are TGI's, built as inference.streaming builds them.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList

from models_registry.catalog.readable_text import readable_chars
from models_registry.catalog.specs import AdapterSpec
from models_registry.core.batch_types import ItemFailure
from models_registry.core.errors import Conflict, HostingError, InvalidInput
from models_registry.inference import fast_lane, generation_step, kv_slots, row_drawing
from models_registry.inference.adapter_cache import AdapterCache
from models_registry.inference.batched_lora import LoraWeights
from models_registry.inference.generation import DEFAULT_MAX_NEW_TOKENS
from models_registry.inference.intake_tokens import TokenizedText
from models_registry.inference.kv_slots import SlotCache
from models_registry.inference.row_processors import logits_processors
from models_registry.inference.row_shaping import RowShaping
from models_registry.inference.slot_table import SlotTable
from models_registry.inference.streaming import (GeneratedSequence, LogProbKeeper, StepDecoder, TokenSink,
                                                 chat_prompt, eos_token_ids)
from models_registry.inference.task_common import max_positions
from models_registry.tasks.task_parameters import MAX_NEW_TOKENS

STEP_S = 0.05  # the prefill one step computes takes about this long (at least MIN_CHUNK tokens)
MIN_CHUNK, FIRST_CHUNK = 32, 64  # prefill tokens per step: at least, and before the first measure
KEEP_IDLE_S = 5.0  # an idle batch keeps its cache (and the heads it holds) this long
JOIN_TOKENS = 256  # short prompts (each within a chunk) computed whole at one step, beside the chunks


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
    last: int = 0  # the token to feed next
    cached: int = 0  # tokens in its cache slot
    history: list[int] = field(default_factory=list)  # the prompt and its tokens, once it has drawn one
    slot: int = -1
    fill: list[int] = field(default_factory=list)  # what its cache must hold before it decodes
    shaping: RowShaping | None = None  # OpenAI's logprobs and structured output (inference.row_shaping)
    joined: float = field(default_factory=time.perf_counter)  # when it arrived (perf_counter)
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
        self.rows: list[Row] = []
        self.eos = eos_token_ids(self.model, self.tokenizer)
        self.limit = max_positions(self.model, self.tokenizer)
        text = self.model.config.get_text_config(decoder=True)
        self.kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.layers = text.num_hidden_layers
        self.cache = SlotCache(self.layers, self.kv_heads, self.head_dim, self.model.dtype, self.model.device,
                               self.limit, max_rows, kv_bytes)  # kv_bytes: what it may take (a GPU's is committed)
        self.table = SlotTable()
        self.configs = kv_slots.configs_of(self.model)
        self.seconds_per_token: float | None = None  # of prefill, measured
        self.step_s: float | None = None  # the batch's forward, measured
        self.lane_times: deque[float] = deque(maxlen=fast_lane.WINDOW)  # the fast lane's last forwards
        self.lane_at, self.went_first = 0.0, False  # the last lane forward (perf_counter); the last step the lane's
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
                   joined=time.perf_counter() - max(0.0, waited_s), adapter=weights)

    def _adapter(self, adapter: AdapterSpec) -> LoraWeights:
        """The adapter's weights; the least recently used others unloaded past the budget (never a running row's).

        A row keeps its adapter's tensors: one unloaded while it runs is held by it until it leaves.
        """
        if self.adapters is None:
            raise Conflict(f"adapter {adapter.name!r}: this model's decode batch serves the base only")
        weights = self.adapters.get(adapter)
        self.adapters.evict([adapter.name, *(r.adapter.name for r in self.rows if r.adapter is not None)])
        return weights

    def step(self, joining: list[Row] | tuple[()] = (), preempted: list[Row] | tuple[()] = ()) -> list[Row]:
        """One step: preempted rows leave, joining rows take slots, one forward; the rows that finished (gone)."""
        finished = [r for r in self.rows if r.done]  # cancelled since the last step
        self._leave(finished + [r for r in preempted if r in self.rows])
        for row in joining:
            if row.done:
                finished.append(row)
            else:
                self._seat(row)
        if self.rows:
            with torch.inference_mode():
                if not self._lane_first():
                    self._forward(self.rows, self._prefill_budget(), JOIN_TOKENS)
                    self._fast_lane()
            done = [r for r in self.rows if r.done]
            self._leave(done)
            finished += done
        # Idle: the cache is kept KEEP_IDLE_S (release_idle), so that a head outlives a moment with no rows
        # (closed-loop clients sending one request each, all finished at one step, then the next).
        self.idle_since = (self.idle_since or time.monotonic()) if not self.rows else None
        return finished

    def release_idle(self, now: float) -> float | None:
        """Give the cache's memory back once idle KEEP_IDLE_S (monotonic now); when to ask again (None: never)."""
        if self.idle_since is None or not self.cache.keys:
            return None
        if now - self.idle_since < KEEP_IDLE_S:
            return self.idle_since + KEEP_IDLE_S
        self.cache.release()
        self.table.clear()
        return None

    def _seat(self, row: Row) -> None:
        """row takes a slot, starting from the longest cached head of what it must compute."""
        row.fill = row.history[:-1] if row.history else row.ids  # a preempted row computes its tokens again
        seat = self.table.take(row.fill, {r.slot: r.held() for r in self.rows if r.tag == row.tag}, row.tag)
        self.cache.reserve(seat.slot + 1, row.tokens)
        if seat.source is not None:
            self.cache.copy(seat.source, seat.slot, seat.reused)
        row.slot, row.cached = seat.slot, seat.reused
        self.rows.append(row)

    def _leave(self, rows: list[Row]) -> None:
        for row in rows:
            if row in self.rows:
                self.rows.remove(row)
                self.table.give_back(row.slot, row.held(), row.tag)
            row.slot, row.cached = -1, 0

    def _lane_first(self) -> bool:
        """Late joining short rows go through the lane alone; never two steps in a row (the long rows would wait)."""
        now, alone = time.perf_counter(), self._lane_alone()
        rows = [] if self.went_first else fast_lane.first_rows(self.rows, now, self.step_s, alone)
        self.went_first = bool(rows)
        for _ in range(fast_lane.FIRST_FORWARDS):
            if not (live := [r for r in rows if not r.done]):
                break
            self._forward(live, fast_lane.LANE_PROMPT * len(live), 0, lane=True)
        return bool(rows)

    def _fast_lane(self) -> None:
        """Short rows that riding the batch would make late decode in forwards of their own (inference.fast_lane)."""
        for _ in range(fast_lane.FAST_STEPS):
            rows = fast_lane.lane_rows(self.rows, time.perf_counter(), self.step_s, self._lane_alone())
            if not rows:
                return
            self._forward(rows, 0, 0, lane=True)

    def _lane_alone(self) -> float | None:  # the fastest of the last few lane forwards; None when stale
        fresh = time.perf_counter() - self.lane_at < fast_lane.FRESH_S
        return min(self.lane_times) if fresh and self.lane_times else None

    def _forward(self, rows: list[Row], budget: int, join_budget: int, lane: bool = False) -> None:
        """One forward: a token for every decoding row of rows, the next chunk of prompts being prefilled."""
        step = generation_step.next_step(rows, self.cache, budget, join_budget)
        if not step.ids:
            return
        device = self.model.device
        plan = step.plan(self.cache, device)
        started = time.perf_counter()
        with kv_slots.slot_attention(self.configs), self._adapter_rows(step):
            logits = self.model(input_ids=torch.tensor([step.ids], device=device), position_ids=plan.positions[None],
                                use_cache=False, logits_to_keep=torch.tensor(step.keep, dtype=torch.long, device=device),
                                slot_plan=plan).logits[0]
        drawing = list(step.decoding)
        for row in step.decoding:
            row.cached += 1
        for row, count, completes in step.chunks:
            row.cached += count
            if completes and not row.history:
                row.history = list(row.ids)
                drawing.append(row)
        self._draw(drawing, logits)
        took = time.perf_counter() - started
        if lane:
            self.lane_times.append(took)
            self.lane_at = time.perf_counter()
            return
        self.step_s = _smoothed(self.step_s, took)
        self.seconds_per_token = _smoothed(self.seconds_per_token, took / len(step.ids))  # a decode token: a prompt's

    def _adapter_rows(self, step: generation_step.Step) -> Any:
        """The step's adapters active on the model, each position computed by its row's (nothing: base rows only)."""
        rows = [*step.decoding, *(row for row, _, _ in step.chunks)]
        if self.adapters is None or all(r.adapter is None for r in rows):
            return contextlib.nullcontext()
        counts = [1] * len(step.decoding) + [count for _, count, _ in step.chunks]  # positions, in step.ids' order
        return self.adapters.lora.row_positions([r.adapter for r in rows], counts)

    def _prefill_budget(self) -> int:
        if self.seconds_per_token is None:
            return FIRST_CHUNK
        return max(MIN_CHUNK, int(STEP_S / self.seconds_per_token))

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


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else 0.7 * old + 0.3 * new
