"""The runner the worker's engine calls: loads models and runs batches of one task, grouped by parameters.

The inference package holds the only modules that import torch and transformers. Every
method here blocks; the engine calls them from its own threads so the worker's event
loop keeps receiving, heart-beating and answering while a model computes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from models_registry.core.batch_types import ItemFailure
from models_registry.core.errors import Conflict, HostingError, Internal, Timeout
from models_registry.inference import (
    adapter_rows,
    compute_deadline,
    encoder_tasks,
    generation,
    media_runs,
    multi_vector,
    ranking,
    sparse_embeddings,
    streaming,
)
from models_registry.inference.containment import contained, describe
from models_registry.inference.embeddings import embed
from models_registry.inference.loading import LoadedModel, load_model
from models_registry.inference.memory_errors import is_out_of_memory
from models_registry.inference.onnx_backend import OrtSettings
from models_registry.inference.question_answering import question_answering
from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec
from models_registry.inference.adapter_cache import AdapterBudget
from models_registry.inference.batched_lora import BatchRows

logger = logging.getLogger(__name__)

# The run of every pipeline task kind but feature-extraction (which needs the LoadedModel: embed).
RUNNERS: dict[str, Callable[[Any, list[Any], dict[str, Any]], list[Any]]] = {
    "fill-mask": encoder_tasks.fill_mask,
    "text-classification": encoder_tasks.text_classification,
    "token-classification": encoder_tasks.token_classification,
    "zero-shot-classification": encoder_tasks.zero_shot_classification,
    "question-answering": question_answering,
    "text-ranking": ranking.text_ranking,
    "text-generation": generation.text_generation,
    **{task: generation.seq2seq(task) for task in generation.SEQ2SEQ_OUTPUT_KEYS},
}


class PipelineRunner:
    """Builds transformers pipelines and runs batches of inputs through them."""

    def __init__(self, default_device: str = "cpu", torch_threads: int | None = None, packing: bool = True,
                 torchscript: bool = True, ort: OrtSettings | None = None,
                 half_dtypes: tuple[str, ...] | None = None, adapters: AdapterBudget | None = None) -> None:
        self.default_device = default_device
        self.adapter_budget = adapters or AdapterBudget()  # LoRA adapters each loaded model holds
        self.half_dtypes = half_dtypes  # what dtype auto tries; None: float16 and bfloat16 on CUDA only (tests: cpu)
        self.packing = packing
        self.torchscript = torchscript
        self.ort = ort  # None: packed embeddings stay on torch
        if torch_threads:
            torch.set_num_threads(torch_threads)

    def load(self, spec: ModelSpec) -> LoadedModel:
        """Load every pipeline task kind the model's tasks use, then warm up (blocking, may raise)."""
        loaded = load_model(spec, self.default_device, packing=self.packing, torchscript=self.torchscript, ort=self.ort,
                            half_dtypes=self.half_dtypes)
        self._warm_up(loaded)
        return loaded

    def _warm_up(self, loaded: LoadedModel) -> None:
        """One tiny forward per embedding task: the first real request must not pay for it."""
        for task in loaded.spec.tasks.values():
            if task.task == "feature-extraction":
                try:
                    self.run(loaded, task, ["warm up"], [dict(task.parameters)])
                except Exception:  # a bad default parameter shows on the first request instead
                    logger.warning("warm-up of %s/%s failed", loaded.spec.name, task.name)

    def run(
        self, loaded: LoadedModel, task: TaskSpec, texts: Sequence[Any], parameters: Sequence[dict[str, Any]],
        sinks: Sequence[Any] | None = None, adapters: Sequence[AdapterSpec | None] | None = None,
    ) -> list[Any]:
        """Outputs for each input (a string, or a question/context object) or ItemFailure, in input order.

        Inputs with equal parameters run together; if a group fails, its inputs are
        retried one by one so a bad input fails only its own request. sinks: where each
        streamed generation input sends its tokens as they come (None: not streamed).
        adapters: each input's LoRA adapter (None: the base); a group mixes them in its forwards.
        """
        row_adapters = list(adapters) if adapters is not None else [None] * len(texts)
        outputs: list[Any] = [None] * len(texts)
        groups: dict[str, list[int]] = {}
        for position, params in enumerate(parameters):
            groups.setdefault(json.dumps(params, sort_keys=True), []).append(position)
        if task.task in streaming.TASKS and any(row_adapters):
            # Adapters generate in the decode batch alone (worker.generation_loop); never the base's tokens here.
            why = adapter_rows.refusal(loaded, task.task) or "adapters do not generate text in static batches"
            for position, adapter in enumerate(row_adapters):
                if adapter is not None:
                    outputs[position] = ItemFailure(Conflict(why))
            groups = {key: kept for key, positions in groups.items()
                      if (kept := [p for p in positions if row_adapters[p] is None])}
        for positions in groups.values():
            params = parameters[positions[0]]
            batch = [texts[p] for p in positions]
            if compute_deadline.passed():  # every client of this batch has had its 504: skip what is left
                compute_deadline.log_stop()
                for position in positions:
                    outputs[position] = ItemFailure(Timeout("stopped: past its deadline before compute"))
                continue
            if task.task in streaming.TASKS and (params.get("stream") or params.get("details")):
                group_sinks = [sinks[p] if sinks else None for p in positions]
                results = self._run_streamed(loaded, task, batch, params, group_sinks)
            else:
                results = self._run_group(loaded, task, batch, params, [row_adapters[p] for p in positions])
            for position, output in zip(positions, results):
                outputs[position] = output
        return outputs

    def _run_streamed(self, loaded: LoadedModel, task: TaskSpec, texts: list[Any], params: dict[str, Any],
                      sinks: list[Any]) -> list[Any]:
        """Token-by-token generation (TGI's stream and details); no retry: tokens may be out already."""
        try:
            with torch.inference_mode():
                answers = streaming.generate(task.task, loaded.pipelines[task.task], texts, params, sinks)
        except HostingError as error:
            return [ItemFailure(error)] * len(texts)
        except BaseException as error:  # a tokenizer panic too (a BaseException): never the worker's end
            if not contained(error):
                raise
            logger.exception("streamed generation on %s/%s failed", loaded.spec.name, task.name)
            return [ItemFailure(Internal(f"generation failed: {describe(error)}"))] * len(texts)
        # The HF shape of each task's answer: a list for text-generation, an object for text2text.
        return [[answer] if task.task == "text-generation" else answer for answer in answers]

    def _run_group(self, loaded: LoadedModel, task: TaskSpec, texts: list[Any], params: dict[str, Any],
                   adapters: list[AdapterSpec | None]) -> list[Any]:
        try:
            if any(adapters):
                with adapter_rows.rows(loaded, task.task, adapters, self.adapter_budget) as rows:
                    return self._compute(loaded, task, texts, params, rows)
            return self._compute(loaded, task, texts, params)
        except Timeout as error:  # past the batch's deadline: the rest is skipped, not retried one by one
            return [ItemFailure(error)] * len(texts)
        except HostingError as error:
            if len(texts) == 1:
                return [ItemFailure(error)]
        except BaseException as error:  # a pipeline error or a tokenizer panic: isolate the input that caused it
            if not contained(error):
                raise
            if is_out_of_memory(error):
                raise  # not this input's fault: the worker splits the batch (capacity.batch_memory)
            if len(texts) == 1:
                logger.exception("pipeline %s/%s failed on one input", loaded.spec.name, task.name)
                return [ItemFailure(Internal(f"the model failed on this input: {describe(error)}"))]
        results: list[Any] = []
        for text, adapter in zip(texts, adapters):
            results.extend(self._run_group(loaded, task, [text], params, [adapter]))
        return results

    def _compute(self, loaded: LoadedModel, task: TaskSpec, texts: list[Any], params: dict[str, Any],
                 rows: BatchRows | None = None) -> list[Any]:
        pipe = loaded.pipelines[task.task]
        with torch.inference_mode():
            if rows is not None:  # adapters among the rows: the runs that set each forward's rows
                return adapter_rows.run(loaded, pipe, task, texts, params, rows)
            if media_runs.handles(task, pipe):
                return media_runs.run(task, pipe, texts, params)
            if task.task == "feature-extraction" and loaded.multi_vector is not None:
                return multi_vector.run(loaded.multi_vector, loaded.layout, pipe, task, texts, params)
            if task.task == "feature-extraction" and loaded.sparse:
                return sparse_embeddings.embed_sparse(loaded, pipe, task, texts, params)
            if task.task == "feature-extraction":
                return embed(loaded, pipe, task, texts, params)
            run = RUNNERS.get(task.task)
            if run is not None:
                return run(pipe, texts, params)
        raise Internal(f"task {task.task} is not supported by this worker")
