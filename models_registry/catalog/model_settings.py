"""Which settings of a task are in effect and where each came from: the operator, the model's files, or the default.

The one rule of precedence (operator, then files, then default) for web and worker alike.

Shown in the admin (a task's "What the model's files say") and in `GET /models/<name>` (`settings`).
"""

from __future__ import annotations

from typing import Any

from models_registry.core import multi_vector_settings
from models_registry.core.model_layout import ModelLayout

REGISTRATION = "registration"  # set by the operator (admin or register_model flags)
FILES = "files"
DEFAULT = "default"


def pooling_of(override: str, layout: ModelLayout, fallback: str = "mean") -> str:
    """The pooling a task computes: the operator's, else the files', else fallback."""
    return override or layout.pooling_name or fallback


def normalize_of(override: bool | None, layout: ModelLayout, fallback: bool = False) -> bool:
    """Whether a task normalizes: the operator's choice, else a Normalize module in the files, else fallback."""
    if override is not None:
        return override
    return layout.normalize if layout.normalize is not None else fallback


def with_prompts(layout: ModelLayout, parameters: dict[str, Any]) -> dict[str, Any]:
    """Task parameters with the files' prompts under the operator's, and the files' default prompt where none is set.

    sentence-transformers gives every model empty `query` and `document` prompts; a model's own prompts
    replace them. An operator's `prompt` or `prompt_name` default wins over `default_prompt_name`.
    """
    if not layout.kind:
        return parameters
    operator_prompts = parameters.get("prompts") if isinstance(parameters.get("prompts"), dict) else {}
    merged = {**parameters, "prompts": {"query": "", "document": "", **layout.prompts, **operator_prompts}}
    if layout.default_prompt_name and parameters.get("prompt") is None and parameters.get("prompt_name") is None:
        merged["prompt_name"] = layout.default_prompt_name
    return merged


def provenance_rows(task: str, pooling_override: str, normalize_override: bool | None, parameters: dict[str, Any],
                    layout: ModelLayout) -> list[tuple[str, str, str]]:
    """(setting, value in effect, where it came from) for the settings the files can shape."""
    rows: list[tuple[str, str, str]] = []
    if layout.kind:
        rows.append(("modules", " -> ".join(layout.modules), FILES))
    if task == "feature-extraction":
        pooling = pooling_of(pooling_override, layout)
        rows.append(("pooling", pooling, REGISTRATION if pooling_override else (FILES if layout.pooling else DEFAULT)))
        if not layout.include_prompt:
            rows.append(("include_prompt", "false (prompt tokens are not pooled)", FILES))
        for dense in layout.said().get("dense", []):
            rows.append(("projection", dense, FILES))
        if layout.multi_vector is not None:
            rows.append(("multi-vector", _multi_vector(layout), FILES))
        normalize = normalize_of(normalize_override, layout)
        rows.append(("normalize", str(normalize).lower(), REGISTRATION if normalize_override is not None else (
            FILES if layout.normalize is not None else DEFAULT)))
        prompts = parameters.get("prompts") if isinstance(parameters.get("prompts"), dict) else {}
        for name, text in {**layout.prompts, **prompts}.items():
            origin = FILES if layout.prompts.get(name) == text else (
                DEFAULT if text == "" and name in ("query", "document") else REGISTRATION)
            rows.append((f"prompt {name}", repr(text), origin))
        chosen = parameters.get("prompt_name")
        if layout.default_prompt_name and parameters.get("prompt") is None and chosen in (None, layout.default_prompt_name):
            rows.append(("default prompt", layout.default_prompt_name, FILES))
    if task == "text-generation":  # how a chat answer's <think> block is told apart (api.openai.reasoning_split)
        chosen = parameters.get("reasoning_format")
        rows.append(("reasoning_format", chosen or layout.reasoning_format or "none",
                     REGISTRATION if chosen else (FILES if layout.reasoning_format else DEFAULT)))
        chosen = parameters.get("tool_call_format")  # how its tool calls are read (api.openai.tool_calls)
        rows.append(("tool_call_format", chosen or layout.tool_call_format or "none",
                     REGISTRATION if chosen else (FILES if layout.tool_call_format else DEFAULT)))
    for key in ("max_seq_length", "do_lower_case", "padding_side", "logit_tokens", "sparse"):
        if key in (said := layout.said()):
            rows.append((key, str(said[key]), FILES))
    return rows


def _multi_vector(layout: ModelLayout) -> str:
    """A ColBERT-style model's query and document settings in one line (or why they are not computed)."""
    try:
        return multi_vector_settings.read(layout.kind, layout.multi_vector or {}).summary()
    except multi_vector_settings.UnsupportedMultiVector as error:
        return f"not computed: {error}"


def provenance(task: Any) -> list[tuple[str, str, str]]:
    """provenance_rows of a ModelTask row (the admin's view of what it stored)."""
    rows = provenance_rows(task.task, task.pooling or "", task.normalize, task.parameters or {}, task.layout())
    if not task.file_settings and task.task in ("feature-extraction", "text-ranking"):
        rows.append(("model files", "not read here (a hub id not in this machine's cache): the worker reads them at "
                                    "load", DEFAULT))
    elif not task.file_settings and task.task == "text-generation":  # the web decides the reasoning and tool split
        rows.append(("model files", "not read (a hub id not in this machine's cache, or registered before they "
                                    "were): no reasoning_format or tool_call_format from its chat template; set "
                                    "them, or register it again", DEFAULT))
    return rows


def settings_of(task: Any) -> dict[str, dict[str, str]]:
    """{setting: {"value", "from"}} of a catalog TaskSpec, for `GET /models/<name>`."""
    rows = provenance_rows(task.task, task.pooling_override, task.normalize_override, task.parameters, task.layout)
    return {name: {"value": value, "from": origin} for name, value, origin in rows}
