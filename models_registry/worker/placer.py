"""The worker's side of placement across the fleet: who holds what, which channels wait, one loader per cold model."""

from __future__ import annotations

import asyncio
import logging
import time

from models_registry.broker import model_holders
from models_registry.broker.work_layer import WorkLayer
from models_registry.core.model_state import ModelState
from models_registry.worker.model_slots import ModelSlots

logger = logging.getLogger(__name__)

TICK_S = 0.2
HOT_AFTER_S = 1.0  # a backlog over the hot threshold this long asks for another copy
HOT_BATCHES = 2  # the hot threshold: this many full batches waiting in the channel


class Placer:
    """Each tick: refresh this worker's holdings, survey backlogs and holders, start the load placement picks."""

    def __init__(self, layer: WorkLayer, slots: ModelSlots, worker_id: str) -> None:
        self.layer = layer
        self.slots = slots
        self.worker_id = worker_id
        self._held: set[str] = set()
        self._claims: set[str] = set()
        self._hot_since: dict[str, float] = {}

    async def run(self) -> None:
        """Tick forever; broker trouble only delays placement."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning("placement tick failed: %s", error)
            await asyncio.sleep(TICK_S)

    async def tick(self) -> None:
        """One round of placement."""
        held = {name for name, slot in self.slots.items() if slot.state == ModelState.READY}
        await model_holders.refresh(self.layer, self.worker_id, sorted(held), sorted(self._held - held))
        self._held = held
        retiring = [name for name, _ in self.slots.items() if name not in self.slots.specs]
        backlog, holders = await model_holders.survey(self.layer, self.worker_id, [*self.slots.specs, *retiring])
        self.slots.backlog = backlog
        await self.slots.place(backlog, holders, hot=self._hot(backlog), claim=self._claim)
        for name in list(self._claims):
            slot = self.slots.get(name)
            if slot is None or slot.state != ModelState.LOADING:
                self._claims.discard(name)
                await model_holders.unclaim(self.layer, name)

    def _hot(self, backlog: dict[str, int]) -> set[str]:
        """Models whose backlog stayed over HOT_BATCHES full batches for HOT_AFTER_S."""
        now = time.time()
        hot: set[str] = set()
        for name, spec in self.slots.specs.items():
            threshold = HOT_BATCHES * max((t.policy.max_batch_size for t in spec.tasks.values()), default=1)
            if backlog.get(name, 0) < threshold:
                self._hot_since.pop(name, None)
                continue
            if now - self._hot_since.setdefault(name, now) >= HOT_AFTER_S:
                hot.add(name)
        return hot

    async def _claim(self, name: str, why: str) -> bool:
        if why == "keep_loaded":
            return True  # every worker holds a pinned model
        if not await model_holders.claim(self.layer, name, self.worker_id):
            return False
        self._claims.add(name)
        return True

    async def retire(self) -> None:
        """A clean exit: this worker holds nothing any more."""
        await model_holders.refresh(self.layer, self.worker_id, [], sorted(self._held))
        for name in self._claims:
            await model_holders.unclaim(self.layer, name)
