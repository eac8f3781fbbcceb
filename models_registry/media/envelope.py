"""The web's look at a media input: its envelope (content type, base64, data URI) and its header, never its pixels.

Pillow's `Image.open` and libsndfile's `info` read only a file's header, so the pixel
count or duration is known before anything is decoded: a decompression bomb (a PNG
claiming 50,000 x 50,000 pixels in a few hundred bytes) is a 413 here and never reaches
a worker. The bytes then travel to the worker as they came.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct

import soundfile
from PIL import (  # noqa: F401  (imported to register exactly these formats, whatever else ran Image.init)
    BmpImagePlugin,
    GifImagePlugin,
    Image,
    JpegImagePlugin,
    PngImagePlugin,
    TiffImagePlugin,
    UnidentifiedImageError,
    WebPImagePlugin,
)

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.media.item import AUDIO, IMAGE, MediaItem

# Our own limit (HOSTING_MAX_IMAGE_PIXELS) is checked against the header below; Pillow's
# global bomb check would warn or raise with its own number first.
Image.MAX_IMAGE_PIXELS = None
# The formats a served image may have: the common web ones. Every other Pillow plugin (and
# its parser's attack surface) stays closed.
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")  # JPEG also opens multi-picture (MPO) files
MAX_SAMPLE_RATE = 768_000  # above any recording's rate: a higher one is a forged header
# A speech model's first convolutions read 25 ms windows (wav2vec2: 400 samples at 16 kHz): a shorter clip fails there.
MIN_AUDIO_SECONDS = 0.1
_DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.ASCII)


def kind_of_content_type(media_type: str) -> str | None:
    """image or audio for an image/* or audio/* type; None for one that names no kind (octet-stream)."""
    major = media_type.split("/", 1)[0]
    return major if major in (IMAGE, AUDIO) else None


def decode_text(value: str, where: str) -> tuple[bytes, str | None]:
    """The bytes of a base64 string or a data URI, and the URI's media type (None for plain base64)."""
    mime = None
    text = value.strip()
    if text.startswith("data:"):
        match = _DATA_URI.match(text)
        if match is None:
            raise InvalidInput(f"{where} is not a valid data URI: use data:<type>;base64,<data>")
        if not match.group("b64"):
            raise InvalidInput(f"{where}: only base64 data URIs are taken (data:<type>;base64,<data>)")
        mime = (match.group("mime") or "").lower() or None
        text = text[match.end():]
    compact = "".join(text.split())
    if not compact:
        raise InvalidInput(f"{where} is empty")
    alphabet = "-_" if ("-" in compact or "_" in compact) else "+/"  # URL-safe base64 too
    try:
        data = base64.b64decode(compact + "=" * (-len(compact) % 4), altchars=alphabet.encode(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{where} is neither base64 nor a data URI (nor an allowed URL)") from None
    return data, mime


def check_kind(kind: str, declared: str | None, where: str) -> None:
    """400 when a content type names the other kind (audio/* sent to an image task)."""
    if declared is not None and declared != kind:
        raise InvalidInput(f"{where} is {declared} content; this task takes {kind} files")


def probe(data: bytes, kind: str, where: str, max_pixels: int, max_seconds: float) -> MediaItem:
    """The item, its header read and checked against the limits (413 over them, 400 unreadable)."""
    if not data:
        raise InvalidInput(f"{where} is empty: send the {kind} file's bytes")
    return _probe_image(data, where, max_pixels) if kind == IMAGE else _probe_audio(data, where, max_seconds)


def _probe_image(data: bytes, where: str, max_pixels: int) -> MediaItem:
    try:
        with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as image:
            width, height, fmt = image.size[0], image.size[1], image.format or ""
    except UnidentifiedImageError:
        raise InvalidInput(f"{where} is not an image this server reads ({', '.join(IMAGE_FORMATS)})") from None
    except Exception as error:  # a header Pillow cannot parse: truncated, corrupt
        raise InvalidInput(f"{where} is not a readable image ({type(error).__name__})") from error
    if width < 1 or height < 1:
        raise InvalidInput(f"{where} has no pixels ({width}x{height})")
    if width * height > max_pixels:
        raise TooLarge(f"{where} is {width}x{height} = {width * height} pixels; the limit is {max_pixels} "
                       "(HOSTING_MAX_IMAGE_PIXELS): send a smaller image")
    return MediaItem(kind=IMAGE, data=data, format=fmt, width=width, height=height)


def _probe_audio(data: bytes, where: str, max_seconds: float) -> MediaItem:
    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception as error:
        raise InvalidInput(f"{where} is not an audio file this server reads (WAV, FLAC, OGG, MP3...): "
                           f"{type(error).__name__}") from None
    if not 0 < info.samplerate <= MAX_SAMPLE_RATE or info.channels <= 0:
        raise InvalidInput(f"{where} declares {info.samplerate} Hz and {info.channels} channels: the sample rate "
                           f"must be from 1 to {MAX_SAMPLE_RATE} Hz, with at least one channel")
    seconds = max(float(info.duration), _declared_wav_seconds(data))
    if seconds > max_seconds:
        raise TooLarge(f"{where} lasts {seconds:.1f} s by its header; the limit is {max_seconds:g} s "
                       "(HOSTING_MAX_AUDIO_SECONDS): send a shorter clip")
    if info.frames <= 0:
        raise InvalidInput(f"{where} holds no audio samples")
    if info.duration < MIN_AUDIO_SECONDS:
        raise InvalidInput(f"{where} lasts {info.duration * 1000:.1f} ms ({info.frames} samples at {info.samplerate} "
                           f"Hz); a clip must last at least {MIN_AUDIO_SECONDS * 1000:g} ms for a model to hear it")
    return MediaItem(kind=AUDIO, data=data, format=str(info.format), seconds=float(info.duration))


def check_request_pixels(items: list[MediaItem], max_pixels: int) -> None:
    """413 for a request whose images hold more pixels together than one request may make a worker decode."""
    total = sum(item.width * item.height for item in items if item.kind == IMAGE)
    if total > max_pixels:
        raise TooLarge(f"the request's images hold {total} pixels together; one request may hold {max_pixels} "
                       "(HOSTING_MAX_REQUEST_PIXELS): send fewer or smaller images per request")


def _declared_wav_seconds(data: bytes) -> float:
    """What a WAV header claims (its data chunk's size), which libsndfile clamps to the bytes present."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return 0.0
    position, byte_rate = 12, 0
    while position + 8 <= len(data) and position < 4096:
        chunk, size = data[position:position + 4], struct.unpack("<I", data[position + 4:position + 8])[0]
        if chunk == b"fmt " and size >= 16 and position + 20 <= len(data):
            byte_rate = struct.unpack("<I", data[position + 16:position + 20])[0]
        if chunk == b"data":
            return size / byte_rate if byte_rate else 0.0
        position += 8 + size + (size & 1)
    return 0.0
