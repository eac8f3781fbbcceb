"""The model and task a request names, else a 404: written once for every route (HF, OpenAI, TEI)."""

from __future__ import annotations

from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.errors import NotFound


def named_model(name: str, specs: dict[str, ModelSpec], listing: str) -> ModelSpec:
    """The registered model called name; 404 naming where the models are listed (listing: "/models", "/v1/models")."""
    spec = specs.get(name)
    if spec is None:
        raise NotFound(f"no model named {name!r}; GET {listing} lists them")
    return spec


def named_task(spec: ModelSpec, task_name: str) -> TaskSpec:
    """spec's task called task_name; 404 listing its tasks."""
    task = spec.tasks.get(task_name)
    if task is None:
        raise NotFound(f"model {spec.name!r} has no task {task_name!r}; its tasks: {', '.join(spec.tasks) or 'none'}")
    return task


def model_and_task(name: str, task_name: str | None, specs: dict[str, ModelSpec],
                   listing: str) -> tuple[ModelSpec, TaskSpec]:
    """The model and its task task_name (its default task when None); 404 when either is unknown."""
    spec = named_model(name, specs, listing)
    return spec, named_task(spec, task_name or spec.default_task)


def model_and_named_task(name: str, task_name: str | None, specs: dict[str, ModelSpec],
                         listing: str) -> tuple[ModelSpec, TaskSpec | None]:
    """The model and the task named (None when none is: the route chooses); 404 when either is unknown."""
    spec = named_model(name, specs, listing)
    return spec, named_task(spec, task_name) if task_name else None
