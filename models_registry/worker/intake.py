"""Intake: one pulled request checked against what this worker serves and counted, before it joins a queue."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from models_registry.broker.messages import WorkRequest
from models_registry.core import sources
from models_registry.core.conf import conf
from models_registry.core.errors import Conflict, InvalidInput, TooLarge, Unavailable
from models_registry.core.model_state import ModelState
from models_registry.media.item import MediaItem, media_of
from models_registry.catalog import answer_size, sparse_answer
from models_registry.catalog.specs import ADAPTER_TASKS
from models_registry.catalog.compute_cost import is_plain_length, request_cost
from models_registry.catalog.readable_text import SEQ2SEQ_TASKS, check_prompt_chars, cut_inputs
from models_registry.worker.media_intake import MediaDecoder
from models_registry.worker.model_slots import ModelSlot


@dataclass(frozen=True)
class Admitted:
    """What an admitted request queues: its inputs as a batch carries them, each one's tokens, and its charge."""

    payloads: list[Any]
    costs: list[int]
    tokens: int  # what the request is charged: what the model will compute


def admit(request: WorkRequest, slot: ModelSlot | None, draining: bool, decoder: MediaDecoder) -> Admitted:
    """What request queues on slot's model; raises the HostingError to answer instead.

    Each text is cut to what the model reads and tokenized once, here: the forward reuses the
    ids (inference.intake_tokens); media inputs start decoding beside the compute thread.
    """
    slot = check_servable(request, slot, draining)
    request = readable(request, slot)  # a 1 MB text costs what the model's length costs
    task = slot.spec.tasks[request.task]
    inputs, costs = slot.loaded.count_inputs(task.task, request.inputs)
    media = media_of(request.inputs)
    charged = computed_tokens(request, slot, costs, media)
    check_token_budget(charged, task.max_request_tokens)
    return Admitted(decoder.prepare(slot.loaded, task.task, inputs, media), costs, charged)


def check_servable(request: WorkRequest, slot: ModelSlot | None, draining: bool) -> ModelSlot:
    """The ready slot that will compute request; raises the HostingError to answer instead."""
    model, task = request.model, request.task
    if draining:
        raise Unavailable("this worker is shutting down")
    if slot is None:
        raise Unavailable(f"model {model!r} is not served by this worker")
    if slot.state != ModelState.READY:
        # The load error names local paths: it is for the admin (heartbeat), not the client.
        detail = f": {sources.LOAD_FAILED}" if slot.state == ModelState.ERROR else ""
        raise Unavailable(f"model {model!r} is {slot.state}{detail}")
    if task not in slot.spec.tasks:
        raise Unavailable(f"model {model!r} has no task {task!r} on this worker")
    if request.adapter:
        check_adapter(request, slot)
    if not request.inputs or not all(isinstance(i, (str, dict)) for i in request.inputs):
        raise InvalidInput("inputs must be a non-empty list of strings or question/context objects")
    return slot


def check_adapter(request: WorkRequest, slot: ModelSlot) -> None:
    """503 for an adapter this worker's view of the base does not list (yet, or any more); 409 for a task it does not change."""
    if slot.spec.adapter_for(request.adapter) is None:
        raise Unavailable(f"adapter {request.adapter!r} of model {request.model!r} is not served by this worker")
    kind = slot.spec.tasks[request.task].task
    if kind not in ADAPTER_TASKS:
        raise Conflict(f"adapter {request.adapter!r}: adapters serve {', '.join(ADAPTER_TASKS)} tasks, not {kind}")


def check_token_budget(tokens: int, limit: int) -> None:
    """413 for a request bringing more input tokens than its task takes (limit 0: no limit)."""
    if limit and tokens > limit:
        raise TooLarge(f"this request has {tokens} input tokens; the task takes at most {limit} per request "
                       "(max_request_tokens): send fewer or shorter inputs")


def computed_tokens(request: WorkRequest, slot: ModelSlot, costs: list[int], media: list[MediaItem | None]) -> int:
    """The tokens request makes the model compute (prompts, labels, windows, new tokens); 400 for impossible windows.

    costs: each input's own tokens (counted for batching), the answer where nothing more is computed;
    media (each input as media.item.media_of found it): media inputs cost what the model's own count says
    (patch tokens, encoder frames).
    """
    if any(item is not None for item in media):
        return media_tokens(media, costs)
    task = slot.spec.tasks[request.task]
    params = {**task.parameters, **request.parameters}
    answer = answer_bytes(task.task, request.inputs, params, slot)
    answer_size.check_answer_bytes(answer, conf.MAX_ANSWER_BYTES)
    answered = answer_size.answer_tokens(answer)  # a large answer is charged what it weighs
    if is_plain_length(task.task, params):
        tokens = sum(costs)  # the common case: no second tokenization
    else:
        counter = slot.loaded.cost_counter()
        if task.task == "text-generation":  # a prompt's cost is its count, plus what is generated
            counted = dict(zip(request.inputs, costs))
            count = counter.tokens
            counter = replace(counter, tokens=lambda text: counted[text] if text in counted else count(text))
        tokens = sum(request_cost(task.task, request.inputs, params, counter))
    return max(tokens, answered)


def media_tokens(media: list[MediaItem | None], costs: list[int]) -> int:
    """The model's own cost of media inputs, or what their decoded pixels weigh; 413 over HOSTING_MAX_REQUEST_PIXELS."""
    pixels = [item.width * item.height if item is not None else 0 for item in media]
    if sum(pixels) > conf.MAX_REQUEST_PIXELS:  # the web refuses it first; a batch line or a forged message here
        raise TooLarge(f"the request's images hold {sum(pixels)} pixels together; one request may hold "
                       f"{conf.MAX_REQUEST_PIXELS} (HOSTING_MAX_REQUEST_PIXELS): send fewer or smaller images")
    return sum(max(cost, answer_size.pixel_tokens(count)) for cost, count in zip(costs, pixels))


def answer_bytes(task: str, inputs: list[Any], params: dict[str, Any], slot: ModelSlot) -> int:
    """The estimated JSON bytes of the answer, where it can outweigh what the model reads (fill-mask, sparse)."""
    width = getattr(slot.loaded, "sparse_width", None)  # a sparse model's, as this load read its files
    if task == "feature-extraction" and width:
        dims = sparse_answer.active_dims(params, slot.loaded.layout, width)
        return sparse_answer.answer_bytes(len(inputs), dims)
    if task != "fill-mask":
        return 0
    tokenizer = getattr(getattr(slot.loaded, "pipelines", {}).get("fill-mask"), "tokenizer", None)
    mask = str(getattr(tokenizer, "mask_token", None) or "")
    return sum(answer_size.fill_mask_bytes(text, mask, params) for text in inputs if isinstance(text, str))


def readable(request: WorkRequest, slot: ModelSlot) -> WorkRequest:
    """request with each text cut to what the model reads, before any tokenizer sees it (catalog.readable_text).

    A text-generation prompt is not cut: one longer than the model's positions can hold is a 400 here.
    """
    task = slot.spec.tasks[request.task]
    max_tokens = getattr(slot.loaded, "max_tokens", 0)  # a runner that counts no tokens reads no length
    if not max_tokens:
        return request
    params = {**task.parameters, **request.parameters}
    if task.task == "text-generation":
        check_prompt_chars(request.inputs, params, getattr(slot.loaded, "positions", None) or max_tokens)
        return request
    if task.task in SEQ2SEQ_TASKS:  # they truncate at the model's positions where it has more than its tokenizer
        max_tokens = max(max_tokens, getattr(slot.loaded, "positions", None) or 0)
    inputs = cut_inputs(task.task, request.inputs, params, max_tokens)
    return request if inputs is request.inputs else replace(request, inputs=inputs)
