"""The decode batch's one scheduler: every decision of a step, as a plan (pure: no torch, no event loop).

A generation request goes from intake to this scheduler's queue (inference.decode_queue:
priorities, one aging rule, fair share and preemption) and waits there until it joins.
At each step `schedule` decides, in this order:

1. rows that are done (finished, cancelled, failed) leave, and their slots keep their heads;
2. at most one running row yields its slot to the waiting head (fair share), and those that
   fit join: each takes a slot, starting from the longest cached head of its prompt
   (inference.slot_table: a shared system prompt, the n choices of one prompt, a preempted row);
3. the step's first forward: a token for every decoding row, then prompt chunks within a
   prefill budget measured so that a step's prefill takes about STEP_S; short prompts that
   join together are computed whole beside the chunks (JOIN_TOKENS); a row whose prompt
   shares a long head with a row prefilled before it waits and copies that head once it
   is computed. A joining short row that riding the batch would make late goes through the
   fast lane first instead (inference.fast_lane: its prompt and first tokens alone).

The executor (inference.generation_batch) runs each Forward and hands back how long it took
(`computed`), which updates the rows' cached tokens and the measures, and answers the step's
next forward: more of the fast lane's (short rows that riding the batch would make late, in
forwards of their own) or None, when the step is over and `settle` takes the rows that ended.
Like vLLM's scheduler, the plan is a value (inference.decode_plan): printable, and tested so.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from models_registry.inference import fast_lane
from models_registry.inference.decode_plan import Chunk, Copy, Forward, Plan
from models_registry.inference.decode_queue import DecodeQueue, Entry
from models_registry.inference.slot_table import SlotTable, common_prefix

logger = logging.getLogger(__name__)

STEP_S = 0.05  # the prefill one step computes takes about this long (at least MIN_CHUNK tokens)
MIN_CHUNK, FIRST_CHUNK = 32, 64  # prefill tokens per step: at least, and before the first measure
JOIN_TOKENS = 256  # short prompts (each within a chunk) computed whole at one step, beside the chunks
WAIT_FOR_HEAD = 64  # a row waits for another's prefill of a head they share when it is this long
COPY_GAIN = 16  # a row copies a head another row computed meanwhile when it gains this many tokens


class DecodeScheduler:
    """The waiting and running rows of one model's decode batch, their slots, and the pace measured so far.

    Rows are inference.generation_batch's Row (or anything with its fields): the scheduler
    writes where each row's cache is (slot, fill, cached); the executor writes what it drew.
    """

    def __init__(self, max_rows: int, token_budget: int = 0) -> None:
        self.queue: DecodeQueue[Any] = DecodeQueue(max_rows, token_budget)
        self.table = SlotTable()
        self.seconds_per_token: float | None = None  # of prefill, measured
        self.step_s: float | None = None  # the batch's forward, measured
        self.lane_times: deque[float] = deque(maxlen=fast_lane.WINDOW)  # the fast lane's last forwards
        self.lane_at, self.went_first = 0.0, False  # the last lane forward (time.time()); the last step the lane's
        self._arriving: deque[Entry[Any]] = deque()  # added from the event loop while a step may run: queued at the next
        self._yielding: list[Any] = []  # rows told to yield their slots at the next step
        self._lane: tuple[bool, int, list[Any]] = (False, 0, [])  # this step's lane: first?, forwards left, rows

    @property
    def rows(self) -> list[Any]:
        """The running rows, in the order they joined."""
        return [entry.payload for entry in self.queue.running.values()]

    def busy(self) -> bool:
        """Whether a row waits or runs."""
        return bool(self._arriving or self.queue.waiting or self.queue.running)

    def entries(self) -> list[Entry[Any]]:
        """Every waiting and running entry (their payloads are the rows)."""
        return [*self.queue.waiting, *self.queue.running.values()]

    def fits_alone(self, row: Any) -> bool:
        """Whether row could ever run: its cache row at its longest within the token budget."""
        return not self.queue.token_budget or row.tokens <= self.queue.token_budget

    def add(self, row: Any, arrival: float, priority: str = "interactive", client: str = "") -> Entry[Any]:
        """Queue row to join at a coming step (fits_alone must hold); arrival: when its request arrived.

        Safe beside a running step (another thread): the row enters the queue when the next step is planned.
        """
        if not self.fits_alone(row):
            raise ValueError(f"row {row.id} needs {row.tokens} tokens, over the budget {self.queue.token_budget}")
        entry = Entry(id=str(id(row)), tokens=row.tokens, prompt_tokens=len(row.ids), arrival=arrival, payload=row,
                      priority=priority, client=client)
        self._arriving.append(entry)
        return entry

    def preempt(self, row: Any) -> None:
        """row yields its slot at the next step and waits again (it is not admitted back at that step)."""
        self._yielding.append(row)

    def schedule(self, now: float) -> Plan:
        """The step's changes and its first forward; now: time.time()."""
        plan = Plan()
        while self._arriving:
            self.queue.add(self._arriving.popleft())
        for entry in [e for e in self.entries() if e.payload.done]:  # cancelled, or failed, since the last step
            self._leave(entry)
            plan.finished.append(entry.payload)
        told = [self.queue.running[str(id(row))] for row in self._yielding if str(id(row)) in self.queue.running]
        self._yielding.clear()
        for entry in told:  # out of the queue while this step admits: their rows stay free for the others
            del self.queue.running[entry.id]
        turn = self.queue.next_turn(now)
        for entry in [*told, *turn.preempted]:
            row = entry.payload
            entry.prompt_tokens = max(1, len(row.history) - 1)  # its tokens so far are computed again
            self._give_back(row)
            plan.preempted.append(row)
            if entry in turn.preempted:
                logger.info("decode batch: request %s of client %r yields its row (fair share)", row.id, entry.client)
        for entry in told:
            entry.preempted += 1
            self.queue.waiting.append(entry)
        for entry in turn.joined:
            plan.seats.append((entry.payload, self._seat(entry.payload)))
        plan.forward = self._first_forward(now)
        return plan

    def computed(self, forward: Forward, took_s: float, now: float) -> Forward | None:
        """forward ran (after its rows drew their tokens) in took_s: the step's next forward, or None (it is over)."""
        for row in forward.decoding:
            row.cached += 1
        for chunk in forward.chunks:
            chunk.row.cached += chunk.count
        if forward.lane:
            self.lane_times.append(took_s)
            self.lane_at = now
        else:
            self.step_s = _smoothed(self.step_s, took_s)
            self.seconds_per_token = _smoothed(self.seconds_per_token, took_s / forward.tokens)  # decode = prompt token
        first, left, rows = self._lane
        if left <= 0:
            return None
        self._lane = (first, left - 1, rows)
        if first:  # the joining short rows go on alone: their first tokens before the batch moves
            live = [r for r in rows if not r.done]
            return self._forward(live, fast_lane.LANE_PROMPT * len(live), 0, lane=True) if live else None
        lane = fast_lane.lane_rows(self.rows, now, self.step_s, self._lane_alone(now))
        return self._forward(lane, 0, 0, lane=True) if lane else None

    def settle(self) -> list[Any]:
        """The step is over: the rows that ended in it leave (their slots keep their heads)."""
        done = [e for e in self.queue.running.values() if e.payload.done]
        for entry in done:
            self._leave(entry)
        return [e.payload for e in done]

    def clear(self) -> None:
        """The cache was released: every slot free and empty."""
        self.table.clear()

    def _first_forward(self, now: float) -> Forward | None:
        """The lane's forward of late joining short rows (never two steps in a row), else the batch's."""
        rows = self.rows
        if not rows:
            return None
        alone = self._lane_alone(now)
        first = [] if self.went_first else fast_lane.first_rows(rows, now, self.step_s, alone)
        self.went_first = bool(first)
        if first:
            self._lane = (True, fast_lane.FIRST_FORWARDS - 1, first)
            return self._forward(first, fast_lane.LANE_PROMPT * len(first), 0, lane=True)
        self._lane = (False, fast_lane.FAST_STEPS, [])
        return self._forward(rows, self._prefill_budget(), JOIN_TOKENS)

    def _forward(self, rows: list[Any], budget: int, join_budget: int, lane: bool = False) -> Forward | None:
        """A forward of rows: every decoding row's next token, then prompt chunks within budget tokens.

        A prompt whose rest fits in one chunk and in join_budget (what is left of it) is computed whole
        from join_budget instead: the short prompts that arrive together all draw their first token
        at the next step (vLLM's scheduler gives waiting requests what its token budget has left, and
        caps a long prompt's share per step), while a long prompt goes on in chunks of budget tokens.
        """
        forward = Forward(lane=lane)
        forward.decoding = sorted((r for r in rows if r.decoding), key=lambda r: r.slot)
        chunk = budget
        for row in self._prefilling(rows, forward.copies):
            rest = len(row.fill) - row.cached
            if rest <= min(chunk, join_budget):  # a short prompt (or a long one's last chunk): whole, beside the others
                join_budget -= rest
                count = rest
            else:
                count = min(rest, budget)
                budget -= count
            if count <= 0:
                if budget <= 0 and join_budget <= 0:
                    break
                continue
            completes = row.cached + count == len(row.fill)
            forward.chunks.append(Chunk(row, row.cached, count, draws=completes and not row.history))
        return forward if forward.tokens else None

    def _prefilling(self, rows: list[Any], copies: list[Copy]) -> list[Any]:
        """Rows with prompt left to compute, in joining order; one waits while another computes a head they share.

        A row that can copy more of its head from another row's slot (computed meanwhile) does so first.
        """
        planned: list[Any] = []
        for row in (r for r in rows if r.cached < len(r.fill)):
            # Keys and values are those of a row's own weights: heads are shared among rows of one adapter (tag).
            live = ((common_prefix(row.fill, other.held()), other.slot) for other in rows
                    if other is not row and other.tag == row.tag)
            shared, source = max(live, default=(0, -1))
            reuse = min(shared, len(row.fill) - 1)
            if reuse >= row.cached + COPY_GAIN or reuse == len(row.fill) - 1 > row.cached:  # more of its head (or all)
                copies.append(Copy(source, row.slot, reuse))
                row.cached = reuse
            if len(row.fill) - row.cached >= WAIT_FOR_HEAD and any(
                    common_prefix(row.fill, other.fill) - row.cached >= WAIT_FOR_HEAD for other in planned
                    if other.tag == row.tag):
                continue  # the other's prefill computes it once; this one copies it afterwards
            planned.append(row)
        return planned

    def _seat(self, row: Any) -> Any:
        """row takes a slot, starting from the longest cached head of what it must compute."""
        row.fill = row.history[:-1] if row.history else row.ids  # a preempted row computes its tokens again
        live = {r.slot: r.held() for r in self.rows if r is not row and r.slot >= 0 and r.tag == row.tag}
        seat = self.table.take(row.fill, live, row.tag)
        row.slot, row.cached = seat.slot, seat.reused
        return seat

    def _leave(self, entry: Entry[Any]) -> None:
        self.queue.leave(entry.id)
        self._give_back(entry.payload)

    def _give_back(self, row: Any) -> None:
        if row.slot >= 0:
            self.table.give_back(row.slot, row.held(), row.tag)
        row.slot, row.cached = -1, 0

    def _prefill_budget(self) -> int:
        if self.seconds_per_token is None:
            return FIRST_CHUNK
        return max(MIN_CHUNK, int(STEP_S / self.seconds_per_token))

    def _lane_alone(self, now: float) -> float | None:
        """The fastest of the last few lane forwards; None when stale (measured again)."""
        fresh = now - self.lane_at < fast_lane.FRESH_S
        return min(self.lane_times) if fresh and self.lane_times else None


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else 0.7 * old + 0.3 * new
