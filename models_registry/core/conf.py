"""The app's settings, read through one object: `conf.MAX_BODY_BYTES` is settings.HOSTING_MAX_BODY_BYTES.

DEFAULTS names every setting the app reads, with its environment variable and its default, so
a host project sets none of them: a value comes from the project's Django settings when it
sets it, else from the environment variable beside it, else from the default here. `conf`
caches each value on first use, so the hot paths pay one attribute lookup, and forgets them
when a test changes a setting (Django's setting_changed), as channels and django-prometheus do.
The README's "Configuration" section names the ones an operator changes first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

_UNSET = object()
Conf = Any  # HostingConf below: a default may read another setting through it


def flag(text: str) -> bool:
    """An on/off variable: 1, true, yes or on (any case) is on."""
    return text.strip().lower() in {"1", "true", "yes", "on"}


def size(text: str) -> int:
    """A size in bytes, with an optional K/M/G/T suffix (powers of 1024)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1024 ** ("KMGT".index(value[-1]) + 1) if value and value[-1] in "KMGT" else 1
    return int(float(value.rstrip("KMGT") or 0) * scale)


def names(text: str) -> list[str]:
    """A comma-separated list, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def hosts(text: str) -> list[str]:
    """A comma-separated list of host names, lower-cased."""
    return [item.lower() for item in names(text)]


@dataclass(frozen=True)
class Default:
    """Where one setting comes from: its Django setting, its environment variable, how to read it, its default."""

    setting: str
    env: str | None  # None: a Django setting only
    parse: Callable[[str], Any]
    default: Any = None  # a value, or a callable of the conf object (a default that follows another setting)
    zero_is_unset: bool = False  # a parsed 0 falls back to the default, as an empty or unset variable does


def tracing_from_environment() -> bool:
    """Whether the standard OTEL_* environment asks for traces (an endpoint set, the SDK and exporter not off)."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint or flag(os.environ.get("OTEL_SDK_DISABLED", "")) or os.environ.get("OTEL_TRACES_EXPORTER",
                                                                                        "otlp") == "none":
        return False
    if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") != "http/protobuf":
        raise ImproperlyConfigured("OTEL_EXPORTER_OTLP_PROTOCOL: this server exports over http/protobuf only (port "
                                   "4318 of a collector); unset it or set it to http/protobuf")
    return True


def _hosting(name: str, parse: Callable[[str], Any], default: Any, **options: Any) -> tuple[str, Default]:
    """The usual case: setting HOSTING_<name>, read from the variable of the same name."""
    return name, Default(f"HOSTING_{name}", f"HOSTING_{name}", parse, default, **options)


def _base_dir() -> Path:
    """The project's BASE_DIR (startproject writes one), else the working directory."""
    return Path(getattr(settings, "BASE_DIR", None) or Path.cwd())


DEFAULTS: dict[str, Default] = dict([
    # --- Broker and files ---------------------------------------------------------------------------
    ("REDIS_URL", Default("REDIS_URL", "REDIS_URL", str, "redis://127.0.0.1:6379/0")),
    # Where the app keeps what it writes itself (exported ONNX models); a project's own files go to its storages.
    _hosting("VAR_DIR", Path, lambda conf: _base_dir() / "var"),
    # The lean middleware of the API's front door (api.server.front_door): async-only, no sessions or CSRF.
    ("API_MIDDLEWARE", Default("HOSTING_API_MIDDLEWARE", None, str, lambda conf: [
        "models_registry.api.server.middleware.RequestIdMiddleware",
        "models_registry.api.server.middleware.ApiGuardMiddleware",
    ])),
    # Batch-priority items are served behind interactive ones until they waited this long.
    _hosting("BATCH_AGING_S", float, 5.0),
    # --- Requests -----------------------------------------------------------------------------------
    _hosting("REQUIRE_API_TOKEN", flag, True),
    _hosting("MAX_BODY_BYTES", int, 1024 * 1024),
    _hosting("MAX_INPUTS", int, 256),
    # Per-token usage accounting and rate limits through Redis (off: no limits, no usage counts).
    _hosting("RATE_LIMITS", flag, True),
    # Response cache: larger results are not stored; at most this much per API token and overall.
    _hosting("CACHE_MAX_ENTRY_BYTES", int, 256 * 1024),
    _hosting("CACHE_MAX_TOKEN_BYTES", size, 64 * 1024 * 1024, zero_is_unset=True),
    _hosting("CACHE_MAX_BYTES", size, 512 * 1024 * 1024, zero_is_unset=True),
    # What one request's answer may weigh (JSON bytes, estimated before compute): over it, 413 before compute.
    _hosting("MAX_ANSWER_BYTES", int, 16 * 1024 * 1024),
    # --- Media --------------------------------------------------------------------------------------
    _hosting("MAX_IMAGE_PIXELS", int, 40_000_000),
    _hosting("MAX_AUDIO_SECONDS", float, 60.0),
    # Pixels all the images of one request may hold together (a worker decodes and holds them all).
    _hosting("MAX_REQUEST_PIXELS", int, 100_000_000),
    # Hosts whose http(s) URLs a media input may name (empty: no URL is ever fetched).
    _hosting("MEDIA_FETCH_HOSTS", hosts, lambda conf: []),
    _hosting("MEDIA_FETCH_TIMEOUT_S", float, 5.0),
    _hosting("MEDIA_FETCH_MAX_BYTES", int, lambda conf: conf.MAX_BODY_BYTES),
    _hosting("MEDIA_DECODE_THREADS", int, 2),
    # --- Metrics ------------------------------------------------------------------------------------
    _hosting("METRICS_TOKEN", str, ""),
    _hosting("METRICS_MAX_TOKENS", int, 100),
    _hosting("METRICS_TOKEN_NAMES", flag, False),
    # prometheus_client's multiprocess directory (prometheus_client reads the variable itself, at import).
    ("PROMETHEUS_MULTIPROC_DIR", Default("HOSTING_PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROC_DIR", str, "")),
    # --- Workers ------------------------------------------------------------------------------------
    _hosting("DEVICE", str, "cpu"),
    _hosting("TORCH_THREADS", int, None),
    _hosting("WEB_PROCESSES", int, 0),
    # Embedding batches run as packed rows (no padding) where a load-time check shows equal outputs.
    _hosting("SEQUENCE_PACKING", flag, True),
    # Streamed text generation on decoder models is batched per token step (off: static batches).
    _hosting("CONTINUOUS_BATCHING", flag, True),
    # On CPU, packed forwards run through a TorchScript trace where it reproduces the eager outputs.
    _hosting("TORCHSCRIPT", flag, True),
    _hosting("ONNX_CACHE_DIR", Path, lambda conf: Path(conf.VAR_DIR) / "onnx"),
    # dtype int8 is refused at load when a sample's minimum cosine to the fp32 vectors falls under this.
    _hosting("INT8_MIN_COSINE", float, 0.99),
    # Scheduling niceness the worker adds to itself: web processes on the same cores go first.
    _hosting("WORKER_NICE", int, 5),
    # Which models a worker serves (empty: all enabled).
    _hosting("WORKER_MODELS", names, lambda conf: []),
    # A worker's memory budget (0: a share of the machine's, or the GPU's), models held at once (0: the
    # budget decides), and whether batches are capped to the budget.
    _hosting("WORKER_MEMORY_BYTES", size, 0),
    _hosting("MAX_LOADED_MODELS", int, 0),
    # LoRA adapters one worker holds per base model (least recently used unloaded first), and their bytes.
    _hosting("MAX_LOADED_ADAPTERS", int, 16),
    _hosting("ADAPTER_MEMORY_BYTES", size, 256 * 2**20),
    _hosting("MEMORY_CAP", flag, True),
    # The class a worker runs models with (dotted path; called as PipelineRunner is).
    _hosting("MODEL_RUNNER", str, "models_registry.inference.model_runner.PipelineRunner"),
    _hosting("HEARTBEAT_S", float, 1.0),
    _hosting("WORKER_STALE_S", float, 10.0),
    # A worker whose event loop has not ticked this long stops being announced alive: its messages requeue.
    _hosting("WORKER_HUNG_S", float, 120.0),
    _hosting("CONFIG_REFRESH_S", float, 1.0),
    # --- Batch jobs (Files and Batches API) ---------------------------------------------------------
    _hosting("BATCH_MAX_FILE_BYTES", int, 200 * 1024 * 1024),
    _hosting("BATCH_MAX_LINES", int, 1_000_000),
    # Lines a job commits at a time, and lines one job has in flight at once.
    _hosting("BATCH_CHUNK_LINES", int, 256),
    _hosting("BATCH_IN_FLIGHT", int, 128),
    # A worker's claim on a job; another worker resumes the job this long after the holder died.
    _hosting("BATCH_LEASE_S", float, 15.0),
    _hosting("BATCH_POLL_S", float, 1.0),
    # Jobs one worker's driver runs side by side, and tries of a line answered 429/503/504.
    _hosting("BATCH_MAX_JOBS", int, 8),
    _hosting("BATCH_LINE_RETRIES", int, 20),
    # Files are deleted this long after their creation unless the upload says otherwise (0: kept).
    _hosting("FILE_RETENTION_S", int, 30 * 24 * 3600),
    # Bytes of files one API token may keep at once (0: no quota).
    _hosting("FILE_STORAGE_BYTES", size, 1024 ** 3),
    # --- Usage and traces ---------------------------------------------------------------------------
    # Every web process moves the usage ledger's Redis counters to the database this often (0: never).
    _hosting("USAGE_FLUSH_S", float, 5.0),
    # Spans exported over OTLP/HTTP when the standard OTEL_* environment names an endpoint (observe.tracing).
    ("TRACING", Default("HOSTING_TRACING", None, flag, lambda conf: tracing_from_environment())),
])


def value_of(name: str, conf: Conf) -> Any:
    """A setting's value: Django's setting, else its environment variable, else its default."""
    entry = DEFAULTS[name]
    found = getattr(settings, entry.setting, _UNSET)
    if found is not _UNSET:
        return found
    text = os.environ.get(entry.env) if entry.env else None
    if text is not None and text.strip():
        parsed = entry.parse(text)
        if not (entry.zero_is_unset and parsed == 0):
            return parsed
    return entry.default(conf) if callable(entry.default) else entry.default


def setting_names() -> set[str]:
    """The Django settings this table reads (a change to one forgets the cached values)."""
    return {entry.setting for entry in DEFAULTS.values()}


class HostingConf:
    """Attribute access to the app's settings (DEFAULTS names them), cached until a setting changes."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(name)
        value = value_of(name, self)
        self.__dict__[name] = value
        return value

    def reset(self) -> None:
        """Forget every cached value (the next read asks Django's settings again)."""
        self.__dict__.clear()


conf = HostingConf()
WATCHED = setting_names()


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting in WATCHED or setting == "BASE_DIR":
        conf.reset()


setting_changed.connect(_on_setting_changed)
