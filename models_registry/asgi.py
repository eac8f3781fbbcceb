"""`with_inference`: a project's ASGI application with the app's API served on its own front door.

In a project's asgi.py:

    from django.core.asgi import get_asgi_application
    from models_registry.asgi import with_inference

    application = with_inference(get_asgi_application())

The API's paths (core.paths.FRONT_DOOR_PREFIXES) go to the lean front door
(api.server.front_door); every other request, the project's own views and its admin included,
goes to the application given, held to the same body limits (api.server.site_bounds). Inference
messages never reach an ASGI application: `manage.py runworker inference` pulls them from
Redis.
"""

from __future__ import annotations

from typing import Any


def with_inference(django_application: Any) -> Any:
    """django_application with the API's paths served by the front door; call it once Django is set up."""
    # Imported here: a project's asgi.py imports this module before get_asgi_application() sets Django up.
    from models_registry.api.server.front_door import ApiASGIHandler
    from models_registry.api.server.site_bounds import bounded, no_encoded_slash
    from models_registry.broker.work_layer import work_layer
    from models_registry.core.collector import freeze_start_up
    from models_registry.core.paths import FRONT_DOOR_PREFIXES

    api_application = ApiASGIHandler()  # bounds its own routes' bodies
    site_application = bounded(django_application)  # the project's pages: the same limits
    work_layer()  # a channel layer without the app's operations fails the start, not the first request

    async def application(scope, receive, send):  # type: ignore[no-untyped-def]
        """The API on its front door, everything else on the project's application."""
        if scope["type"] == "http" and scope["path"].startswith(FRONT_DOOR_PREFIXES):
            return await api_application(scope, receive, send)
        return await site_application(scope, receive, send)

    served = no_encoded_slash(application)
    freeze_start_up()  # what was built so far lives as long as the process (core.collector)
    return served
