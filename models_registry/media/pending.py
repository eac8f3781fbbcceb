"""A media input being opened (media.opening): what a batch item carries in the worker once its opening has started."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.media.opening import open_item
from models_registry.media.item import MediaItem

# A file whose decoding takes longer fails alone: the compute thread must never wait on it for good.
OPEN_TIMEOUT_S = 30.0


class PendingMedia:
    """A media item and its decoding, started in a thread pool when the item reached the worker.

    The compute thread calls get() when the item's batch runs: by then the image or clip
    has usually been decoded while the previous batch computed.
    """

    def __init__(self, item: MediaItem, future: Future[Any]) -> None:
        self.item = item
        self.future = future

    @property
    def kind(self) -> str:
        """image or audio."""
        return self.item.kind

    def get(self) -> Any:
        """The decoded image or samples (raises the decoding's InvalidInput or TooLarge, or InvalidInput after
        OPEN_TIMEOUT_S)."""
        try:
            return self.future.result(timeout=OPEN_TIMEOUT_S)
        except FutureTimeout:
            raise InvalidInput(f"the {self.kind} file took over {OPEN_TIMEOUT_S:g} s to open") from None


def start(pool: Executor, item: MediaItem, sampling_rate: int | None, max_pixels: int,
          max_seconds: float) -> PendingMedia:
    """Decode item in pool; the PendingMedia that will hold it."""
    return PendingMedia(item, pool.submit(open_item, item, sampling_rate, max_pixels, max_seconds))


def opened(items: list[Any]) -> list[Any]:
    """The opened values of a batch's media inputs.

    Anything else is refused: a string handed to a transformers pipeline where an image
    belongs would be opened as a local path or fetched as a URL.
    """
    if not all(isinstance(item, PendingMedia) for item in items):
        raise InvalidInput("a media task takes image or audio files, not text")
    return [item.get() for item in items]
