"""Opening streams against a real Redis: each one charged, admitted and sent by broker.enqueue's one script.

The first stream of a request carries its charge; the others are sent once it was admitted,
uncharged. A refusal (a spent limit, a full queue) leaves nothing queued and nothing listening.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from models_registry.broker import admission, enqueue, messages, stream_handoff
from models_registry.broker.layer import HostingChannelLayer
from models_registry.broker.stream_handoff import Opening
from models_registry.core import token_events
from models_registry.core.errors import Overloaded
from models_registry.policy import charges, rate_limits
from tests import admitting

CHANNEL = messages.model_channel("m")
LIMITS = rate_limits.Limits(requests_per_minute=1)
pytestmark = pytest.mark.usefixtures("within_one_minute")  # the limits count in one UTC minute


@pytest.fixture
def runs(layer: HostingChannelLayer, monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool, bool]]:
    """Every run of the enqueue script, as (charged, admitted, sent): the streams open on layer."""
    monkeypatch.setattr(stream_handoff, "work_layer", lambda: layer)
    return admitting.record_runs(monkeypatch)


async def answer(layer: HostingChannelLayer, count: int) -> list[str]:
    """A worker: each request's prompt upper-cased as its one (final) token event; the prompts in pull order."""
    prompts: list[str] = []
    while len(prompts) < count:
        pulled = await layer.pull([CHANNEL], "w1", 10)
        if not pulled:
            await asyncio.sleep(0.01)
        for _, message, _ in pulled:
            request = messages.WorkRequest.from_wire(message)
            assert request is not None and request.parameters["stream"] is True
            text = request.inputs[0].upper()
            summary = token_events.Summary(finish_reason="eos_token", generated_tokens=1, seed=None, input_length=2)
            event = token_events.last_event({"id": 1, "text": text, "logprob": 0.0, "special": False}, summary,
                                            text, text)
            await layer.send(request.reply, messages.TokenEvents(id=request.id, seq=0, events=[event],
                                                                 source="w1").to_wire())
            prompts.append(request.inputs[0])
    return prompts


async def open_streams(openings: list[Opening], plan: enqueue.ChargePlan | None,
                       max_queue_size: int = 10) -> list[stream_handoff.Stream]:
    return await asyncio.wait_for(stream_handoff.open_streams(
        openings, plan, model="m", task="t", timeout_s=5, max_queue_size=max_queue_size, client="7"), 5)


def plan(layer: HostingChannelLayer, tokens: int = 4) -> enqueue.ChargePlan:
    return rate_limits.plan(layer.prefix, 7, LIMITS, tokens, time.time())


async def requests_this_minute(layer: HostingChannelLayer) -> int:
    minute = rate_limits.usage_keys(layer.prefix, 7, time.time())[0]
    return int(await layer.connection(0).hget(minute, "r") or 0)


async def test_one_script_charges_admits_and_sends_a_stream(layer: HostingChannelLayer,
                                                            runs: list[tuple[bool, bool, bool]]) -> None:
    worker = asyncio.ensure_future(answer(layer, 1))
    charge = plan(layer)
    [stream] = await open_streams([Opening("once", {"max_new_tokens": 3})], charge)
    assert await worker == ["once"]
    assert runs == [(True, True, True)]
    assert charges.outcome(charge, LIMITS, time.time()).tokens == 4
    assert await requests_this_minute(layer) == 1 and await admission.depth(layer, "m", "t") == 1
    assert [token_events.added_text(event) async for event in stream.events()] == ["ONCE"] and stream.text == "ONCE"
    stream.close()


async def test_the_other_streams_follow_the_first_uncharged(layer: HostingChannelLayer,
                                                           runs: list[tuple[bool, bool, bool]]) -> None:
    worker = asyncio.ensure_future(answer(layer, 3))
    streams = await open_streams([Opening(text, {}) for text in ("a", "b", "c")], plan(layer))
    assert (await worker)[0] == "a"  # sent before the others
    assert runs == [(True, True, True), (False, True, True), (False, True, True)]
    assert [token_events.added_text(stream.first[0]) for stream in streams] == ["A", "B", "C"]  # in the openings' order
    assert await requests_this_minute(layer) == 1 and await admission.depth(layer, "m", "t") == 3
    for stream in streams:
        stream.close()


async def test_a_spent_limit_queues_nothing_and_listens_no_more(layer: HostingChannelLayer,
                                                                runs: list[tuple[bool, bool, bool]]) -> None:
    spent = plan(layer)
    await enqueue.run(layer.connection(0), spent)  # the minute's one request, charged alone
    with pytest.raises(enqueue.ChargeRefused):
        await open_streams([Opening("a", {}), Opening("b", {})], plan(layer))
    assert runs == [(True, False, False), (True, True, True)]  # the second stream was never sent
    assert await layer.pull([CHANNEL], "w1", 10) == []
    assert await admission.depth(layer, "m", "t") == 0 and layer._replies == {}


async def test_a_full_queue_refuses_the_request_and_gives_the_first_place_back(
        layer: HostingChannelLayer, runs: list[tuple[bool, bool, bool]]) -> None:
    with pytest.raises(Overloaded, match="limit 1 for interactive traffic"):
        await open_streams([Opening("a", {}), Opening("b", {})], None, max_queue_size=1)
    assert layer._replies == {}
    for _ in range(100):  # the first stream's place goes back in the background
        if await admission.depth(layer, "m", "t") == 0:
            break
        await asyncio.sleep(0.01)
    assert await admission.depth(layer, "m", "t") == 0
