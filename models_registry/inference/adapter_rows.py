"""The encoder task runs of a batch whose rows name LoRA adapters: embeddings, classification and ranking.

Each run tells the batch's rows (inference.batched_lora.BatchRows) which inputs every forward
computes, in the order it computes them: the embedding run's sorted micro-batches and packed rows
(per token), the ranking run's sorted chunks, the classification pipeline's one forward in input order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from models_registry.catalog.specs import ADAPTER_TASKS, AdapterSpec, TaskSpec
from models_registry.core.errors import Conflict
from models_registry.inference import encoder_tasks, onnx_logits, ranking
from models_registry.inference.adapter_cache import AdapterBudget, AdapterCache, cache_for
from models_registry.inference.batched_lora import BatchRows
from models_registry.inference.decoder_ranking import DecoderRanker
from models_registry.inference.embeddings import embed
from models_registry.inference.loading import LoadedModel


def refusal(loaded: LoadedModel, kind: str) -> str | None:
    """Why the loaded model cannot compute adapters for this task kind (None: it can)."""
    spec = loaded.spec
    if kind not in ADAPTER_TASKS:
        return f"adapters serve {', '.join(ADAPTER_TASKS)} tasks, not {kind}"
    if spec.backend == "onnxruntime" or spec.dtype == "int8":
        return f"model {spec.name!r} runs on ONNX Runtime, which serves the base only"
    if kind == "feature-extraction" and (loaded.multi_vector is not None or loaded.sparse):
        return "adapters of multi-vector or sparse embedding models are not served"
    if kind == "text-generation":  # its rows join the decode batch (inference.generation_batch), never this path
        return ("adapters generate text in the continuous batch only; this worker runs this model's generation "
                "in static batches (HOSTING_CONTINUOUS_BATCHING off, or an architecture it does not serve)")
    if kind == "text-ranking" and isinstance(loaded.pipelines.get(kind), DecoderRanker):
        return "adapters of decoder rerankers are not served (decoder LoRA is not built yet)"
    return None


def cache_of(loaded: LoadedModel, kind: str, budget: AdapterBudget) -> AdapterCache:
    """The adapter cache on the model of this task kind's pipeline (made on first use)."""
    cache = loaded.adapter_caches.get(kind)
    if cache is None:
        cache = cache_for(loaded.pipelines[kind].model, budget)
        loaded.adapter_caches[kind] = cache
    return cache  # type: ignore[no-any-return]


@contextmanager
def rows(loaded: LoadedModel, kind: str, adapters: Sequence[AdapterSpec | None],
         budget: AdapterBudget) -> Iterator[BatchRows]:
    """The batch's adapters active on the task kind's model while it computes (409 where it cannot)."""
    why_not = refusal(loaded, kind)
    if why_not is not None:
        raise Conflict(why_not)
    with cache_of(loaded, kind, budget).rows(adapters) as batch_rows:
        yield batch_rows


def run(loaded: LoadedModel, pipe: Any, task: TaskSpec, texts: list[Any], params: dict[str, Any],
        batch_rows: BatchRows) -> list[Any]:
    """The task's outputs for a batch whose rows name adapters (the caller holds rows(...) and inference mode)."""
    if task.task == "feature-extraction":
        return embed(loaded, pipe, task, texts, params, batch_rows)
    with onnx_logits.eager(pipe.model):  # base batches may run its logits on ONNX Runtime; these rows need the hooks
        if task.task == "text-ranking":
            return ranking.text_ranking(pipe, texts, params, batch_rows)
        # The pipeline pads every input into one forward, in input order (batch_size = the inputs).
        batch_rows.for_inputs(range(len(texts)))
        return encoder_tasks.text_classification(pipe, texts, params)
