"""models_registry.asgi: the objects alive once the application is built are kept out of the collector's walks."""

from __future__ import annotations

import gc

from django.core.asgi import get_asgi_application

from models_registry.asgi import with_inference


def test_what_is_alive_when_the_application_is_built_is_frozen_once() -> None:
    gc.unfreeze()  # the test process may have frozen some already
    try:
        with_inference(get_asgi_application())
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with_inference(get_asgi_application())
        assert gc.get_freeze_count() <= frozen  # once per process: later objects are the collector's as ever
    finally:
        gc.unfreeze()  # the test process's objects back in the generations
