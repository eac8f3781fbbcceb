"""A stub generation worker on the real channel layer: every request pulled is answered with fixed token events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker import messages
from models_registry.core import token_events


def piece_events(pieces: list[str], finish_reason: str, input_length: int) -> list[dict[str, Any]]:
    """The worker's token events (core.token_events), one per piece, the last with the summary."""
    tokens = [{"id": n, "text": piece, "logprob": 0.0, "special": False} for n, piece in enumerate(pieces)]
    summary = token_events.Summary(finish_reason=finish_reason, generated_tokens=len(pieces), seed=None,
                                   input_length=input_length)
    text = token_events.spelled(tokens)
    return [*map(token_events.token_event, tokens[:-1]), token_events.last_event(tokens[-1], summary, text, text)]


@asynccontextmanager
async def generating(models: list[str], pieces: list[str], finish_reason: str = "eos_token",
                     input_length: int = 9) -> AsyncIterator[list[dict[str, Any]]]:
    """While open, a worker pulls the models' channels and answers pieces; yields the messages it pulled."""
    layer = get_channel_layer()
    pulled: list[dict[str, Any]] = []
    channels = [messages.model_channel(name) for name in models]

    async def serve() -> None:
        while True:
            found = await layer.pull(channels, "w1", 10)
            if not found:
                await asyncio.sleep(0.01)
            for _, message, _ in found:
                request = messages.WorkRequest.from_wire(message)
                assert request is not None
                pulled.append(message)
                for seq, event in enumerate(piece_events(pieces, finish_reason, input_length)):
                    await layer.send(request.reply, messages.TokenEvents(id=request.id, seq=seq, events=[event],
                                                                         source="w1").to_wire())

    task = asyncio.ensure_future(serve())
    try:
        yield pulled
    finally:
        task.cancel()
