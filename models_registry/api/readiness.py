"""The checks behind GET /ready: database, broker, a live worker serving an enabled model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from models_registry.broker.work_layer import work_layer
from models_registry.core.model_state import ModelState, servable
from models_registry.catalog import lookups

CHECK_TIMEOUT_S = 2.0


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
        specs = await lookups.get_specs()
        view = await lookups.get_workers()
        enabled = {name for name, spec in specs.items() if spec.enabled}
        serving = sorted(n for n, s in view.model_states.items() if n in enabled and s.get("state") == ModelState.READY)
        # Registered, enabled, not loaded now, and fits a live worker: the first request loads it.
        on_demand = sorted(n for n, s in view.model_states.items() if n in enabled and n not in serving and servable(s))
        checks["workers_alive"] = len(view.workers)
        lists = {"models_ready": serving, "models_loadable_on_demand": on_demand,
                 "models_not_served": sorted(enabled - set(serving) - set(on_demand))}
        for key, names in lists.items():
            if shown is None:
                checks[f"{key}_count"] = len(names)
            else:
                checks[key] = [name for name in names if shown(name)]
        if not serving and not on_demand:
            missing.append("a live worker serving an enabled model")
    return {"status": "ready" if not missing else "not_ready", "checks": checks, "missing": missing}
