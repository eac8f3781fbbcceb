"""OpenAI's POST /v1/chat/completions and /v1/completions over text-generation tasks.

Each choice is one streamed generation on the workers (broker.stream_handoff, opened by
the route skeleton through the policy gate), where it joins the running decode batch at the
next token step; a whole answer is the streams collected. Chat messages are rendered with
the model's chat template on the worker (a model without one answers 400); a reasoning model's
`<think>` block comes back apart, as `reasoning_content` (api.openai.reasoning_split), and the tool calls the
content holds as `tool_calls` (api.openai.tool_calls; a forced one by a grammar). The token's
limits and priority apply as on every route; its charge is the prompt plus the generated
tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import orjson

from models_registry.api.openai import generation_requests, structured_output
from models_registry.api.pipeline.answer import Answer, dump_json
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.openai.completion_shapes import Choice, Shaper
from models_registry.api.pipeline.error_answers import invalid, openai_error_answer, openai_error_body
from models_registry.api.openai.generation_requests import GenerationRequest
from models_registry.api.pipeline.inference_route import Streaming, Work
from models_registry.api.openai.logprob_shapes import Released
from models_registry.api.openai import tool_grammar
from models_registry.api.openai.tool_calls import ToolCallStream
from models_registry.api.openai.tool_schemas import forced_field, unusable
from models_registry.api.openai.openai_routes import json_body, model_task
from models_registry.api.openai.reasoning_split import ReasoningSplitter
from models_registry.api.pipeline.request_record import StreamTally
from models_registry.broker.stream_handoff import Opening, Stream
from models_registry.core.errors import HostingError, InvalidInput, NotFound
from models_registry.core.task_key import TaskKey
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.tasks.task_parameters import ReasoningFormat, ToolCallFormat

TASK = "text-generation"


def resolve(model_id: str, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
    """The text-generation task a /v1 model id names (404 or 400 otherwise)."""
    spec, task = model_task(model_id, specs)
    if task.task != TASK:  # OpenAI answers 404 for a model the endpoint does not serve
        raise NotFound(f"{model_id!r} is a {task.task} task, not a text-generation model; GET /v1/models "
                       "lists the ids")
    return spec, task


def reasoning_format(task: TaskSpec) -> ReasoningFormat:
    """The task's reasoning_format, else what its chat template implies; "none" where neither says one."""
    return task.parameters.get("reasoning_format") or task.layout.reasoning_format or "none"


def tool_call_format(task: TaskSpec) -> ToolCallFormat:
    """The task's tool_call_format, else what its chat template renders; "none" where neither says one."""
    chosen = task.parameters.get("tool_call_format") or task.layout.tool_call_format or "none"
    return chosen  # type: ignore[no-any-return]


async def with_tools(wanted: GenerationRequest, tool_format: ToolCallFormat) -> GenerationRequest:
    """wanted, its forced call's grammar compiled (off the loop); a 400 where this model cannot take its tools."""
    tools = wanted.tools
    if tools is None:
        return wanted
    if tool_format == "none":
        raise unusable("this model's chat template does not render tools in a format this server reads (hermes, "
                       "llama3-json, mistral): leave 'tools' out, or register the task with a tool_call_format")
    if not tools.forced:
        return wanted
    if wanted.schema is not None:
        raise unusable("a forced tool_choice and a response_format cannot both shape the answer: send one")
    try:
        grammar = await structured_output.tool_grammar_of(tool_grammar.grammar_source(tools, tool_format))
    except InvalidInput as error:  # the grammar refused: name the function's schema where it is one
        raise invalid(error.message, forced_field(tools)) from None
    return dataclasses.replace(wanted, grammar=grammar)


class GenerationRoute:
    """One of OpenAI's generation routes: chat (messages) or completions (prompt)."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.label = "v1-chat" if chat else "v1-completions"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, GenerationRequest]:
        """The validated body and the model it names."""
        wanted = generation_requests.read(json_body(call), self.chat)
        return TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: GenerationRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The text-generation task the model id names."""
        return resolve(wanted.model, specs)

    async def prepare(self, call: ApiCall, wanted: GenerationRequest, spec: ModelSpec, task: TaskSpec) -> Work:
        """Every answer is generated as streams, one per choice; charged for every prompt of every choice.

        A response_format schema is compiled here, off the event loop, once the token and the model are known
        (a stranger's schema costs nothing); one that cannot be used is a 400 before anything is charged.
        """
        wanted = await with_tools(wanted, tool_call_format(task))
        if wanted.schema is not None:
            wanted = dataclasses.replace(wanted, grammar=await structured_output.grammar_of(wanted.schema))
        prompts = [""] if wanted.chat else wanted.prompts  # chat: the worker renders the messages
        openings = [Opening(prompt, {**task.parameters, **generation_requests.worker_parameters(wanted, choice)})
                    for p, prompt in enumerate(prompts) for choice in range(p * wanted.n, (p + 1) * wanted.n)]
        return Work(wanted.prompts * wanted.n, wanted.parameters, wanted.choices, call.priority,
                    streaming=Streaming(openings, Choices(wanted, self.label,
                                                          reasoning_format(task) if wanted.chat else "none",
                                                          tool_call_format(task))))

    def error(self, error: HostingError, request_id: str) -> Answer:
        """OpenAI's error shape."""
        return openai_error_answer(error, request_id)


CHAT = GenerationRoute(chat=True)
COMPLETIONS = GenerationRoute(chat=False)




async def _merged(streams: list[Stream]) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
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


class Choices:
    """OpenAI's answer of a request's streams: chunks as they come, or the whole answer once they ended."""

    def __init__(self, wanted: GenerationRequest, log_route: str, reasoning: ReasoningFormat = "none",
                 tool_format: ToolCallFormat = "none") -> None:
        self.wanted = wanted
        self.log_route = log_route
        self.sse = wanted.stream
        self.shaper = Shaper(chat=wanted.chat, model=wanted.model, n=wanted.n)
        self.choices = [Choice(index=i, stops=wanted.stops,
                               logprobs=Released([]) if wanted.logprobs is not None else None,
                               splitter=ReasoningSplitter(reasoning) if reasoning != "none" else None,
                               caller=ToolCallStream(tool_format, wanted.tools.parallel, wanted.tools.forced)
                               if wanted.tools else None)
                        for i in range(wanted.choices)]

    async def events(self, streams: list[Stream]) -> AsyncGenerator[bytes, None]:
        """The chunks (a stream), or the one JSON answer."""
        wanted, shaper = self.wanted, self.shaper
        if not wanted.stream:
            async with aclosing(_merged(streams)) as merged:
                async for index, event in merged:
                    self.choices[index].take(event)
            yield dump_json(shaper.answer(self.choices))
            return
        if wanted.chat:
            for choice in self.choices:
                yield _sse(shaper.chunk(choice.index, None, None, wanted.include_usage))
        async with aclosing(_merged(streams)) as merged:  # its pumps stop with the answer
            async for index, event in merged:
                choice = self.choices[index]
                if choice.finish_reason is not None:
                    continue  # cut at a stop sequence: the rest of its tokens are not shown
                pieces = choice.take(event)
                if pieces.reasoning:  # the reasoning first: a piece may close the block and start the answer
                    yield _sse(shaper.chunk(index, "", None, wanted.include_usage,
                                            None if pieces.content else choice.new_logprobs(), pieces.reasoning))
                if pieces.content:
                    yield _sse(shaper.chunk(index, pieces.content, None, wanted.include_usage,
                                            choice.new_logprobs()))
                for call in choice.new_calls():  # its opening, then its arguments (a forced call's as they come)
                    yield _sse(shaper.chunk(index, "", None, wanted.include_usage, choice.new_logprobs(), call=call))
                if choice.finish_reason is not None:
                    yield _sse(shaper.chunk(index, "", choice.finish_reason, wanted.include_usage,
                                            choice.new_logprobs()))
        if wanted.include_usage:
            yield _sse(shaper.usage_chunk(self.choices))
        yield b"data: [DONE]\n\n"

    def error_event(self, error: HostingError) -> bytes:
        """OpenAI's error object as an event."""
        return _sse(openai_error_body(error))

    def tally(self) -> StreamTally:
        """The charge is the prompts and the generated tokens."""
        usage = self.shaper.usage(self.choices)
        return StreamTally(usage["total_tokens"], len(self.choices), {
            "choices": len(self.choices), "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"]}, usage["prompt_tokens"], usage["completion_tokens"])


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"

