"""Priority classes: a request runs at its token's class, or lower if it asks (X-Priority or options.priority)."""

from __future__ import annotations

from models_registry.core.errors import Forbidden, InvalidInput

INTERACTIVE = "interactive"
BATCH = "batch"
CLASSES = (INTERACTIVE, BATCH)
HEADER = "X-Priority"


def resolve(token_priority: str, asked: str | None) -> str:
    """The request's class: the token's, or batch when a request of an interactive token asks for it."""
    if asked is None or not asked.strip():
        return token_priority
    wanted = asked.strip().lower()
    if wanted not in CLASSES:
        raise InvalidInput(f"the priority ({HEADER} or options.priority) must be {' or '.join(CLASSES)}, "
                           f"not {asked.strip()!r}")
    if wanted == INTERACTIVE and token_priority == BATCH:
        raise Forbidden(f"this API token has batch priority; its requests cannot ask for {INTERACTIVE}")
    return wanted


def place(token_priority: str, asked: str | None, max_queue_size: int,
          max_batch_queue_size: int | None) -> tuple[str, int]:
    """(the request's class, the pending items past which it is refused): resolve and queue_limit at once."""
    klass = resolve(token_priority, asked)
    return klass, queue_limit(klass, max_queue_size, max_batch_queue_size)


def queue_limit(priority: str, max_queue_size: int, max_batch_queue_size: int | None) -> int:
    """Pending items past which a request of this class is refused: batch traffic is shed first."""
    if priority != BATCH:
        return max_queue_size
    if max_batch_queue_size is None:
        return max(1, max_queue_size // 2)
    return min(max_batch_queue_size, max_queue_size)
