"""Each text is tokenized once: intake's ids are the forward's, and embeddings from them equal a fresh tokenization's."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.specs import ModelSpec, TaskSpec
from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference import intake_tokens  # noqa: E402
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402

WORDS = "the model server packs short and long sentences into rows so no compute goes to padding".split()


def _spec(source: Path) -> ModelSpec:
    task = TaskSpec(name="embed", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)
    return ModelSpec(name="m", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"embed": task}, default_task="embed")


def _texts() -> list[str]:
    rng = random.Random(5)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(30)]
    return texts + [" ".join(WORDS * 60), "", "Ünïcödé 🙂"]  # truncated, empty, non-ASCII


def test_intake_ids_equal_the_forwards_tokenization_and_counts() -> None:
    runner = PipelineRunner()
    loaded = runner.load(_spec(model_factory.minilm_path()))
    assert loaded.intake is not None
    texts = _texts()
    payloads, costs = loaded.count_inputs("feature-extraction", texts)
    assert all(isinstance(p, intake_tokens.TokenizedText) for p in payloads)
    assert payloads == texts  # still the same strings everywhere a str is read
    assert costs == [loaded.count_tokens(t) for t in texts]
    tokenizer = loaded.pipelines["feature-extraction"].tokenizer
    want = tokenizer(texts, truncation=True, max_length=loaded.max_tokens)
    assert [p.ids for p in payloads] == want["input_ids"]
    assert [p.types for p in payloads] == want["token_type_ids"]
    assert max(costs) == loaded.max_tokens


def test_other_tasks_keep_plain_strings_and_pairs_are_counted_as_before() -> None:
    loaded = PipelineRunner().load(_spec(model_factory.minilm_path()))
    payloads, costs = loaded.count_inputs("text-classification", ["a b c", "d"])
    assert [type(p) for p in payloads] == [str, str]
    assert costs == [loaded.count_tokens("a b c"), loaded.count_tokens("d")]
    pair = {"question": "who", "context": "me"}
    assert loaded.count_inputs("question-answering", [pair]) == ([pair], [loaded.count_tokens(pair)])


def test_vectors_from_intake_ids_equal_vectors_from_fresh_tokenization() -> None:
    runner = PipelineRunner()
    loaded = runner.load(_spec(model_factory.minilm_path()))
    task = loaded.spec.tasks["embed"]
    texts = _texts()
    payloads, _ = loaded.count_inputs("feature-extraction", texts)
    reused = runner.run(loaded, task, payloads, [{}] * len(texts))
    fresh = runner.run(loaded, task, texts, [{}] * len(texts))
    assert reused == fresh  # the same float32 bytes: the same ids went in
    # A prompt makes new strings: those are tokenized by the forward, prompt included.
    prompted = runner.run(loaded, task, payloads[:2], [{"prompt": "query: "}] * 2)
    want = runner.run(loaded, task, ["query: " + t for t in texts[:2]], [{}] * 2)
    assert prompted == want
    assert prompted != reused[:2]


def test_a_tokenizer_whose_ids_differ_from_the_wrapper_is_not_reused() -> None:
    loaded = PipelineRunner().load(_spec(model_factory.minilm_path()))
    tokenizer = loaded.pipelines["feature-extraction"].tokenizer

    class Shifted:
        """The wrapper with a different post-processing: one extra id at the end of every text."""

        backend_tokenizer = tokenizer.backend_tokenizer
        model_input_names = tokenizer.model_input_names

        def __call__(self, texts: list[str], **options: object) -> dict[str, list[list[int]]]:
            encoded = tokenizer(texts, **options)
            return {"input_ids": [ids + [0] for ids in encoded["input_ids"]],
                    "token_type_ids": [t + [0] for t in encoded["token_type_ids"]]}

    assert intake_tokens.intake_tokenizer(Shifted(), loaded.max_tokens) is None
    assert intake_tokens.intake_tokenizer(tokenizer, loaded.max_tokens) is not None
    assert intake_tokens.reusable(["plain"]) is None


def test_a_prompt_is_tokenized_once_for_its_n_choices_and_the_decode_batch_reuses_the_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from models_registry.inference.generation_batch import GenerationBatch

    source = model_factory.build_tiny_gpt2(tmp_path / "gpt2", positions=64)
    task = TaskSpec(name="gen", task="text-generation", parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=8), timeout_s=30.0)
    spec = ModelSpec(name="g", source=str(source), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={"gen": task}, default_task="gen")
    loaded = PipelineRunner().load(spec)
    assert loaded.intake is not None and loaded.positions == 64
    encoded: list[list[str]] = []
    tokenizer, with_types = loaded.intake
    real = tokenizer.encode_batch
    monkeypatch.setattr(loaded, "intake", (type("Spy", (), {"encode_batch": lambda self, texts: (
        encoded.append(list(texts)), real(texts))[1]})(), with_types))
    prompt = "The cat sees the dog"
    choices = [loaded.count_inputs("text-generation", [prompt]) for _ in range(4)]  # n=4: four requests
    assert encoded == [[prompt]]
    payload = choices[0][0][0]
    assert isinstance(payload, intake_tokens.TokenizedText) and choices[0][1] == [len(payload.ids)]
    batch = GenerationBatch(loaded.pipelines["text-generation"])
    class NotAgain:
        def __init__(self, tokenizer: object) -> None:
            self.tokenizer = tokenizer

        def __getattr__(self, name: str) -> object:
            return getattr(self.tokenizer, name)

        def __call__(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("the prompt was tokenized again")

    monkeypatch.setattr(batch, "tokenizer", NotAgain(batch.tokenizer))
    assert batch.prepare("r", payload, {"max_new_tokens": 4}, None).ids == payload.ids
    too_long = loaded.count_inputs("text-generation", ["word " * 200])[0][0]
    assert not isinstance(too_long, intake_tokens.TokenizedText)  # truncated at intake: the row counts it whole
