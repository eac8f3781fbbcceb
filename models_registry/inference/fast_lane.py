"""The fast lane: rows that ask a few tokens decode in forwards of their own, so long rows do not hold them.

A 4-token answer beside 32 long streams would otherwise take four steps of the whole batch
(on a CPU a forward of one row costs about a quarter of one of 33: reading the weights).

- On a CPU whose cores are not all taken by torch's threads (one torch thread per worker on a
  2-core machine, say), the lane runs on a thread of its own (LaneThread) during the batch's
  forward: short rows with short prompts are prefilled and decoded there, as many forwards
  as fit in the batch's forward, and the batch computes the other rows alone. The long rows
  then lose only what the two forwards contend for (memory bandwidth, the GIL between ops).
- Elsewhere (a GPU, or every core taken) the lane follows the batch's forward on the compute
  thread: a short row's prompt rides the batch's forward, then up to SEQUENTIAL_FORWARDS
  forwards of the short rows alone, each costing the long rows its time; a 4-token answer
  within twice its time alone needs no more than three.

Either way the lane runs only while its rows are at most a quarter of the batch's
(LANE_SHARE), so it computes fewer rows than the batch's step.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

SHORT_TOKENS = 16  # a row asking at most this many tokens is short
SEQUENTIAL_FORWARDS = 3  # on the compute thread: forwards of the short rows after the batch's, at most
LANE_SHARE = 4  # the lane's rows are at most a quarter of the batch's
LANE_PROMPT = 32  # a short row's prompt (or what is left of it) this short is prefilled in the lane thread
SMOOTHING = 0.3  # weight of the newest measure in the running step and lane forward times


def spare_core(device: Any) -> bool:
    """Whether a lane thread has a core of its own: a CPU whose cores torch's threads do not all take."""
    if torch.device(device).type != "cpu":
        return False  # a GPU's kernels queue on one stream: a second thread would only wait its turn
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores > torch.get_num_threads()


def sequential_rows(rows: list[Any]) -> list[Any]:
    """The short decoding rows that take forwards of their own after the batch's ([] while too many)."""
    decoding = [r for r in rows if r.decoding and not r.done]
    short = [r for r in decoding if r.max_new_tokens <= SHORT_TOKENS]
    return short if short and LANE_SHARE * len(short) <= len(decoding) else []


def threaded_rows(rows: list[Any]) -> list[Any]:
    """The short rows the lane thread computes: a few tokens asked, a prompt left of at most LANE_PROMPT."""
    short = [r for r in rows if not r.done and r.max_new_tokens <= SHORT_TOKENS
             and len(r.fill) - r.cached <= LANE_PROMPT]
    return short if short and LANE_SHARE * len(short) <= len(rows) - len(short) else []


class LaneThread:
    """One thread beside the compute thread that runs the lane's forwards while the batch's forward runs.

    A worker's compute thread runs one step at a time, so one lane serves every decode batch of
    the worker. The lane starts a forward while the batch's is still running and expected to
    last at least half a lane forward more (both times measured as they go), so the batch
    seldom waits for the lane; it always runs one, so a short row moves at every step.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fast-lane")
        self._batch_done = threading.Event()
        self.step_s: float | None = None  # the batch's forward while the lane runs, measured
        self.forward_s: float | None = None  # one forward of the lane, measured
        self.forwards = 0  # the lane's forwards so far (for tests and the profile)

    def beside(self, lane_forward: Callable[[], bool], batch_forward: Callable[[], None]) -> None:
        """batch_forward on this thread while lane_forward runs on the lane's as long as it fits.

        lane_forward computes one forward of the lane's rows and says whether any is left to compute.
        The lane is waited for before this returns; an error of either is raised here.
        """
        self._batch_done.clear()
        started = time.perf_counter()
        pending: Future[None] = self._pool.submit(self._run, lane_forward, started)
        try:
            batch_forward()
        finally:
            self.step_s = _smoothed(self.step_s, time.perf_counter() - started)
            self._batch_done.set()
            pending.result()

    def _run(self, lane_forward: Callable[[], bool], started: float) -> None:
        with torch.inference_mode():  # thread-local: the lane's thread enters it itself
            while True:
                began = time.perf_counter()
                more = lane_forward()
                self.forward_s = _smoothed(self.forward_s, time.perf_counter() - began)
                self.forwards += 1
                if not more or not self._may_go_on(started):
                    return

    def _may_go_on(self, started: float) -> bool:
        if self._batch_done.is_set():
            return False
        if self.step_s is None or self.forward_s is None:
            return True
        return time.perf_counter() - started + self.forward_s / 2 <= self.step_s


_shared: LaneThread | None = None
_shared_lock = threading.Lock()


def shared_lane() -> LaneThread:
    """The worker's lane thread (made on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LaneThread()
        return _shared


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new
