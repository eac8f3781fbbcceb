"""Suite-wide hooks: CI's PostgreSQL phase skips the tests that no database backend changes; SQLite tests on a file.

`.ci/run` runs the suite twice: SQLite + embedded Redis (everything), then PostgreSQL +
Redis with HOSTING_TEST_PHASE=postgres. That phase skips the tests marked `one_phase`
(soak, faults, scale-out, `make run`, the browser, the fuzzer: slow, and the database only
stores their setup) and the unit and model tiers (they touch neither database nor broker),
which all ran in the first phase. Every other test runs in both.
"""

from __future__ import annotations

from collections.abc import Iterator
import os
from pathlib import Path
import time

import pytest

PHASE_ENV = "HOSTING_TEST_PHASE"
PHASES = ("", "sqlite", "postgres")  # "" and "sqlite": the whole suite
BACKEND_FREE_TIERS = ("unit", "model")  # tests/<tier>: no database, no broker, by the tier's definition
TESTS = Path(__file__).resolve().parent
MINUTE_MARGIN_S = 10.0  # longer than any test that counts on one rate-limit minute takes


def _one_phase(item: pytest.Item) -> bool:
    if item.get_closest_marker("one_phase"):
        return True
    parts = item.path.resolve().relative_to(TESTS).parts
    return len(parts) > 1 and parts[0] in BACKEND_FREE_TIERS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the postgres phase, skip what the SQLite phase already ran the same way."""
    phase = os.environ.get(PHASE_ENV, "")
    if phase not in PHASES:
        raise pytest.UsageError(f"{PHASE_ENV}={phase!r}: expected one of {', '.join(p for p in PHASES if p)}")
    if phase != "postgres":
        return
    skip = pytest.mark.skip(reason=f"one_phase: ran in the SQLite phase ({PHASE_ENV}=postgres)")
    for item in items:
        if _one_phase(item):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_queue_left_marked_full() -> Iterator[None]:
    """Each test starts with no task marked full: a mark is this process's, and would refuse the next test's posts."""
    from models_registry.broker import queue_state

    yield
    queue_state.reset()


@pytest.fixture
def within_one_minute() -> None:
    """Start the test with at least MINUTE_MARGIN_S left in the UTC minute.

    A token's requests_per_minute and tokens_per_minute count in fixed UTC minutes: a test
    that spends a limit and expects the next request refused fails if the minute turns in
    between (the count starts again). Waiting (at most MINUTE_MARGIN_S) keeps it in one.
    """
    left = 60.0 - time.time() % 60.0
    if left < MINUTE_MARGIN_S:
        time.sleep(left + 0.05)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """The SQLite test database in a file of this run, locked as the product's is (WAL, busy timeout).

    Django's default SQLite test database is in memory with a shared cache, where a
    connection that reads a table another thread's connection is writing fails at once
    with "database table is locked" (no busy timeout applies to table locks). The product
    runs some ORM calls on a thread of their own (the batch job's finish, the file sweep,
    uploads): a test polling beside them failed now and then under load.
    """
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database["TEST"] = {**database.get("TEST", {}), "NAME": str(tmp_path_factory.mktemp("sqlite") / "test.sqlite3")}
