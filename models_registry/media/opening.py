"""Opening a media item in the worker (its bytes to pixels or samples): an RGB picture the right way up, or mono samples at the model's rate.

The header was checked by the web; it is checked again here, because the worker must not
trust a message more than the web trusts a client.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import soundfile
import soxr
from PIL import Image, ImageOps

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.media.envelope import IMAGE_FORMATS, MAX_SAMPLE_RATE, MIN_AUDIO_SECONDS
from models_registry.media.item import IMAGE, MediaItem

_HIGH_DEPTH = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")


def open_item(item: MediaItem, sampling_rate: int | None, max_pixels: int, max_seconds: float) -> Any:
    """A PIL RGB image, or a float32 mono array at sampling_rate (raises InvalidInput or TooLarge)."""
    if item.kind == IMAGE:
        return open_image(item.data, max_pixels)
    return open_audio(item.data, sampling_rate, max_seconds)


def open_image(data: bytes, max_pixels: int) -> Image.Image:
    """The first frame, EXIF orientation applied, as 8-bit RGB (alpha laid on white)."""
    try:
        image = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
        if image.size[0] * image.size[1] > max_pixels or min(image.size) < 1:
            raise TooLarge(f"the image is {image.size[0]}x{image.size[1]} pixels; the limit is {max_pixels}")
        image.seek(0)  # an animated GIF or WebP: its first frame
        image.load()
        image = ImageOps.exif_transpose(image) or image
        return _to_rgb(image)
    except (TooLarge, InvalidInput):
        raise
    except Exception as error:  # truncated or corrupt data: the client's input, not our fault
        raise InvalidInput(f"the image could not be decoded ({type(error).__name__}: {error})"[:300]) from None


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode in _HIGH_DEPTH:  # 16-bit or float grey: scaled to 8 bits, not clipped at 255
        values = np.asarray(image, dtype=np.float32)
        top = 65535.0 if image.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        if image.mode == "F":
            top = max(float(values.max(initial=0)), 1.0)
        image = Image.fromarray(np.clip(values / top * 255.0, 0, 255).astype(np.uint8))
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image if image.mode == "RGB" else image.convert("RGB")  # CMYK, L, 1, YCbCr, I;16...


def open_audio(data: bytes, sampling_rate: int | None, max_seconds: float) -> np.ndarray:
    """Mono float32 samples, resampled to sampling_rate (soxr) when the file has another rate."""
    try:
        info = soundfile.info(io.BytesIO(data))
        if info.duration > max_seconds:
            raise TooLarge(f"the clip lasts {info.duration:.1f} s; the limit is {max_seconds:g} s")
        if not 0 < info.samplerate <= MAX_SAMPLE_RATE or info.duration < MIN_AUDIO_SECONDS:
            raise InvalidInput(f"the clip has {info.frames} samples at {info.samplerate} Hz: it must last at least "
                               f"{MIN_AUDIO_SECONDS * 1000:g} ms at a rate from 1 to {MAX_SAMPLE_RATE} Hz")
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (TooLarge, InvalidInput):
        raise
    except Exception as error:
        raise InvalidInput(f"the audio could not be decoded ({type(error).__name__}: {error})"[:300]) from None
    if samples.shape[0] == 0:
        raise InvalidInput("the audio holds no samples")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if sampling_rate and rate != sampling_rate:
        mono = soxr.resample(mono, rate, sampling_rate)
    return np.ascontiguousarray(mono, dtype=np.float32)
