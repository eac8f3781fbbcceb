"""Versions of a registered model: each registration that changes what the model computes makes one."""

from __future__ import annotations

from django.db import models

from models_registry.models.registered import RegisteredModel


class ModelVersion(models.Model):
    """One version of a model: what it computes (source, revision, dtype, backend), numbered 1, 2, ... per model."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.CharField(max_length=500)
    revision = models.CharField(max_length=100, blank=True)
    dtype = models.CharField(max_length=10, default="auto")
    backend = models.CharField(max_length=20, default="auto")
    created_at = models.DateTimeField(auto_now_add=True)
    live_since = models.DateTimeField(null=True, blank=True, help_text="When requests last switched to it.")
    allow_shape_change = models.BooleanField(
        default=False, help_text="Registered with --allow-shape-change: its answers may look unlike live's.")
    rolled_back = models.BooleanField(
        default=False, help_text="Rolled back from: a later rollback never returns to it (register it again).")
    reload_of = models.PositiveIntegerField(
        default=0, help_text="The version this one is a fresh copy of (the admin's Load now); 0: a registration.")

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="unique_version_number_per_model")]

    def __str__(self) -> str:
        return f"{self.model.name} v{self.number}"

    def compute_key(self) -> tuple[str, str, str, str]:
        """What the version computes: a registration that changes it makes a new version."""
        return (self.source, self.revision, self.dtype, self.backend)
