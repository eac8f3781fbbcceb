"""The admin's "Load now" is a rolling reload: 8 closed-loop clients for 20 s around it meet no answer but a 200.

A tiny encoder on two workers (CI's time; the demo model, MiniLM, was measured the same way:
docs/versions.md): the fresh copy (v2) loads beside v1 on both, requests switch to it once it
is warm on both, then each worker unloads v1.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests import model_factory
from tests.integration.admin_session import AdminSession
from tests.integration.closed_loop import Load
from tests.stack import Stack, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

MODEL = "demo"
WORKERS = 2
RUN_S = 20.0  # the clients ask for at least this long, and until the switch is done
SWITCH_S = 120.0  # a load beside 8 clients on a shared 2-core box (MiniLM's took 6 s)
PASSWORD = "admin-password-for-tests"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    source = model_factory.build_feature_extractor(tmp_path_factory.mktemp("load-now") / "encoder")
    with Stack.started() as running:
        running.manage("register_model", MODEL, "--source", str(source), "--task", "feature-extraction",
                       "--timeout", "30")
        running.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com",
                       env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD})
        running.create_token("all")
        for _ in range(WORKERS):
            running.start_worker()
        running.start_web()
        running.wait_ready([MODEL])
        yield running


def test_load_now_under_load_answers_every_request(stack: Stack) -> None:
    admin = AdminSession(stack.url, "ops", PASSWORD)
    changelist = "/admin/models_registry/registeredmodel/"
    pk = re.search(r'name="_selected_action" value="(\d+)"', admin.get(changelist)).group(1)
    load = Load(stack.web[0][1], stack.tokens["all"], MODEL)
    started = time.time()
    load.start()
    try:
        wait_until(lambda: len(load.since(started)) >= 40, 30, "the clients answered")
        reloading = time.time()
        status, page = admin.post(changelist, {"action": "load_now", "_selected_action": pk, "index": "0"})
        assert status == 200 and "v2 (a fresh copy of v1) loads beside v1" in page, page[-2000:]

        def switched() -> bool:
            recent = load.since(reloading)[-40:]
            return len(recent) == 40 and all(s.version == 2 for s in recent)

        wait_until(switched, SWITCH_S, "every answer from the fresh copy (v2)", interval_s=0.1)
        switch_s = time.time() - reloading
        time.sleep(max(0.0, started + RUN_S - time.time()))  # the clients keep asking for RUN_S in all
    finally:
        load.close()
    samples = load.since(started)
    failed = [s for s in samples if s.status != 200]
    print(f"\n{len(samples)} answers in {samples[-1].at - samples[0].at:.1f} s, the switch {switch_s:.1f} s "
          f"after Load now, {len(failed)} not 200")
    assert not failed, f"{len(failed)} of {len(samples)} answers failed: {failed[:5]}"
    assert {s.version for s in samples} == {1, 2} and len({s.length for s in samples}) == 1
    # Each worker loaded v2 and, once its requests were answered, unloaded v1.
    for index in range(WORKERS):
        log = stack.workdir / f"worker-{index}.log"
        wait_until(lambda: f"model {MODEL}.v1 unloaded" in log.read_text(), 30, f"worker {index} unloading v1")
        assert f"model {MODEL}.v2 ready" in log.read_text()
