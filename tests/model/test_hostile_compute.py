"""Inputs that make the tokenizers library panic (a BaseException) fail their own request, never the caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import HostingError
from models_registry.registry.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402 (after the torch skip)

LONG_QUESTION = {"question": "why " * 300, "context": "word " * 400}


def _loaded(path: Path, task_kind: str) -> tuple[PipelineRunner, object, TaskSpec]:
    task = TaskSpec(name="t", task=task_kind, parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=8), timeout_s=30.0)
    spec = ModelSpec(name="m", source=str(path), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"t": task}, default_task="t")
    runner = PipelineRunner(packing=False)
    return runner, runner.load(spec), task


@pytest.fixture(scope="module")
def qa(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineRunner, object, TaskSpec]:
    return _loaded(model_factory.build_question_answering(tmp_path_factory.mktemp("qa") / "m", positions=512),
                   "question-answering")


@pytest.fixture(scope="module")
def ner(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineRunner, object, TaskSpec]:
    return _loaded(model_factory.build_token_classifier(tmp_path_factory.mktemp("ner") / "m", positions=512),
                   "token-classification")


def test_a_question_longer_than_its_window_fails_alone(qa: tuple) -> None:
    runner, model, task = qa
    ok = {"question": "who?", "context": "Ada wrote the first program."}
    outputs = runner.run(model, task, [LONG_QUESTION, ok], [{}, {}])
    assert isinstance(outputs[0], ItemFailure)
    assert isinstance(outputs[0].error, HostingError) and outputs[0].error.status == 400
    assert isinstance(outputs[1], dict) and "answer" in outputs[1]


def test_a_stride_the_window_cannot_hold_fails_alone(ner: tuple) -> None:
    runner, model, task = ner
    outputs = runner.run(model, task, ["word " * 600, "Ada lives in Paris"], [{"stride": 510}, {}])
    assert isinstance(outputs[0], ItemFailure) and isinstance(outputs[0].error, HostingError)
    assert isinstance(outputs[1], list)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineRunner, object, TaskSpec]:
    return _loaded(model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("gpt2") / "m", positions=1024),
                   "text-generation")


def test_a_requests_seed_leaves_the_process_generator_alone(gpt2: tuple) -> None:
    runner, model, task = gpt2
    params = {"seed": 7, "do_sample": True, "max_new_tokens": 8}
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = runner.run(model, task, ["The cat"], [params])
    assert torch.equal(torch.get_rng_state(), state)  # other requests' sampling stays unpredictable
    assert runner.run(model, task, ["The cat"], [params]) == first  # the seed still makes it repeatable


def test_generation_stops_once_the_batch_is_past_its_deadline(gpt2: tuple) -> None:
    import time

    from models_registry.inference.compute_deadline import computing_until

    runner, model, task = gpt2
    params = {"max_new_tokens": 500, "do_sample": True, "return_full_text": False}
    started = time.perf_counter()
    [full] = runner.run(model, task, ["The cat"], [params])
    full_s = time.perf_counter() - started
    started = time.perf_counter()
    with computing_until(time.time() + full_s / 10):
        [cut] = runner.run(model, task, ["The cat"], [params])
    assert time.perf_counter() - started < full_s / 2
    assert len(cut[0]["generated_text"]) < len(full[0]["generated_text"])
    with computing_until(time.time() - 1):  # already past: not even started
        [skipped] = runner.run(model, task, ["The cat"], [params])
    assert isinstance(skipped, ItemFailure) and skipped.error.status == 504


def test_an_embedding_batch_past_its_deadline_skips_its_remaining_forwards(tmp_path_factory: pytest.TempPathFactory
                                                                           ) -> None:
    import time

    from models_registry.core.errors import Timeout
    from models_registry.inference.compute_deadline import computing_until
    from models_registry.inference.embeddings import embed

    runner, model, task = _loaded(model_factory.minilm_path(), "feature-extraction")
    texts = [f"sentence number {i} " * 20 for i in range(64)]
    with computing_until(time.time() - 1):
        outputs = runner.run(model, task, texts, [{}] * len(texts))
        assert all(isinstance(o, ItemFailure) and o.error.status == 504 for o in outputs)
        with pytest.raises(Timeout):  # inside a run too: the forwards left are skipped
            embed(model, model.pipelines["feature-extraction"], task, texts, {})
    with computing_until(time.time() + 60):
        assert not any(isinstance(o, ItemFailure) for o in runner.run(model, task, texts[:4], [{}] * 4))
