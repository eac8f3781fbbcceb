"""Liveness from a thread of its own: a worker busy computing, or with its event loop held up, is alive.

The Redis liveness key (broker.message_leases: a worker whose key expired has its leased messages
requeued by the others, and a message requeued twice is quarantined) and the database
heartbeat (/ready, the web's "no live worker" 503) used to be refreshed by the worker's
event loop, so any stretch of seconds that held the loop (a request tokenized on it, a
long reply) made a healthy worker look dead. This thread refreshes both on its own event
loop and connection, never waiting on the compute thread or the main loop. It stops
vouching only when the main loop has not ticked for HOSTING_WORKER_HUNG_S: a hung worker
is then taken for dead as before; the heartbeat carries the last state the loop reported.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from models_registry.broker.work_layer import WorkLayer

logger = logging.getLogger(__name__)

Beat = Callable[[tuple[Any, ...]], None]  # writes the database heartbeat from a state snapshot (sync)


class LivenessThread:
    """Announces the worker alive every ttl_s / 3 and writes its heartbeat every heartbeat_s, off the main loop."""

    def __init__(self, layer: WorkLayer, worker_id: str, ttl_s: float, heartbeat_s: float, hung_s: float,
                 beat: Beat) -> None:
        self.layer = layer
        self.worker_id = worker_id
        self.ttl_s = ttl_s
        self.heartbeat_s = heartbeat_s
        self.hung_s = hung_s
        self.beat = beat
        self.snapshot: tuple[Any, ...] | None = None  # the latest state the main loop reported
        self.ticked = time.monotonic()  # when the main loop last reported
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness", daemon=True)

    def report(self, snapshot: tuple[Any, ...]) -> None:
        """Called by the main loop: its latest heartbeat state (a tuple, swapped atomically) and that it runs."""
        self.snapshot = snapshot
        self.ticked = time.monotonic()

    def start(self) -> None:
        """Start vouching for the worker."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop vouching (before the worker gives its leases back and forgets its heartbeat)."""
        self._stop.set()
        self._thread.join(timeout_s)

    def loop_hung(self) -> bool:
        """Whether the main loop has been silent past hung_s (then the worker is let die)."""
        return time.monotonic() - self.ticked > self.hung_s

    def _run(self) -> None:
        # An event loop of its own for the layer's async client, run only while announcing: the database
        # heartbeat is written between its runs (Django refuses ORM calls where a loop is running).
        loop = asyncio.new_event_loop()
        next_beat, said_hung = 0.0, False
        try:
            while not self._stop.is_set():
                hung = self.loop_hung()
                if hung and not said_hung:
                    logger.error("worker %s: event loop silent for over %.0f s; no longer announced alive",
                                 self.worker_id, self.hung_s)
                said_hung = hung
                if not hung:
                    try:
                        loop.run_until_complete(self.layer.announce(self.worker_id, self.ttl_s))
                    except Exception as error:
                        logger.warning("could not announce liveness: %s", error)
                    if time.monotonic() >= next_beat and self.snapshot is not None:
                        next_beat = time.monotonic() + self.heartbeat_s
                        self._beat(self.snapshot)
                self._stop.wait(min(self.ttl_s / 3, self.heartbeat_s))
        finally:
            loop.close()  # channels_redis closes this loop's pool with it
            close_old_connections()

    def _beat(self, snapshot: tuple[Any, ...]) -> None:
        try:
            close_old_connections()
            self.beat(snapshot)
        except Exception:
            logger.exception("could not write the heartbeat")
