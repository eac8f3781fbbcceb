"""Admin: register models with their tasks inline, manage tokens, see live workers."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from models_registry.staff.sample_input_form import TestInputPage
from models_registry.staff.version_admin import ModelVersionInline, VersionActions, VersionedModelForm
from models_registry.core.model_state import ModelState, best_report
from models_registry.models import Adapter, ApiToken, ModelTask, QuarantinedRequest, RegisteredModel, WorkerHeartbeat
from models_registry.observe import traffic_window
from models_registry.observe.model_columns import PlacementColumns, live_states
from models_registry.policy.rate_limits import Usage
from models_registry.policy.usage import token_usage
from models_registry.catalog import model_settings, version_changes
from models_registry.catalog.heartbeats import live_workers


class ModelTaskInline(admin.StackedInline):
    """A model's tasks with their defaults and queue limits."""

    model = ModelTask
    extra = 0
    min_num = 1
    fields = (
        ("name", "task"),
        "parameters",
        ("pooling", "normalize"),
        "model_files",
        ("max_batch_size", "max_batch_tokens", "max_batch_delay_ms"),
        ("max_queue_size", "max_batch_queue_size", "timeout_s"),
        ("max_request_tokens", "cache_ttl_s", "cache_shared"),
    )
    readonly_fields = ("model_files",)

    @admin.display(description="What the model's files say")
    def model_files(self, obj: ModelTask) -> str:
        """The pooling, prompts, projection and normalization in effect, and where each came from."""
        return format_html_join(mark_safe("<br>"), "{}: {} <i>({})</i>", model_settings.provenance(obj)) if obj.pk else ""


def _live_states() -> dict[str, dict[str, Any]]:
    return live_states(live_workers())


def _best_state(entry: dict[str, Any] | None) -> str:
    best = best_report((entry or {}).get("states", []))
    return best.get("state", "") if best else "no live worker"


@admin.register(RegisteredModel)
class RegisteredModelAdmin(TestInputPage, VersionActions, PlacementColumns, admin.ModelAdmin):
    """Models with live state from worker heartbeats."""

    inlines = [ModelTaskInline, ModelVersionInline]
    form = VersionedModelForm  # the confirmation a change of output shape needs
    # Fits a 1440 px window beside the admin's side bar: no filter column (the state says "disabled"),
    # keep_loaded shown with the placement, device, dtype and backend in one column (the backend's
    # reason is on the change page).
    list_display = ("name", "short_source", "version", "live_state", "loaded_on", "memory", "queue_depth", "throughput",
                    "task_names", "runtime")
    readonly_fields = ("version", "live_backend", "test_input")
    state_of = staticmethod(lambda name: _best_state(_live_states().get(name)))  # the test input's worker check
    search_fields = ("name", "source")
    actions = ["enable", "disable", "load_now", "run_test_input", "promote", "rollback"]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """After the model and its tasks: a change of what it computes makes a new version (live once warm)."""
        super().save_related(request, form, formsets, change)
        version = version_changes.record(form.instance,
                                         allow_shape_change=bool(form.cleaned_data.get("allow_shape_change")))
        if version is not None and version.number > 1:
            self.message_user(request, f"version {version.number} made: it goes live once warm on every worker.")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The test-input link for those who may run it; what the model computes for those who may make versions."""
        return [*self.test_input_fields(request, super().get_readonly_fields(request, obj)),
                *self.version_readonly_fields(request, obj)]

    def get_queryset(self, request: HttpRequest) -> Any:
        """Tasks in one query for the whole page."""
        return super().get_queryset(request).prefetch_related("tasks")

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        """Read the heartbeats once per page, not once per row."""
        self._states = _live_states()
        return super().changelist_view(request, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> Any:
        """Read the heartbeats for the backend the workers chose."""
        self._states = _live_states()
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="backend in use")
    def live_backend(self, obj: RegisteredModel) -> str:
        """The embedding backend the workers' load check chose (configured: obj.backend), why, int8's cosine, the dtype."""
        best = best_report(getattr(self, "_states", {}).get(obj.name, {}).get("states", [])) or {}
        if not best.get("backend"):
            return f"{obj.backend} (not loaded yet)"
        shown = best["backend"] + (f" ({best['backend_reason']})" if best.get("backend_reason") else "")
        cosine = best.get("int8_cosine")
        shown += f", cosine to fp32 min {cosine['min']:.4f} / median {cosine['median']:.4f}" if cosine else ""
        return shown + (f"; dtype {best['active_dtype']} ({best.get('dtype_reason', '')})" if best.get("active_dtype") else "")

    @admin.display(description="state")
    def live_state(self, obj: RegisteredModel) -> str:
        """loading, ready, error (with its message) or disabled."""
        if not obj.enabled:
            return ModelState.DISABLED
        entry = getattr(self, "_states", {}).get(obj.name)
        if not entry or not entry["states"]:
            return "loading (no live worker yet)"
        best = best_report(entry["states"]) or {}
        state = best.get("state") or "unknown"
        return f"{state}: {best['error']}" if best.get("error") else state

    @admin.display(description="queued")
    def queue_depth(self, obj: RegisteredModel) -> int:
        """Items waiting on all live workers."""
        return getattr(self, "_states", {}).get(obj.name, {}).get("depth", 0)

    @admin.display(description="source", ordering="source")
    def short_source(self, obj: RegisteredModel) -> str:
        """The source, its long local paths cut from the left (the change page has it whole)."""
        return obj.source if len(obj.source) <= 28 else "…" + obj.source[-27:]

    @admin.display(description="req/s (1 min)")
    def throughput(self, obj: RegisteredModel) -> str:
        """Requests per second this web process answered for the model over the last minute."""
        return f"{traffic_window.WINDOW.rate(obj.name, 60):.2f}"

    @admin.display(description="tasks")
    def task_names(self, obj: RegisteredModel) -> str:
        """Task names and pipeline tasks."""
        return ", ".join(t.name if t.name == t.task else f"{t.name} ({t.task})" for t in obj.tasks.all())

    @admin.action(description="Load now (a fresh copy loads beside the live one, then takes over)",
                  permissions=["change"])
    def load_now(self, request: HttpRequest, queryset: Any) -> None:
        """Reload the selected models with no outage: new weights at the same source, or a retry after an error."""
        for model in queryset:
            self.message_user(request, f"{model.name}: {version_changes.reload(model.name)}.")

    @admin.action(description="Enable (workers load them within seconds)", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: Any) -> None:
        """Enable the selected models."""
        count = queryset.update(enabled=True)
        self.message_user(request, f"{count} model(s) enabled.")

    @admin.action(description="Disable (workers unload them within seconds)", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: Any) -> None:
        """Disable the selected models."""
        count = queryset.update(enabled=False)
        self.message_user(request, f"{count} model(s) disabled.")

@admin.register(Adapter)
class AdapterAdmin(admin.ModelAdmin):
    """LoRA adapters of registered models: the form checks the files against the base (Adapter.clean)."""

    list_display = ("name", "base", "version", "source", "revision", "canary_percent", "enabled", "updated_at")
    list_filter = ("enabled", "base")
    search_fields = ("name", "source")
    fields = ("name", "base", "source", "revision", "enabled", "version", "previous_source", "previous_revision",
              "canary_source", "canary_revision", "canary_percent")
    # A canary starts from `register_adapter NAME --source DIR --canary PERCENT`; here it is shown, promoted, dropped.
    readonly_fields = ("version", "previous_source", "previous_revision", "canary_source", "canary_revision",
                       "canary_percent")
    actions = ("promote_canary", "roll_back")

    def save_model(self, request: Any, obj: Adapter, form: Any, change: bool) -> None:
        """Files edited here replace the live ones as register_adapter does: the next version, the old kept."""
        if change and {"source", "revision"} & set(form.changed_data):
            before = Adapter.objects.get(pk=obj.pk)
            obj.previous_source, obj.previous_revision = before.source, before.revision
            obj.version = before.version + 1
        super().save_model(request, obj, form, change)

    @admin.action(description="Promote the canary (its files become live)")
    def promote_canary(self, request: Any, queryset: Any) -> None:
        self._each(request, queryset, Adapter.promote)

    @admin.action(description="Roll back (drop the canary; with none, the files live before)")
    def roll_back(self, request: Any, queryset: Any) -> None:
        self._each(request, queryset, Adapter.rollback)

    def _each(self, request: Any, queryset: Any, change: Any) -> None:
        for adapter in queryset:
            try:
                change(adapter)
            except ValidationError as error:
                self.message_user(request, f"{adapter.name}: {' '.join(error.messages)}", level=messages.WARNING)
                continue
            adapter.save()
            self.message_user(request, f"{adapter.name}: now v{adapter.version}")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens: the raw value is shown once, when created here."""

    list_display = ("name", "prefix", "priority", "limits", "usage_today", "usage_this_month", "revoked",
                    "expires_at", "last_used_at")
    readonly_fields = ("prefix", "last_used_at", "created_at", "usage_today", "usage_this_month")
    fieldsets = (
        (None, {"fields": ("name", "prefix", "all_models", "allowed_models", "allowed_adapters", "revoked",
                           "expires_at")}),
        ("Limits and priority", {"fields": (("requests_per_minute", "tokens_per_minute", "tokens_per_day"),
                                            "priority")}),
        ("Usage (from Redis, every web replica)", {"fields": ("usage_today", "usage_this_month", "last_used_at",
                                                              "created_at")}),
    )
    filter_horizontal = ("allowed_models", "allowed_adapters")
    actions = ["revoke"]

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's tokens, and their usage in one Redis round trip: two per row, or every token's, are unbounded."""
        changelist = super().get_changelist_instance(request)
        self._usage = token_usage([token.pk for token in changelist.result_list])
        return changelist

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> Any:
        """Usage of the token shown."""
        self._usage = token_usage([int(object_id)]) if object_id.isdigit() else {}
        return super().change_view(request, object_id, form_url, extra_context)

    def _usage_of(self, obj: ApiToken) -> tuple[Usage, Usage] | None:
        return getattr(self, "_usage", {}).get(obj.pk)

    @admin.display(description="limits")
    def limits(self, obj: ApiToken) -> str:
        """The token's limits in short."""
        parts = [f"{value} {unit}" for value, unit in ((obj.requests_per_minute, "req/min"),
                 (obj.tokens_per_minute, "tok/min"), (obj.tokens_per_day, "tok/day")) if value]
        return ", ".join(parts) or "none"

    @admin.display(description="usage today (UTC)")
    def usage_today(self, obj: ApiToken) -> str:
        """Requests and input tokens since midnight UTC."""
        if obj.pk is None:
            return "-"
        usage = self._usage_of(obj)
        return "unknown (broker down)" if usage is None else _usage_text(usage[0])

    @admin.display(description="usage this month")
    def usage_this_month(self, obj: ApiToken) -> str:
        """Requests and input tokens this calendar month (UTC)."""
        if obj.pk is None:
            return "-"
        usage = self._usage_of(obj)
        return "unknown (broker down)" if usage is None else _usage_text(usage[1])

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """Generate the token on creation and show it once."""
        if not change:
            raw = ApiToken.generate()
            obj.set_token(raw)
            messages.warning(request, f"New API token for {obj.name} (shown only now): {raw}")
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        """Revoke the selected tokens."""
        count = queryset.update(revoked=True)
        self.message_user(request, f"{count} token(s) revoked.")


def _usage_text(usage: Usage) -> str:
    return f"{usage.requests} requests, {usage.tokens} tokens"


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

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # workers own these rows; stale ones are pruned by the workers


@admin.register(QuarantinedRequest)
class QuarantinedRequestAdmin(admin.ModelAdmin):
    """Poison requests (in flight at two worker deaths): read-only, answered 500 and never retried."""

    list_display = ("quarantined_at", "model", "task", "request_id", "inputs", "input_bytes")
    list_filter = ("model",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Written by the workers only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A record of what happened: not editable."""
        return False


from models_registry.jobs import admin as _jobs_admin  # noqa: E402,F401  (registers the batch job pages)
from models_registry.staff import usage_admin as _usage_admin  # noqa: E402,F401  (registers the usage page)
