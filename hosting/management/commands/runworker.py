"""`manage.py runworker inference`: the app's worker, after starting the embedded Redis if this install uses it."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from hosting import embedded_redis
from models_registry.management.commands.runworker import Command as AppRunworker


class Command(AppRunworker):
    """The app's runworker (models_registry.management.commands.runworker) on this install's broker."""

    def handle(self, *args: Any, **options: Any) -> None:
        """Start the embedded Redis when REDIS_URL is unset, then run the app's worker."""
        if settings.EMBEDDED_REDIS:
            embedded_redis.ensure_running(settings.VAR_DIR)
        super().handle(*args, **options)
