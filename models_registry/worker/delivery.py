"""What the worker keeps with each queued request: where its answer goes and what came with its message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Lease = tuple[str, bytes]  # (channel, message as the layer holds it in this worker's in-flight set)


@dataclass(frozen=True)
class Delivery:
    """A request's reply channel, parameters and lease, carried through the batcher untouched."""

    reply: str  # the view's reply channel
    parameters: dict[str, Any] = field(default_factory=dict)  # the request's own, merged over the task's at compute
    lease: Lease | None = None  # released once the request is answered or dropped
    tokens: int = 0  # what the request is charged: the tokens the model computes for it
    suspect: bool = False  # redelivered after a worker died: computed alone (worker.suspects)
    client: str = ""  # the API token that sent it (inference.decode_queue)
    # The web's request span as W3C trace context, when tracing: the worker's spans join its trace (worker.batch_spans).
    traceparent: str = ""
    tracestate: str = ""
    adapter: str = ""  # the LoRA adapter that computes it ("": the base model)

    @property
    def streams(self) -> bool:
        """Whether the request asked for its tokens as they come."""
        return bool(self.parameters.get("stream"))
