"""The worker's media path on tiny models: costs from the config, decoding beside compute, one bad file fails alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import InvalidInput
from models_registry.inference.model_runner import PipelineRunner
from models_registry.media import envelope
from models_registry.media.item import media_of
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.worker.media_intake import MediaDecoder
from tests import media_factory

pytestmark = pytest.mark.django_db(transaction=False)


def spec(source: Path, *tasks: tuple[str, str]) -> ModelSpec:
    specs = {name: TaskSpec(name=name, task=task, parameters={}, pooling="mean", normalize=True,
                            policy=BatchPolicy(), timeout_s=30) for name, task in tasks}
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="auto", enabled=True,
                     tasks=specs, default_task=tasks[0][0])


def prepare(decoder: MediaDecoder, loaded: Any, task: str, inputs: list[Any]) -> list[Any]:
    """The payloads of inputs as the worker's intake prepares them (each input looked at once first)."""
    return decoder.prepare(loaded, task, inputs, media_of(inputs))


def wire(data: bytes, kind: str) -> dict:
    return envelope.probe(data, kind, "x", 10**8, 600).wire()


@pytest.fixture(scope="module")
def runner() -> PipelineRunner:
    return PipelineRunner(torch_threads=1)


@pytest.fixture(scope="module")
def decoder() -> MediaDecoder:
    pool = MediaDecoder(threads=2)
    yield pool
    pool.shutdown()


def test_a_truncated_file_fails_alone_in_its_batch(tmp_path: Path, runner: PipelineRunner,
                                                   decoder: MediaDecoder) -> None:
    model = spec(media_factory.build_vit_classifier(tmp_path / "vit"), ("classify", "image-classification"))
    loaded = runner.load(model)
    good = wire(media_factory.png(), "image")
    truncated = {**good, "data": good["data"][:100]}  # its header passed; its pixels are missing
    assert loaded.count_tokens(good) == (media_factory.IMAGE_SIZE // media_factory.PATCH) ** 2 + 1
    payloads = prepare(decoder, loaded, "image-classification", [good, truncated, good])
    outputs = runner.run(loaded, model.tasks["classify"], payloads, [{"top_k": 2}] * 3)
    assert isinstance(outputs[1], ItemFailure) and isinstance(outputs[1].error, InvalidInput)
    assert outputs[0] == outputs[2] and len(outputs[0]) == 2


def test_inputs_of_the_wrong_kind_never_reach_a_pipeline(tmp_path: Path, runner: PipelineRunner,
                                                         decoder: MediaDecoder) -> None:
    model = spec(media_factory.build_vit_classifier(tmp_path / "vit"), ("classify", "image-classification"))
    loaded = runner.load(model)
    with pytest.raises(InvalidInput):
        prepare(decoder, loaded, "image-classification", ["/etc/passwd"])
    with pytest.raises(InvalidInput):
        prepare(decoder, loaded, "image-classification", [wire(media_factory.tone(0.1), "audio")])
    with pytest.raises(InvalidInput):
        prepare(decoder, loaded, "text-classification", [wire(media_factory.png(), "image")])
    [failure] = runner.run(loaded, model.tasks["classify"], ["http://169.254.169.254/"], [{}])
    assert isinstance(failure, ItemFailure) and "not text" in str(failure.error)


def test_clip_shares_one_copy_and_audio_costs_its_frames(tmp_path: Path, runner: PipelineRunner) -> None:
    clip = runner.load(spec(media_factory.build_tiny_clip(tmp_path / "clip"), ("text", "feature-extraction"),
                            ("image", "image-feature-extraction"), ("zs", "zero-shot-image-classification")))
    shared = {id(p) for p in clip.pipelines.values()}
    assert len(shared) == 1 and clip.pack_position_offset is None
    audio = runner.load(spec(media_factory.build_audio_classifier(tmp_path / "audio"), ("a", "audio-classification")))
    assert audio.media_costs.sampling_rate == 16_000 and audio.media_costs.audio_frames_per_s == 50
    assert audio.count_tokens(wire(media_factory.tone(2.0), "audio")) == 100


def test_files_are_decoded_in_the_decode_pool_and_a_slow_one_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from models_registry.media import pending
    from models_registry.media.item import MediaItem

    threads: list[str] = []

    def decode(item: MediaItem, *args: object) -> str:
        threads.append(threading.current_thread().name)
        if item.data == b"slow":
            time.sleep(0.5)
        return "decoded"

    monkeypatch.setattr(pending, "open_item", decode)
    monkeypatch.setattr(pending, "OPEN_TIMEOUT_S", 0.1)
    with ThreadPoolExecutor(2, thread_name_prefix="decode") as pool:
        fast = pending.start(pool, MediaItem("image", b"fast", "PNG", 1, 1), None, 10, 1.0)
        slow = pending.start(pool, MediaItem("image", b"slow", "PNG", 1, 1), None, 10, 1.0)
        assert fast.get() == "decoded"
        with pytest.raises(InvalidInput, match="to open"):
            slow.get()
    assert threads and all(name.startswith("decode") for name in threads)
