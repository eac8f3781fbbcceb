"""A worker's runner whose allocator runs out over a size: tests reach out-of-memory recovery without a real OOM.

Chosen with HOSTING_MODEL_RUNNER=tests.exhausting_runner.ExhaustingRunner; the limit (padded tokens a batch may
hold) comes from EXHAUSTING_RUNNER_ABOVE_TOKENS in the worker's environment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from models_registry.inference.model_runner import PipelineRunner

LIMIT_ENV = "EXHAUSTING_RUNNER_ABOVE_TOKENS"


class ExhaustingRunner(PipelineRunner):
    """The pipeline runner, failing like an exhausted allocator on batches over LIMIT_ENV padded tokens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.above_tokens = int(os.environ.get(LIMIT_ENV) or 0)

    def run(self, loaded: Any, task: Any, texts: Sequence[Any], parameters: Sequence[dict[str, Any]],
            sinks: Sequence[Any] | None = None) -> list[Any]:
        """MemoryError past the limit, as torch's or ONNX Runtime's allocator would raise; else the real run."""
        if self.above_tokens and texts:
            padded = len(texts) * max(loaded.count_tokens(t) for t in texts)
            if padded > self.above_tokens:
                raise MemoryError(f"test allocator: {padded} padded tokens > {self.above_tokens}")
        return super().run(loaded, task, texts, parameters, sinks)
