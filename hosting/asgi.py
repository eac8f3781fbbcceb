"""ASGI entry point: HTTP only (the API on its front door, models_registry.api.front_door; the rest on Django's).

Inference messages never reach an ASGI application: workers pull them from Redis
(models_registry.worker.process), leased, in batches.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()  # sets Django up before the imports below

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from models_registry.api.front_door import ApiASGIHandler  # noqa: E402
from models_registry.api.site_bounds import bounded, no_encoded_slash  # noqa: E402
from models_registry.broker.work_layer import work_layer  # noqa: E402
from models_registry.core.paths import FRONT_DOOR_PREFIXES  # noqa: E402

if settings.EMBEDDED_REDIS:
    from hosting import embedded_redis

    embedded_redis.ensure_running(settings.VAR_DIR)

api_application = ApiASGIHandler()  # bounds its own routes' bodies
site_application = bounded(django_application)  # the admin, /dashboard/, /metrics: the same limits
work_layer()  # a channel layer without the hosting operations fails the start, not the first request


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    """The API on its front door (models_registry.api.front_door), everything else on Django's full stack."""
    if scope["path"].startswith(FRONT_DOOR_PREFIXES):
        return await api_application(scope, receive, send)
    return await site_application(scope, receive, send)


application = ProtocolTypeRouter({"http": no_encoded_slash(http_application)})
