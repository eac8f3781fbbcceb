"""The worker's side of media inputs: each one checked against its task and decoded in a small pool as it arrives.

Decoding runs beside the compute thread, so a batch's images are usually decoded while
the batch before it computes; the compute thread only waits for the ones not done yet.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from models_registry.core.conf import conf
from models_registry.core.errors import InvalidInput
from models_registry.media import pending
from models_registry.media.item import MediaItem
from models_registry.tasks.task_inputs import TASK_KINDS


class MediaDecoder:
    """Starts decoding a request's media inputs in a pool of HOSTING_MEDIA_DECODE_THREADS threads."""

    def __init__(self, threads: int | None = None) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads or conf.MEDIA_DECODE_THREADS,
                                       thread_name_prefix="decode")

    def prepare(self, loaded: Any, task: str, inputs: list[Any], media: list[MediaItem | None]) -> list[Any]:
        """The batch payloads of inputs: media items become PendingMedia (decoding); InvalidInput on a mismatch.

        media: each input as media.item.media_of found it (None: a text input).
        """
        kind = TASK_KINDS[task].media if task in TASK_KINDS else None
        if kind is None:
            if any(item is not None for item in media):
                raise InvalidInput(f"{task} takes text, not image or audio files")
            return inputs
        if not all(item is not None and item.kind == kind for item in media):
            raise InvalidInput(f"{task} takes {kind} files only")
        return [pending.start(self.pool, item, loaded.media_costs.sampling_rate, conf.MAX_IMAGE_PIXELS,
                              conf.MAX_AUDIO_SECONDS)
                for item in media if item is not None]

    def shutdown(self) -> None:
        """Drop decodings not started (the process is ending)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
