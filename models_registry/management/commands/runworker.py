"""`manage.py runworker inference`: channels' runworker with our worker class."""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import Any

from channels.layers import get_channel_layer
from channels.management.commands.runworker import Command as ChannelsRunworker
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError

from models_registry.api.pipeline.line_caller import LineCaller
from models_registry.broker.messages import INFERENCE_CHANNEL
from models_registry.broker.work_layer import require_work_layer
from models_registry.core.conf import conf
from models_registry.jobs.driver import JobDriver
from models_registry.observe import tracing
from models_registry.worker.process import InferenceWorker


def drive_batch_jobs(worker_id: str) -> Awaitable[None]:
    """The batch-job driver of this worker (jobs/driver.py)."""
    return JobDriver(worker_id, LineCaller()).run()


class JobDrivingWorker(InferenceWorker):
    """The inference worker that also drives batch jobs: `make run` needs no extra process, and a
    job's own CPU (reading lines, writing records) runs at the workers' lower priority."""

    services = (drive_batch_jobs,)


class Command(ChannelsRunworker):
    """Run an inference worker (drains on SIGTERM, heart-beats, loads models at start)."""

    worker_class = JobDrivingWorker

    def before_run(self) -> None:
        """A project's own step once the command line and the layer are checked, before the worker starts."""

    def handle(self, *args: Any, **options: Any) -> None:
        """Check the channel and the layer, run the worker."""
        if options["channels"] != [INFERENCE_CHANNEL]:
            raise CommandError(f"runworker serves the {INFERENCE_CHANNEL!r} channel only (got {options['channels']})")
        try:
            layer = require_work_layer(get_channel_layer(options["layer"]))
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from None
        self.before_run()
        # Before torch loads: OpenMP threads that spin while they wait take the cores the
        # web server and Redis share with this worker, several times the CPU a sentence
        # needs. An operator's own setting wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if conf.WORKER_NICE:
            # Where web servers share the cores, they answer first: /health and the
            # hand-off of requests and replies do not wait behind a forward pass.
            os.nice(conf.WORKER_NICE)
        tracing.setup("worker")  # OTEL_EXPORTER_OTLP_ENDPOINT set: its batches' spans join the requests' traces
        # No ASGI application: the worker pulls leased batches itself, so a project needs no ASGI_APPLICATION.
        self.worker_class(application=None, channels=options["channels"], channel_layer=layer).run()
