"""A catalog snapshot reads the registry once per refresh: the workers' view reuses the specs just read."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.catalog import lookups


@pytest.mark.django_db(transaction=True)
async def test_a_snapshot_reads_the_registry_once_and_a_reset_reads_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups.reset()
    calls: list[int] = []
    real = lookups.read_specs

    def counting() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(lookups, "read_specs", counting)
    monkeypatch.setattr(lookups._specs, "loader", counting)
    await lookups.snapshot()
    assert len(calls) == 1  # the specs' refresh; the workers' view took what it read
    lookups.reset()
    await lookups.get_workers()  # the specs are not fresh: the workers' view reads them itself
    assert len(calls) == 2
    lookups.reset()
