"""The view side of a stream: token messages in order, the result that overtakes them, a worker that dies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from models_registry.broker import handoff, messages
from models_registry.broker.stream_handoff import Stream
from models_registry.core import token_events
from models_registry.core.errors import InvalidInput, Unavailable


class FakeLayer:
    """Only what a Stream uses (the layer fills its queue with the replies it reads)."""

    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def forget_reply(self, channel: str) -> None:
        self.forgotten.append(channel)


def tokens(seq: int, *texts: str, final: bool = False, source: str = "w1") -> dict[str, Any]:
    """A token message of texts (with final, the last ends its sequence)."""
    pieces = [{"id": 1, "text": t, "logprob": 0.0, "special": False} for t in texts]
    events = [token_events.token_event(piece) for piece in pieces]
    if final:
        summary = token_events.Summary(finish_reason="length", generated_tokens=len(texts), seed=None, input_length=1)
        events[-1] = token_events.last_event(pieces[-1], summary, "", "")
    return messages.TokenEvents(id="r", seq=seq, events=events, source=source).to_wire()


def text(event: dict[str, Any]) -> str:
    token = token_events.token_of(event)
    assert token is not None
    return token["text"]


async def collect(stream: Stream) -> list[str]:
    return [text(event) async for event in stream.events()]


async def test_events_come_out_in_sequence_order_and_the_result_may_overtake_them() -> None:
    layer = FakeLayer()
    stream = Stream(layer, "m", "t", "r", "reply!1", timeout_s=5)  # type: ignore[arg-type]
    queue = stream.queue
    for message in (tokens(1, "c", "d"), messages.WorkResult(id="r", outputs=[]).to_wire(), tokens(0, "a", "b"),
                    tokens(2, "e", final=True)):
        queue.put_nowait(messages.read_reply(message))
    assert await asyncio.wait_for(collect(stream), 2) == ["a", "b", "c", "d", "e"]


async def test_a_result_that_counts_its_token_messages_waits_for_all_of_them_however_late(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from models_registry.broker import stream_handoff

    monkeypatch.setattr(stream_handoff, "LATE_TOKENS_S", 0.01)  # only a worker that does not count uses it
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!5", timeout_s=5)  # type: ignore[arg-type]
    stream.queue.put_nowait(messages.read_reply(messages.WorkResult(id="r", outputs=[], token_messages=2).to_wire()))

    async def late_tokens() -> None:
        await asyncio.sleep(0.2)  # twenty times the old grace: the answer must still come whole
        stream.queue.put_nowait(messages.read_reply(tokens(1, "b", final=True)))
        stream.queue.put_nowait(messages.read_reply(tokens(0, "a")))

    sender = asyncio.ensure_future(late_tokens())
    assert await asyncio.wait_for(collect(stream), 2) == ["a", "b"]
    await sender


async def test_a_result_of_a_stream_that_sent_nothing_ends_it_at_once() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!6", timeout_s=5)  # type: ignore[arg-type]
    stream.queue.put_nowait(messages.read_reply(messages.WorkResult(id="r", outputs=[], token_messages=0).to_wire()))
    assert await asyncio.wait_for(stream.next_events(), 1) is None


async def test_an_error_result_raises_the_workers_error() -> None:
    layer = FakeLayer()
    stream = Stream(layer, "m", "t", "r", "reply!2", timeout_s=5)  # type: ignore[arg-type]
    stream.queue.put_nowait(messages.WorkResult(id="r", error_type="invalid_input", error="prompt too long"))
    with pytest.raises(InvalidInput, match="prompt too long"):
        await stream.next_events()


async def test_a_stream_goes_on_once_another_worker_repeated_what_its_client_has() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!3", timeout_s=5)  # type: ignore[arg-type]
    queue = stream.queue
    queue.put_nowait(messages.read_reply(tokens(0, "a", "b")))
    assert [text(e) for e in await stream.next_events() or []] == ["a", "b"]
    # The first worker died; the second generates from the prompt again, and a late message of the first comes.
    for message in (tokens(0, "a", source="w2"), tokens(1, "c", source="w1"), tokens(1, "b", "c", source="w2"),
                    tokens(2, "d", final=True, source="w2")):
        queue.put_nowait(messages.read_reply(message))
    assert await asyncio.wait_for(collect(stream), 2) == ["c", "d"]
    assert stream.text == "abcd" and stream.starts == 1  # the new generation's whole text


async def test_a_new_generation_that_says_something_else_ends_the_stream() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!3", timeout_s=5)  # type: ignore[arg-type]
    queue = stream.queue
    queue.put_nowait(messages.read_reply(tokens(0, "a", "b")))
    assert await stream.next_events()
    queue.put_nowait(messages.read_reply(tokens(0, "a", "x", source="w2")))  # a sampled row: another answer
    with pytest.raises(Unavailable, match="went away"):
        await stream.next_events()


async def test_a_new_generation_that_ends_before_what_was_sent_ends_the_stream() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!3", timeout_s=5)  # type: ignore[arg-type]
    stream.queue.put_nowait(messages.read_reply(tokens(0, "a", "b")))
    assert await stream.next_events()
    stream.queue.put_nowait(messages.read_reply(tokens(0, "a", final=True, source="w2")))
    with pytest.raises(Unavailable, match="differs"):
        await stream.next_events()


async def test_a_whole_answer_is_the_last_generation_alone() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!7", timeout_s=5, whole=True)  # type: ignore[arg-type]
    queue = stream.queue
    queue.put_nowait(messages.read_reply(tokens(0, "a", "b")))
    stream.first = await stream.next_events() or []  # as open_streams does
    for message in (tokens(1, "c"), tokens(0, "x", source="w2"), tokens(1, "y", final=True, source="w2")):
        queue.put_nowait(messages.read_reply(message))
    assert await asyncio.wait_for(collect(stream), 2) == ["x", "y"]
    assert stream.text == "xy"  # the new worker's generation, whole


async def test_an_end_only_event_ends_the_stream_and_full_text_is_its_text() -> None:
    stream = Stream(FakeLayer(), "m", "t", "r", "reply!8", timeout_s=5)  # type: ignore[arg-type]
    summary = token_events.Summary(finish_reason="length", generated_tokens=2, seed=None, input_length=1)
    end = token_events.last_event(None, summary, "ab\ufffd", "ab")  # a partial character never completed
    stream.queue.put_nowait(messages.read_reply(tokens(0, "a", "b")))
    stream.queue.put_nowait(messages.read_reply(messages.TokenEvents(id="r", seq=1, events=[end], source="w1")
                                                .to_wire()))
    assert [e async for e in stream.events()][-1] == end
    assert stream.finished and stream.text == "ab\ufffd"


async def test_close_forgets_the_channel_once(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = FakeLayer()
    stream = Stream(layer, "m", "t", "r", "reply!4", timeout_s=5)  # type: ignore[arg-type]
    left: list[tuple[Any, ...]] = []
    monkeypatch.setattr(handoff, "leave_later", lambda *args: left.append(args))
    stream.close()
    stream.close()
    await asyncio.sleep(0)  # given back in the background
    assert layer.forgotten == ["reply!4"] and len(left) == 1
