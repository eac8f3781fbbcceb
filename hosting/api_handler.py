"""An ASGI handler for the inference API with its own, lean middleware list.

Django applies settings.MIDDLEWARE to every request; the admin needs sessions, CSRF and
messages, but on an async view each of those sync middlewares costs a thread hop, which
halves the throughput of the inference routes. This handler builds Django's usual
middleware chain from settings.API_MIDDLEWARE instead.
"""

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.test.utils import override_settings


class ApiASGIHandler(ASGIHandler):
    """Django's ASGIHandler with settings.API_MIDDLEWARE as its middleware."""

    def load_middleware(self, is_async: bool = False) -> None:
        """Build the chain once, at start, from the API list."""
        with override_settings(MIDDLEWARE=settings.API_MIDDLEWARE):
            super().load_middleware(is_async=is_async)
