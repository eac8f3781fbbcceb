"""`register_adapter NAME --base MODEL --source DIR [--revision R] [--disabled | --enabled]`: create or update an adapter."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from models_registry.models import Adapter, RegisteredModel


class Command(BaseCommand):
    """Idempotent: running it again updates the adapter of that name (checked against its base each time)."""

    help = "Register (or update) a PEFT LoRA adapter of a registered model; its name is then used like a model's."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--base", help="the registered model it adapts (required for a new adapter)")
        parser.add_argument("--source", help="PEFT adapter directory or hub id (required for a new adapter)")
        parser.add_argument("--revision", default=None)
        state = parser.add_mutually_exclusive_group()
        state.add_argument("--disabled", action="store_true", help="disable it (its requests answer 503)")
        state.add_argument("--enabled", action="store_true", help="enable it again (the default for a new adapter)")

    def handle(self, *args: Any, **options: Any) -> None:
        adapter = Adapter.objects.filter(name=options["name"]).first() or Adapter(name=options["name"])
        if options["base"]:
            base = RegisteredModel.objects.filter(name=options["base"]).first()
            if base is None:
                raise CommandError(f"no registered model {options['base']!r}: register the base with register_model")
            adapter.base = base
        elif adapter.pk is None:
            raise CommandError("--base is required for a new adapter")
        if options["source"]:
            adapter.source = options["source"]
        elif adapter.pk is None:
            raise CommandError("--source is required for a new adapter")
        if options["revision"] is not None:
            adapter.revision = options["revision"]
        if options["disabled"] or options["enabled"]:
            adapter.enabled = bool(options["enabled"])
        try:
            adapter.full_clean()
        except ValidationError as error:
            raise CommandError("; ".join(f"{field}: {' '.join(messages)}"
                                         for field, messages in error.message_dict.items())) from None
        created = adapter.pk is None
        adapter.save()
        self.stdout.write(f"{'registered' if created else 'updated'} adapter {adapter.name} of {adapter.base.name}"
                          f"{'' if adapter.enabled else ' (disabled)'}")
