"""What a job driver needs of whatever runs its lines: a caller answering each line as its url's route would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson

from models_registry.jobs.lines import JobLine


@dataclass(frozen=True)
class LineAnswer:
    """What the route answered."""

    status: int
    body: bytes
    retry_after_s: float | None = None

    def error(self) -> dict[str, str]:
        """The answer's error as an output record's `error` ({code, message}), from either error shape we answer."""
        try:
            body = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):  # the OpenAI routes' shape
            return {"code": str(error.get("code") or body.get("error_type") or "error"),
                    "message": str(error.get("message"))}
        if isinstance(body, dict):
            return {"code": str(body.get("error_type") or "error"), "message": str(error)}
        return {"code": "error", "message": f"HTTP {self.status}"}


class LineCalls(Protocol):
    """Runs one line as the job's owner (api.pipeline.line_caller.LineCaller; tests give their own)."""

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        """The answer the line's request would get over HTTP."""
