"""A Whisper model takes a transcription's language and temperature; a CTC model leaves them unused (tiny models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models_registry.core.batch_types import ItemFailure
from models_registry.core.errors import InvalidInput
from models_registry.inference.model_runner import PipelineRunner
from models_registry.worker.media_intake import MediaDecoder
from tests import media_factory
from tests.model.test_media_runs import prepare, spec, wire

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture(scope="module")
def runner() -> PipelineRunner:
    return PipelineRunner(torch_threads=1)


@pytest.fixture(scope="module")
def decoder() -> MediaDecoder:
    pool = MediaDecoder(threads=1)
    yield pool
    pool.shutdown()


def transcribed(runner: PipelineRunner, decoder: MediaDecoder, source: Path, params: list[dict[str, Any]],
                generated: list[dict[str, Any]] | None = None) -> list:
    """What the runner answers for one clip per params; generated, when given, gets each generate() call's options."""
    model = spec(source, ("asr", "automatic-speech-recognition"))
    loaded = runner.load(model)
    if generated is not None:
        pipe = loaded.pipelines["automatic-speech-recognition"]
        generate = type(pipe.model).generate.__get__(pipe.model)

        def spied(**kwargs: Any) -> Any:
            generated.append({k: v for k, v in kwargs.items() if k in ("language", "task", "temperature")})
            return generate(**kwargs)

        pipe.model.generate = spied
    clips = [wire(media_factory.tone(0.5), "audio") for _ in params]
    return runner.run(loaded, model.tasks["asr"], prepare(decoder, loaded, "automatic-speech-recognition", clips),
                      params)


def test_a_whisper_model_transcribes_in_the_language_asked_and_samples_at_a_temperature(
        tmp_path: Path, runner: PipelineRunner, decoder: MediaDecoder) -> None:
    source = media_factory.build_tiny_whisper(tmp_path / "whisper")
    generated: list[dict[str, Any]] = []
    free, english, french, unknown = transcribed(runner, decoder, source, [
        {}, {"language": "en"}, {"language": "fr"}, {"language": "de"}], generated)
    assert {"language": "fr", "task": "transcribe"} in generated
    assert {"language": "en", "task": "transcribe"} in generated
    assert {} in generated and len(generated) == 3  # the unknown language never reached generate
    assert all(isinstance(t["text"], str) for t in (free, english, french))
    assert isinstance(unknown, ItemFailure) and isinstance(unknown.error, InvalidInput)
    assert "'language' 'de' is not one of this Whisper model's languages" in str(unknown.error)
    greedy = transcribed(runner, decoder, source, [{"temperature": 0.0}, {}])
    assert greedy[0] == greedy[1] == free  # 0 is greedy, as without one
    sampled = transcribed(runner, decoder, source, [{"temperature": 1.0}] * 4)
    assert any(s != free for s in sampled)  # random weights: sampling leaves the greedy path


def test_a_ctc_model_ignores_language_and_temperature(tmp_path: Path, runner: PipelineRunner,
                                                      decoder: MediaDecoder) -> None:
    source = media_factory.build_ctc_recognizer(tmp_path / "ctc")
    plain, asked = transcribed(runner, decoder, source, [{}, {"language": "fr", "temperature": 1.0}])
    assert plain == asked and isinstance(plain["text"], str)
