"""OpenAI's POST /v1/responses over text-generation tasks: a chat request underneath, answered as a Response.

The body becomes a chat request (api.openai.responses_requests), so every chat check, bound,
tool and structured-output path applies; the chat route prepares its one stream, and this route's
stream shape turns the chat choice's pieces into Response items and typed events
(api.openai.responses_shapes). A stored response (store, default true) is kept for its token with
its conversation (jobs.response_store), off the event loop, once its answer is whole;
previous_response_id puts that conversation before the input.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from asgiref.sync import sync_to_async

from models_registry.api.openai import openai_generation, responses_requests
from models_registry.api.openai.openai_generation import Choices
from models_registry.api.openai.openai_routes import json_body
from models_registry.api.openai.responses_requests import ResponsesRequest
from models_registry.api.openai.responses_shapes import ResponseEvents
from models_registry.api.pipeline.answer import Answer, dump_json
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import openai_error_answer, openai_error_body
from models_registry.api.pipeline.inference_route import Streaming, Work
from models_registry.api.pipeline.request_record import StreamTally
from models_registry.broker.stream_handoff import Stream
from models_registry.catalog.lookups import fresh_connection
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core.errors import HostingError
from models_registry.core.task_key import TaskKey
from models_registry.jobs import response_store
from models_registry.policy import auth

logger = logging.getLogger(__name__)


async def owner_of(call: ApiCall) -> int | None:
    """The id of the token the call acts as (None when tokens are off): the owner of what it stores."""
    grant = await auth.authorize(call.authorization, None, call.acting_token_id, call.staff)
    return grant.token_id if grant is not None else None


class ResponsesRoute:
    """POST /v1/responses: a chat generation, read and answered in the Responses API's shapes."""

    label = "v1-responses"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, ResponsesRequest]:
        """The validated body (as the chat request it runs) and the model it names."""
        wanted = responses_requests.read(json_body(call))
        return TaskKey.parse(wanted.chat.model).model, wanted

    def resolve(self, wanted: ResponsesRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The text-generation task the model id names."""
        return openai_generation.resolve(wanted.chat.model, specs)

    async def prepare(self, call: ApiCall, wanted: ResponsesRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """The chat route's one stream, with the stored conversation first; answered as a Response."""
        owner = await owner_of(call)
        history: list[dict[str, Any]] = []
        if wanted.previous_id is not None:  # a 404 before anything is charged
            history = await sync_to_async(fresh_connection(response_store.conversation))(wanted.previous_id, owner)
            wanted = responses_requests.with_history(wanted, history)
        work = await openai_generation.CHAT.prepare(call, wanted.chat, spec, task)
        assert work.streaming is not None and isinstance(work.streaming.shape, Choices)
        shape = ResponseStream(wanted, work.streaming.shape, owner, history)
        return dataclasses.replace(work, streaming=Streaming(work.streaming.openings, shape))

    def error(self, error: HostingError, request_id: str) -> Answer:
        """OpenAI's error shape."""
        return openai_error_answer(error, request_id)


RESPONSES = ResponsesRoute()


class ResponseStream:
    """A Response of the chat choice's stream: typed events as they come, or the one object once it ended."""

    def __init__(self, wanted: ResponsesRequest, chat: Choices, owner: int | None,
                 history: list[dict[str, Any]]) -> None:
        self.wanted, self.chat, self.owner, self.history = wanted, chat, owner, history
        self.log_route = "v1-responses"
        self.sse = wanted.chat.stream
        self.built = ResponseEvents(model=wanted.chat.model, echo=wanted.echo)

    async def events(self, streams: list[Stream]) -> AsyncGenerator[bytes, None]:
        """The typed events (a stream), or the one Response object."""
        built, choice, sent = self.built, self.chat.choices[0], 0
        for event in built.started():
            if self.sse:
                yield _sse(event)
        async for worker_event in streams[0].events():  # no n: one choice, one stream
            if choice.finish_reason is not None:
                continue  # cut at a stop sequence: the rest of its tokens are not shown
            pieces = choice.take(worker_event)
            told = built.reasoning(pieces.reasoning) + built.text(pieces.content)
            for call in choice.calls[sent:]:
                told += built.call(call)
            sent = len(choice.calls)
            if self.sse:
                for event in told:
                    yield _sse(event)
        last = built.finished(choice.prompt_tokens, choice.completion_tokens, 0, choice.finish_reason == "length")
        response = last[-1]["response"]
        if self.wanted.store:
            await self._keep(response)
        if not self.sse:
            yield dump_json(response)
            return
        for event in last:
            yield _sse(event)

    async def _keep(self, response: dict[str, Any]) -> None:
        conversation = self.history + self.wanted.items + responses_requests.output_history(response["output"])
        try:
            await sync_to_async(fresh_connection(response_store.save))(response["id"], self.owner, response,
                                                                         conversation)
        except Exception:  # the answer is whole and right: a failed store is logged, not the client's error
            logger.exception("storing response %s failed", response["id"])

    def error_event(self, error: HostingError) -> bytes:
        """Responses' error event."""
        told = openai_error_body(error)["error"]
        event = {"type": "error", "code": told["code"], "message": told["message"], "param": told["param"],
                 "sequence_number": self.built.sequence}
        return _sse(event)

    def tally(self) -> StreamTally:
        """The chat choice's charge: its prompt and generated tokens."""
        return self.chat.tally()


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
