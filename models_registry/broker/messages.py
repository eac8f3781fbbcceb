"""Wire messages between the web process and the workers (plain msgpack-safe dicts).

Only str keys, str/int/float/bool/None/bytes/list/dict values: channels_redis' msgpack
cannot decode int-keyed maps and refuses numpy values, sets or datetimes.
"""

from __future__ import annotations

from typing import Any

INFERENCE_CHANNEL = "inference"


def model_channel(model: str) -> str:
    """The work channel of one model: workers pull only the models they have ready."""
    return f"{INFERENCE_CHANNEL}.{model}"

REQUEST_TYPE = "inference.request"
RESULT_TYPE = "inference.result"
TOKENS_TYPE = "inference.tokens"


def request_message(
    *,
    request_id: str,
    reply_channel: str,
    model: str,
    task: str,
    inputs: list[str],
    parameters: dict[str, Any],
    deadline: float,
    priority: str = "interactive",
    client: str = "",
) -> dict[str, Any]:
    """The message a view sends to the inference channel (client: who sent it, for fair decode scheduling)."""
    message = {
        "type": REQUEST_TYPE,
        "id": request_id,
        "reply": reply_channel,
        "model": model,
        "task": task,
        "inputs": inputs,
        "parameters": parameters,
        "deadline": deadline,
        "priority": priority,  # interactive or batch (served behind interactive, shed first)
    }
    if client:
        message["client"] = client
    return message


def result_message(
    *,
    request_id: str,
    outputs: list[Any] | None = None,
    error_type: str | None = None,
    error: str | None = None,
    queue_ms: float = 0.0,
    compute_ms: float = 0.0,
    batch_size: int = 0,
    worker: str = "",
    tokens: int = 0,
) -> dict[str, Any]:
    """The message a worker sends back to the request's reply channel."""
    return {
        "type": RESULT_TYPE,
        "id": request_id,
        "outputs": outputs,
        "error_type": error_type,
        "error": error,
        "queue_ms": round(queue_ms, 3),
        "compute_ms": round(compute_ms, 3),
        "batch_size": batch_size,
        "worker": worker,
        "tokens": tokens,  # input tokens (after truncation), for usage reports
    }


def tokens_message(*, request_id: str, seq: int, events: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """Streamed generation events a worker sends as they are produced (seq orders them: 0, 1, ...).

    source names the generating worker: a request requeued after its worker died starts over
    elsewhere, and its view must not splice two generations together.
    """
    return {"type": TOKENS_TYPE, "id": request_id, "seq": seq, "events": events, "source": source}
