"""The admin's usage page: the ledger per token or per model over a range, a chart of it, and its CSV."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from models_registry.jobs.admin import ReadOnlyAdmin
from models_registry.models import UsageRecord
from models_registry.observe import ledger_report
from models_registry.observe.ledger import HOUR_S

DAY_S = 24 * HOUR_S
CHART_WIDTH, CHART_HEIGHT = 720, 160


def _day(value: str | None, default: dt.date) -> dt.date:
    try:
        return dt.date.fromisoformat(value) if value else default
    except ValueError:
        return default


def _unix(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def chart(hourly: list[dict[str, Any]], start: int, end: int) -> dict[str, Any]:
    """Bars of requests per hour (ranges up to two days) or per day: their geometry for an inline SVG."""
    step = HOUR_S if end - start <= 2 * DAY_S else DAY_S
    buckets = [0] * max(1, (end - start + step - 1) // step)
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
    return {"bars": bars, "top": top, "width": CHART_WIDTH, "height": CHART_HEIGHT,
            "step": "hour" if step == HOUR_S else "day"}


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """The usage ledger, read-only: one page per token or per model over a range, with a chart and a CSV export."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The usage page (GET start, end: dates; by: token or model; token, model: one of them; format=csv)."""
        if not self.has_view_permission(request):
            return self.admin_site.login(request) if not request.user.is_authenticated else HttpResponse(status=403)
        today = dt.datetime.now(dt.UTC).date()
        first = _day(request.GET.get("start"), today - dt.timedelta(days=6))
        last = max(first, _day(request.GET.get("end"), today))
        start, end = _unix(first), _unix(last) + DAY_S
        by = "model" if request.GET.get("by") == "model" else "token"
        token = request.GET.get("token", "")
        tokens = [int(token)] if token.isdigit() else None
        model = request.GET.get("model") or None
        if request.GET.get("format") == "csv":
            out = io.StringIO()
            ledger_report.write_csv(ledger_report.rows(tokens, start, end, ["token", "version", "hour"], model), out)
            response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="usage-{first}-{last}.csv"'
            return response
        table = ledger_report.rows(tokens, start, end, [by], model)
        names = ledger_report.token_names(row["token_id"] for row in table if "token_id" in row)
        for row in table:
            if "token_id" in row:
                row["token_name"] = names.get(row["token_id"], f"#{row['token_id']} (deleted)")
        hourly = ledger_report.rows(tokens, start, end, ["hour"], model)
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": "Usage",
            "table": table, "by": by, "start": first.isoformat(), "end": last.isoformat(), "token": token,
            "model": model or "", "chart": chart(hourly, start, end),
            "totals": {key: sum(row[key] for row in table) for key in ("requests", "input_tokens", "output_tokens",
                                                                        "errors")},
            "csv_query": request.GET.copy().urlencode() + "&format=csv" if request.GET else "format=csv",
            "token_choices": sorted(ledger_report.token_names(
                UsageRecord.objects.values_list("token_id", flat=True).distinct()).items()),
            "model_choices": list(UsageRecord.objects.values_list("model", flat=True).distinct().order_by("model")),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/models_registry/usagerecord/usage.html", context)
