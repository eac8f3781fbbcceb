"""The admin's usage page: the ledger per token or per model over a range, a chart of it, and its CSV.

Every part is bounded before it is computed, whatever the query string asks: a range of at most
MAX_RANGE_DAYS (a wider one is a 400 that says so; 0001-01-01 to 9999-12-31 used to build one bar per
day, 2.47 GB in one web process), at most CHART_BARS bars, PAGE_ROWS rows a page, MAX_CSV_ROWS rows an
export and MAX_CHOICES names in each picker.
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse

from models_registry.jobs.admin import ReadOnlyAdmin
from models_registry.models import UsageRecord
from models_registry.observe import ledger_report
from models_registry.observe.ledger import HOUR_S

DAY_S = 24 * HOUR_S
CHART_WIDTH, CHART_HEIGHT = 720, 160
MAX_RANGE_DAYS = 366  # any calendar year; longer reports: manage.py usage_report
CHART_BARS = 120  # hours up to two days, then days, then as many days a bar as keep it under this
PAGE_ROWS = 100
MAX_CSV_ROWS = 50_000
MAX_CHOICES = 500
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class UsageQuery:
    """What the page's query string asks for, parsed (bad values fall back to the defaults)."""

    first: dt.date
    last: dt.date
    by: str  # token or model
    token: str  # a token id, or "" for every token
    model: str  # a model, or "" for every model
    page: int  # 1-based

    @property
    def start(self) -> int:
        """The range's start, unix seconds (the first day's midnight UTC)."""
        return _unix(self.first)

    @property
    def end(self) -> int:
        """The range's end, unix seconds (the midnight after the last day)."""
        return _unix(self.last) + DAY_S

    @property
    def tokens(self) -> list[int] | None:
        """The one token asked for, or None: every token."""
        return [int(self.token)] if self.token else None

    def refusal(self) -> str:
        """Why the range is not shown ("" when it is)."""
        days = (self.last - self.first).days + 1
        if days <= MAX_RANGE_DAYS:
            return ""
        return (f"{self.first} to {self.last} is {days:,} days; the usage page shows at most {MAX_RANGE_DAYS} days "
                "at a time: pick a shorter range (manage.py usage_report prints longer ones)")


def _day(value: str | None, default: dt.date) -> dt.date:
    try:
        return dt.date.fromisoformat(value) if value else default
    except ValueError:
        return default


def _unix(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def parse(get: QueryDict, today: dt.date) -> UsageQuery:
    """The query of a GET (start, end: dates, the last week by default; by; token; model; page)."""
    first = _day(get.get("start"), today - dt.timedelta(days=6))
    token, page = get.get("token", ""), get.get("page", "")
    return UsageQuery(first=first, last=max(first, _day(get.get("end"), today)),
                      by="model" if get.get("by") == "model" else "token",
                      token=token if token.isdigit() and len(token) < 19 else "", model=get.get("model") or "",
                      page=min(MAX_PAGE, int(page)) if page.isdigit() and len(page) < 8 and int(page) > 0 else 1)


def chart(hourly: list[dict[str, Any]], start: int, end: int) -> dict[str, Any]:
    """Bars of requests per hour (ranges up to two days), per day, or per some days: at most CHART_BARS bars."""
    span = end - start
    step = HOUR_S if span <= 2 * DAY_S else DAY_S
    if span > step * CHART_BARS:  # whole days a bar, as few as keep the bars under CHART_BARS
        step = -(-span // (CHART_BARS * DAY_S)) * DAY_S
    buckets = [0] * max(1, -(-span // step))
    for row in hourly:
        place = (row["start_time"] - start) // step
        if 0 <= place < len(buckets):
            buckets[place] += row["requests"]
    top = max(buckets) or 1
    width = CHART_WIDTH / len(buckets)
    bars = [{"x": round(i * width, 2), "width": round(max(1.0, width - 1), 2),
             "height": round(CHART_HEIGHT * count / top, 2), "y": round(CHART_HEIGHT * (1 - count / top), 2),
             "label": f"{dt.datetime.fromtimestamp(start + i * step, dt.UTC):%Y-%m-%d %H:%M}: {count} requests"}
            for i, count in enumerate(buckets)]
    shown = {HOUR_S: "hour", DAY_S: "day"}.get(step, f"{step // DAY_S} days")
    return {"bars": bars, "top": top, "width": CHART_WIDTH, "height": CHART_HEIGHT, "step": shown}


def _with(get: QueryDict, **changes: Any) -> str:
    """The query string with some parameters set."""
    query = get.copy()
    for key, value in changes.items():
        query[key] = str(value)
    return query.urlencode()


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """The usage ledger, read-only: one page per token or per model over a range, with a chart and a CSV export."""

    template = "admin/models_registry/usagerecord/usage.html"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The usage page (GET start, end: dates; by: token or model; token, model: one of them; page; format=csv)."""
        if not self.has_view_permission(request):
            return self.admin_site.login(request) if not request.user.is_authenticated else HttpResponse(status=403)
        query = parse(request.GET, dt.datetime.now(dt.UTC).date())
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": "Usage",
                   "by": query.by, "start": query.first.isoformat(), "end": query.last.isoformat(),
                   "token": query.token, "model": query.model, **self._choices(), **(extra_context or {})}
        refusal = query.refusal()
        if refusal:  # before any of it is read
            return TemplateResponse(request, self.template, {**context, "refusal": refusal}, status=400)
        model = query.model or None
        if request.GET.get("format") == "csv":
            return self._csv(request, query, context)
        offset = (query.page - 1) * PAGE_ROWS
        table, more = ledger_report.page(query.tokens, query.start, query.end, [query.by], model, offset, PAGE_ROWS)
        names = ledger_report.token_names(row["token_id"] for row in table if "token_id" in row)
        for row in table:
            if "token_id" in row:
                row["token_name"] = names.get(row["token_id"], f"#{row['token_id']} (deleted)")
        hourly = ledger_report.rows(query.tokens, query.start, query.end, ["hour"], model)  # at most 24 x 366
        return TemplateResponse(request, self.template, {
            **context, "table": table, "chart": chart(hourly, query.start, query.end),
            "totals": ledger_report.totals(query.tokens, query.start, query.end, model),
            "rows_from": offset + 1 if table else 0, "rows_to": offset + len(table),
            "previous_query": _with(request.GET, page=query.page - 1) if query.page > 1 else "",
            "next_query": _with(request.GET, page=query.page + 1) if more else "",
            "csv_query": _with(request.GET, format="csv"),
        })

    def _csv(self, request: HttpRequest, query: UsageQuery, context: dict[str, Any]) -> HttpResponse:
        """The export per token, model, version and hour; a 400 on the page over MAX_CSV_ROWS rows."""
        model = query.model or None
        found = ledger_report.count(query.tokens, query.start, query.end, model)  # one row per record
        if found > MAX_CSV_ROWS:
            refusal = (f"this export would hold {found:,} rows; one holds at most {MAX_CSV_ROWS:,}: pick a shorter "
                       "range, a token or a model (manage.py usage_report --csv prints any)")
            return TemplateResponse(request, self.template, {**context, "refusal": refusal}, status=400)
        out = io.StringIO()
        names = ledger_report.token_names(ledger_report.tokens_in(query.tokens, query.start, query.end, model))
        ledger_report.write_csv(ledger_report.iter_rows(query.tokens, query.start, query.end,
                                                        ["token", "version", "hour"], model), out, names)
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-{query.first}-{query.last}.csv"'
        return response

    @staticmethod
    def _choices() -> dict[str, Any]:
        """The token and model pickers: the first MAX_CHOICES of each in the ledger."""
        ids = UsageRecord.objects.order_by("token_id").values_list("token_id", flat=True).distinct()[:MAX_CHOICES]
        models = UsageRecord.objects.order_by("model").values_list("model", flat=True).distinct()[:MAX_CHOICES]
        return {"token_choices": sorted(ledger_report.token_names(ids).items()), "model_choices": list(models),
                "max_choices": MAX_CHOICES, "max_range_days": MAX_RANGE_DAYS}
