"""OpenAI's per-row options in a decode batch: logprobs from the very logits each token was drawn from."""

from __future__ import annotations

from typing import Any

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.core import token_events  # noqa: E402
from models_registry.inference.generation_batch import GenerationBatch, Row  # noqa: E402
from models_registry.inference.loading import load_pipeline  # noqa: E402


class Sink:
    """Collects a row's events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def cancelled(self) -> bool:
        return False


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("shaping") / "gpt2", positions=256)
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


def run(batch: GenerationBatch, rows: list[Row]) -> None:
    """Every row joins the first step, then steps until all finished (the decode loop's calls, in one thread)."""
    batch.step(list(rows))
    while batch.rows:
        batch.step()


def test_logprobs_are_the_models_raw_log_softmax_beside_a_row_without(gpt2: Any) -> None:
    batch = GenerationBatch(gpt2)
    sinks = [Sink(), Sink()]
    asked = batch.prepare("a", "The cat sees", {"stream": True, "max_new_tokens": 6, "do_sample": False,
                                                "logprobs": 3}, sinks[0])
    free = batch.prepare("b", "A dog likes the lazy dog and", {"stream": True, "max_new_tokens": 6,
                                                               "do_sample": False}, sinks[1])
    run(batch, [asked, free])
    assert all("logprobs" not in (token_events.token_of(e) or {}) for e in sinks[1].events)
    events = sinks[0].events
    ids = gpt2.tokenizer("The cat sees")["input_ids"]
    with torch.inference_mode():
        for event in events:
            expected = torch.log_softmax(gpt2.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            drawn = token_events.token_of(event)
            assert drawn is not None
            token, entry = drawn["id"], drawn["logprobs"]
            assert entry["logprob"] == pytest.approx(float(expected[token]), abs=1e-4)
            assert entry["bytes"] == list(gpt2.tokenizer.decode([token]).encode())
            top_ids = expected.topk(3).indices.tolist()
            assert [lp for _, lp in entry["top"]] == pytest.approx(expected[top_ids].tolist(), abs=1e-4)
            assert entry["top"][0][0] == entry["bytes"]  # greedy: the token is the most likely one
            ids.append(token)


SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags", "ok"], "additionalProperties": False}


def test_a_structured_row_and_a_free_row_share_a_batch(gpt2: Any) -> None:
    """The random-weight model writes schema-valid, compact JSON under the mask and stops once it is complete."""
    import json
    import re

    import jsonschema

    from models_registry.tasks.json_grammar import compile_schema

    batch = GenerationBatch(gpt2)
    grammar = compile_schema(SCHEMA)
    sinks = [Sink() for _ in range(4)]
    rows = [batch.prepare(str(n), "The cat sees", {"stream": True, "max_new_tokens": 120, "do_sample": True,
                                                   "seed": n, "temperature": 1.0, "grammar": grammar, "logprobs": 0}, sinks[n])
            for n in range(3)]
    free = batch.prepare("free", "The cat sees", {"stream": True, "max_new_tokens": 20, "do_sample": False}, sinks[3])
    run(batch, [*rows, free])
    for row in rows:
        answer = row.answer()[0]
        text = answer["generated_text"]
        jsonschema.validate(json.loads(text), SCHEMA)
        assert not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text))  # compact: no space outside strings
        assert list(json.loads(text)) == list(SCHEMA["properties"])  # in the schema's order
        assert answer["details"]["finish_reason"] == "eos_token"
    assert free.answer()[0]["generated_text"] == gpt2("The cat sees", max_new_tokens=20, do_sample=False,
                                                      return_full_text=False)[0]["generated_text"]


def test_json_object_masks_a_greedy_row_too(gpt2: Any) -> None:
    from models_registry.tasks.json_grammar import ANY_OBJECT, compile_schema

    batch = GenerationBatch(gpt2)
    sink = Sink()
    row = batch.prepare("o", "The cat sees", {"stream": True, "max_new_tokens": 40, "do_sample": False,
                                              "grammar": compile_schema(ANY_OBJECT)}, sink)
    run(batch, [row])
    text = row.answer()[0]["generated_text"]
    assert text.startswith("{")  # an object, cut at max_new_tokens or complete
    assert all(ch not in text for ch in "\n\t")


def unchecked_grammar(schema: dict[str, Any]) -> str:
    """schema's grammar as llguidance gives it, without the web's checks (what they would refuse reaches a row)."""
    import llguidance

    from models_registry.tasks.json_grammar import COMPACT

    return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=COMPACT)


@pytest.mark.parametrize(("schema", "tokens"), [
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}, 0),  # nothing to write
    ({"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]}, 1),  # "{" and no further
])
def test_a_grammar_the_engine_cannot_go_on_with_fails_its_row_alone(gpt2: Any, schema: dict[str, Any],
                                                                     tokens: int) -> None:
    """Its answer is a 400 saying so, after the tokens it did write, never "stop" over unfinished JSON."""
    from models_registry.core.batch_types import ItemFailure
    from models_registry.core.errors import GrammarStalled

    batch = GenerationBatch(gpt2)
    sinks = [Sink(), Sink()]
    stuck = batch.prepare("stuck", "The cat sees", {"stream": True, "max_new_tokens": 30, "do_sample": False,
                                                    "grammar": unchecked_grammar(schema)}, sinks[0])
    free = batch.prepare("free", "The cat sees", {"stream": True, "max_new_tokens": 8, "do_sample": False}, sinks[1])
    run(batch, [stuck, free])
    failure = stuck.answer()
    assert isinstance(failure, ItemFailure) and isinstance(failure.error, GrammarStalled)
    assert failure.error.status == 400 and f"stopped after {tokens} generated tokens" in failure.error.message
    assert len(sinks[0].events) == tokens and not any(map(token_events.is_final, sinks[0].events))
    assert free.answer()[0]["generated_text"] == gpt2("The cat sees", max_new_tokens=8, do_sample=False,
                                                      return_full_text=False)[0]["generated_text"]


def test_a_grammar_is_instantiated_once_per_tokenizer_and_copied_for_each_row(gpt2: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import llguidance

    from models_registry.inference import grammar_mask
    from models_registry.tasks.json_grammar import compile_schema

    grammar = compile_schema({**SCHEMA, "description": "instantiated once"})
    built = []
    real = llguidance.LLMatcher

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(grammar_mask.llguidance, "LLMatcher", counting)
    batch = GenerationBatch(gpt2)
    sinks = [Sink() for _ in range(3)]
    rows = [batch.prepare(str(n), "The cat sees", {"stream": True, "max_new_tokens": 60, "do_sample": True, "seed": n,
                                                   "temperature": 1.0, "grammar": grammar}, sinks[n]) for n in range(3)]
    run(batch, rows)
    assert built == [grammar]  # one matcher built, three rows each on its own copy
    texts = [row.answer()[0]["generated_text"] for row in rows]
    assert len(set(texts)) > 1 and all(text.startswith('{"name":"') for text in texts)
