"""Model versions under closed-loop load: a source change, a 25% canary, promote, rollback, a 100% shadow.

Two tiny encoders of different hidden sizes (32 and 48) tell by the vector's length which
version answered; every answer must be a 200 whose X-Model-Version agrees with its length.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import model_factory
from tests.integration.closed_loop import Load, Sample
from tests.stack import Stack, http_json, wait_until

MODEL = "versioned"
WORKERS = 2  # a version goes live once warm on every worker serving the model
NARROW, WIDE = 32, 48


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("versions")
    return {NARROW: model_factory.build_feature_extractor(root / "narrow"),
            WIDE: model_factory.build_wide_feature_extractor(root / "wide", WIDE)}


@pytest.fixture(scope="module")
def versioned_stack(encoders: dict[int, Path]) -> Iterator[Stack]:
    with Stack.started() as running:
        running.manage("register_model", MODEL, "--source", str(encoders[NARROW]), "--task", "feature-extraction",
                       "--max-batch-size", "16", "--timeout", "30")
        running.create_token("all")
        for _ in range(WORKERS):
            running.start_worker()
        running.start_web()
        running.wait_ready([MODEL])
        yield running


COMMAND_S: list[float] = []  # how long each register_model command itself took (a Django start-up)


def register(stack: Stack, *args: str) -> float:
    """Run register_model; when its change was committed (the model row's updated_at; else when it returned)."""
    started = time.time()
    stack.manage("register_model", MODEL, *args)
    COMMAND_S.append(time.time() - started)
    url = stack.env["DATABASE_URL"]
    if not url.startswith("sqlite:///"):
        return time.time()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        (text,) = db.execute("SELECT updated_at FROM models_registry_registeredmodel WHERE name = ?",
                             (MODEL,)).fetchone()
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def source_args(path: Path) -> list[str]:
    return ["--source", str(path), "--task", "feature-extraction"]


SETTLE_S = 1.0  # longer than any answer in flight at a switch (p95 under 20 ms here)


def wait_all(load: Load, length: int, since: float, what: str, count: int = 40) -> float:
    """Until the last count answers all have vectors of length and no other answer landed for SETTLE_S; when the
    switch was (the first answer after the last other one)."""
    # Count runs of new answers do not mean every client has switched: a web process that reads the change a
    # moment later, or a request already routed to the old version, still answers from it (by design, no request
    # fails), possibly after count new answers from the others, and on a loaded machine later than any fixed
    # pause (CI once saw one land last). So wait until the tail is new and the last straggler is SETTLE_S old.
    def settled() -> bool:
        answers = load.since(since)
        recent = answers[-count:]
        if len(recent) < count or any(s.length != length for s in recent):
            return False
        stragglers = [s.at for s in answers if s.length != length]
        return not stragglers or time.time() - stragglers[-1] >= SETTLE_S

    wait_until(settled, 60, what, interval_s=0.1)
    answers = load.since(since)
    others = [i for i, s in enumerate(answers) if s.length != length]
    first_new = next(i for i, s in enumerate(answers) if s.length == length)
    late = [answers[i] for i in others if i > first_new]
    if late:  # old answers after the first new one: how late the slowest landed, and how long it had waited
        print(f"\n{what}: {len(late)} old answers after the first new one; the last "
              f"{late[-1].at - since:.2f} s after the commit, (status, version, s waited) "
              f"{[(s.status, s.version, round(s.latency_s, 3)) for s in late[-3:]]}")
    return answers[others[-1] + 1].at if others else answers[0].at  # from here on, only the new version answers


def shadow_count(url: str) -> float:
    status, _, text = http_json("GET", f"{url}/metrics")
    assert status == 200
    found = re.findall(r'^hosting_shadow_distance_count\{model="%s",version="\d+"\} (\S+)$' % MODEL, text, re.M)
    return sum(float(v) for v in found)


def rss_mib(pid: int) -> float:
    """The worker's resident memory (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def summary(samples: list[Sample]) -> str:
    latencies = sorted(s.latency_s for s in samples) or [0.0]
    return (f"{len(samples)} answers, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
            f"p95 {latencies[int(len(latencies) * 0.95)] * 1000:.1f} ms")


def test_versions_switch_canary_promote_rollback_and_shadow_without_a_failed_request(
        versioned_stack: Stack, encoders: dict[int, Path]) -> None:
    stack = versioned_stack
    worker = stack.workers[0].pid
    load = Load(stack.web[0][1], stack.tokens["all"], MODEL)
    one_version_mib = rss_mib(worker)  # one worker's: each holds every version
    load.start()
    try:
        wait_until(lambda: len(load.since(0)) >= 100, 30, "load running")
        steady = time.time()
        wait_until(lambda: len(load.since(steady)) >= 100, 30, "steady answers")

        # 1. A source change: v2 loads beside v1 and takes over in one step.
        before = load.since(steady)
        registering = time.time()
        registered = register(stack, *source_args(encoders[WIDE]), "--allow-shape-change")
        switched = wait_all(load, WIDE, registered, "the switch to v2")
        during = [s for s in load.since(registering) if s.at <= switched + 1]
        print(f"\nregistration (commit) to the switch: {switched - registered:.2f} s; "
              f"before: {summary(before)}; during the switch: {summary(during)}")

        # 2. A 25% canary (v3, narrow): refused while its vectors' size differs from live's, unless allowed;
        # then its share of 400 answers.
        with pytest.raises(RuntimeError, match="v3 answers 32-float vectors where live v2 answers 48-float vectors"):
            stack.manage("register_model", MODEL, *source_args(encoders[NARROW]), "--canary", "25")
        canary_at = register(stack, *source_args(encoders[NARROW]), "--canary", "25", "--allow-shape-change")
        wait_until(lambda: any(s.length == NARROW for s in load.since(canary_at)), 60, "the canary answering")
        counted = time.time()
        two_versions_mib = rss_mib(worker)
        status, headers, body = http_json("POST", f"{stack.url}/v1/embeddings", {"model": MODEL, "input": "x"},
                                          token=stack.tokens["all"])
        named = {k.lower(): v for k, v in headers.items()}.get("x-model-version")
        assert status == 200 and named in {"2", "3"}  # the OpenAI route names its version too
        assert len(body["data"][0]["embedding"]) == (WIDE if named == "2" else NARROW)
        print(f"one worker's RSS: {one_version_mib:.0f} MiB with v1 alone, {two_versions_mib:.0f} MiB with v2 and v3")
        wait_until(lambda: len(load.since(counted)) >= 400, 60, "400 answers with the canary")
        share = sum(s.length == NARROW for s in load.since(counted)[:400]) / 400
        print(f"canary share in 400 answers: {share:.3f}")
        assert 0.15 <= share <= 0.35

        # 3. Promote: v3 answers everything.
        promoted = register(stack, "--promote")
        done = wait_all(load, NARROW, promoted, "the promotion of v3")
        print(f"--promote (commit) to the switch: {done - promoted:.2f} s")

        # 4. Rollback with no candidate: back to v2 (unloaded after the promotion: it loads again).
        rolled = register(stack, "--rollback")
        done = wait_all(load, WIDE, rolled, "the rollback to v2")
        print(f"--rollback (commit) to the switch: {done - rolled:.2f} s")

        # 5. A 100% shadow (v4, narrow): answers stay v2's, the distance is recorded.
        shadowed = register(stack, *source_args(encoders[NARROW]), "--shadow", "100", "--allow-shape-change")
        wait_until(lambda: shadow_count(stack.url) >= 20, 60, "shadow comparisons recorded")
        not_live = [s for s in load.since(shadowed) if s.length != WIDE]  # named in full: CI failed here once
        assert not not_live, (f"{len(not_live)} answers after the shadow's registration were not live v2's "
                              f"(status, version, length, s after it): "
                              f"{[(s.status, s.version, s.length, round(s.at - shadowed, 3)) for s in not_live[:8]]}")

        # 6. Two more rollbacks: the shadow is dropped, then back to v1 (live before v2), never forward to v3.
        register(stack, "--rollback")
        rolled = register(stack, "--rollback")
        done = wait_all(load, NARROW, rolled, "the rollback to v1")
        time.sleep(1.0)
        assert {s.version for s in load.since(done)} == {1}
        loaded_for = load.since(0)[-1].at - load.since(0)[0].at
    finally:
        load.close()
    print(f"load ran {loaded_for:.1f} s; each register_model command took {min(COMMAND_S):.1f}-{max(COMMAND_S):.1f} s")
    samples = load.since(0)
    failed = [s for s in samples if s.status != 200]
    assert not failed, f"{len(failed)} of {len(samples)} answers failed: {failed[:5]}"
    versions = {(s.version, s.length) for s in samples}
    assert {v for v, _ in versions} == {1, 2, 3}  # v4 (the shadow) never answers a client
    assert versions == {(1, NARROW), (2, WIDE), (3, NARROW)}
    status, _, text = http_json("GET", f"{stack.url}/metrics")
    assert re.search(r'^hosting_model_version_requests_total\{model="%s",version="3"\} ' % MODEL, text, re.M)
    print(f"{len(samples)} answers in all, none failed")
