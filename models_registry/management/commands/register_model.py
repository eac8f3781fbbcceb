"""`register_model NAME --source SRC --task TASK ...`: create or update a model and task."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from models_registry.models import ModelTask, RegisteredModel
from models_registry.tasks.task_inputs import SUPPORTED_TASKS


class Command(BaseCommand):
    """Idempotent: running it again updates the model and the named task."""

    help = "Register (or update) a model and one of its tasks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--source", required=True, help="hub id or local directory")
        parser.add_argument("--task", required=True, choices=SUPPORTED_TASKS)
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
        parser.add_argument("--pooling", choices=["mean", "cls", "none"])
        parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                            help="L2-normalize feature-extraction vectors (--no-normalize turns it off)")
        parser.add_argument("--parameters", default=None, help="default parameters as a JSON object")
        state = parser.add_mutually_exclusive_group()
        state.add_argument("--disabled", action="store_true", help="disable it (workers unload it)")
        state.add_argument("--enabled", action="store_true", help="enable it again (the default for a new model)")

    def handle(self, *args: Any, **options: Any) -> None:
        import json

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
        self.stdout.write(f"registered {model.name}/{task.name} ({task.task}) from {model.source}")

    def _save(self, obj: Any) -> None:
        try:
            obj.full_clean(validate_unique=obj.pk is None)
        except ValidationError as error:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
            raise CommandError(details) from None
        obj.save()
