"""`register_model NAME --source SRC --task TASK ...`: create or update a model and task."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from models_registry.core.errors import InvalidInput
from models_registry.models import ModelTask, RegisteredModel
from models_registry.models.registered import POOLING_CHOICES
from models_registry.catalog import version_changes
from models_registry.catalog.rollout import CANARY, SHADOW
from models_registry.tasks.task_inputs import SUPPORTED_TASKS


class Command(BaseCommand):
    """Idempotent: running it again updates the model and the named task."""

    help = "Register (or update) a model and one of its tasks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--source", help="hub id or local directory (required but with --promote, --rollback, --reload)")
        parser.add_argument("--task", choices=SUPPORTED_TASKS, help="required but with --promote, --rollback, --reload")
        parser.add_argument("--task-name", help="default: the pipeline task")
        parser.add_argument("--revision", default=None)
        parser.add_argument("--max-batch-size", type=int)
        parser.add_argument("--max-batch-tokens", type=int)
        parser.add_argument("--max-batch-delay-ms", type=int)
        parser.add_argument("--max-queue-size", type=int)
        parser.add_argument("--timeout", type=float, dest="timeout_s")
        parser.add_argument("--max-request-tokens", type=int,
                            help="input tokens one request may bring (0 = no limit; default 16384)")
        parser.add_argument("--max-batch-queue-size", type=int,
                            help="pending items above which batch-priority requests are refused")
        parser.add_argument("--cache-ttl", type=int, dest="cache_ttl_s",
                            help="seconds results stay in the response cache (0 = off; deterministic tasks)")
        parser.add_argument("--cache-shared", action=argparse.BooleanOptionalAction, dest="cache_shared", default=None,
                            help="share cached results between API tokens (a token can then probe others' inputs)")
        parser.add_argument("--device", default=None)
        parser.add_argument("--dtype", default=None, choices=[d for d, _ in RegisteredModel.DTYPES])
        parser.add_argument("--backend", default=None, choices=[b for b, _ in RegisteredModel.BACKENDS],
                            help="embedding forwards: auto (ONNX Runtime on CPU when it matches torch), torch, onnxruntime")
        parser.add_argument("--pooling", choices=POOLING_CHOICES,
                            help="default: what the model's files say (1_Pooling), mean without them")
        parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                            help="L2-normalize feature-extraction vectors (--no-normalize turns it off; default: what the "
                                 "model's files say, a Normalize module)")
        parser.add_argument("--parameters", default=None, help="default parameters as a JSON object")
        rollout = parser.add_mutually_exclusive_group()
        rollout.add_argument("--canary", type=int, metavar="PERCENT",
                             help="serve a changed source to PERCENT of requests beside the live version")
        rollout.add_argument("--shadow", type=int, metavar="PERCENT",
                             help="copy PERCENT of requests to a changed source; live answers; the distance is kept")
        rollout.add_argument("--promote", action="store_true", help="make the canary or shadow version live")
        rollout.add_argument("--rollback", action="store_true",
                             help="drop the canary or shadow version, or go back to the previous live version")
        rollout.add_argument("--reload", action="store_true",
                             help="the admin's Load now: a fresh copy loads beside the live one and takes over once warm")
        parser.add_argument("--sticky", action="store_true", help="split the canary per API token, not per request")
        parser.add_argument("--allow-shape-change", action="store_true",
                            help="register a version whose answers look unlike live's (another vector size, "
                                 "other labels); refused without it")
        state = parser.add_mutually_exclusive_group()
        state.add_argument("--disabled", action="store_true", help="disable it (workers unload it)")
        state.add_argument("--enabled", action="store_true", help="enable it again (the default for a new model)")

    def handle(self, *args: Any, **options: Any) -> None:
        import json

        if options["promote"] or options["rollback"] or options["reload"]:
            try:
                if options["promote"]:
                    done = f"promoted v{version_changes.promote(options['name'])} (live once warm on every worker)"
                elif options["reload"]:
                    done = version_changes.reload(options["name"])
                else:
                    done = version_changes.rollback(options["name"])
            except InvalidInput as error:
                raise CommandError(error.message) from None
            self.stdout.write(f"{options['name']}: {done}")
            return
        if not options["source"] or not options["task"]:
            raise CommandError("--source and --task are required (but with --promote, --rollback or --reload)")
        mode, percent = (CANARY, options["canary"]) if options["canary"] is not None else (
            (SHADOW, options["shadow"]) if options["shadow"] is not None else ("", 0))
        if mode and not 0 <= percent <= 100:
            raise CommandError(f"--{mode} takes a percent from 0 to 100, not {percent}")
        with transaction.atomic():
            model = RegisteredModel.objects.filter(name=options["name"]).first() or RegisteredModel(name=options["name"])
            model.source = options["source"]
            for field in ("revision", "device", "dtype", "backend"):
                if options[field] is not None:
                    setattr(model, field, options[field])
            if options["disabled"]:
                model.enabled = False
            elif options["enabled"] or model.pk is None:
                model.enabled = True  # re-running never re-enables what an operator disabled
            self._save(model)
            task_name = options["task_name"] or options["task"]
            task = ModelTask.objects.filter(model=model, name=task_name).first() or ModelTask(model=model, name=task_name)
            task.task = options["task"]
            for field in ("max_batch_size", "max_batch_tokens", "max_batch_delay_ms", "max_queue_size",
                          "timeout_s", "pooling", "normalize", "max_batch_queue_size", "cache_ttl_s",
                          "max_request_tokens", "cache_shared"):
                if options[field] is not None:
                    setattr(task, field, options[field])
            if options["parameters"] is not None:
                try:
                    task.parameters = json.loads(options["parameters"])
                except json.JSONDecodeError as error:
                    raise CommandError(f"--parameters is not valid JSON: {error}") from None
            self._save(task)
            try:
                version = version_changes.record(model, mode, percent, options["sticky"],
                                                 allow_shape_change=options["allow_shape_change"])
            except InvalidInput as error:  # nothing of this registration is kept
                raise CommandError(error.message) from None
        made = ""
        if version is not None and version.number > 1:  # a first registration prints as it always did
            made = f"; version {version.number}" + (f" ({mode} {percent}%)" if mode else "")
        self.stdout.write(f"registered {model.name}/{task.name} ({task.task}) from {options['source']}{made}")

    def _save(self, obj: Any) -> None:
        try:
            obj.full_clean(validate_unique=obj.pk is None)
        except ValidationError as error:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
            raise CommandError(details) from None
        obj.save()
