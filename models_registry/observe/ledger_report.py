"""Reading the usage ledger: its rows over a range, grouped, as GET /v1/usage, the admin and usage_report show them."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import IO, Any

from django.db.models import Sum

from models_registry.models import UsageRecord
from models_registry.observe.ledger import HOUR_S

GROUPS = ("token", "model", "version", "hour")  # what rows may be grouped by (the API: all but token)
_GROUP_COLUMNS = {"token": "token_id", "model": "model", "version": "version", "hour": "hour"}
_SUMS = ("requests", "input_tokens", "output_tokens", "compute_us", "errors", "images", "audio_ms")
CSV_COLUMNS = ("token_id", "token", "model", "version", "start_time", "end_time", "requests", "input_tokens",
               "output_tokens", "compute_seconds", "errors", "images", "audio_seconds")


def rows(token_ids: Iterable[int] | None, start: int, end: int, group_by: Iterable[str],
         model: str | None = None) -> list[dict[str, Any]]:
    """The ledger's sums over the hours that overlap [start, end) (unix seconds), one row per group, in group order.

    token_ids None: every token. A version is a model's: grouping by version groups by model too.
    Each row names the model (null when not grouped by it), and, as grouped: the token_id, the
    version, the hour's start_time and end_time; then requests, input_tokens, output_tokens,
    compute_seconds, errors, images, audio_seconds.
    """
    groups = [g for g in GROUPS if g in set(group_by) | ({"model"} if "version" in group_by else set())]
    records = UsageRecord.objects.filter(hour__gt=start - HOUR_S, hour__lt=end)
    if token_ids is not None:
        records = records.filter(token_id__in=list(token_ids))
    if model:
        records = records.filter(model=model)
    columns = [_GROUP_COLUMNS[g] for g in groups]
    sums = records.values(*columns).annotate(**{f"sum_{c}": Sum(c) for c in _SUMS}).order_by(*columns)
    return [_row(found, groups) for found in sums]


def _row(found: dict[str, Any], groups: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    if "token" in groups:
        row["token_id"] = found["token_id"]
    row["model"] = found.get("model")
    if "version" in groups:
        row["version"] = found["version"]
    if "hour" in groups:
        row["start_time"], row["end_time"] = found["hour"], found["hour"] + HOUR_S
    row.update(requests=found["sum_requests"], input_tokens=found["sum_input_tokens"],
               output_tokens=found["sum_output_tokens"], compute_seconds=round(found["sum_compute_us"] / 1e6, 6),
               errors=found["sum_errors"], images=found["sum_images"],
               audio_seconds=round(found["sum_audio_ms"] / 1000, 3))
    return row


def token_names(token_ids: Iterable[int]) -> dict[int, str]:
    """{token id: name} for the ids given (a deleted token has none; 0 is "(no token)")."""
    from models_registry.models import ANONYMOUS_TOKEN, ApiToken

    names = dict(ApiToken.objects.filter(pk__in=set(token_ids)).values_list("pk", "name"))
    names[ANONYMOUS_TOKEN] = "(no token)"
    return names


def write_csv(found: list[dict[str, Any]], out: IO[str]) -> None:
    """The rows as CSV with a header (CSV_COLUMNS; token names looked up, blank where not grouped)."""
    names = token_names(row["token_id"] for row in found if "token_id" in row)
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in found:
        named = {**row, "token": names.get(row["token_id"], f"#{row['token_id']} (deleted)")} if "token_id" in row \
            else row
        writer.writerow(named)
