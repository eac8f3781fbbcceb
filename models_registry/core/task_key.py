"""TaskKey: one task of one model, the unit of queues, rates and metrics; "model/task" as text."""

from __future__ import annotations

from typing import NamedTuple


class TaskKey(NamedTuple):
    """(model, task); str() gives "model/task", the form in heartbeats, metrics labels and model ids."""

    model: str
    task: str

    def __str__(self) -> str:
        return f"{self.model}/{self.task}"

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        """ "model/task" -> TaskKey; "model" alone gives task "" (model names and task names are slugs)."""
        model, _, task = text.partition("/")
        return cls(model, task)
