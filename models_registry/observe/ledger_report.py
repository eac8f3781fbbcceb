"""Reading the usage ledger: its rows over a range, grouped, as GET /v1/usage, the admin and usage_report show them."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from typing import IO, Any

from django.db.models import Sum

from models_registry.models import UsageRecord
from models_registry.observe.ledger import HOUR_S

GROUPS = ("token", "model", "version", "hour")  # what rows may be grouped by (the API: all but token)
_GROUP_COLUMNS = {"token": "token_id", "model": "model", "version": "version", "hour": "hour"}
_SUMS = ("requests", "input_tokens", "output_tokens", "compute_us", "errors", "images", "audio_ms")
CSV_COLUMNS = ("token_id", "token", "model", "version", "start_time", "end_time", "requests", "input_tokens",
               "output_tokens", "compute_seconds", "errors", "images", "audio_seconds")


def _grouped(token_ids: Iterable[int] | None, start: int, end: int, group_by: Iterable[str],
             model: str | None) -> tuple[Any, list[str]]:
    """(the grouped sums as a queryset, the groups) of rows' arguments."""
    groups = [g for g in GROUPS if g in set(group_by) | ({"model"} if "version" in group_by else set())]
    columns = [_GROUP_COLUMNS[g] for g in groups]
    sums = _records(token_ids, start, end, model).values(*columns).annotate(
        **{f"sum_{c}": Sum(c) for c in _SUMS}).order_by(*columns)
    return sums, groups


def _records(token_ids: Iterable[int] | None, start: int, end: int, model: str | None) -> Any:
    """The ledger's records of the hours that overlap [start, end), of those tokens (None: all) and that model."""
    records = UsageRecord.objects.filter(hour__gt=start - HOUR_S, hour__lt=end)
    if token_ids is not None:
        records = records.filter(token_id__in=list(token_ids))
    if model:
        records = records.filter(model=model)
    return records


def rows(token_ids: Iterable[int] | None, start: int, end: int, group_by: Iterable[str],
         model: str | None = None) -> list[dict[str, Any]]:
    """The ledger's sums over the hours that overlap [start, end) (unix seconds), one row per group, in group order.

    token_ids None: every token. A version is a model's: grouping by version groups by model too.
    Each row names the model (null when not grouped by it), and, as grouped: the token_id, the
    version, the hour's start_time and end_time; then requests, input_tokens, output_tokens,
    compute_seconds, errors, images, audio_seconds.
    """
    sums, groups = _grouped(token_ids, start, end, group_by, model)
    return [_row(found, groups) for found in sums]


def iter_rows(token_ids: Iterable[int] | None, start: int, end: int, group_by: Iterable[str],
              model: str | None = None) -> Iterator[dict[str, Any]]:
    """rows(), read from the database a chunk at a time rather than held whole."""
    sums, groups = _grouped(token_ids, start, end, group_by, model)
    return (_row(found, groups) for found in sums.iterator(chunk_size=2000))


def page(token_ids: Iterable[int] | None, start: int, end: int, group_by: Iterable[str], model: str | None,
         offset: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """limit of rows() from offset on, and whether more follow."""
    sums, groups = _grouped(token_ids, start, end, group_by, model)
    found = [_row(row, groups) for row in sums[offset:offset + limit + 1]]
    return found[:limit], len(found) > limit


def totals(token_ids: Iterable[int] | None, start: int, end: int, model: str | None = None) -> dict[str, int]:
    """requests, input_tokens, output_tokens and errors summed over everything rows() would hold."""
    found = _records(token_ids, start, end, model).aggregate(
        **{key: Sum(key) for key in ("requests", "input_tokens", "output_tokens", "errors")})
    return {key: int(value or 0) for key, value in found.items()}


def count(token_ids: Iterable[int] | None, start: int, end: int, model: str | None = None) -> int:
    """How many records the ledger holds there: the rows of a grouping by token, version and hour."""
    return int(_records(token_ids, start, end, model).count())


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


def tokens_in(token_ids: Iterable[int] | None, start: int, end: int, model: str | None = None) -> list[int]:
    """The ids of the tokens with records there."""
    return list(_records(token_ids, start, end, model).values_list("token_id", flat=True).distinct().order_by())


def token_names(token_ids: Iterable[int]) -> dict[int, str]:
    """{token id: name} for the ids given (a deleted token has none; 0 is "(no token)")."""
    from models_registry.models import ANONYMOUS_TOKEN, ApiToken

    names = dict(ApiToken.objects.filter(pk__in=set(token_ids)).values_list("pk", "name"))
    names[ANONYMOUS_TOKEN] = "(no token)"
    return names


def write_csv(found: Iterable[dict[str, Any]], out: IO[str], names: dict[int, str] | None = None) -> None:
    """The rows as CSV with a header (CSV_COLUMNS; token names looked up, or from names, blank where not grouped)."""
    if names is None:
        found = list(found)
        names = token_names(row["token_id"] for row in found if "token_id" in row)
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in found:
        named = {**row, "token": names.get(row["token_id"], f"#{row['token_id']} (deleted)")} if "token_id" in row \
            else row
        writer.writerow(named)
