"""`manage.py runworker inference`: the app's worker, after starting the embedded Redis if this install uses it."""

from __future__ import annotations

from django.conf import settings

from hosting import embedded_redis
from models_registry.management.commands.runworker import Command as AppRunworker


class Command(AppRunworker):
    """The app's runworker (models_registry.management.commands.runworker) on this install's broker."""

    def before_run(self) -> None:
        """Start the embedded Redis when REDIS_URL is unset: only once the app has checked the command line."""
        if settings.EMBEDDED_REDIS:
            embedded_redis.ensure_running(settings.VAR_DIR)
