"""The checks behind GET /ready: database, broker, and every model the live workers are meant to serve is served.

The fleet's part is catalog.fleet_readiness (the policy, documented there and in docs/operating.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from models_registry.broker.work_layer import work_layer
from models_registry.catalog import fleet_readiness, lookups

CHECK_TIMEOUT_S = 2.0
NO_WORKER = "a live worker serving an enabled model"
ALL_MEANT = "every model the live workers are meant to serve ready (models_not_ready)"


def _database_ok() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


async def _broker_ok() -> None:
    conn = work_layer().connection(0)  # channels_redis' own pool: the same path requests use
    await conn.ping()


async def check(shown: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """{"status": "ready"|"not_ready", "checks": {...}, "missing": [...]}.

    shown: which models the caller may see by name (None: none, only how many). The
    verdict counts every model whatever the caller sees.
    """
    checks: dict[str, Any] = {}
    missing: list[str] = []
    try:
        await asyncio.wait_for(sync_to_async(lookups.fresh_connection(_database_ok))(), CHECK_TIMEOUT_S)
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {type(error).__name__}"
        missing.append("database")
    try:
        await asyncio.wait_for(_broker_ok(), CHECK_TIMEOUT_S)
        checks["broker"] = "ok"
    except Exception as error:
        checks["broker"] = f"error: {type(error).__name__}"
        missing.append("broker")
    if "database" not in missing:
        specs = await lookups.get_specs()  # first: the workers' view names versions by these (lookups._fresh_specs)
        view = await lookups.get_workers()
        fleet = fleet_readiness.assess(specs, view)
        checks["workers_alive"] = len(view.workers)
        lists = {"models_ready": fleet.ready, "models_loadable_on_demand": fleet.on_demand,
                 "models_not_ready": fleet.not_ready, "models_not_served": fleet.not_served}
        for key, names in lists.items():
            if shown is None:
                checks[f"{key}_count"] = len(names)
            else:
                checks[key] = [name for name in names if shown(name)]
        if not fleet.serves_any:
            missing.append(NO_WORKER)
        if not fleet.serves_all_meant:
            missing.append(ALL_MEANT)
    return {"status": "ready" if not missing else "not_ready", "checks": checks, "missing": missing}
