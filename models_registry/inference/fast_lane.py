"""Which rows the fast lane computes: rows that ask a few tokens and would be late riding the batch (pure).

A 4-token answer beside 32 long streams would take four steps of the whole batch; in the lane
it takes forwards of its rows alone (on a CPU a forward of one row costs about a quarter of one
of 33: reading the weights). Each lane forward costs the long rows its time, so the lane runs
only for a short row that riding the batch would make more than SLOWDOWN times as slow as
alone: its time since it arrived plus what riding costs, against SLOWDOWN times a lane forward
per token asked (the batch's forward measured as it runs; a lane forward alone, the fastest of
the last WINDOW, measured again at least every FRESH_S). Beside 8 rows (a step about 1.4 lane
forwards on a CPU) a short row rides the batch; beside 32 (a step about 3) riding even the one
forward that computes its prompt would make it late, so its prompt and first tokens go through
the lane first, before the batch's forward of that step (FIRST_FORWARDS), and it is answered
before the long rows move.
"""

from __future__ import annotations

from typing import Any

SHORT_TOKENS = 16  # a row asking at most this many tokens may take the lane
FAST_STEPS = 3  # lane forwards after one batch forward, at most
LANE_SHARE = 4  # the lane's rows are at most a quarter of the decoding rows
SLOWDOWN = 2.0  # a short row takes the lane when riding the batch would make it slower than this times alone
FIRST_FORWARDS = 4  # forwards a joining short row may take before the batch's: its prompt and first tokens
LANE_PROMPT = 32  # ... when its prompt (what is left of it) is this short
WINDOW = 16  # lane forwards whose fastest stands for a forward alone (the others met a busier machine)
FRESH_S = 10.0  # a lane forward measured longer ago is measured again (one measured under a passing load would
# otherwise keep every short row riding the batch, and the lane would never run to correct it)


def late(spent_s: float, left: int, asked: int, step_s: float | None, lane_s: float | None) -> bool:
    """Whether a short row riding the batch would take over SLOWDOWN times its time alone.

    spent_s: since it arrived at the worker; left: tokens it has yet to draw; asked: its max_new_tokens;
    step_s, lane_s: the batch's forward and a lane forward, measured (None: not yet: late, so the
    lane runs once and is measured).
    """
    if step_s is None or lane_s is None:
        return True
    return spent_s + left * step_s > SLOWDOWN * asked * lane_s


def first(spent_s: float, asked: int, step_s: float | None, lane_s: float | None) -> bool:
    """Whether a joining short row would be late even riding one batch forward and taking the lane after it."""
    if step_s is None or lane_s is None:
        return False  # the lane after the batch's forward measures itself first
    return spent_s + step_s + (asked - 1) * lane_s > SLOWDOWN * asked * lane_s


def first_rows(rows: list[Any], now: float, step_s: float | None, lane_s: float | None) -> list[Any]:
    """The joining short rows (short prompts) that go through the lane before the batch's forward, alone."""
    joining = [r for r in rows if not r.decoding and not r.done and r.max_new_tokens <= SHORT_TOKENS
               and len(r.fill) - r.cached <= LANE_PROMPT and first(now - r.joined, r.max_new_tokens, step_s, lane_s)]
    return _within_share(joining, rows)


def lane_rows(rows: list[Any], now: float, step_s: float | None, lane_s: float | None) -> list[Any]:
    """The decoding rows the lane computes next ([] while none is late, or while they are too many)."""
    short = [r for r in rows if r.decoding and not r.done and r.max_new_tokens <= SHORT_TOKENS
             and late(now - r.joined, r.max_new_tokens - len(r.sequence.ids), r.max_new_tokens, step_s, lane_s)]
    return _within_share(short, rows)


def _within_share(chosen: list[Any], rows: list[Any]) -> list[Any]:
    """chosen, while they are at most a quarter (LANE_SHARE) of the decoding rows; else none."""
    decoding = sum(1 for r in rows if r.decoding and not r.done)
    return chosen if chosen and LANE_SHARE * len(chosen) <= decoding else []
