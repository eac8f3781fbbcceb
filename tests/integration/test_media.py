"""Images and audio through real processes: every media route, the real clients, and hostile files.

One stack for the module (six tiny models built here); every test reads its own answers.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from collections.abc import Iterator

import numpy as np
import pytest

from tests import media_factory
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration

VIT, CLIP, DETECTOR, CAPTIONER, AUDIO_CLS, ASR = "vit", "clip", "yolos", "captioner", "audio-cls", "asr"


@pytest.fixture(scope="module")
def media_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The product with six media models: CLIP with a text, an image and a zero-shot task."""
    root = tmp_path_factory.mktemp("media-models")
    paths = {
        VIT: media_factory.build_vit_classifier(root / "vit"),
        CLIP: media_factory.build_tiny_clip(root / "clip"),
        DETECTOR: media_factory.build_yolos_detector(root / "yolos"),
        CAPTIONER: media_factory.build_captioner(root / "captioner"),
        AUDIO_CLS: media_factory.build_audio_classifier(root / "audio-cls"),
        ASR: media_factory.build_ctc_recognizer(root / "asr"),
    }
    registrations = [
        # An image costs the tiny ViT (32 / 8)^2 + 1 = 17 patch tokens: two fit in 40, three do not.
        (VIT, "image-classification", None, ["--cache-ttl", "60", "--max-request-tokens", "40"]),
        (CLIP, "feature-extraction", "text", ["--normalize", "--max-batch-size", "16"]),
        (CLIP, "image-feature-extraction", "image", ["--normalize", "--max-batch-size", "8"]),
        (CLIP, "zero-shot-image-classification", "zero-shot", []),
        (DETECTOR, "object-detection", None, []),
        (CAPTIONER, "image-to-text", None, []),
        (AUDIO_CLS, "audio-classification", None, []),
        (ASR, "automatic-speech-recognition", None, []),
    ]
    # One process registers them all (a manage.py process each would cost seconds apiece).
    calls = [["register_model", name, "--source", str(paths[name]), "--task", task, "--timeout", "60",
              *(["--task-name", task_name] if task_name else []), *extra]
             for name, task, task_name, extra in registrations]
    script = ("from django.core.management import call_command\n"
              f"for args in {json.dumps(calls)}:\n    call_command(*args)\n")
    # localhost is listed, so a URL input on it goes as far as the address check (loopback: refused).
    env = {"HOSTING_MAX_AUDIO_SECONDS": "60", "HOSTING_MEDIA_FETCH_HOSTS": "localhost"}
    with Stack.started(extra_env=env) as running:
        running.manage("shell", "-c", script)
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready(list(paths))
        yield running


@pytest.fixture(scope="module")
def token(media_stack: Stack) -> str:
    """A token valid for every model."""
    return media_stack.tokens["all"]


def post(stack: Stack, token: str, path: str, body: bytes | dict, content_type: str | None = None
         ) -> tuple[int, dict[str, str], object]:
    """POST a raw body (with content_type, or none) or a JSON one; the answer's headers in lower case."""
    if isinstance(body, dict):
        status, headers, answer = http_json("POST", f"{stack.url}{path}", body, token=token)
    else:
        sent = {"Content-Type": content_type} if content_type is not None else {"Content-Type": ""}
        status, headers, answer = http_json("POST", f"{stack.url}{path}", body, token=token, headers=sent)
    return status, {name.lower(): value for name, value in headers.items()}, answer


def b64(data: bytes) -> str:
    """The base64 text of data."""
    return base64.b64encode(data).decode()


def labels_of(answer: object) -> list[str]:
    """The labels of one classification answer, in order."""
    assert isinstance(answer, list)
    return [entry["label"] for entry in answer]


# --- the routes ---------------------------------------------------------------------------------


def test_raw_image_bytes_are_classified(media_stack: Stack, token: str) -> None:
    status, headers, body = post(media_stack, token, f"/models/{VIT}", media_factory.png(), "image/png")
    assert status == 200, body
    assert sorted(labels_of(body)) == ["bird", "cat", "dog"]  # top_k 5 capped at the model's 3 labels
    assert abs(sum(entry["score"] for entry in body) - 1.0) < 1e-4
    assert headers["x-batch-size"] == "1"


def test_base64_data_uri_and_octet_stream_give_the_same_answer(media_stack: Stack, token: str) -> None:
    image = media_factory.png(64, 48)
    _, _, raw = post(media_stack, token, f"/models/{VIT}", image, "application/octet-stream")
    status, _, listed = post(media_stack, token, f"/models/{VIT}", {
        "inputs": [b64(image), f"data:image/png;base64,{b64(image)}"], "parameters": {"top_k": 2}})
    assert status == 200, listed
    assert len(listed) == 2 and all(len(answer) == 2 for answer in listed)
    assert listed[0] == listed[1] == raw[:2]
    status, _, untyped = post(media_stack, token, f"/models/{VIT}", image, None)  # no Content-Type at all
    assert status == 200 and untyped == raw


def test_an_image_costs_its_patch_tokens(media_stack: Stack, token: str) -> None:
    two = {"inputs": [b64(media_factory.png(20 + i, 20)) for i in range(2)]}
    three = {"inputs": [b64(media_factory.png(20 + i, 20)) for i in range(3)]}
    assert post(media_stack, token, f"/models/{VIT}", two)[0] == 200
    status, _, body = post(media_stack, token, f"/models/{VIT}", three)
    assert status == 413 and "51 input tokens" in body["error"]


def test_clip_text_and_image_vectors_share_one_space(media_stack: Stack, token: str) -> None:
    status, _, text = post(media_stack, token, f"/models/{CLIP}/text", {"inputs": ["a red square", "a dog"]})
    assert status == 200, text
    status, _, image = post(media_stack, token, f"/models/{CLIP}/image", media_factory.png(), "image/png")
    assert status == 200, image
    text, image = np.array(text), np.array(image)
    assert text.shape == (2, 16) and image.shape == (16,)  # CLIP's projection size for both towers
    np.testing.assert_allclose(np.linalg.norm(text, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(image), 1.0, atol=1e-5)


def test_zero_shot_image_classification_ranks_the_candidates(media_stack: Stack, token: str) -> None:
    body = {"inputs": b64(media_factory.png()),
            "parameters": {"candidate_labels": ["cat", "dog", "car"], "hypothesis_template": "a photo of a {}"}}
    status, _, answer = post(media_stack, token, f"/models/{CLIP}/zero-shot", body)
    assert status == 200, answer
    assert sorted(labels_of(answer)) == ["car", "cat", "dog"]
    scores = [entry["score"] for entry in answer]
    assert scores == sorted(scores, reverse=True) and abs(sum(scores) - 1) < 1e-4
    status, _, error = post(media_stack, token, f"/models/{CLIP}/zero-shot", {"inputs": b64(media_factory.png())})
    assert status == 400 and "candidate_labels" in error["error"]


def test_object_detection_and_captions(media_stack: Stack, token: str) -> None:
    status, _, boxes = post(media_stack, token, f"/models/{DETECTOR}",
                            {"inputs": b64(media_factory.png()), "parameters": {"threshold": 0.0}})
    assert status == 200, boxes
    assert boxes and set(boxes[0]) == {"score", "label", "box"} and set(boxes[0]["box"]) == {"xmin", "ymin", "xmax", "ymax"}
    status, _, error = post(media_stack, token, f"/models/{DETECTOR}",
                            {"inputs": b64(media_factory.png()), "parameters": {"threshold": 2}})
    assert status == 400 and "threshold" in error["error"]
    status, _, caption = post(media_stack, token, f"/models/{CAPTIONER}", media_factory.png(), "image/png")
    assert status == 200, caption
    assert isinstance(caption, list) and isinstance(caption[0]["generated_text"], str)


def test_audio_classification_and_speech_recognition(media_stack: Stack, token: str) -> None:
    # A stereo FLAC at 44.1 kHz: mono and 16 kHz in the worker.
    clip = media_factory.tone(0.4, rate=44_100, channels=2, fmt="FLAC")
    status, _, classes = post(media_stack, token, f"/models/{AUDIO_CLS}", clip, "audio/flac")
    assert status == 200, classes
    assert sorted(labels_of(classes)) == ["music", "noise", "speech"]
    status, _, text = post(media_stack, token, f"/models/{ASR}", media_factory.tone(0.5), "audio/wav")
    assert status == 200, text
    assert set(text) == {"text"} and isinstance(text["text"], str)
    status, _, both = post(media_stack, token, f"/models/{ASR}", {"inputs": [b64(media_factory.tone(0.2)), b64(clip)]})
    assert status == 200 and len(both) == 2


def test_the_response_cache_keys_on_the_bytes(media_stack: Stack, token: str) -> None:
    image = media_factory.png(30, 30)
    first = post(media_stack, token, f"/models/{VIT}", image, "image/png")
    second = post(media_stack, token, f"/models/{VIT}", image, "image/png")
    other = post(media_stack, token, f"/models/{VIT}", media_factory.png(31, 30), "image/png")
    assert (first[1]["x-cache"], second[1]["x-cache"], other[1]["x-cache"]) == ("miss", "hit", "miss")
    assert first[2] == second[2]


# --- hostile media: each a clear answer, and the worker serves on ---------------------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims width x height pixels in a few dozen bytes (a decompression bomb's header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _wav_claiming(seconds: float) -> bytes:
    """A short WAV whose header declares seconds of 16 kHz 16-bit mono."""
    wav = bytearray(media_factory.tone(0.1))
    at = wav.find(b"data")
    wav[at + 4:at + 8] = struct.pack("<I", int(seconds * 16_000 * 2))
    return bytes(wav)


HOSTILE = [
    ("bomb", VIT, _png_header(50_000, 50_000), "image/png", 413, "pixels"),
    ("truncated", VIT, media_factory.png(64, 64)[:120], "image/png", 400, "image"),
    ("zero-pixels", VIT, _png_header(0, 0), "image/png", 400, "image"),
    ("audio-to-image-task", VIT, media_factory.tone(0.1), "audio/wav", 400, "audio"),
    ("html", VIT, b"<html></html>", "text/html", 400, "content type"),
    ("empty", VIT, b"", "image/png", 400, "empty"),
    ("not-an-image", VIT, b"GIF89a nonsense", "image/gif", 400, "image"),
    ("two-hours", ASR, _wav_claiming(7200), "audio/wav", 413, "HOSTING_MAX_AUDIO_SECONDS"),
    ("image-to-audio-task", ASR, media_factory.png(), "image/png", 400, "image"),
    ("truncated-audio", ASR, media_factory.tone(0.2)[:30], "audio/wav", 400, "audio"),
]


@pytest.mark.parametrize(("name", "model", "data", "content_type", "status", "says"), HOSTILE,
                         ids=[case[0] for case in HOSTILE])
def test_hostile_files_get_a_clear_error(media_stack: Stack, token: str, name: str, model: str, data: bytes,
                                         content_type: str, status: int, says: str) -> None:
    got, _, body = post(media_stack, token, f"/models/{model}", data, content_type)
    assert got == status, body
    assert says.lower() in body["error"].lower()


@pytest.mark.parametrize(("text", "says"), [
    ("/etc/passwd", "not an image"),  # valid base64 letters: decoded, and not an image
    ("file:///etc/passwd", "neither base64 nor a data URI"),
    ("http://169.254.169.254/latest/meta-data", "not a host this server fetches from"),
    ("https://example.com/cat.png", "not a host this server fetches from"),
    ("http://localhost:{port}/health", "private or reserved address"),  # listed, but loopback
])
def test_strings_are_never_opened_as_paths_or_urls(media_stack: Stack, token: str, text: str, says: str) -> None:
    port = media_stack.web[0][1]
    status, _, body = post(media_stack, token, f"/models/{VIT}", {"inputs": text.format(port=port)})
    assert status == 400, body
    assert says in body["error"]


def _exif_rotated(image_bytes: bytes) -> bytes:
    """The same picture stored turned a quarter, with the EXIF orientation (6) that turns it back."""
    from PIL import Image

    image = Image.open(io.BytesIO(image_bytes))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    image.transpose(Image.Transpose.ROTATE_90).save(out, format="PNG", exif=exif)
    return out.getvalue()


def _animated_gif() -> bytes:
    from PIL import Image

    frames = [Image.new("RGB", (20, 20), color) for color in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    return out.getvalue()


ODD_BUT_FINE = [
    ("one-pixel", media_factory.png(1, 1)),
    ("animated-gif", _animated_gif()),
    ("cmyk-jpeg", media_factory.png(mode="CMYK", fmt="JPEG")),
    ("16-bit-png", media_factory.png(mode="I;16")),
    ("palette-with-transparency", media_factory.png(mode="P", transparency=0)),
    ("rgba-webp", media_factory.png(mode="RGBA", fmt="WEBP")),
]


@pytest.mark.parametrize(("name", "data"), ODD_BUT_FINE, ids=[case[0] for case in ODD_BUT_FINE])
def test_odd_images_are_served(media_stack: Stack, token: str, name: str, data: bytes) -> None:
    status, _, body = post(media_stack, token, f"/models/{CLIP}/image", data, "application/octet-stream")
    assert status == 200, body
    assert len(body) == 16 and np.isfinite(body).all()


def test_exif_orientation_is_applied(media_stack: Stack, token: str) -> None:
    upright = media_factory.png(48, 32)
    status, _, want = post(media_stack, token, f"/models/{CLIP}/image", upright, "image/png")
    status2, _, got = post(media_stack, token, f"/models/{CLIP}/image", _exif_rotated(upright), "image/png")
    assert status == status2 == 200
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_the_worker_serves_on_after_the_hostile_files(media_stack: Stack, token: str) -> None:
    status, _, ready = http_json("GET", f"{media_stack.url}/ready")
    assert status == 200, ready
    status, _, body = post(media_stack, token, f"/models/{VIT}", media_factory.png(17, 23), "image/png")
    assert status == 200, body
    assert all(worker.poll() is None for worker in media_stack.workers)


def test_metrics_count_media_items_and_bytes(media_stack: Stack, token: str) -> None:
    image = media_factory.png(20, 20)
    post(media_stack, token, f"/models/{CLIP}/image", image, "image/png")
    status, _, text = http_json("GET", f"{media_stack.url}/metrics")
    assert status == 200
    assert f'hosting_media_items_total{{kind="image",model="{CLIP}",task="image"}}' in text
    assert f'hosting_media_bytes_total{{kind="audio",model="{AUDIO_CLS}",task="audio-classification"}}' in text


# --- the real clients ---------------------------------------------------------------------------


def test_inference_client_image_and_speech_tasks(media_stack: Stack, token: str, hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    image = media_factory.png()
    classes = InferenceClient(model=f"{media_stack.url}/models/{VIT}", token=token).image_classification(image)
    assert sorted(c.label for c in classes) == ["bird", "cat", "dog"]
    top = InferenceClient(model=f"{media_stack.url}/models/{VIT}", token=token).image_classification(image, top_k=1)
    assert len(top) == 1 and top[0].label == max(classes, key=lambda c: c.score).label
    zero_shot = InferenceClient(model=f"{media_stack.url}/models/{CLIP}/zero-shot", token=token)
    ranked = zero_shot.zero_shot_image_classification(image, candidate_labels=["cat", "dog"])
    assert sorted(c.label for c in ranked) == ["cat", "dog"]
    speech = InferenceClient(model=f"{media_stack.url}/models/{ASR}", token=token)
    assert isinstance(speech.automatic_speech_recognition(media_factory.tone(0.3)).text, str)


def test_inference_client_detection_captions_and_audio_classes(media_stack: Stack, token: str,
                                                               hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    image = media_factory.png()
    boxes = InferenceClient(model=f"{media_stack.url}/models/{DETECTOR}", token=token).object_detection(
        image, threshold=0.0)
    assert boxes and boxes[0].box.xmax >= boxes[0].box.xmin
    caption = InferenceClient(model=f"{media_stack.url}/models/{CAPTIONER}", token=token).image_to_text(image)
    assert isinstance(caption.generated_text, str)
    classes = InferenceClient(model=f"{media_stack.url}/models/{AUDIO_CLS}", token=token).audio_classification(
        media_factory.tone(0.3, fmt="FLAC"))
    assert sorted(c.label for c in classes) == ["music", "noise", "speech"]


def test_openai_sdk_embeds_images_with_modality(media_stack: Stack, token: str) -> None:
    import openai

    image = media_factory.png(40, 40)
    client = openai.OpenAI(base_url=f"{media_stack.url}/v1", api_key=token, max_retries=0)
    answer = client.embeddings.create(model=CLIP, input=[f"data:image/png;base64,{b64(image)}"],
                                      extra_body={"modality": "image"})
    _, _, route = post(media_stack, token, f"/models/{CLIP}/image", image, "image/png")
    np.testing.assert_allclose(answer.data[0].embedding, route, atol=1e-6)
    text = client.embeddings.create(model=CLIP, input="a red square")
    assert len(text.data[0].embedding) == len(answer.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError, match="modality"):
        client.embeddings.create(model=CLIP, input=[b64(media_factory.tone(0.1))], extra_body={"modality": "audio"})


# --- batch jobs ---------------------------------------------------------------------------------


def _run_batch(client: object, endpoint: str, rows: list[dict]) -> tuple[dict, dict]:
    """Upload rows, run them as one batch; (output responses, error responses) by custom_id."""
    import time

    lines = b"".join(json.dumps(row).encode() + b"\n" for row in rows)
    uploaded = client.files.create(file=("media.jsonl", io.BytesIO(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch

    def records(file_id: str | None) -> dict:
        if file_id is None:
            return {}
        return {r["custom_id"]: r["response"] for r in map(json.loads, client.files.content(file_id).content.splitlines())}
    return records(batch.output_file_id), records(batch.error_file_id)


def test_batch_jobs_take_base64_media_lines(media_stack: Stack, token: str) -> None:
    import openai

    image = media_factory.png(36, 36)
    client = openai.OpenAI(base_url=f"{media_stack.url}/v1", api_key=token, max_retries=0, timeout=30)
    output, errors = _run_batch(client, f"/models/{VIT}", [
        {"custom_id": "img", "method": "POST", "url": f"/models/{VIT}", "body": {"inputs": b64(image)}},
        {"custom_id": "bomb", "method": "POST", "url": f"/models/{VIT}",
         "body": {"inputs": b64(_png_header(50_000, 50_000))}},
    ])
    _, _, alone = post(media_stack, token, f"/models/{VIT}", image, "image/png")
    assert output["img"]["body"] == alone
    assert errors["bomb"]["status_code"] == 413
    output, _ = _run_batch(client, "/v1/embeddings", [
        {"custom_id": "vec", "method": "POST", "url": "/v1/embeddings",
         "body": {"model": CLIP, "input": f"data:image/png;base64,{b64(image)}", "modality": "image",
                  "encoding_format": "float"}},
    ])
    _, _, vector = post(media_stack, token, f"/models/{CLIP}/image", image, "image/png")
    np.testing.assert_allclose(output["vec"]["body"]["data"][0]["embedding"], vector, atol=1e-6)


# --- OpenAI's transcriptions ---------------------------------------------------------------------


def test_openai_transcriptions_answer_what_the_hf_route_answers(media_stack: Stack, token: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{media_stack.url}/v1", api_key=token, max_retries=0)
    clip = media_factory.tone(0.5)
    _, _, hf = post(media_stack, token, f"/models/{ASR}", clip, "audio/wav")
    whole = client.audio.transcriptions.create(model=ASR, file=("clip.wav", clip, "audio/wav"))
    assert whole.text == hf["text"]
    text = client.audio.transcriptions.create(model=ASR, file=("clip.wav", clip), response_format="text")
    assert text == hf["text"]
    verbose = client.audio.transcriptions.create(model=ASR, file=("clip.wav", clip), response_format="verbose_json",
                                                 language="en")
    assert verbose.text == hf["text"] and verbose.language == "en" and abs(verbose.duration - 0.5) < 0.01
    steered = client.audio.transcriptions.create(model=ASR, file=("clip.wav", clip), language="fr", temperature=0.8)
    assert steered.text == hf["text"]  # a CTC model has no decoder to steer: both are left unused


def test_openai_transcriptions_refuse_what_they_cannot_serve(media_stack: Stack, token: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{media_stack.url}/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="not supported here") as refused:
        client.audio.transcriptions.create(model=ASR, file=("clip.wav", media_factory.tone(0.2)), response_format="srt")
    assert refused.value.body["param"] == "response_format"  # type: ignore[index]
    for field, value in (("language", "english"), ("temperature", 2.0)):
        with pytest.raises(openai.BadRequestError) as refused:
            client.audio.transcriptions.create(model=ASR, file=("clip.wav", media_factory.tone(0.2)), **{field: value})
        assert refused.value.body["param"] == field  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="audio"):  # a picture is not a clip
        client.audio.transcriptions.create(model=ASR, file=("x.png", media_factory.png()))
    with pytest.raises(openai.NotFoundError, match="no automatic-speech-recognition task"):
        client.audio.transcriptions.create(model=VIT, file=("clip.wav", media_factory.tone(0.2)))
    with pytest.raises(openai.NotFoundError, match="no model named"):
        client.audio.transcriptions.create(model="nope", file=("clip.wav", media_factory.tone(0.2)))
