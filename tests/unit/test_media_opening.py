"""media.opening: the first frame, the right way up, 8-bit RGB; audio mono at the model's rate."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.media.opening import open_audio, open_image
from tests import media_factory

PIXELS = 10_000_000


def test_modes_become_rgb() -> None:
    for mode, fmt in (("CMYK", "JPEG"), ("L", "PNG"), ("P", "GIF"), ("RGBA", "PNG"), ("I;16", "PNG"), ("1", "BMP")):
        image = open_image(media_factory.png(mode=mode, fmt=fmt), PIXELS)
        assert image.mode == "RGB" and image.size == (48, 40), mode


def test_sixteen_bit_grey_is_scaled_not_clipped() -> None:
    values = np.full((4, 4), 32768, dtype=np.uint16)  # mid grey in 16 bits
    out = io.BytesIO()
    Image.fromarray(values).save(out, format="PNG")
    assert open_image(out.getvalue(), PIXELS).getpixel((0, 0)) == (127, 127, 127)


def test_transparent_pixels_are_laid_on_white() -> None:
    out = io.BytesIO()
    Image.new("RGBA", (2, 2), (0, 0, 0, 0)).save(out, format="PNG")
    assert open_image(out.getvalue(), PIXELS).getpixel((0, 0)) == (255, 255, 255)


def test_exif_orientation_and_the_first_frame() -> None:
    upright = Image.new("RGB", (4, 2), (255, 0, 0))
    upright.putpixel((0, 0), (0, 0, 255))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    upright.transpose(Image.Transpose.ROTATE_90).save(out, format="PNG", exif=exif)
    turned = open_image(out.getvalue(), PIXELS)
    assert turned.size == (4, 2) and turned.getpixel((0, 0)) == (0, 0, 255)
    frames = [Image.new("RGB", (3, 3), c) for c in ((255, 0, 0), (0, 255, 0))]
    gif = io.BytesIO()
    frames[0].save(gif, format="GIF", save_all=True, append_images=frames[1:])
    assert open_image(gif.getvalue(), PIXELS).getpixel((1, 1)) == (255, 0, 0)


def test_truncated_and_oversized_images() -> None:
    with pytest.raises(InvalidInput, match="could not be decoded"):
        open_image(media_factory.png(64, 64)[:150], PIXELS)
    with pytest.raises(TooLarge):
        open_image(media_factory.png(64, 64), 100)


def test_stereo_44k_becomes_mono_16k() -> None:
    samples = open_audio(media_factory.tone(0.5, rate=44_100, channels=2, fmt="FLAC"), 16_000, 60)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) - 8_000) <= 2
    assert 0.25 < float(np.abs(samples).max()) < 0.35  # the tone's 0.3 amplitude survives the resampling


def test_bad_audio() -> None:
    with pytest.raises(InvalidInput):
        open_audio(media_factory.tone(0.2)[:40], 16_000, 60)
    with pytest.raises(TooLarge):
        open_audio(media_factory.tone(2.0), 16_000, 1)
