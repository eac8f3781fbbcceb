"""The admin's view of model versions: history inline, the version column, promote and roll back."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.http import HttpRequest

from models_registry.core.errors import InvalidInput
from models_registry.models import ModelVersion
from models_registry.models.registered import MANAGE_VERSIONS
from models_registry.policy.shadow import read_sums
from models_registry.catalog import version_changes
from models_registry.catalog.rollout import SHADOW


class ModelVersionInline(admin.TabularInline):
    """Every version of the model, newest first (read-only: a registration makes them)."""

    model = ModelVersion
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "source", "revision", "dtype", "backend", "made_by", "created_at",
                                "live_since")
    ordering = ("-number",)

    @admin.display(description="made by")
    def made_by(self, obj: ModelVersion) -> str:
        """A registration, or the admin's Load now (a fresh copy of another version)."""
        return f"Load now (a copy of v{obj.reload_of})" if obj.reload_of else "registration"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Versions come from registrations, not from this form."""
        return False


def version_summary(obj: Any) -> str:
    """live vN, the switch in progress, the candidate with its share (and a shadow's measured distance)."""
    if not obj.live_version:
        return "-"
    shown = f"v{obj.live_version}"
    if obj.target_version:
        shown += f" → v{obj.target_version} (loading)"
    if obj.candidate_version:
        shown += f"; {obj.candidate_mode} v{obj.candidate_version} {obj.candidate_percent}%"
        if obj.candidate_sticky:
            shown += " (sticky)"
        if obj.candidate_mode == SHADOW:
            shown += _shadow_sums(obj.name, obj.candidate_version)
    return shown


def _shadow_sums(model: str, version: int) -> str:
    try:
        sums = async_to_sync(read_sums)(model, version)
    except Exception:  # Redis away: the page still shows
        return " (shadow sums unavailable)"
    return (f" — {int(sums['n'])} compared, mean distance {sums['mean_distance']:.4f}, "
            f"mean {sums['mean_ms']:.1f} ms, {int(sums['errors'])} failed")


# What a model computes: an edit of these makes a new version, so it needs the version permission too.
COMPUTE_FIELDS = ("source", "revision", "dtype", "backend")


class VersionActions:
    """Promote and roll back, as `register_model NAME --promote / --rollback` do (models_registry.manage_versions)."""

    message_user: Any
    opts: Any

    def has_manage_versions_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Promote, roll back, or change what a stored model computes."""
        return request.user.has_perm(f"{self.opts.app_label}.{MANAGE_VERSIONS}")

    def version_readonly_fields(self, request: HttpRequest, obj: Any) -> tuple[str, ...]:
        """What a stored model computes stays read-only for a user who may change it but not make versions."""
        return COMPUTE_FIELDS if obj is not None and not self.has_manage_versions_permission(request) else ()

    @admin.display(description="version")
    def version(self, obj: Any) -> str:
        """The live version, a switch in progress, the candidate."""
        return version_summary(obj)

    @admin.action(description="Promote the canary or shadow version (live once warm)", permissions=[MANAGE_VERSIONS])
    def promote(self, request: HttpRequest, queryset: Any) -> None:
        """Make each selected model's candidate live."""
        for model in queryset:
            self._report(request, model.name, lambda name: f"promoted v{version_changes.promote(name)}")

    @admin.action(description="Roll back (drop the candidate, or return to the previous live version)",
                  permissions=[MANAGE_VERSIONS])
    def rollback(self, request: HttpRequest, queryset: Any) -> None:
        """Roll each selected model back."""
        for model in queryset:
            self._report(request, model.name, version_changes.rollback)

    def _report(self, request: HttpRequest, name: str, change: Any) -> None:
        try:
            self.message_user(request, f"{name}: {change(name)}.")
        except InvalidInput as error:
            self.message_user(request, f"{name}: {error.message}", messages.ERROR)
