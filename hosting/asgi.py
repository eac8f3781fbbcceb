"""ASGI entry point: HTTP to Django, the `inference` channel to the inference consumer."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

site_application = get_asgi_application()  # sets Django up before the imports below

from channels.routing import ChannelNameRouter, ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from hosting.api_handler import ApiASGIHandler  # noqa: E402
from models_registry.broker.messages import INFERENCE_CHANNEL  # noqa: E402
from models_registry.worker.consumer import InferenceConsumer  # noqa: E402

if settings.EMBEDDED_REDIS:
    from hosting import embedded_redis

    embedded_redis.ensure_running(settings.VAR_DIR)

api_application = ApiASGIHandler()


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    """The inference API on the lean handler, everything else on the full stack."""
    if scope["path"].startswith(settings.API_PATH_PREFIXES):
        return await api_application(scope, receive, send)
    return await site_application(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_application,
        "channel": ChannelNameRouter({INFERENCE_CHANNEL: InferenceConsumer.as_asgi()}),
    }
)
