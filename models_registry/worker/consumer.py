"""The Channels consumer on the `inference` channel: hands messages to the engine, nothing more."""

from __future__ import annotations

import logging
from typing import Any

from channels.consumer import AsyncConsumer

from models_registry.worker import engine_registry

logger = logging.getLogger(__name__)


class InferenceConsumer(AsyncConsumer):
    """Enqueues each inference request and returns at once (runworker awaits handlers)."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Route by type without channels' per-message DB connection check (no ORM here).

        Never raises: an exception would end this consumer instance and lose every
        message queued behind it.
        """
        try:
            if message.get("type") == "inference.request":
                engine = engine_registry.current()
                if engine is None:
                    logger.error("inference message received before the engine started; dropped")
                    return
                engine.submit(message)
            else:
                logger.warning("ignored a message of type %r on the inference channel", message.get("type"))
        except Exception:
            logger.exception("could not enqueue an inference message")
