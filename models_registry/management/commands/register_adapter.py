"""`register_adapter NAME --base MODEL --source DIR [--revision R] [--disabled | --enabled]`: create or update an adapter.

Versions: new files given to an existing adapter replace its live ones at once (the next version; the old
ones kept for `--rollback`); with `--canary PERCENT` they answer that share of its requests beside the live
ones until `--promote` makes them live or `--rollback` drops them.
"""

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
        parser.add_argument("--canary", type=int, metavar="PERCENT", default=None,
                            help="--source/--revision's files answer this share of requests beside the live ones "
                                 "(alone: change the running canary's share)")
        change = parser.add_mutually_exclusive_group()
        change.add_argument("--promote", action="store_true", help="the canary's files become live")
        change.add_argument("--rollback", action="store_true",
                            help="drop the canary; with none, return to the files live before the last change")

    def handle(self, *args: Any, **options: Any) -> None:
        adapter = Adapter.objects.filter(name=options["name"]).first() or Adapter(name=options["name"])
        if options["base"]:
            base = RegisteredModel.objects.filter(name=options["base"]).first()
            if base is None:
                raise CommandError(f"no registered model {options['base']!r}: register the base with register_model")
            adapter.base = base
        elif adapter.pk is None:
            raise CommandError("--base is required for a new adapter")
        if adapter.pk is None:
            if not options["source"]:
                raise CommandError("--source is required for a new adapter")
            if options["canary"] is not None or options["promote"] or options["rollback"]:
                raise CommandError("a new adapter has no live files to canary, promote or roll back")
            adapter.source, adapter.revision = options["source"], options["revision"] or ""
        else:
            self._change_files(adapter, options)
        if options["disabled"] or options["enabled"]:
            adapter.enabled = bool(options["enabled"])
        try:
            adapter.full_clean()
        except ValidationError as error:
            raise CommandError("; ".join(f"{field}: {' '.join(messages)}"
                                         for field, messages in error.message_dict.items())) from None
        created = adapter.pk is None
        adapter.save()
        canary = (f", canary v{adapter.version + 1} at {adapter.canary_percent}%" if adapter.canary_source else "")
        self.stdout.write(f"{'registered' if created else 'updated'} adapter {adapter.name} of {adapter.base.name}"
                          f" (v{adapter.version}{canary}){'' if adapter.enabled else ' (disabled)'}")

    @staticmethod
    def _change_files(adapter: Adapter, options: dict[str, Any]) -> None:
        """An existing adapter's new files (live at once, or as a canary), its promotion or its rollback."""
        files = options["source"] is not None or options["revision"] is not None
        if (options["promote"] or options["rollback"]) and (files or options["canary"] is not None):
            raise CommandError("--promote and --rollback take no --source, --revision or --canary")
        try:
            if options["promote"]:
                adapter.promote()
            elif options["rollback"]:
                adapter.rollback()
        except ValidationError as error:
            raise CommandError("; ".join(" ".join(m) for m in error.message_dict.values())) from None
        if options["canary"] is not None:
            if files:
                adapter.start_canary(options["source"] or adapter.source,
                                     adapter.revision if options["revision"] is None else options["revision"],
                                     options["canary"])
            elif not adapter.canary_source:
                raise CommandError(f"adapter {adapter.name!r} has no canary: give its files with --source")
            else:
                adapter.canary_percent = options["canary"]
        elif files:
            adapter.replace_files(options["source"] or adapter.source,
                                  adapter.revision if options["revision"] is None else options["revision"])
