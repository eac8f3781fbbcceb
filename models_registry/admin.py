"""Admin: register models with their tasks inline, manage tokens, see live workers."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from models_registry.heartbeats import live_workers
from models_registry.models import ApiToken, ModelTask, RegisteredModel, WorkerHeartbeat


class ModelTaskInline(admin.StackedInline):
    """A model's tasks with their defaults and queue limits."""

    model = ModelTask
    extra = 0
    min_num = 1
    fields = (
        ("name", "task"),
        "parameters",
        ("pooling", "normalize"),
        ("max_batch_size", "max_batch_tokens", "max_batch_delay_ms"),
        ("max_queue_size", "timeout_s"),
    )


def _live_states() -> dict[str, dict[str, Any]]:
    states: dict[str, dict[str, Any]] = {}
    for worker in live_workers():
        for name, state in (worker.models_state or {}).items():
            entry = states.setdefault(name, {"states": [], "depth": 0, "workers": 0})
            entry["states"].append(state)
            entry["workers"] += 1
        for key, depth in (worker.queue_depths or {}).items():
            states.setdefault(key.split("/")[0], {"states": [], "depth": 0, "workers": 0})["depth"] += depth
    return states


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    """Models with live state from worker heartbeats."""

    inlines = [ModelTaskInline]
    list_display = ("name", "source", "enabled", "live_state", "queue_depth", "task_names", "device", "dtype")
    list_filter = ("enabled",)
    search_fields = ("name", "source")
    actions = ["enable", "disable"]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        """Read the heartbeats once per page, not once per row."""
        self._states = _live_states()
        return super().changelist_view(request, extra_context)

    @admin.display(description="state")
    def live_state(self, obj: RegisteredModel) -> str:
        """loading, ready, error (with its message) or disabled."""
        if not obj.enabled:
            return "disabled"
        entry = getattr(self, "_states", {}).get(obj.name)
        if not entry or not entry["states"]:
            return "loading (no live worker yet)"
        for wanted in ("ready", "loading", "error"):
            for state in entry["states"]:
                if state.get("state") == wanted:
                    return f"{wanted}: {state['error']}" if state.get("error") else wanted
        return "unknown"

    @admin.display(description="queued")
    def queue_depth(self, obj: RegisteredModel) -> int:
        """Items waiting on all live workers."""
        return getattr(self, "_states", {}).get(obj.name, {}).get("depth", 0)

    @admin.display(description="tasks")
    def task_names(self, obj: RegisteredModel) -> str:
        """Task names and pipeline tasks."""
        return ", ".join(f"{t.name} ({t.task})" for t in obj.tasks.all())

    @admin.action(description="Enable (workers load them within seconds)")
    def enable(self, request: HttpRequest, queryset: Any) -> None:
        """Enable the selected models."""
        count = queryset.update(enabled=True)
        self.message_user(request, f"{count} model(s) enabled.")

    @admin.action(description="Disable (workers unload them within seconds)")
    def disable(self, request: HttpRequest, queryset: Any) -> None:
        """Disable the selected models."""
        count = queryset.update(enabled=False)
        self.message_user(request, f"{count} model(s) disabled.")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens: the raw value is shown once, when created here."""

    list_display = ("name", "prefix", "revoked", "expires_at", "last_used_at", "created_at")
    readonly_fields = ("prefix", "last_used_at", "created_at")
    filter_horizontal = ("allowed_models",)
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """Generate the token on creation and show it once."""
        if not change:
            raw = ApiToken.generate()
            obj.set_token(raw)
            messages.warning(request, f"New API token for {obj.name} (shown only now): {raw}")
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        """Revoke the selected tokens."""
        count = queryset.update(revoked=True)
        self.message_user(request, f"{count} token(s) revoked.")


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    """Runtime records, written by the workers: read-only."""

    list_display = ("host", "pid", "device", "loaded_models", "draining", "last_seen", "started_at")

    @admin.display(description="models")
    def loaded_models(self, obj: WorkerHeartbeat) -> str:
        """model: state for each model the worker holds."""
        return ", ".join(f"{n}: {s.get('state')}" for n, s in (obj.models_state or {}).items())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
