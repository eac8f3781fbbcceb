"""Issue 54's hot changes through the real stack: with a client sending base requests steadily, a first adapter and a
second are registered, one replaced and both disabled; no base request fails, each adapter's first request waits
rather than 503 and answers peft's merged adapter, and the base is loaded once (its worker's load counter)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import adapter_layouts, hub_layouts
from tests.integration.test_adapters import TEXTS, assert_close, reference
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration
pytest.importorskip("peft")

OPERATOR = "operator-secret"  # HOSTING_METRICS_TOKEN: GET /models/<name> shows each worker's load counter
BASE_REQUESTS = 600  # the steady client's bound
ANSWER_DEADLINE_S = 60.0  # generous: a busy machine, a web and a worker each up to a refresh behind


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hot-adapters")
    base = hub_layouts.build(hub_layouts.FAMILIES["mpnet"], root / "base")
    return {"base": base, **{name: adapter_layouts.build_adapter(base, root / name, seed=i + 31, r=2 + i)
                             for i, name in enumerate(("alpha", "beta"))}}


@pytest.fixture(scope="module")
def stack(dirs: dict[str, Path]) -> Iterator[Stack]:
    with Stack.started(extra_env={"HOSTING_METRICS_TOKEN": OPERATOR}) as running:
        # The default layout: on this CPU the base's packed embeddings run a fixed graph (ONNX Runtime or a trace).
        running.manage("register_model", "embed", "--source", str(dirs["base"]), "--task", "feature-extraction")
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready(["embed"])
        yield running


def base_loads(stack: Stack) -> int:
    """The loads of the base that the live workers report (their heartbeat's counter)."""
    status, _, detail = http_json("GET", f"{stack.url}/models/embed", token=OPERATOR)
    assert status == 200, detail
    return sum(int(worker.get("loads", 0)) for worker in detail["workers"])


class SteadyClient(threading.Thread):
    """Base requests one after another until stopped (or BASE_REQUESTS sent): every status kept."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack, self.statuses, self.stop = stack, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.statuses) < BASE_REQUESTS:
            status, _, body = http_json("POST", f"{self.stack.url}/models/embed", {"inputs": TEXTS[0]},
                                        token=self.stack.tokens["all"])
            self.statuses.append((status, body if status != 200 else None))
            time.sleep(0.02)


def first_answer(stack: Stack, name: str) -> list[list[float]]:
    """The adapter's first answer: only a web that does not list it yet (404) is asked again; any other error fails."""
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    while True:
        status, _, body = http_json("POST", f"{stack.url}/models/{name}", {"inputs": TEXTS}, token=stack.tokens["all"],
                                    timeout=ANSWER_DEADLINE_S)
        if status != 404 or time.monotonic() > deadline:
            assert status == 200, body
            return body  # type: ignore[no-any-return]
        time.sleep(0.05)


def test_adapters_registered_replaced_and_removed_under_load_fail_no_request_and_never_reload_the_base(
        stack: Stack, dirs: dict[str, Path]) -> None:
    loads = base_loads(stack)
    assert loads >= 1
    _, _, detail = http_json("GET", f"{stack.url}/models/embed", token=OPERATOR)
    print("\nthe base runs on", [worker.get("backend") for worker in detail["workers"]])  # a fixed graph on CPU
    client = SteadyClient(stack)
    client.start()
    try:
        stack.manage("register_adapter", "alpha", "--base", "embed", "--source", str(dirs["alpha"]))  # the first
        assert_close(first_answer(stack, "alpha"), reference(dirs, "alpha"))
        stack.manage("register_adapter", "beta", "--base", "embed", "--source", str(dirs["beta"]))
        assert_close(first_answer(stack, "beta"), reference(dirs, "beta"))
        stack.manage("register_adapter", "beta", "--base", "embed", "--source", str(dirs["alpha"]))  # replaced
        want = reference(dirs, "alpha")
        deadline = time.monotonic() + ANSWER_DEADLINE_S
        while True:  # the old files answer until the worker's next refresh: then the new ones
            status, _, vectors = http_json("POST", f"{stack.url}/models/beta", {"inputs": TEXTS},
                                           token=stack.tokens["all"])
            assert status == 200, vectors
            try:
                assert_close(vectors, want)
                break
            except AssertionError:
                assert time.monotonic() < deadline, "beta still answers its old files"
                time.sleep(0.2)
        stack.manage("register_adapter", "alpha", "--disabled")
        stack.manage("register_adapter", "beta", "--disabled")  # the base's last adapter
        time.sleep(3.0)  # a few refreshes of web and worker with no adapter left, the client still sending
    finally:
        client.stop.set()
        client.join(ANSWER_DEADLINE_S)
    failed = [entry for entry in client.statuses if entry[0] != 200]
    assert not failed, failed[:5]
    assert len(client.statuses) >= 20, len(client.statuses)  # the client did send through the changes
    assert base_loads(stack) == loads, stack.logs()
    assert "model embed unloaded" not in stack.logs()
    print(f"{len(client.statuses)} base requests, all 200; base loads {loads} before and after")


def versioned_answers(stack: Stack, name: str, count: int) -> list[tuple[str, list[list[float]]]]:
    """count answers of the adapter, each with the X-Adapter-Version that answered it."""
    answers = []
    for _ in range(count):
        status, headers, vectors = http_json("POST", f"{stack.url}/models/{name}", {"inputs": TEXTS},
                                             token=stack.tokens["all"], timeout=ANSWER_DEADLINE_S)
        assert status == 200, vectors
        answers.append((headers.get("X-Adapter-Version") or headers.get("x-adapter-version") or "", vectors))
    return answers


def until_version(stack: Stack, name: str, version: str) -> None:
    """Until the adapter answers from that version (web and worker each up to a refresh behind)."""
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    while (answered := versioned_answers(stack, name, 1)[0][0]) != version:
        assert time.monotonic() < deadline, f"{name} answers v{answered}, never v{version}"
        time.sleep(0.2)


def settled(stack: Stack, name: str) -> None:
    """Past the web's registry refresh: a stale view is read once more and refreshed behind it (catalog.lookups)."""
    time.sleep(3.0)
    versioned_answers(stack, name, 4)
    time.sleep(1.5)


def test_an_adapters_canary_answers_its_share_then_promotion_and_rollback_switch_its_files(
        stack: Stack, dirs: dict[str, Path]) -> None:
    loads = base_loads(stack)
    want = {"alpha": reference(dirs, "alpha"), "beta": reference(dirs, "beta")}
    stack.manage("register_adapter", "gamma", "--base", "embed", "--source", str(dirs["alpha"]))
    assert_close(first_answer(stack, "gamma"), want["alpha"])
    stack.manage("register_adapter", "gamma", "--source", str(dirs["beta"]), "--canary", "50")
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    seen: dict[str, int] = {}
    while len(seen) < 2:  # both sides answer once the web lists the canary; each answer is its side's files
        assert time.monotonic() < deadline, seen
        for version, vectors in versioned_answers(stack, "gamma", 8):
            assert_close(vectors, want["beta" if version == "2" else "alpha"])
            seen[version] = seen.get(version, 0) + 1
    assert set(seen) == {"1", "2"}, seen
    stack.manage("register_adapter", "gamma", "--promote")
    settled(stack, "gamma")
    for version, vectors in versioned_answers(stack, "gamma", 4):  # the canary's v2 is live: no v1 answers
        assert version == "2"
        assert_close(vectors, want["beta"])
    stack.manage("register_adapter", "gamma", "--rollback")  # v1's files again, as the next version
    until_version(stack, "gamma", "3")
    assert_close(versioned_answers(stack, "gamma", 1)[0][1], want["alpha"])
    assert base_loads(stack) == loads
    print(f"\ncanary answers by version: {seen}; promoted (v2), rolled back (v3); base loads {loads}")
