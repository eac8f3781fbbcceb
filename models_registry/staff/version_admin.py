"""The admin's view of model versions: history inline, the version column, promote and roll back."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.db.models import F, OuterRef, Subquery
from django.http import HttpRequest

from models_registry.core.errors import InvalidInput
from models_registry.core.model_state import ModelState
from models_registry.models import ModelVersion
from models_registry.models.registered import MANAGE_VERSIONS
from models_registry.policy.shadow import read_sums
from models_registry.catalog import version_changes
from models_registry.catalog.rollout import SHADOW


# What a model computes: an edit of these makes a new version, so it needs the version permission too.
COMPUTE_FIELDS = ("source", "revision", "dtype", "backend")
SHOWN_VERSIONS = 20  # of a model's history on its change page (the rest: manage.py shell, the database)


class VersionedModelForm(forms.ModelForm):
    """The registered model's form, with the confirmation a version whose answers change shape needs."""

    allow_shape_change = forms.BooleanField(
        required=False, label="Allow a change of output shape",
        help_text="A new source whose answers look unlike live's (another vector size, other labels) is refused "
                  "unless this is ticked: clients would get both shapes during a canary, and new ones after the switch.")

    def clean(self) -> dict[str, Any]:
        """Refuse, naming both shapes, a change of what the model computes that changes its answers' shape."""
        cleaned = super().clean()
        model = self.instance
        if model.pk is not None and not cleaned.get("allow_shape_change"):
            key = tuple(cleaned.get(f, getattr(model, f)) for f in COMPUTE_FIELDS)
            problem = version_changes.shape_problem(model, key)  # type: ignore[arg-type]
            if problem:
                self.add_error("allow_shape_change", problem)
        return cleaned


class ModelVersionInline(admin.TabularInline):
    """The model's newest SHOWN_VERSIONS versions, newest first (read-only: a registration makes them)."""

    model = ModelVersion
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "source", "revision", "dtype", "backend", "made_by", "created_at",
                                "live_since", "rolled_back")
    ordering = ("-number",)
    verbose_name_plural = f"versions (the newest {SHOWN_VERSIONS})"

    def get_queryset(self, request: HttpRequest) -> Any:
        """Versions numbered within SHOWN_VERSIONS of the model's newest: every registration and Load now adds one."""
        newest = ModelVersion.objects.filter(model=OuterRef("model")).order_by("-number").values("number")[:1]
        return super().get_queryset(request).annotate(newest=Subquery(newest)).filter(
            number__gt=F("newest") - SHOWN_VERSIONS)

    @admin.display(description="made by")
    def made_by(self, obj: ModelVersion) -> str:
        """A registration (its shape change allowed or not), or the admin's Load now (a copy of another version)."""
        if obj.reload_of:
            return f"Load now (a copy of v{obj.reload_of})"
        return "registration" + (" (shape change allowed)" if obj.allow_shape_change else "")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Versions come from registrations, not from this form."""
        return False


def version_summary(obj: Any, entry: dict[str, Any] | None = None) -> str:
    """live vN, the switch in progress, the candidate with its share (and a shadow's measured distance).

    entry: the model's live_states entry; a version beside live that failed on a worker says so, with its error.
    """
    if not obj.live_version:
        return "-"
    shown = f"v{obj.live_version}"
    if obj.target_version:
        shown += f" → v{obj.target_version} ({_failure(entry, obj.target_version) or 'loading'})"
    if obj.candidate_version:
        shown += f"; {obj.candidate_mode} v{obj.candidate_version} {obj.candidate_percent}%"
        if obj.candidate_sticky:
            shown += " (sticky)"
        if failure := _failure(entry, obj.candidate_version):
            shown += f" ({failure})"
        elif obj.candidate_mode == SHADOW:
            shown += _shadow_sums(obj.name, obj.candidate_version)
    return shown


def _failure(entry: dict[str, Any] | None, number: int) -> str:
    """"failed: <error>" when a worker reports the version failed, else ""."""
    reports = ((entry or {}).get("versions") or {}).get(number, [])
    failed = next((r for r in reports if r.get("state") == ModelState.ERROR), None)
    return f"failed: {failed.get('error') or 'no message'}" if failed else ""


def _shadow_sums(model: str, version: int) -> str:
    try:
        sums = async_to_sync(read_sums)(model, version)
    except Exception:  # Redis away: the page still shows
        return " (shadow sums unavailable)"
    return (f" — {int(sums['n'])} compared, mean distance {sums['mean_distance']:.4f}, "
            f"mean {sums['mean_ms']:.1f} ms, {int(sums['errors'])} failed")


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
        """The live version, a switch in progress, the candidate (a failed one with its error)."""
        return version_summary(obj, getattr(self, "_states", {}).get(obj.name))

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
