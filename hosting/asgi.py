"""ASGI entry point: the project's Django application wrapped by the app (models_registry.asgi), as any project's.

Before it, the embedded Redis this install uses when REDIS_URL is unset (hosting.embedded_redis).
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from models_registry.asgi import with_inference

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

django_application = get_asgi_application()

if settings.EMBEDDED_REDIS:
    from hosting import embedded_redis

    embedded_redis.ensure_running(settings.VAR_DIR)

application = with_inference(django_application)
