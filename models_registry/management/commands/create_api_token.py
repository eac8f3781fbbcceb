"""`create_api_token NAME [--models a,b]`: prints the new token alone on its last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from models_registry.models import ApiToken, RegisteredModel


class Command(BaseCommand):
    """Create a token (or rotate the one with this name) and print it once."""

    help = "Create an API token; the raw token is printed on the last line and never stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--models", default="", help="comma-separated model names (default: every model)")

    def handle(self, *args: Any, **options: Any) -> None:
        names = [n.strip() for n in options["models"].split(",") if n.strip()]
        models = list(RegisteredModel.objects.filter(name__in=names))
        unknown = sorted(set(names) - {m.name for m in models})
        if unknown:
            raise CommandError(f"unknown model(s): {', '.join(unknown)}")
        token = ApiToken.objects.filter(name=options["name"]).first() or ApiToken(name=options["name"])
        raw = ApiToken.generate()
        token.set_token(raw)
        token.revoked = False
        if token.expires_at is not None and token.expires_at <= timezone.now():
            token.expires_at = None  # rotating an expired token must not print a dead one
        token.save()
        token.allowed_models.set(models)
        scope = ", ".join(names) if names else "every model"
        self.stdout.write(f"API token {token.name!r} for {scope}:")
        self.stdout.write(raw)
