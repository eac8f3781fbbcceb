"""A media input as it travels from the web to a worker: its bytes, its kind and what its header said."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

IMAGE = "image"
AUDIO = "audio"
KINDS = (IMAGE, AUDIO)

# What the web charges before a worker knows the model: a 224-pixel ViT-B/16 image (196
# patches and its class token) and wav2vec2's 50 frames a second. The worker counts the
# model's own cost and the token's charge is settled on that.
ESTIMATED_IMAGE_TOKENS = 197
ESTIMATED_AUDIO_FRAMES_PER_S = 50


@dataclass(frozen=True)
class MediaItem:
    """One image or audio clip: the file's bytes, untouched, and its header's size."""

    kind: str
    data: bytes
    format: str  # what the header said: PNG, JPEG, WAV, FLAC...
    width: int = 0  # images
    height: int = 0
    seconds: float = 0.0  # audio

    @property
    def digest(self) -> str:
        """The bytes' SHA-256: the response cache keys on it, never on the bytes."""
        return hashlib.sha256(self.data).hexdigest()

    def estimated_tokens(self) -> int:
        """The web's charge for this item before the worker counts the model's own."""
        if self.kind == IMAGE:
            return ESTIMATED_IMAGE_TOKENS
        return max(1, math.ceil(self.seconds * ESTIMATED_AUDIO_FRAMES_PER_S))

    def wire(self) -> dict[str, Any]:
        """The msgpack-safe dict a worker message carries (msgpack sends bytes as they are)."""
        return {"media": self.kind, "data": self.data, "format": self.format, "width": self.width,
                "height": self.height, "seconds": self.seconds}

    @classmethod
    def from_wire(cls, value: dict[str, Any]) -> MediaItem:
        """The item back from its wire dict."""
        return cls(kind=str(value["media"]), data=bytes(value["data"]), format=str(value.get("format") or ""),
                   width=int(value.get("width") or 0), height=int(value.get("height") or 0),
                   seconds=float(value.get("seconds") or 0.0))


def is_media(value: Any) -> bool:
    """Whether an input (as the wire carries it) is a media item."""
    return isinstance(value, dict) and value.get("media") in KINDS and isinstance(value.get("data"), bytes)


def media_of(inputs: list[Any]) -> list[MediaItem | None]:
    """Each input as a MediaItem, or None for a text one: a request's inputs looked at once, where a worker takes it."""
    return [MediaItem.from_wire(value) if is_media(value) else None for value in inputs]


def identity(value: Any) -> Any:
    """What the response cache hashes for an input: a media item's kind and digest, else the input itself."""
    if is_media(value):
        return {"media": value["media"], "sha256": hashlib.sha256(value["data"]).hexdigest()}
    return value


def estimated_tokens(value: Any) -> int | None:
    """The web's charge for a media input; None for a text input."""
    return MediaItem.from_wire(value).estimated_tokens() if is_media(value) else None


@dataclass(frozen=True)
class MediaCount:
    """The media among a request's inputs, counted once: the charge it is estimated at and what the ledger counts."""

    tokens: tuple[int | None, ...] = ()  # per input: a media item's estimated tokens, None for a text input
    items: int = 0  # how many inputs are media items
    images: int = 0
    audio_s: float = 0.0


NO_MEDIA = MediaCount()


def count(inputs: list[Any]) -> MediaCount:
    """The media among inputs (as the wire carries them); NO_MEDIA for text alone."""
    tokens: list[int | None] = []
    images, audio_s = 0, 0.0
    for value in inputs:
        if not is_media(value):
            tokens.append(None)
            continue
        tokens.append(MediaItem.from_wire(value).estimated_tokens())
        if value["media"] == IMAGE:
            images += 1
        else:
            audio_s += float(value.get("seconds") or 0.0)
    items = len(tokens) - tokens.count(None)
    return MediaCount(tuple(tokens), items, images, audio_s) if items else NO_MEDIA
