"""A generating row's logits processors, from its request's parameters over the model's generation config."""

from __future__ import annotations

from typing import Any

from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)


def logits_processors(config: Any, params: dict[str, Any], sample: bool) -> LogitsProcessorList:
    """The row's logits processors, from its parameters over the model's generation config (as generate())."""
    processors = LogitsProcessorList()
    penalty = params.get("repetition_penalty") or config.repetition_penalty
    if penalty and penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(penalty=float(penalty)))
    if not sample:
        return processors
    temperature = params.get("temperature") or config.temperature
    if temperature and temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(temperature)))
    top_k = params.get("top_k") or config.top_k
    if top_k:
        processors.append(TopKLogitsWarper(top_k=int(top_k)))
    top_p = params.get("top_p") or config.top_p
    if top_p and top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=float(top_p)))
    typical = params.get("typical_p") or config.typical_p
    if typical and typical < 1.0:
        processors.append(TypicalLogitsWarper(mass=float(typical)))
    return processors
