"""The text put before every input of an embedding request: a prompt of the model's, or the request's own."""

from __future__ import annotations

from typing import Any

from models_registry.catalog import model_settings
from models_registry.core import model_layout
from models_registry.core.errors import InvalidInput


def prompt_prefix(layout: model_layout.ModelLayout, params: dict[str, Any]) -> str:
    """The prompt named (the files' default where none is, catalog.model_settings.with_prompts), else `prompt`, else ""."""
    params = model_settings.with_prompts(layout, params)
    prompts = params.get("prompts") or {}
    name = params.get("prompt_name")
    if name is None:
        return params.get("prompt") or ""
    if name not in prompts:
        raise InvalidInput(f"prompt_name {name!r} is not defined for this task; "
                           f"defined: {', '.join(sorted(prompts)) or 'none'}")
    return prompts[name]
