"""Task runs on audio clips: classification and speech recognition (clips decoded, mono, at the model's rate)."""

from __future__ import annotations

from typing import Any

from models_registry.core.errors import InvalidInput
from models_registry.inference.task_common import per_input, to_plain
from models_registry.media.pending import opened

DEFAULT_TOP_K = 5


def _clips(pipe: Any, inputs: list[Any]) -> list[dict[str, Any]]:
    # A dict of samples and their rate: the pipeline neither resamples nor reads files.
    rate = pipe.feature_extractor.sampling_rate
    return [{"raw": samples, "sampling_rate": rate} for samples in opened(inputs)]


def audio_classification(pipe: Any, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """[{label, score}, ...] per clip, best first (top_k, default 5)."""
    clips = _clips(pipe, inputs)
    kwargs: dict[str, Any] = {"top_k": min(params.get("top_k") or DEFAULT_TOP_K, pipe.model.config.num_labels)}
    if params.get("function_to_apply"):
        kwargs["function_to_apply"] = params["function_to_apply"]
    raw = pipe(clips, batch_size=len(clips), **kwargs)
    return [to_plain(r) for r in per_input(raw, len(clips))]


def automatic_speech_recognition(pipe: Any, inputs: list[Any], params: dict[str, Any]) -> list[Any]:
    """{text} per clip."""
    clips = _clips(pipe, inputs)
    kwargs: dict[str, Any] = {}
    generate = whisper_generation(pipe, params) if pipe.type == "seq2seq_whisper" else {}
    if generate:
        kwargs["generate_kwargs"] = generate
    raw = pipe(clips, batch_size=len(clips), **kwargs)
    results = raw if isinstance(raw, list) else [raw]
    return [{"text": to_plain(r)["text"]} for r in results]


def whisper_generation(pipe: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's generate_kwargs for a Whisper model: max_new_tokens, the language to transcribe, temperature.

    Only Whisper's decoder is steered by them: a CTC model reads no language and samples nothing, so the
    route's language and temperature are left unused there (docs/using.md). A language the model does not
    know is a 400 before compute, rather than Whisper's ValueError (a 500).
    """
    generate: dict[str, Any] = {}
    if params.get("max_new_tokens") is not None:
        generate["max_new_tokens"] = params["max_new_tokens"]
    language = params.get("language")
    if language:
        config = pipe.model.generation_config
        if getattr(config, "is_multilingual", True) is False:
            if language != "en":
                raise InvalidInput(f"'language' {language!r}: this Whisper model transcribes English only (en)")
        elif f"<|{language}|>" not in (getattr(config, "lang_to_id", None) or {}):
            raise InvalidInput(f"'language' {language!r} is not one of this Whisper model's languages")
        else:  # transcribe, never translate: the route is /transcriptions
            generate.update(language=language, task="transcribe")
    if params.get("temperature") is not None:
        generate["temperature"] = float(params["temperature"])  # 0: greedy; above: sampled (Whisper's generate)
    return generate
