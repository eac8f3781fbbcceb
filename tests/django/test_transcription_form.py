"""The transcription form read as the openai SDK sends it, and each refusal naming its field (no Redis, no model)."""

from __future__ import annotations

import pytest

from models_registry.api.openai.transcriptions import TranscriptionRequest, read_form, shaped
from models_registry.api.pipeline.answer import PlainText, body_answer
from models_registry.core.errors import InvalidInput
from models_registry.media.item import MediaItem

BOUNDARY = "xyz"
TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def form(fields: dict[str, str], audio: bytes | None = b"RIFF....") -> bytes:
    """A multipart body with fields and, unless None, a file part."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    if audio is not None:
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                     "Content-Type: audio/wav\r\n\r\n".encode() + audio + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def test_the_sdks_form_is_read() -> None:
    wanted = read_form(form({"model": "asr", "response_format": "verbose_json", "language": "en"}), TYPE)
    assert wanted == TranscriptionRequest("asr", b"RIFF....", "verbose_json", "en")
    assert read_form(form({"model": "asr"}), TYPE).response_format == "json"
    asked = read_form(form({"model": "asr", "language": "FR", "temperature": "0.4", "prompt": "Bonjour"}), TYPE)
    assert (asked.language, asked.temperature) == ("fr", 0.4)
    assert asked.parameters() == {"language": "fr", "temperature": 0.4}
    assert read_form(form({"model": "asr", "temperature": "0"}), TYPE).parameters() == {"temperature": 0.0}
    assert read_form(form({"model": "asr"}), TYPE).parameters() == {}


@pytest.mark.parametrize(("body", "content_type", "param", "says"), [
    (form({"model": "asr"}, audio=None), TYPE, "file", "'file' is required"),
    (form({}), TYPE, "model", "'model' is required"),
    (form({"model": "asr", "response_format": "srt"}), TYPE, "response_format", "not supported here"),
    (form({"model": "asr", "response_format": "xml"}), TYPE, "response_format", "must be one of"),
    (form({"model": "asr", "colour": "red"}), TYPE, "colour", "unrecognized"),
    (form({"model": "asr", "stream": "true"}), TYPE, "stream", "not supported"),
    (form({"model": "asr", "language": "english"}), TYPE, "language", "ISO-639-1"),
    (form({"model": "asr", "language": "e1"}), TYPE, "language", "ISO-639-1"),
    (form({"model": "asr", "temperature": "hot"}), TYPE, "temperature", "from 0 to 1"),
    (form({"model": "asr", "temperature": "1.5"}), TYPE, "temperature", "from 0 to 1"),
    (form({"model": "asr", "temperature": "nan"}), TYPE, "temperature", "from 0 to 1"),
    (b'{"model": "asr"}', "application/json", None, "multipart/form-data"),
    (b"--xyz\r\ngarbage", TYPE, "file", "'file' is required"),
])
def test_a_bad_form_is_a_400_naming_its_field(body: bytes, content_type: str, param: str | None, says: str) -> None:
    with pytest.raises(InvalidInput, match=says) as refused:
        read_form(body, content_type)
    assert getattr(refused.value, "param", None) == param


def test_each_format_has_its_shape() -> None:
    clip = MediaItem("audio", b"", "WAV", seconds=1.5)
    asked = TranscriptionRequest("asr", b"", "text", None)
    text = shaped("hello", asked, clip)
    assert isinstance(text, PlainText) and body_answer(text).content_type.startswith("text/plain")
    assert body_answer(text).body == b"hello"
    assert shaped("hello", TranscriptionRequest("asr", b"", "json", None), clip) == {"text": "hello"}
    verbose = shaped("hello", TranscriptionRequest("asr", b"", "verbose_json", "de"), clip)
    assert verbose["duration"] == 1.5 and verbose["language"] == "de" and verbose["segments"][0]["end"] == 1.5
