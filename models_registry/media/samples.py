"""Sample media made on the spot: what the admin's "Run a test input" sends a media task when no file is uploaded."""

from __future__ import annotations

import io

import numpy as np
import soundfile
from PIL import Image, ImageDraw

SAMPLE_RATE = 16_000


def sample_image() -> bytes:
    """A 64x64 PNG drawing: a red square and a green circle on blue."""
    image = Image.new("RGB", (64, 64), (30, 60, 200))
    draw = ImageDraw.Draw(image)
    draw.rectangle((8, 8, 30, 30), fill=(220, 30, 30))
    draw.ellipse((32, 32, 60, 60), fill=(30, 200, 60))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def sample_clip(seconds: float = 1.0) -> bytes:
    """A 440 Hz tone as 16 kHz mono 16-bit WAV."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    out = io.BytesIO()
    soundfile.write(out, (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32"), SAMPLE_RATE, format="WAV",
                    subtype="PCM_16")
    return out.getvalue()
