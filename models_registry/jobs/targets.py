"""The upload-time check of what each line calls: a served model and task the token may use.

Bodies are validated when the line runs, by the very view that serves the url, so a
line's answer (or error) is exactly what the same request sent alone would get.
"""

from __future__ import annotations

from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.jobs.lines import EMBEDDINGS_URL, RouteCheck, model_of
from models_registry.policy import auth
from models_registry.policy.auth import TokenGrant
from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import ModelSpec


def route_check(specs: dict[str, ModelSpec], grant: TokenGrant | None) -> RouteCheck:
    """A check that refuses lines calling an unknown model or task, or one the token may not use."""

    def check(url: str, body: dict[str, Any]) -> None:
        target = model_of(url, body)
        if target is None:  # only /v1/embeddings without a usable "model" gets here
            raise InvalidInput(f"the body of a {EMBEDDINGS_URL} request needs a 'model' (a model id from /v1/models)")
        name, task_name = target
        spec = specs.get(name)
        if spec is None:
            raise InvalidInput(f"no model named {name!r}; GET /models lists them")
        task = spec.tasks.get(task_name or spec.default_task)
        if task is None:
            raise InvalidInput(f"model {name!r} has no task {task_name!r}; its tasks: {', '.join(spec.tasks) or 'none'}")
        auth.require_allowed(grant, name)
        if url == EMBEDDINGS_URL and (task.task != "feature-extraction" or task.pooling == "none"
                                      or sparse_answer.is_sparse_task(task)):
            raise InvalidInput(f"{body.get('model')!r} is not an embedding model; GET /v1/models lists the embedding ids")

    return check
