"""TEI's POST /embed_sparse over a sparse (SPLADE) model's feature-extraction task, and what sparse tasks take.

A model whose files say SparseEncoder (an MLM transformer, then SpladePooling), registered with
`--task feature-extraction`, computes sparse vectors: here one list of `{"index", "value"}` entries per
input (TEI's shape, a list per input even for one string), on the HF route the same list per input.
OpenAI's embeddings are dense: /v1/embeddings refuses such a model, as /embed_sparse refuses a dense one.
"""

from __future__ import annotations

from typing import Any


from models_registry.api.hf import payloads
from models_registry.api.shapes import request_schemas, response_schemas
from models_registry.api.tei import tei_routes
from models_registry.api.pipeline.answer import Answer
from models_registry.api.pipeline.call import ApiCall
from models_registry.api.pipeline.error_answers import error_answer
from models_registry.api.pipeline.inference_route import Work
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core import paths
from models_registry.core.conf import conf
from models_registry.core.errors import HostingError, InvalidInput
from models_registry.core.task_key import TaskKey

HOW_TO_REGISTER = ("register a sparse model (its modules.json: MLMTransformer, then SpladePooling) with "
                   "--task feature-extraction")


def sparse_task(spec: ModelSpec, named: TaskSpec | None) -> TaskSpec:
    """The sparse task /embed_sparse runs: the one named, else the default, else the model's first; 400 for none."""
    if named is not None:
        if not sparse_answer.is_sparse_task(named):
            raise InvalidInput(f"{spec.name}/{named.name} is a {_kind(named)} task, not a sparse (SPLADE) model, so it "
                               f"cannot serve {paths.shown_path('tei-embed-sparse')}; {HOW_TO_REGISTER}")
        return named
    candidates = [spec.tasks[spec.default_task]] if spec.default_task in spec.tasks else []
    for task in candidates + list(spec.tasks.values()):
        if sparse_answer.is_sparse_task(task):
            return task
    raise InvalidInput(f"model {spec.name!r} computes no sparse vectors (its files name no SpladePooling), so it "
                       f"cannot serve {paths.shown_path('tei-embed-sparse')}; dense vectors come from "
                       f"{paths.shown_path('openai-embeddings')} and {paths.shown_path('model')}")


def _kind(task: TaskSpec) -> str:
    return "dense feature-extraction" if task.task == "feature-extraction" else task.task


class EmbedSparseRoute:
    """TEI's POST /embed_sparse: each input is one batch item of the model's sparse feature-extraction task."""

    label = "embed_sparse"

    def read(self, call: ApiCall, path: dict[str, str]) -> tuple[str, tei_routes.EmbedSparseRequest]:
        """The validated body and the model it names."""
        wanted = tei_routes.read_embed_sparse_request(tei_routes.body_of(call), conf.MAX_INPUTS)
        return TaskKey.parse(wanted.model).model, wanted

    def resolve(self, wanted: tei_routes.EmbedSparseRequest, specs: dict[str, ModelSpec]) -> tuple[ModelSpec, TaskSpec]:
        """The sparse task of the model named."""
        spec, named = tei_routes.resolve(wanted.model, specs)
        return spec, sparse_task(spec, named)

    async def prepare(self, call: ApiCall, wanted: tei_routes.EmbedSparseRequest, spec: ModelSpec,
                      task: TaskSpec) -> Work:
        """The inputs, the task's parameters under the request's, and TEI's lists as the answer."""
        parameters = {**{k: v for k, v in task.parameters.items() if v is not None}, **wanted.parameters}

        def shape(result: InferenceResult) -> Any:
            if not all(sparse_answer.is_sparse_output(output) for output in result.outputs):
                # its registration read sparse files the worker's load no longer finds
                raise InvalidInput(f"model {spec.name!r} answered dense vectors: its files no longer say SparseEncoder;"
                                   " register it again")
            return [payloads.decode_sparse(output) for output in result.outputs]

        return Work(wanted.inputs, parameters, len(wanted.inputs), call.priority, shape)

    def error(self, error: HostingError, request_id: str) -> Answer:
        """The API's one error shape."""
        return error_answer(error, request_id)


EMBED_SPARSE = EmbedSparseRoute()



def operation(operation_class: Any, errors: tuple[int, ...], max_inputs: int) -> Any:
    """The route as api.openapi.openapi documents it."""
    return operation_class(
        "tei-embed-sparse", "post", "Text Embeddings Inference's embed_sparse over a sparse (SPLADE) model: each "
        "input's non-zero vocabulary weights, at most max_active_dims of them (its largest).",
        response_schemas.EmbedSparseResponse, errors, request_schemas.embed_sparse_request(max_inputs), ("tei",),
        timings=True, example={"model": "my-splade", "inputs": ["What is Django?", "A web framework."]},
        description="A model whose files say SparseEncoder (modules.json: MLMTransformer, or a Transformer with "
                    "transformer_task fill-mask, then SpladePooling), registered with --task feature-extraction. "
                    "Each vector keeps at most max_active_dims entries: the task's default parameter, else the "
                    f"model's config_sentence_transformers.json, else {sparse_answer.DEFAULT_MAX_ACTIVE_DIMS}. A "
                    "dense model is a 400.")
