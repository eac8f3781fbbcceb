"""What workers write about themselves: heartbeats, and the poison requests they quarantined."""

from __future__ import annotations

from django.db import models


class QuarantinedRequest(models.Model):
    """A request in flight at two worker deaths: answered 500 and never delivered again (a poison message)."""

    request_id = models.CharField(max_length=64)
    model = models.CharField(max_length=100)
    task = models.CharField(max_length=100)
    inputs = models.PositiveIntegerField(default=0, help_text="Inputs the request carried.")
    input_bytes = models.PositiveIntegerField(default=0, help_text="Size of its inputs (not kept: they may be private).")
    quarantined_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-quarantined_at"]

    def __str__(self) -> str:
        return f"{self.model}/{self.task} {self.request_id}"


class WorkerHeartbeat(models.Model):
    """What a live `runworker` process last said about itself (written by the worker)."""

    worker_id = models.CharField(max_length=64, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    device = models.CharField(max_length=20)
    models_state = models.JSONField(default=dict, help_text="{model: {state, error, device}}")
    queue_depths = models.JSONField(default=dict, help_text="{model/task: pending items}")
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    draining = models.BooleanField(default=False)
    busy_fraction = models.FloatField(default=0.0, help_text="Share of the last seconds its device spent computing.")
    # /ready waits for every enabled model some live worker is meant to serve (catalog.fleet_readiness).
    serve_models = models.JSONField(default=list, blank=True,
                                    help_text="HOSTING_WORKER_MODELS: the models it serves (empty: every enabled one)")

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"
