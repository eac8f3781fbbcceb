"""media.envelope: base64 and data URIs, the header's size against the limits, never the pixels."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.media import envelope
from models_registry.media.item import AUDIO, IMAGE, MediaItem, estimated_tokens, identity, is_media
from tests import media_factory

LIMITS = {"max_pixels": 1_000_000, "max_seconds": 30.0}


def probe(data: bytes, kind: str) -> MediaItem:
    return envelope.probe(data, kind, "inputs", **LIMITS)


def png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + ihdr + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_base64_plain_urlsafe_unpadded_and_data_uri_decode_alike() -> None:
    data = media_factory.png()
    plain = base64.b64encode(data).decode()
    urlsafe = base64.urlsafe_b64encode(data).decode().rstrip("=")
    assert envelope.decode_text(plain, "x") == (data, None)
    assert envelope.decode_text(urlsafe, "x") == (data, None)
    assert envelope.decode_text(f"data:image/png;base64,{plain}", "x") == (data, "image/png")
    assert envelope.decode_text(plain[:40] + "\n" + plain[40:], "x")[0] == data  # line-wrapped base64


@pytest.mark.parametrize("text", ["", "   ", "not base64!", "data:image/png,rawtext", "data:;base64", "a"])
def test_bad_envelopes_are_400(text: str) -> None:
    with pytest.raises(InvalidInput):
        envelope.decode_text(text, "inputs")


def test_an_image_header_gives_the_size_without_decoding() -> None:
    item = probe(media_factory.png(48, 40), IMAGE)
    assert (item.width, item.height, item.format) == (48, 40, "PNG")


def test_a_bomb_header_is_413_before_any_pixel_is_read() -> None:
    with pytest.raises(TooLarge, match="50000x50000"):
        probe(png_header(50_000, 50_000), IMAGE)  # no pixel data at all: only the header was read


@pytest.mark.parametrize("data", [b"", png_header(0, 0), b"\x89PNG\r\n", b"%PDF-1.4", media_factory.tone(0.1)])
def test_unreadable_or_empty_images_are_400(data: bytes) -> None:
    with pytest.raises(InvalidInput):
        probe(data, IMAGE)


def test_audio_header_gives_the_duration_and_a_wav_claiming_hours_is_413() -> None:
    item = probe(media_factory.tone(0.5), AUDIO)
    assert item.kind == AUDIO and item.seconds == pytest.approx(0.5)
    wav = bytearray(media_factory.tone(0.1))
    at = wav.find(b"data")
    wav[at + 4:at + 8] = struct.pack("<I", 2 * 3600 * 16_000 * 2)  # declares two hours
    with pytest.raises(TooLarge, match="7200"):
        probe(bytes(wav), AUDIO)
    with pytest.raises(InvalidInput):
        probe(media_factory.png(), AUDIO)


def test_content_types_of_the_other_kind_are_refused() -> None:
    assert envelope.kind_of_content_type("image/png") == IMAGE
    assert envelope.kind_of_content_type("application/octet-stream") is None
    envelope.check_kind(IMAGE, None, "x")
    with pytest.raises(InvalidInput, match="audio"):
        envelope.check_kind(IMAGE, AUDIO, "x")


def test_the_wire_form_carries_the_bytes_and_the_cache_sees_a_digest() -> None:
    item = probe(media_factory.png(), IMAGE)
    wire = item.wire()
    assert is_media(wire) and MediaItem.from_wire(wire) == item
    assert identity(wire) == {"media": IMAGE, "sha256": item.digest}
    assert identity("text") == "text" and not is_media({"question": "q", "context": "c"})
    assert estimated_tokens(wire) == 197 and estimated_tokens("text") is None
    assert estimated_tokens(probe(media_factory.tone(2.0), AUDIO).wire()) == 100
