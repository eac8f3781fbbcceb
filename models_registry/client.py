"""The view side of the hand-off: send a request to the workers, await its own reply."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer

from models_registry import messages
from models_registry.errors import HostingError, Overloaded, Timeout, Unavailable, from_wire

BROKER_TIMEOUT_S = 1.0  # a broker that does not take a message in a second is down


@dataclass(frozen=True)
class InferenceResult:
    """A worker's answer and what happened on the way."""

    outputs: list[Any]
    queue_ms: float
    compute_ms: float
    batch_size: int


async def infer(
    *, request_id: str, model: str, task: str, inputs: list[str], parameters: dict[str, Any], timeout_s: float
) -> InferenceResult:
    """Run inputs through model/task on some worker; raises a HostingError on failure."""
    layer = get_channel_layer()
    reply_channel = await layer.new_channel()
    deadline = time.time() + timeout_s
    message = messages.request_message(
        request_id=request_id, reply_channel=reply_channel, model=model, task=task,
        inputs=inputs, parameters=parameters, deadline=deadline,
    )
    try:
        await asyncio.wait_for(layer.send(messages.INFERENCE_CHANNEL, message), BROKER_TIMEOUT_S)
    except ChannelFull:
        raise Overloaded("the inference channel is full; retry later", headers={"Retry-After": "1"}) from None
    except Exception as error:  # connection refused, timeouts: the broker is unreachable
        raise Unavailable(f"the message broker is unreachable ({type(error).__name__})") from None
    try:
        reply = await asyncio.wait_for(layer.receive(reply_channel), max(0.0, deadline - time.time()))
    except TimeoutError:
        raise Timeout(f"no result within {timeout_s:g} s") from None
    except Exception as error:
        raise Unavailable(f"lost the connection to the message broker ({type(error).__name__})") from None
    finally:
        # A late reply would otherwise sit in this process' buffer forever.
        layer.receive_buffer.pop(reply_channel, None)
    if reply.get("error_type"):
        error: HostingError = from_wire(reply["error_type"], reply.get("error") or "inference failed")
        if reply.get("retry_after"):
            error.headers["Retry-After"] = str(reply["retry_after"])
        raise error
    return InferenceResult(
        outputs=reply.get("outputs") or [],
        queue_ms=float(reply.get("queue_ms") or 0.0),
        compute_ms=float(reply.get("compute_ms") or 0.0),
        batch_size=int(reply.get("batch_size") or 0),
    )
