"""Streamed generation: the token events a client gets, one by one, equal what generate() produces in one go."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.core import token_events
from models_registry.inference import streaming
from models_registry.inference.loading import load_pipeline


class Sink:
    """Collects events; cancels itself after `after` events when asked to."""

    def __init__(self, after: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.after = after
        self.threads: set[str] = set()

    def put(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.threads.add(threading.current_thread().name)

    def cancelled(self) -> bool:
        return self.after is not None and len(self.events) >= self.after


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("stream") / "gpt2")
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_seq2seq(tmp_path_factory.mktemp("stream") / "bart")
    return load_pipeline("text2text-generation", str(path), None, "cpu", torch.float32)


PROMPTS = ["The cat sees", "A dog likes the lazy dog and"]


def text_of(events: list[dict[str, Any]]) -> str:
    """The sequence's text the events tell."""
    text = ""
    for event in events:
        text = token_events.text_after(text, event)
    return text


def test_events_rebuild_the_greedy_generation_of_each_prompt_in_one_batch(gpt2: Any) -> None:
    sinks = [Sink(), Sink()]
    answers = streaming.generate("text-generation", gpt2, PROMPTS, {"max_new_tokens": 12}, sinks)
    for prompt, sink, answer in zip(PROMPTS, sinks, answers):
        expected = gpt2(prompt, max_new_tokens=12, do_sample=False, return_full_text=False)[0]["generated_text"]
        events = sink.events
        assert answer["generated_text"] == expected
        assert text_of(events) == expected and all("full_text" not in e for e in events)  # the pieces spell it
        assert [token_events.is_final(e) for e in events] == [False] * (len(events) - 1) + [True]
        summary = token_events.summary(events[-1])
        assert summary is not None and summary["generated_tokens"] == len(events)
        assert summary == {k: v for k, v in answer["details"].items() if k not in ("prefill", "tokens")}
        assert summary["finish_reason"] in ("length", "eos_token")
        tokens = [token_events.token_of(e) for e in events]
        assert answer["details"]["tokens"] == tokens and all(t is not None and t["logprob"] <= 0 for t in tokens)
        assert all(set(t) == {"id", "text", "logprob", "special"} for t in answer["details"]["tokens"])


def test_a_cancelled_sink_stops_at_the_next_token_others_go_on(gpt2: Any) -> None:
    sinks = [Sink(after=3), Sink()]
    answers = streaming.generate("text-generation", gpt2, PROMPTS, {"max_new_tokens": 20}, sinks)
    assert len(sinks[0].events) == 3 and answers[0]["details"]["finish_reason"] == "cancelled"
    assert len(sinks[1].events) == answers[1]["details"]["generated_tokens"] > 3


def test_a_generation_that_ends_early_closes_with_an_end_only_event(gpt2: Any) -> None:
    """generate() stopped before max_new_tokens (a deadline): the summary comes alone, with the held-back text."""
    sink = Sink()
    sequence = streaming.GeneratedSequence(sink=sink, prompt_tokens=3)
    decoder = streaming.StepDecoder(gpt2.tokenizer, [sequence], streaming.LogProbKeeper(), 20, [], set(), seed=None)
    drawn = [*gpt2.tokenizer("The cat")["input_ids"], gpt2.tokenizer.convert_tokens_to_ids("Ã")]  # 0xC3: half a "é"
    for token in drawn:
        decoder.take(0, sequence, token, -1.0)
    decoder.end()
    *going, end = sink.events
    assert len(going) == len(drawn) and not any(map(token_events.is_final, going))
    assert token_events.token_of(end) is None
    assert token_events.summary(end) == {"finish_reason": "length", "generated_tokens": len(drawn), "seed": None,
                                         "input_length": 3}
    assert sequence.text == "The cat\ufffd" and end["full_text"] == sequence.text == text_of(sink.events)


def test_a_stop_sequence_ends_the_sequence(gpt2: Any) -> None:
    free = streaming.generate("text-generation", gpt2, PROMPTS[:1], {"max_new_tokens": 20}, [None])[0]
    text = free["generated_text"]
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert stop.strip()
    stopped = streaming.generate("text-generation", gpt2, PROMPTS[:1], {"max_new_tokens": 20, "stop": [stop]},
                                 [Sink()])[0]
    assert stopped["details"]["finish_reason"] == "stop_sequence" and stop in stopped["generated_text"]
    assert len(stopped["generated_text"]) < len(text)


def test_too_long_for_the_model_is_a_clear_400(gpt2: Any) -> None:
    from models_registry.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="positions"):
        streaming.generate("text-generation", gpt2, ["word " * 100], {"max_new_tokens": 100}, [None])


def test_text2text_streams_too(bart: Any) -> None:
    sink = Sink()
    [answer] = streaming.generate("text2text-generation", bart, ["The quick brown fox"],
                                  {"generate_parameters": {"max_new_tokens": 8}}, [sink])
    expected = bart.tokenizer.decode(bart.model.generate(**bart.tokenizer(["The quick brown fox"], return_tensors="pt"),
                                                         max_new_tokens=8, do_sample=False)[0],
                                     skip_special_tokens=True)
    assert answer["generated_text"] == expected
    assert text_of(sink.events) == expected and token_events.is_final(sink.events[-1])
