"""Worker heartbeats in the database: written by workers, read by the web processes."""

from __future__ import annotations

import datetime as dt
import os
import socket
from typing import Any

from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.models import WorkerHeartbeat


def beat(worker_id: str, device: str, models_state: dict[str, Any], queue_depths: dict[str, int],
         started_at: float, draining: bool, busy_fraction: float = 0.0, serve_models: list[str] | None = None) -> None:
    """Record that this worker is alive, what it holds and which models it serves (none named: all; sync ORM)."""
    WorkerHeartbeat.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "device": device,
            "models_state": models_state,
            "queue_depths": queue_depths,
            "started_at": dt.datetime.fromtimestamp(started_at, tz=dt.UTC),
            "last_seen": timezone.now(),
            "draining": draining,
            "busy_fraction": busy_fraction,
            "serve_models": sorted(serve_models or []),
        },
    )


def forget(worker_id: str) -> None:
    """Remove this worker's record (clean exit)."""
    WorkerHeartbeat.objects.filter(worker_id=worker_id).delete()


def live_workers() -> list[WorkerHeartbeat]:
    """Workers whose heartbeat is younger than HOSTING_WORKER_STALE_S, newest first."""
    cutoff = timezone.now() - dt.timedelta(seconds=conf.WORKER_STALE_S)
    return list(WorkerHeartbeat.objects.filter(last_seen__gte=cutoff))


def prune_stale(older_than_s: float = 3600) -> int:
    """Delete records of workers silent for a long time (killed without a goodbye)."""
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_s)
    deleted, _ = WorkerHeartbeat.objects.filter(last_seen__lt=cutoff).delete()
    return deleted
