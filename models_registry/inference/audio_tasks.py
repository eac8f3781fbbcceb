"""Task runs on audio clips: classification and speech recognition (clips decoded, mono, at the model's rate)."""

from __future__ import annotations

from typing import Any

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
    if params.get("max_new_tokens") is not None and pipe.type == "seq2seq_whisper":
        kwargs["generate_kwargs"] = {"max_new_tokens": params["max_new_tokens"]}
    raw = pipe(clips, batch_size=len(clips), **kwargs)
    results = raw if isinstance(raw, list) else [raw]
    return [{"text": to_plain(r)["text"]} for r in results]
