"""`create_api_token NAME [--models a,b | --all-models] [--requests-per-minute N] [--tokens-per-minute N] [--tokens-per-day N]
[--priority P]`: prints the new token alone on its last line.

Rotating an existing token (its name again) keeps its models unless --models or
--all-models says otherwise: a scope never widens by itself.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from models_registry.models import Adapter, ApiToken, RegisteredModel

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "tokens_per_day")


class Command(BaseCommand):
    """Create a token (or rotate the one with this name) and print it once."""

    help = "Create an API token; the raw token is printed on the last line and never stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--models", default="", help="comma-separated model and adapter names (default: every model for a "
                                                        "new token; a rotated token keeps its models)")
        scope.add_argument("--all-models", action="store_true", help="every model, present and future")
        parser.add_argument("--requests-per-minute", type=int, help="requests per minute (default: no limit)")
        parser.add_argument("--tokens-per-minute", type=int, help="input tokens per minute (default: no limit)")
        parser.add_argument("--tokens-per-day", type=int, help="input tokens per UTC day (default: no limit)")
        parser.add_argument("--priority", choices=[p for p, _ in ApiToken.PRIORITIES],
                            help="interactive (default) or batch: served behind interactive traffic, shed first")

    def handle(self, *args: Any, **options: Any) -> None:
        names = [n.strip() for n in options["models"].split(",") if n.strip()]
        models = list(RegisteredModel.objects.filter(name__in=names))
        adapters = list(Adapter.objects.filter(name__in=names))  # granted by name like models
        unknown = sorted(set(names) - {m.name for m in models} - {a.name for a in adapters})
        if unknown:
            raise CommandError(f"unknown model(s): {', '.join(unknown)}")
        token = ApiToken.objects.filter(name=options["name"]).first() or ApiToken(name=options["name"])
        raw = ApiToken.generate()
        token.set_token(raw)
        token.revoked = False
        for field in LIMIT_FIELDS:
            value = options[field]
            if value is not None and value < 1:
                raise CommandError(f"--{field.replace('_', '-')} must be at least 1 (leave it out for no limit)")
            setattr(token, field, value)  # left out: no limit (like --models: the command states it all)
        token.priority = options["priority"] or "interactive"
        if token.expires_at is not None and token.expires_at <= timezone.now():
            token.expires_at = None  # rotating an expired token must not print a dead one
        rotated = token.pk is not None
        if names:
            token.all_models = False
        elif options["all_models"] or not rotated:
            token.all_models = True
        token.save()
        if names or token.all_models:
            token.allowed_models.set(models)  # all_models: the list is cleared, not kept for later
            token.allowed_adapters.set(adapters)
        allowed = token.scope()
        scope = "every model" if allowed is None else ", ".join(sorted(allowed)) or "no model"
        limits = ", ".join(f"{f.replace('_', ' ')} {getattr(token, f)}" for f in LIMIT_FIELDS if getattr(token, f))
        self.stdout.write(f"API token {token.name!r} for {scope}, {token.priority} priority, "
                          f"{limits or 'no rate limits'}:")
        self.stdout.write(raw)
