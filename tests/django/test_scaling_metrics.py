"""The autoscaler's inputs in /metrics (pending items, oldest wait, busy share) and the scaling rule applied to them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from channels.layers import get_channel_layer
from django.test import Client

from models_registry.broker.admission import pending_key
from models_registry.core.scaling import PENDING_ITEMS_PER_WORKER, desired_workers
from models_registry.models import RegisteredModel, WorkerHeartbeat
from models_registry.catalog import version_changes

pytestmark = pytest.mark.django_db(transaction=True)


def sample(text: str, name: str, labels: str = "") -> float:
    found = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    assert found, f"{name}{labels} not in /metrics"
    return float(found.group(1))


def test_pending_items_of_every_version_drive_the_worker_count(
        broker: str, make_model: Callable[..., RegisteredModel], heartbeat: Callable[..., Any], settings: Any) -> None:
    settings.HOSTING_METRICS_TOKEN = ""
    enc = make_model("enc", task="feature-extraction", timeout_s=30)
    version_changes.record(enc)
    enc.source = "example/enc-2"
    enc.save()
    version_changes.record(enc, "canary", 50)  # v2 beside v1: both queues count
    layer, conn, now = get_channel_layer(), redis.Redis.from_url(broker), time.time()
    live = {f"a{i}": now + 30 - 4 for i in range(100)}  # admitted 4 s ago (deadline = admitted + timeout_s)
    canary = {f"b{i}": now + 30 - 1 for i in range(60)}
    conn.zadd(pending_key(layer, "enc.v1", "feature-extraction"), live)
    conn.zadd(pending_key(layer, "enc.v2", "feature-extraction"), {**canary, "gone": now - 1})  # expired: not counted
    heartbeat({"enc.v1": {"state": "ready"}}, worker_id="w1")
    WorkerHeartbeat.objects.filter(worker_id="w1").update(busy_fraction=0.75)
    heartbeat({"enc.v1": {"state": "ready"}}, worker_id="w2")

    text = Client().get("/metrics").content.decode()
    labels = '{model="enc",task="feature-extraction"}'
    pending = sample(text, "hosting_queue_pending_items", labels)
    assert pending == 160
    assert 3.5 <= sample(text, "hosting_queue_oldest_wait_seconds", labels) <= 10
    assert sample(text, "hosting_workers_busy_ratio") == pytest.approx(0.375)
    assert desired_workers(pending) == 3 == -(-160 // PENDING_ITEMS_PER_WORKER)
