"""A stub generation worker on the real channel layer: every request pulled is answered with fixed token events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.layers import get_channel_layer

from models_registry.broker import messages


def token_events(pieces: list[str], finish_reason: str, input_length: int) -> list[dict[str, Any]]:
    """TGI-shaped events, one per piece, the last with the generated text and details."""
    events: list[dict[str, Any]] = [{"token": {"id": n, "text": piece, "logprob": 0.0, "special": False}}
                                    for n, piece in enumerate(pieces)]
    events[-1].update(generated_text="".join(pieces), details={
        "finish_reason": finish_reason, "input_length": input_length, "generated_tokens": len(pieces)})
    return events


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
                for seq, event in enumerate(token_events(pieces, finish_reason, input_length)):
                    await layer.send(request.reply, messages.TokenEvents(id=request.id, seq=seq, events=[event],
                                                                         source="w1").to_wire())

    task = asyncio.ensure_future(serve())
    try:
        yield pulled
    finally:
        task.cancel()
