"""The channel layer's operations are declared once, and a layer without them is refused at start."""

from __future__ import annotations

from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from models_registry.broker.layer import HostingChannelLayer
from models_registry.broker.work_layer import WorkLayer, require_work_layer, work_layer

PLAIN_LAYER = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                           "CONFIG": {"hosts": ["redis://127.0.0.1:1"]}}}


def test_the_hosting_layer_has_every_declared_operation() -> None:
    layer = HostingChannelLayer(hosts=["redis://127.0.0.1:1"])
    assert isinstance(layer, WorkLayer)
    assert require_work_layer(layer) is layer


def test_a_plain_channels_redis_layer_is_refused_with_what_to_set() -> None:
    with pytest.raises(ImproperlyConfigured, match="BACKEND to models_registry.broker.layer.HostingChannelLayer"):
        require_work_layer(RedisChannelLayer(hosts=["redis://127.0.0.1:1"]))


def test_the_configured_layer_is_checked_when_first_used(settings: Any) -> None:
    assert isinstance(work_layer(), HostingChannelLayer)
    settings.CHANNEL_LAYERS = PLAIN_LAYER
    with pytest.raises(ImproperlyConfigured, match="channels_redis.core.RedisChannelLayer"):
        work_layer()


def test_runworker_refuses_a_plain_layer_before_loading_anything(settings: Any) -> None:
    settings.CHANNEL_LAYERS = PLAIN_LAYER
    with pytest.raises(CommandError, match="lacks the operations"):
        call_command("runworker", "inference")


def test_runworker_serves_the_inference_channel_only() -> None:
    with pytest.raises(CommandError, match="'inference' channel only"):
        call_command("runworker", "inference", "other")
