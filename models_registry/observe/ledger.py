"""The usage ledger's counters: per API token, model version and UTC hour, added up in one Redis hash.

The web records each request once (api.pipeline.request_record): its fields() go out as HINCRBYs in the
pipeline its event-loop turn already sends (broker.deferred), into one hash per broker: no
database write per request. Every few seconds a web process moves that hash to the database
(observe.ledger_flush, which reads it back with rows_of). A field of the hash is
`token|model|version|hour|column`; model names are slugs, so `|` never appears in one.
"""

from __future__ import annotations

import time
from typing import Any

from models_registry.media import item as media_item

HOUR_S = 3600
# A hash field's last part -> the ledger column it adds to (models.UsageRecord).
COLUMNS = {"r": "requests", "i": "input_tokens", "o": "output_tokens", "c": "compute_us", "e": "errors",
           "m": "images", "a": "audio_ms"}
Key = tuple[int, str, int, int]  # token id, model, version, hour (unix seconds of its start)


LIVE_KEY = "ledger"  # the hash every web process counts into, after the broker's key prefix as every key of ours


def fields(token_id: int, model: str, version: int, *, input_tokens: int = 0, output_tokens: int = 0,
           compute_s: float = 0.0, media: media_item.MediaCount = media_item.NO_MEDIA, error: bool = False,
           now: float | None = None) -> dict[str, int]:
    """The hash fields one request adds to, and by how much (zeros left out), in the hour holding now.

    media: the images and audio seconds among the request's inputs (media.item.count).
    """
    images, audio_s = media.images, media.audio_s
    now = time.time() if now is None else now
    base = f"{token_id}|{model}|{version}|{int(now // HOUR_S) * HOUR_S}|"
    amounts = {"r": 1, "e": int(error), "i": input_tokens, "o": output_tokens, "c": round(compute_s * 1_000_000),
               "m": images, "a": round(audio_s * 1000)}
    return {base + column: value for column, value in amounts.items() if value}


def rows_of(raw: dict[Any, Any]) -> dict[Key, dict[str, int]]:
    """The ledger rows a hash of counts adds to: {(token, model, version, hour): {column: value}}.

    A field that does not parse (written by a newer peer, or by hand) is left out, not fatal.
    """
    rows: dict[Key, dict[str, int]] = {}
    for field, value in raw.items():
        text = field.decode() if isinstance(field, bytes) else str(field)
        parts = text.split("|")
        if len(parts) != 5 or parts[4] not in COLUMNS:
            continue
        try:
            key = (int(parts[0]), parts[1], int(parts[2]), int(parts[3]))
            amount = int(value)
        except ValueError:
            continue
        row = rows.setdefault(key, {})
        row[COLUMNS[parts[4]]] = row.get(COLUMNS[parts[4]], 0) + amount
    return rows
