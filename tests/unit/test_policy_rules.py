"""Pure policy rules: the priority a request runs at, its queue limit, and the response cache key."""

from __future__ import annotations

import dataclasses

import pytest

from models_registry.core.errors import Forbidden, InvalidInput
from models_registry.policy import priority, response_cache
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.worker.batcher import BatchPolicy

TASK = TaskSpec(name="emb", task="feature-extraction", parameters={}, pooling="mean", normalize=True,
                policy=BatchPolicy(), timeout_s=30.0, cache_ttl_s=60)
SPEC = ModelSpec(name="m", source="/models/m", revision="", device="", dtype="auto", enabled=True,
                 tasks={"emb": TASK}, default_task="emb")


def test_a_request_may_lower_its_priority_but_not_raise_it() -> None:
    assert priority.resolve("interactive", None) == "interactive"
    assert priority.resolve("interactive", " Batch ") == "batch"
    assert priority.resolve("batch", "") == "batch"
    assert priority.resolve("batch", "batch") == "batch"
    with pytest.raises(Forbidden, match="batch priority"):
        priority.resolve("batch", "interactive")
    with pytest.raises(InvalidInput, match="options.priority. must be interactive or batch, not 'high'"):
        priority.resolve("interactive", "high")


def test_the_header_or_the_body_options_ask() -> None:
    from models_registry.api.hf.hf_route import asked_priority

    assert asked_priority("batch", {"options": {"priority": "interactive"}}) == "batch"  # the header wins
    assert asked_priority(None, {"inputs": "x", "options": {"priority": "batch"}}) == "batch"
    assert asked_priority("", {"inputs": "x"}) is None
    assert asked_priority(None, "plain text body") is None
    with pytest.raises(InvalidInput, match="options.priority must be interactive or batch"):
        asked_priority(None, {"options": {"priority": 1}})


def test_a_place_is_the_class_and_its_queue_limit_in_one() -> None:
    assert priority.place("interactive", None, 64, None) == ("interactive", 64)
    assert priority.place("interactive", "batch", 64, None) == ("batch", 32)
    assert priority.place("batch", None, 64, 8) == ("batch", 8)
    with pytest.raises(Forbidden):
        priority.place("batch", "interactive", 64, None)


def test_batch_traffic_has_its_own_smaller_queue_limit() -> None:
    assert priority.queue_limit("interactive", 1024, 100) == 1024
    assert priority.queue_limit("batch", 1024, None) == 512
    assert priority.queue_limit("batch", 1024, 100) == 100
    assert priority.queue_limit("batch", 1, None) == 1


def key(spec: ModelSpec = SPEC, task: TaskSpec = TASK, parameters: dict | None = None,
        inputs: list | None = None) -> str:
    return response_cache.cache_key("asgi", spec, task, parameters or {"truncate": True}, inputs or ["hello"])


def test_the_cache_key_covers_what_the_answer_depends_on() -> None:
    assert key() == key(parameters={"truncate": True})
    assert key().startswith("asgicache:m:emb:")  # the layer's prefix, then model and task (for operators)
    changed = [
        key(spec=dataclasses.replace(SPEC, load_generation=1)),  # "Load now"
        key(spec=dataclasses.replace(SPEC, revision="v2")),
        key(spec=dataclasses.replace(SPEC, dtype="float16")),
        key(task=dataclasses.replace(TASK, normalize=False)),
        key(task=dataclasses.replace(TASK, parameters={"prompt": "query: "})),
        key(parameters={"truncate": False}),
        key(inputs=["hello "]),
        key(inputs=["hello", "world"]),
    ]
    assert len(set(changed)) == len(changed) and key() not in changed
    # Queue settings and the TTL do not change the answer: the same entry serves.
    assert key(task=dataclasses.replace(TASK, timeout_s=5.0, cache_ttl_s=1)) == key()


def test_entries_round_trip_bytes_and_floats_exactly() -> None:
    outputs = [[b"\x00\x01\x02\x03", [1]], [{"label": "a", "score": 0.1 + 0.2}]]
    stored = response_cache.decode(response_cache.encode(outputs, 7))
    assert stored.outputs == outputs and stored.tokens == 7
