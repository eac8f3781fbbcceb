"""TEI's POST /tokenize through the route skeleton: answered by the web process alone, metered like any model route.

The web process loads the model's tokenizer.json (no torch, no worker), so a tokenize request never
queues behind batches; the skeleton still does the token, the 403, the 404, the metrics and the log line,
and the token's rate limits and quotas are charged the tokens the answer holds.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, replace
from typing import Any


from models_registry.api.tei import tei_routes, tokenization
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import error_answer
from models_registry.api.pipeline.inference_route import Work
from models_registry.broker.handoff import InferenceResult
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, ModelDisabled, NotFound
from models_registry.catalog.specs import ModelSpec, TaskSpec

TASK_LABEL = "tokenize"  # the metrics' task label: no pipeline task runs
INLINE_CHARS = 20_000  # tokenize larger requests in a thread, not on the event loop


class TokenizeRoute:
    """TEI's POST /tokenize: ids, strings and character offsets of each input, with the model's own truncation."""

    label = "tokenize"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, tei_routes.TokenizeRequest]:
        """The validated body and the model it names."""
        wanted = tei_routes.read_tokenize_request(tei_routes.body_of(call), conf.MAX_INPUTS)
        return tei_routes.TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: tei_routes.TokenizeRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The model named; its task is the tokenizer itself (labelled 'tokenize' in metrics and logs)."""
        spec, named = tei_routes.resolve(wanted.model, specs)
        task = named or spec.tasks.get(spec.default_task) or next(iter(spec.tasks.values()), None)
        if task is None:
            raise NotFound(f"model {spec.name!r} has no task yet, so no tokenizer is loaded for it")
        return spec, replace(task, name=TASK_LABEL)

    async def prepare(self, call: ApiCall, wanted: tei_routes.TokenizeRequest, spec: ModelSpec,
                      task: TaskSpec) -> Work:
        """No worker: the answer is made here, once the token's limits let it through (its tokens are charged)."""
        if not spec.enabled:
            raise ModelDisabled(spec.name)

        async def here() -> InferenceResult:
            tokens = await _tokenize(spec, wanted)
            body = [[asdict(token) for token in found] for found in tokens]
            return InferenceResult(body, queue_ms=0.0, compute_ms=0.0, batch_size=0,
                                   tokens=sum(len(found) for found in tokens))

        return Work(wanted.inputs, {}, len(wanted.inputs), here=here)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The API's one error shape."""
        return error_answer(error, request_id)


async def _tokenize(spec: ModelSpec, wanted: tei_routes.TokenizeRequest) -> list[Any]:
    tokenizer = await tokenization.get(spec.source, spec.revision)
    if sum(len(tokenization.readable(tokenizer, text)[0]) for text in wanted.inputs) > INLINE_CHARS:
        return await asyncio.to_thread(tokenization.tokenize, tokenizer, wanted.inputs, wanted.add_special_tokens)
    return tokenization.tokenize(tokenizer, wanted.inputs, wanted.add_special_tokens)


TOKENIZE = TokenizeRoute()

