"""The usage ledger: what each API token used of each model version, per UTC hour (observe.ledger counts it)."""

from __future__ import annotations

from django.db import models

ANONYMOUS_TOKEN = 0  # requests served with tokens off (HOSTING_REQUIRE_API_TOKEN=0) or by a staff sample


class UsageRecord(models.Model):
    """One API token's use of one model version in one UTC hour: added to by every flush, never rewritten.

    token_id is the token's id, not a foreign key: a deleted token's history stays for chargeback.
    """

    token_id = models.BigIntegerField(help_text="The API token's id (0: no token).")
    model = models.CharField(max_length=100)
    version = models.PositiveIntegerField(default=0, help_text="The model version that answered (0: no versions).")
    hour = models.BigIntegerField(help_text="Unix seconds of the UTC hour's start.")
    requests = models.BigIntegerField(default=0, help_text="Requests that reached the model, answered or failed.")
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0, help_text="Generated tokens.")
    compute_us = models.BigIntegerField(default=0, help_text="The requests' share of their batches' compute time.")
    errors = models.BigIntegerField(default=0, help_text="Requests answered with an error.")
    images = models.BigIntegerField(default=0)
    audio_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token_id", "model", "version", "hour"],
                                               name="usage_record_one_row_per_key")]
        indexes = [models.Index(fields=["token_id", "hour"]), models.Index(fields=["hour"])]
        ordering = ["-hour", "token_id", "model", "version"]
        verbose_name = verbose_name_plural = "usage"

    def __str__(self) -> str:
        return f"token {self.token_id} {self.model} v{self.version} @{self.hour}"


class LedgerFlush(models.Model):
    """A flush of the Redis counters applied to the ledger, written in the same transaction as its rows.

    Its id is unique: a flush that a second process applies again (its first flusher died after
    the commit, before it deleted the counters) fails on it and adds nothing.
    """

    flush_id = models.CharField(max_length=40, primary_key=True)
    applied_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return self.flush_id
