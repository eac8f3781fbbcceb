"""OpenAI's POST /v1/chat/completions and /v1/completions over text-generation tasks.

Each choice is one streamed generation on the workers (broker.stream_handoff), where it
joins the running decode batch at the next token step; a whole answer is the stream
collected. Chat messages are rendered with the model's chat template on the worker (a
model without one answers 400). The token's limits and priority apply as on every route;
its charge is the prompt plus the generated tokens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse

from models_registry.api import generation_requests, inference_route
from models_registry.api.answer import Answer, json_answer, to_django
from models_registry.api.call import ApiCall, from_django
from models_registry.api.completion_shapes import Choice, Shaper
from models_registry.api.error_answers import openai_error_answer, openai_error_body
from models_registry.api.generation_requests import GenerationRequest
from models_registry.api.inference_route import Work
from models_registry.api.openai_routes import _body, model_task, openai_view
from models_registry.broker import stream_handoff
from models_registry.broker.stream_handoff import Stream
from models_registry.core.errors import HostingError, NotFound
from models_registry.core.task_key import TaskKey
from models_registry.observe import metrics
from models_registry.policy import auth, dispatch, gate, priority
from models_registry.catalog.specs import ModelSpec, TaskSpec

logger = logging.getLogger("models_registry.requests")

TASK = "text-generation"


def resolve(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    """The text-generation task a /v1 model id names (404 or 400 otherwise)."""
    spec, task = model_task(model_id, "ids", specs)
    if task.task != TASK:  # OpenAI answers 404 for a model the endpoint does not serve
        raise NotFound(f"{model_id!r} is a {task.task} task, not a text-generation model; GET /v1/models "
                       "lists the ids")
    return spec, task


class GenerationRoute:
    """One of OpenAI's generation routes: chat (messages) or completions (prompt)."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.label = "v1-chat" if chat else "v1-completions"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, GenerationRequest]:
        """The validated body and the model it names."""
        wanted = generation_requests.read(_body(call), self.chat)
        return TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: GenerationRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The text-generation task the model id names."""
        return resolve(wanted.model, specs)

    async def prepare(self, call: ApiCall, wanted: GenerationRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """Every answer is generated as streams: the route answers by itself."""

        async def respond(grant: auth.TokenGrant | None, started: float) -> Answer:
            return await _respond(call, grant, spec, task, wanted, started)

        return Work(wanted.prompts, wanted.parameters, wanted.choices, call.priority, respond=respond)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """OpenAI's error shape."""
        return openai_error_answer(error, request_id)


CHAT = GenerationRoute(chat=True)
COMPLETIONS = GenerationRoute(chat=False)


@openai_view("POST")
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """OpenAI's POST /v1/chat/completions (Django's way in; the API's handler runs the same route directly)."""
    return to_django(await inference_route.serve(CHAT, from_django(request), {}))


@openai_view("POST")
async def completions(request: HttpRequest) -> HttpResponse:
    """OpenAI's POST /v1/completions (Django's way in)."""
    return to_django(await inference_route.serve(COMPLETIONS, from_django(request), {}))


async def _open_all(wire: str, task: TaskSpec, wanted: GenerationRequest, klass: str,
                    drain_rate: float, client: str) -> list[Stream]:
    """One stream per choice, opened together; all closed if any fails."""
    limit = priority.queue_limit(klass, task.policy.max_queue_size, task.max_batch_queue_size)
    prompts = [""] if wanted.chat else wanted.prompts
    openings = [stream_handoff.open_stream(
        model=wire, task=task.name, text=prompt, timeout_s=task.timeout_s, drain_rate=drain_rate,
        priority=klass, max_queue_size=limit, client=client,
        parameters={**task.parameters, **generation_requests.worker_parameters(wanted, choice)})
        for p, prompt in enumerate(prompts) for choice in range(p * wanted.n, (p + 1) * wanted.n)]
    results = await asyncio.gather(*openings, return_exceptions=True)
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    if failure is not None:
        for result in results:
            if isinstance(result, Stream):
                result.close()
        raise failure
    return [r for r in results if isinstance(r, Stream)]


async def _merged(streams: list[Stream]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(choice, event) from every stream as they come."""
    queue: asyncio.Queue[tuple[int, dict[str, Any] | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, stream: Stream) -> None:
        try:
            async for event in stream.events():
                queue.put_nowait((index, event))
            queue.put_nowait((index, None))
        except Exception as error:  # noqa: BLE001 - handed to the reader, which raises it
            queue.put_nowait((index, error))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    open_streams = len(streams)
    try:
        while open_streams:
            index, item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


async def _respond(call: ApiCall, grant: auth.TokenGrant | None, spec: ModelSpec, task: TaskSpec,
                   wanted: GenerationRequest, started: float) -> Answer:
    wire, version = await dispatch.serving_wire(spec)  # the version that answers (no canary for streams)
    drain_rate = await dispatch.require_serving(spec, task.name, wire)
    estimate_parameters = {**task.parameters, **wanted.parameters}
    client = str(grant.token_id) if grant is not None else ""
    admitted = await gate.admit_stream(grant=grant, asked_priority=call.priority,
                                       inputs=wanted.prompts * wanted.n, task=TASK, parameters=estimate_parameters)
    try:
        streams = await _open_all(wire, task, wanted, admitted.klass, drain_rate, client)
    except BaseException:
        admitted.settle(0)
        raise
    first_token_s = time.perf_counter() - started
    shaper = Shaper(chat=wanted.chat, model=wanted.model, n=wanted.n)
    choices = [Choice(index=i, stops=wanted.stops) for i in range(len(streams))]
    headers = {**admitted.headers, "X-Time-To-First-Token-Ms": f"{first_token_s * 1000:.2f}",
               **({dispatch.VERSION_HEADER: str(version)} if version else {})}

    def finish(failure: HostingError | None, gone: bool) -> None:
        for stream in streams:
            stream.close()
        usage = shaper.usage(choices)
        admitted.settle(usage["total_tokens"])  # the charge: prompts and generated tokens
        elapsed = time.perf_counter() - started
        if failure is not None:
            metrics.observe_failure(spec.name, task.name, failure.status, failure.error_type, elapsed)
        else:
            metrics.observe_success(spec.name, task.name, elapsed, first_token_s, elapsed - first_token_s,
                                    len(choices))
        logger.info("request id=%s model=%s task=%s route=%s status=200 choices=%d prompt_tokens=%d "
                    "completion_tokens=%d first_token_ms=%.1f total_ms=%.1f%s", call.request_id, spec.name,
                    task.name, "v1-chat" if wanted.chat else "v1-completions", len(choices), usage["prompt_tokens"],
                    usage["completion_tokens"], first_token_s * 1000, elapsed * 1000,
                    f" error_type={failure.error_type}" if failure else " client_gone" if gone else "")

    if not wanted.stream:
        failure = None
        try:
            async for index, event in _merged(streams):
                choices[index].take(event)
        except HostingError as error:
            failure = error
            raise
        finally:
            finish(failure, False)
        return json_answer(shaper.answer(choices), 200, headers)

    async def events() -> AsyncIterator[bytes]:
        failure, gone = None, False
        try:
            if wanted.chat:
                for choice in choices:
                    yield _sse(shaper.chunk(choice.index, None, None, wanted.include_usage))
            async for index, event in _merged(streams):
                choice = choices[index]
                if choice.finish_reason is not None:
                    continue  # cut at a stop sequence: the rest of its tokens are not shown
                text = choice.take(event)
                if text:
                    yield _sse(shaper.chunk(index, text, None, wanted.include_usage))
                if choice.finish_reason is not None:
                    yield _sse(shaper.chunk(index, "", choice.finish_reason, wanted.include_usage))
            if wanted.include_usage:
                yield _sse(shaper.usage_chunk(choices))
            yield b"data: [DONE]\n\n"
        except HostingError as error:
            failure = error
            yield _sse(openai_error_body(error))
        except BaseException:  # the client went away (the handler cancels the response)
            gone = True
            raise
        finally:
            finish(failure, gone)

    return Answer(200, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                  content_type="text/event-stream", events=events())


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"

