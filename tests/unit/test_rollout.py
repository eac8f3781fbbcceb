"""Version selection, the canary split and its stickiness, readiness across workers, and shadow distances."""

from __future__ import annotations

import random

import pytest

from models_registry.policy.shadow_distance import cosine_distance, distance
from models_registry.catalog.rollout import (
    CANARY,
    SHADOW,
    Rollout,
    choose,
    draw,
    ready_everywhere,
    serving,
    shadow_of,
    split_wire,
    wire_name,
)


def test_wire_names_round_trip_and_unversioned_models_keep_their_name() -> None:
    assert wire_name("mini-lm", 3) == "mini-lm.v3"
    assert split_wire("mini-lm.v3") == ("mini-lm", 3)
    assert wire_name("mini", 0) == "mini" and split_wire("mini") == ("mini", 0)
    assert split_wire("a.vx") == ("a.vx", 0)  # not a version suffix


def test_the_target_answers_only_once_ready_everywhere() -> None:
    plan = Rollout(live=1, target=2)
    assert serving(plan, {1}) == 1
    assert serving(plan, {1, 2}) == 2
    assert plan.held() == [1, 2]


def test_right_after_a_switch_a_stale_view_of_the_workers_keeps_the_previous_version_answering() -> None:
    switched = Rollout(live=2, previous=1)
    assert serving(switched, {1}) == 1  # v2's readiness not seen yet here: v1 (still held) answers
    assert serving(switched, {1, 2}) == 2
    assert serving(Rollout(live=1), set()) == 1  # a first load: live (503 until ready)


def test_canary_share_is_close_to_its_percent_and_needs_the_canary_ready() -> None:
    plan = Rollout(live=1, candidate=2, mode=CANARY, percent=25)
    rng = random.Random(7)
    picks = [choose(plan, {1, 2}, rng.random()) for _ in range(4000)]
    assert 0.22 < picks.count(2) / len(picks) < 0.28
    assert {choose(plan, {1}, rng.random()) for _ in range(200)} == {1}  # canary still loading: live answers


def test_sticky_split_gives_one_token_always_the_same_version() -> None:
    plan = Rollout(live=1, candidate=2, mode=CANARY, percent=50, sticky=True)
    for token in ("1", "2", "77", "1234"):
        seen = {choose(plan, {1, 2}, draw(token, random.random())) for _ in range(50)}
        assert len(seen) == 1
    tokens = [str(i) for i in range(2000)]
    share = sum(choose(plan, {1, 2}, draw(t, 0.0)) == 2 for t in tokens) / len(tokens)
    assert 0.45 < share < 0.55  # per-token hashing still splits tokens by the percent


def test_shadow_copies_but_never_answers() -> None:
    plan = Rollout(live=1, candidate=2, mode=SHADOW, percent=100)
    assert choose(plan, {1, 2}, 0.0) == 1
    assert shadow_of(plan, {1, 2}, 0.5) == 2
    assert shadow_of(plan, {1}, 0.5) == 0  # not warm yet: no copies
    assert shadow_of(Rollout(live=1, candidate=2, mode=CANARY, percent=100), {1, 2}, 0.0) == 0


def test_ready_everywhere_needs_every_worker_serving_the_model() -> None:
    one = {"m.v1": {"state": "ready"}, "m.v2": {"state": "ready"}, "other": {"state": "ready"}}
    two = {"m.v1": {"state": "ready"}, "m.v2": {"state": "loading"}}
    idle = {"m.v1": {"state": "available"}}  # holds no version: does not count
    assert ready_everywhere([one, two, idle]) == {"m": {1}, "other": {0}}
    two["m.v2"]["state"] = "ready"
    assert ready_everywhere([one, two, idle])["m"] == {1, 2}


def test_a_version_retiring_on_one_worker_is_neither_switched_to_nor_routed_to_as_the_target() -> None:
    # CI once saw a rollback flip back: a worker whose registry view predated the rollback still held
    # the old live version as retiring, reported it ready, the switch happened, and then it unloaded it.
    fresh = {"m.v2": {"state": "ready"}, "m.v3": {"state": "ready"}}
    stale = {"m.v2": {"state": "ready", "retiring": True}, "m.v3": {"state": "ready"}}
    ready = ready_everywhere([fresh, stale])
    assert ready == {"m": {3}}
    assert serving(Rollout(live=3, target=2, previous=2), ready["m"]) == 3  # v3 answers until v2 stays
    stale["m.v2"]["retiring"] = False  # the worker read the rollback
    assert serving(Rollout(live=3, target=2, previous=2), ready_everywhere([fresh, stale])["m"]) == 2


def test_distances() -> None:
    assert distance([[1.0, 0.0]], [[1.0, 0.0]]) == pytest.approx(0.0)
    assert distance([[1.0, 0.0]], [[0.0, 1.0]]) == pytest.approx(1.0)
    assert cosine_distance([1.0, 0.0], [1.0, 0.0, 0.0]) == 1.0  # another hidden size
    labels_a = [[{"label": "POS", "score": 0.9}, {"label": "NEG", "score": 0.1}]]
    labels_b = [[{"label": "NEG", "score": 0.6}, {"label": "POS", "score": 0.4}]]
    assert distance(labels_a, labels_a) == 0.0 and distance(labels_a, labels_b) == 1.0
    assert distance(["a text", "b"], ["a text", "c"]) == pytest.approx(0.5)
    assert distance([[1.0]], []) == 1.0
