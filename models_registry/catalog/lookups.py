"""Registry, worker and token lookups for the web process, cached for a second.

The inference path must not pay two database queries per request; a change in the admin
reaches the views within HOSTING_CONFIG_REFRESH_S, like it reaches the workers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from models_registry.core.conf import conf
from models_registry.core.model_state import ModelState, best_report
from models_registry.core.task_key import TaskKey
from models_registry.catalog import heartbeats
from models_registry.catalog.rollout import ready_everywhere, serving, wire_name
from models_registry.catalog.specs import ModelSpec, read_specs


@dataclass(frozen=True)
class WorkerView:
    """What the web process knows of the live workers."""

    workers: list[Any]
    model_states: dict[str, dict[str, Any]]  # best state of each model over live workers
    drain_rates: dict[TaskKey, float]  # items/s per (model, task), summed over live workers
    # items/s per (model, task) the live workers can drain, from their measured cost per token
    capacities: dict[TaskKey, float] = field(default_factory=dict)
    # {model: versions ready on every worker serving it}: the web routes only to these (catalog.rollout)
    ready: dict[str, set[int]] = field(default_factory=dict)


def _read_workers() -> WorkerView:
    workers = heartbeats.live_workers()
    states: dict[str, dict[str, Any]] = {}
    rates: dict[TaskKey, float] = {}
    capacities: dict[TaskKey, float] = {}
    for worker in workers:
        if worker.draining:
            continue
        for name, state in (worker.models_state or {}).items():
            for task, rate in (state.get("drain_rates") or {}).items():
                key = TaskKey(name, task)
                rates[key] = rates.get(key, 0.0) + float(rate)
            best = best_report([states.get(name), state])
            if best is not None:
                states[name] = best
            if state.get("state") != ModelState.READY:
                continue  # only a ready worker drains: the others add no capacity
            for task, (s_per_token, tokens_per_item) in (state.get("costs") or {}).items():
                if s_per_token > 0 and tokens_per_item > 0:  # workers compute in parallel: capacities add up
                    key = TaskKey(name, task)
                    capacities[key] = capacities.get(key, 0.0) + 1.0 / (s_per_token * tokens_per_item)
    ready = ready_everywhere(w.models_state for w in workers if not w.draining)
    _alias_versions(_fresh_specs(), ready, states, rates, capacities)
    return WorkerView(workers=workers, model_states=states, drain_rates=rates, capacities=capacities, ready=ready)


def _alias_versions(specs: dict[str, ModelSpec], ready: dict[str, set[int]], states: dict[str, dict[str, Any]],
                    rates: dict[TaskKey, float], capacities: dict[TaskKey, float]) -> None:
    """Workers report each version by its wire name: a model's own name reads as the version that answers it."""
    for name, spec in specs.items():
        if spec.base:  # an adapter's state is its base's (answered by the same workers and queues)
            wire = wire_name(spec.base, serving(spec.rollout, ready.get(spec.base, set()))) if spec.version else spec.base
            if wire in states:
                states[name] = states[wire]
            continue
        if not spec.version:
            continue
        wire = wire_name(name, serving(spec.rollout, ready.get(name, set())))
        if wire in states:
            states[name] = states[wire]
        for task in spec.tasks:
            for table in (rates, capacities):
                if TaskKey(wire, task) in table:
                    table[TaskKey(name, task)] = table[TaskKey(wire, task)]


def answering(spec: ModelSpec, view: WorkerView) -> str:
    """The wire name of the version answering the model's requests (its own name for a model without versions)."""
    name = spec.served_as  # an adapter is answered by its base's workers
    return wire_name(name, serving(spec.rollout, view.ready.get(name, set()))) if spec.version else name


def fresh_connection(loader: Any) -> Any:
    """Wrap a sync ORM loader so it first drops stale connections.

    The API handler runs no request_started receivers, so this path does their job.
    """

    def run(*args: Any) -> Any:
        close_old_connections()
        return loader(*args)

    return run


class _Cached:
    """A value refreshed from a sync loader at most once per ttl, one refresh at a time."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.value: Any = None
        self.loaded_at = float("-inf")
        self.lock: asyncio.Lock | None = None

    async def get(self) -> Any:
        if time.monotonic() - self.loaded_at < conf.CONFIG_REFRESH_S:
            return self.value
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if time.monotonic() - self.loaded_at >= conf.CONFIG_REFRESH_S:
                self.value = await sync_to_async(fresh_connection(self.loader))()
                self.loaded_at = time.monotonic()
        return self.value

    def peek(self) -> Any:
        """The value as cached, without waiting (None: never loaded); a stale one is refreshed in the background."""
        if time.monotonic() - self.loaded_at >= conf.CONFIG_REFRESH_S and not (self.lock and self.lock.locked()):
            self.refreshing = asyncio.ensure_future(self.get())  # held: a task nobody references may be collected
        return self.value

    def reset(self) -> None:
        self.loaded_at = float("-inf")
        self.lock = None  # a test's next event loop makes its own (a lock once waited on is bound to its loop)


_specs = _Cached(read_specs)
_workers = _Cached(_read_workers)


def _fresh_specs() -> dict[str, ModelSpec]:
    """The registry as _specs holds it while that is fresh (a snapshot refreshes the specs first), else read now.

    The workers' view names versions by the registry's rollouts: it read the registry again at
    every refresh, a second time in the second the specs' own refresh had just read it.
    """
    if time.monotonic() - _specs.loaded_at < conf.CONFIG_REFRESH_S:
        return _specs.value  # type: ignore[no-any-return]
    return read_specs()


@dataclass(frozen=True)
class Catalog:
    """What one request reads of the registry and the workers, read once at the start of its path."""

    specs: dict[str, ModelSpec]
    workers: WorkerView


async def snapshot() -> Catalog:
    """The registered models and the live workers, both cached, for one request."""
    return Catalog(await _specs.get(), await _workers.get())


async def get_specs() -> dict[str, ModelSpec]:
    """Every registered model (cached)."""
    return await _specs.get()


def peek_specs() -> dict[str, ModelSpec] | None:
    """Every registered model as cached now, never waiting for the database (the fast 503; None: not loaded yet)."""
    return _specs.peek()


async def get_workers() -> WorkerView:
    """Live workers and the states they report (cached)."""
    return await _workers.get()


def reset() -> None:
    """Forget cached values (tests, and after the admin saves)."""
    _specs.reset()
    _workers.reset()
