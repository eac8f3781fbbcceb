"""The usage ledger's flush: Redis counters to database rows, every few seconds, by each web process.

Nothing is lost or counted twice when flushers race or die, because:

1. a flush starts with one Lua script that RENAMEs the live hash to a key of its own
   (`ledger:flush:<id>`) and notes the id in an index (a sorted set by time): requests
   counted from then on go to a fresh live hash, and no other flusher takes these counts;
2. the rows are upserted (added to) in ONE database transaction that also inserts the
   flush id (models.LedgerFlush, unique): a flush applied twice fails on its id and adds
   nothing;
3. only after the commit are the flush key and its index entry deleted.

A flusher killed between 1 and 3 leaves its key and index entry: any web process applies
flush keys older than STALE_S on its next round (a restarted one included). If it had
committed already, the id's row says so and the key is just deleted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

from channels.layers import get_channel_layer
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.utils import timezone

from models_registry.core.conf import conf
from models_registry.models import LedgerFlush, UsageRecord
from models_registry.observe import ledger

logger = logging.getLogger(__name__)

STALE_MIN_S = 10.0  # a flush key older than this (and 3 rounds) is taken over: its flusher died
KEEP_FLUSH_IDS = timedelta(days=30)  # an applied flush's id outlives any flush key left behind
HANDOFF = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
"""
_COLUMNS = ("requests", "input_tokens", "output_tokens", "compute_us", "errors", "images", "audio_ms")


def flush_key(prefix: str, flush_id: str) -> str:
    """Where one flush's counts wait until its rows are committed."""
    return f"{prefix}ledger:flush:{flush_id}"


def index_key(prefix: str) -> str:
    """The flushes under way (or abandoned): id -> when it started."""
    return f"{prefix}ledger:flushes"


def _upsert(rows: dict[ledger.Key, dict[str, int]]) -> None:
    """Add rows to the ledger (one statement per row, inserted or added to: SQLite and PostgreSQL alike)."""
    quote = connection.ops.quote_name
    table = quote(UsageRecord._meta.db_table)
    columns = ", ".join(quote(c) for c in ("token_id", "model", "version", "hour", *_COLUMNS))
    added = ", ".join(f"{quote(c)} = {table}.{quote(c)} + excluded.{quote(c)}" for c in _COLUMNS)
    sql = (f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * (4 + len(_COLUMNS)))}) "
           f"ON CONFLICT ({', '.join(quote(c) for c in ('token_id', 'model', 'version', 'hour'))}) DO UPDATE SET {added}")
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(*key, *(values.get(c, 0) for c in _COLUMNS)) for key, values in sorted(rows.items())])


def apply(client: Any, prefix: str, flush_id: str) -> int:
    """Commit one flush key's counts to the ledger, once, then delete the key; the rows it added to."""
    key = flush_key(prefix, flush_id)
    rows = ledger.rows_of(client.hgetall(key))
    if rows:
        try:
            with transaction.atomic():
                LedgerFlush.objects.create(flush_id=flush_id)  # first: a second apply stops here
                _upsert(rows)
        except IntegrityError:
            if not LedgerFlush.objects.filter(flush_id=flush_id).exists():
                raise
            logger.info("ledger flush %s was applied already: its counts are dropped from Redis", flush_id)
            rows = {}
    pipe = client.pipeline(transaction=False)
    pipe.delete(key)
    pipe.zrem(index_key(prefix), flush_id)
    pipe.execute()
    return len(rows)


def flush(client: Any, prefix: str, stale_s: float = STALE_MIN_S, now: float | None = None) -> int:
    """One round: hand the live counts off and apply them, and every abandoned flush; the rows added to."""
    now = time.time() if now is None else now
    flush_id = f"{os.getpid()}-{uuid.uuid4().hex}"  # whose it is, for an operator reading Redis
    ids = []
    if client.eval(HANDOFF, 3, prefix + ledger.LIVE_KEY, flush_key(prefix, flush_id), index_key(prefix),
                   flush_id, now):
        ids.append(flush_id)
    ids += [raw.decode() for raw in client.zrangebyscore(index_key(prefix), "-inf", now - stale_s)]
    return sum(apply(client, prefix, one) for one in ids)


def forget_old_flushes() -> int:
    """Delete the ids of flushes applied long ago (no flush key lives that long); how many."""
    deleted, _ = LedgerFlush.objects.filter(applied_at__lt=timezone.now() - KEEP_FLUSH_IDS).delete()
    return deleted


class Flusher(threading.Thread):
    """A web process' flusher: a daemon thread (sync Redis and ORM, off the event loop) flushing every interval_s."""

    def __init__(self, redis_url: str, prefix: str, interval_s: float) -> None:
        super().__init__(name="ledger-flush", daemon=True)
        self.redis_url, self.prefix, self.interval_s = redis_url, prefix, interval_s
        self.stale_s = max(STALE_MIN_S, 3 * interval_s)

    def run(self) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
        rounds = 0
        while True:
            time.sleep(self.interval_s)
            close_old_connections()
            try:
                flush(client, self.prefix, self.stale_s)
                if rounds % 720 == 0:
                    forget_old_flushes()
            except Exception as error:  # the broker or the database is away: the counts wait in Redis
                logger.warning("usage ledger not flushed: %s: %s", type(error).__name__, error)
            finally:
                close_old_connections()
            rounds += 1


decided = False  # whether this process' flusher was started, or found not wanted (the front door asks once)
_lock = threading.Lock()


def decide() -> None:
    """Start this web process' flusher, once (HOSTING_USAGE_FLUSH_S 0: none, as in the Django tier)."""
    global decided
    with _lock:
        if not decided and conf.USAGE_FLUSH_S > 0:
            Flusher(conf.REDIS_URL, get_channel_layer().prefix, conf.USAGE_FLUSH_S).start()
        decided = True
