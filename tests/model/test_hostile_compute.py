"""Inputs that make the tokenizers library panic (a BaseException) fail their own request, never the caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import HostingError
from models_registry.catalog.specs import ModelSpec, TaskSpec
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


# --- issue 27 -----------------------------------------------------------------------------------------------
def test_sampling_at_the_smallest_temperature_and_penalty_taken_is_finite(gpt2: tuple) -> None:
    # Below MIN_LOGIT_DIVISOR (1e-45, 1e-300) sampling failed: "probability tensor contains inf/nan" (a 500).
    from models_registry.tasks.task_parameters import MIN_LOGIT_DIVISOR

    runner, model, task = gpt2
    params = {"do_sample": True, "temperature": MIN_LOGIT_DIVISOR, "repetition_penalty": MIN_LOGIT_DIVISOR,
              "max_new_tokens": 8, "seed": 1}
    [answer] = runner.run(model, task, ["The cat"], [params])
    assert not isinstance(answer, ItemFailure), answer


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineRunner, object, TaskSpec]:
    return _loaded(model_factory.build_masked_lm(tmp_path_factory.mktemp("mlm") / "m"), "fill-mask")


@pytest.mark.parametrize(("text", "params"), [("[MASK] " * 20, {"top_k": 100}), ("a [MASK] b [MASK] c", {}),
                                              ("the [MASK] sat on the mat " * 3, {"top_k": 7})])
def test_the_fill_mask_answer_estimate_is_an_upper_bound(mlm: tuple, text: str, params: dict) -> None:
    import json

    from models_registry.catalog.answer_size import fill_mask_bytes

    runner, model, task = mlm
    [answer] = runner.run(model, task, [text], [params])
    assert not isinstance(answer, ItemFailure), answer
    actual = len(json.dumps(answer).encode())
    estimate = fill_mask_bytes(text, model.pipelines["fill-mask"].tokenizer.mask_token, params)
    assert actual <= estimate <= 4 * actual  # bounds the answer, yet refuses nothing far under the budget


@pytest.fixture(scope="module")
def nli(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineRunner, object, TaskSpec]:
    return _loaded(model_factory.build_zero_shot_classifier(tmp_path_factory.mktemp("nli") / "m"),
                   "zero-shot-classification")


def test_a_label_the_model_cannot_read_beside_the_text_is_refused_before_compute(nli: tuple) -> None:
    # "x " * 3000 reached the pipeline: "The size of tensor a (3010) must match the size of tensor b (128)".
    from models_registry.core.errors import InvalidInput
    from models_registry.catalog.compute_cost import request_cost

    runner, model, task = nli
    counter = model.cost_counter()
    long_label = "x " * (counter.max_tokens - 3)
    with pytest.raises(InvalidInput, match="send a shorter label"):
        request_cost(task.task, ["the cat sat"], {"candidate_labels": [long_label, "b"]}, counter)
    fits = "x " * (counter.max_tokens - 12)  # "This example is x x ... ." with room for the text
    request_cost(task.task, ["the cat sat"], {"candidate_labels": [fits]}, counter)
    [answer] = runner.run(model, task, ["the cat sat " * 100], [{"candidate_labels": [fits, "b"]}])
    assert not isinstance(answer, ItemFailure), answer
