"""Every staff page bounded before it computes (issue 50, item 1): the widest range a query string can ask for.

The admin usage page with ?start=0001-01-01&end=9999-12-31, as a view-only staff user, built one bar per day of
the range: a web process went from 150 MB to 2.47 GB without answering in 120 s. The checks here count the work
(bars, rows, queries), not the time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from models_registry.staff import dashboard, usage_admin
from models_registry.models import ApiToken, UsageRecord
from models_registry.observe import traffic_window

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/admin/models_registry/usagerecord/"
WIDEST = {"start": "0001-01-01", "end": "9999-12-31"}
DAY = 1_790_000_000 // 86400 * 86400  # a UTC midnight in 2026


@pytest.fixture
def viewer(client: Client, django_user_model: Any) -> Client:
    """A staff user who may only view the usage ledger (as the issue's tester was)."""
    user = django_user_model.objects.create_user("viewer", password="pw-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_usagerecord"))
    client.force_login(user)
    return client


def _ledger(tokens: int, hours: int = 1) -> None:
    """Usage of tokens tokens (real ones, named), each over hours hours from DAY on."""
    for i in range(tokens):
        ApiToken.objects.create(name=f"t{i:03d}", prefix=f"p{i:03d}", token_hash=f"h{i}")
    ids = list(ApiToken.objects.values_list("pk", flat=True))
    UsageRecord.objects.bulk_create([UsageRecord(token_id=pk, model="emb", version=1, hour=DAY + h * 3600, requests=1)
                                     for pk in ids for h in range(hours)])


@pytest.mark.parametrize("query", [WIDEST, {**WIDEST, "format": "csv"}, {**WIDEST, "by": "model", "page": "9" * 40}])
def test_the_widest_range_is_a_400_that_says_the_cap_and_reads_no_usage(viewer: Client, query: dict[str, str]) -> None:
    _ledger(3)
    with CaptureQueriesContext(connection) as queries:
        response = viewer.get(PAGE, query)
    assert response.status_code == 400
    html = response.content.decode()
    assert "3,652,059 days" in html and f"at most {usage_admin.MAX_RANGE_DAYS} days" in html
    assert "<rect" not in html and "usage-table" not in html
    sums = [q["sql"] for q in queries.captured_queries if "SUM(" in q["sql"].upper() or "COUNT(" in q["sql"].upper()]
    assert sums == []  # nothing of the ledger summed or counted: refused before any of it is read


def test_a_year_is_charted_in_a_fixed_number_of_bars_and_a_page_of_rows(viewer: Client) -> None:
    _ledger(usage_admin.PAGE_ROWS + 30, hours=2)
    year = {"start": "2026-01-01", "end": "2026-12-31"}  # 365 days: the widest range the page shows
    response = viewer.get(PAGE, year)
    assert response.status_code == 200
    context = response.context
    assert len(context["chart"]["bars"]) <= usage_admin.CHART_BARS and context["chart"]["step"] == "4 days"
    assert len(context["table"]) == usage_admin.PAGE_ROWS and context["next_query"] and not context["previous_query"]
    assert context["totals"]["requests"] == (usage_admin.PAGE_ROWS + 30) * 2  # over every page, not this one
    second = viewer.get(PAGE, {**year, "page": "2"}).context
    assert len(second["table"]) == 30 and not second["next_query"] and second["previous_query"]
    assert {r["token_name"] for r in context["table"]}.isdisjoint(r["token_name"] for r in second["table"])


def test_an_export_over_the_row_cap_is_a_400_and_one_under_it_is_whole(viewer: Client,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _ledger(3, hours=4)  # 12 records: 12 rows per token, version and hour
    monkeypatch.setattr(usage_admin, "MAX_CSV_ROWS", 11)
    response = viewer.get(PAGE, {"start": "2026-09-01", "end": "2026-09-30", "format": "csv"})
    assert response.status_code == 400 and "12 rows" in response.content.decode()
    monkeypatch.setattr(usage_admin, "MAX_CSV_ROWS", 12)
    response = viewer.get(PAGE, {"start": "2026-09-01", "end": "2026-09-30", "format": "csv"})
    assert response.status_code == 200 and len(response.content.decode().splitlines()) == 1 + 12


def test_the_pickers_list_a_bounded_number_of_names(viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    _ledger(5, hours=3)
    monkeypatch.setattr(usage_admin, "MAX_CHOICES", 2)
    with CaptureQueriesContext(connection) as queries:
        choices = viewer.get(PAGE).context["token_choices"]
    assert [name for _, name in choices] == ["(no token)", "t000", "t001"]  # the first two, and "no token"
    picked = [q["sql"] for q in queries.captured_queries if "DISTINCT" in q["sql"].upper()]
    assert picked and all("LIMIT 2" in sql.upper() for sql in picked), picked  # not every record of the ledger


def test_the_dashboard_data_takes_no_range_and_draws_a_fixed_window(admin_client: Client,
                                                                    make_model: Callable[..., Any]) -> None:
    make_model("sentiment")
    traffic_window.WINDOW.record_success("sentiment", "text-classification", 0.01, 0.001, 0.005, 1)
    response = admin_client.get("/dashboard/data.json", {**WIDEST, "seconds": "999999999"})
    assert response.status_code == 200
    [task] = response.json()["tasks"]
    assert len(task["series"]["t"]) == dashboard.SERIES_S and all(len(v) == dashboard.SERIES_S
                                                                    for v in task["series"].values())


def test_the_token_list_reads_usage_for_its_page_only(admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from models_registry import admin as registry_admin

    _ledger(130)
    asked: list[list[int]] = []
    monkeypatch.setattr(registry_admin, "token_usage", lambda ids: asked.append(ids) or {})
    assert admin_client.get("/admin/models_registry/apitoken/").status_code == 200
    assert [len(ids) for ids in asked] == [100]  # the page's tokens (Django's 100 a page), not all 130


def test_a_models_change_page_shows_its_newest_versions_only(admin_client: Client,
                                                             make_model: Callable[..., Any]) -> None:
    from models_registry.staff.version_admin import SHOWN_VERSIONS
    from models_registry.models import ModelVersion

    model, other = make_model("enc"), make_model("other")
    ModelVersion.objects.bulk_create([ModelVersion(model=m, number=n, source=f"example/v{n}")
                                      for m in (model, other) for n in range(1, SHOWN_VERSIONS + 16)])
    html = admin_client.get(f"/admin/models_registry/registeredmodel/{model.pk}/change/").content.decode()
    shown = [n for n in range(1, SHOWN_VERSIONS + 16) if f"example/v{n}<" in html]
    assert shown == list(range(16, SHOWN_VERSIONS + 16)), shown
