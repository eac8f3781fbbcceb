"""Django settings: the ONLY place the environment is read (README "Configuration" lists them)."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from hosting import secret_key, var_dir

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HOSTING_VAR_DIR", BASE_DIR / "var"))


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _bytes(name: str) -> int:
    """A size in bytes, with an optional K/M/G/T suffix (powers of 1024); 0 when unset."""
    value = (os.environ.get(name) or "0").strip().upper().removesuffix("B").removesuffix("I")
    scale = 1024 ** ("KMGT".index(value[-1]) + 1) if value and value[-1] in "KMGT" else 1
    return int(float(value.rstrip("KMGT") or 0) * scale)


var_dir.prepare(VAR_DIR)  # 0700: the key, the SQLite file, the Redis socket, batch files
SECRET_KEY = secret_key.load(VAR_DIR, os.environ.get("SECRET_KEY", ""))
DEBUG = _flag("DEBUG", False)
if not DEBUG and (_weak := secret_key.refusal(SECRET_KEY)):
    raise ImproperlyConfigured(_weak)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h.strip()]

INSTALLED_APPS = [
    # Ours first: its `runworker` extends channels' one (drain, heartbeats, embedded Redis).
    "models_registry",
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_prometheus",
    "axes",  # admin login throttling (AXES_* below)
]

# The full stack serves the admin, the dashboard and /metrics.
MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "models_registry.api.middleware.RequestIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes documents: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
# The inference API runs with this lean, async-only stack instead (hosting/asgi.py):
# each sync MiddlewareMixin costs a thread hop per request on an async view.
API_MIDDLEWARE = [
    "models_registry.api.middleware.RequestIdMiddleware",
    "models_registry.api.middleware.ApiGuardMiddleware",
]

ROOT_URLCONF = "hosting.urls"
ASGI_APPLICATION = "hosting.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=60,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _db_file = Path(DATABASES["default"]["NAME"])
    if _db_file.name not in ("", ":memory:") and _db_file.parent.is_dir():
        var_dir.private_file(_db_file)  # 0600: it holds sessions and token hashes
    # Web and workers write to one file at once: WAL and a busy timeout avoid "locked".
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    # Async views reach the ORM from asgiref's thread; keep connections healthy.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing root
WHITENOISE_USE_FINDERS = True  # serve app static files without a collectstatic step

LOGIN_URL = "/admin/login/"

# --- Admin login throttling (django-axes) and TLS ---------------------------------------
# AxesStandaloneBackend first: it refuses a login while its username and address are locked out.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
# Failed logins of one username from one address before a lockout, and how long it lasts.
AXES_FAILURE_LIMIT = int(os.environ.get("HOSTING_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("HOSTING_LOGIN_COOLOFF_HOURS", "0.25"))  # hours
# Username and address together: a stranger guessing passwords cannot lock every admin out from elsewhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no banner in every process' log
# Behind a TLS-terminating proxy (it must set X-Forwarded-Proto): HTTPS only for the admin and
# the dashboard, HSTS, and cookies that never travel over plain HTTP (`check --deploy` clean).
HOSTING_BEHIND_TLS = _flag("HOSTING_BEHIND_TLS", False)
if HOSTING_BEHIND_TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]  # scraped inside the network, often over plain HTTP
    SECURE_HSTS_SECONDS = int(os.environ.get("HOSTING_HSTS_SECONDS", 365 * 24 * 3600))
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# --- Broker -----------------------------------------------------------------------------
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402

REDIS_URL = os.environ.get("REDIS_URL") or ""
EMBEDDED_REDIS = not REDIS_URL
if EMBEDDED_REDIS:
    from hosting import embedded_redis

    REDIS_URL = embedded_redis.url(VAR_DIR)

# Batch-priority items are served behind interactive ones until they waited this long.
HOSTING_BATCH_AGING_S = float(os.environ.get("HOSTING_BATCH_AGING_S", "5"))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "models_registry.broker.layer.HostingChannelLayer",
        "CONFIG": {
            # socket_timeout None: redis-py's 5 s default races channels_redis' 5 s BZPOPMIN.
            # retry_on_error: a pooled connection that a Redis restart closed reconnects and
            # retries its command once, instead of failing the request that drew it.
            "hosts": [{"address": REDIS_URL, "socket_timeout": None, "max_connections": 1000,
                       "retry_on_error": [RedisConnectionError]}],
            # Admission is ours (max_queue_size per task); the layer's cap must never be
            # the thing that refuses an accepted request.
            "capacity": 100_000,
            # Longer than any task's timeout_s, so nothing accepted expires unseen.
            "expiry": 3600,
            # Batch-priority requests queue behind interactive ones sent up to this much later.
            "batch_delay_s": HOSTING_BATCH_AGING_S,
        },
    }
}

# --- Product settings (README "Configuration") -----------------------------------------
HOSTING_REQUIRE_API_TOKEN = _flag("HOSTING_REQUIRE_API_TOKEN", True)
HOSTING_MAX_BODY_BYTES = int(os.environ.get("HOSTING_MAX_BODY_BYTES", 1024 * 1024))
HOSTING_DEVICE = os.environ.get("HOSTING_DEVICE", "cpu")
HOSTING_TORCH_THREADS = int(os.environ["HOSTING_TORCH_THREADS"]) if os.environ.get("HOSTING_TORCH_THREADS") else None
# Web server processes `manage.py serve` (make run) starts on its port; 0: one per core, at most 8
# (models_registry.capacity.sizing.web_processes). The image's entrypoint reads the same variable.
HOSTING_WEB_PROCESSES = int(os.environ.get("HOSTING_WEB_PROCESSES") or 0)
# Embedding batches run as packed rows (no padding) where a load-time check shows equal outputs.
HOSTING_SEQUENCE_PACKING = _flag("HOSTING_SEQUENCE_PACKING", True)
# Streamed text-generation on decoder models is batched per token step (off: static batches, for comparison).
HOSTING_CONTINUOUS_BATCHING = _flag("HOSTING_CONTINUOUS_BATCHING", True)
# On CPU, packed forwards run through a TorchScript trace where it reproduces the eager outputs.
HOSTING_TORCHSCRIPT = _flag("HOSTING_TORCHSCRIPT", True)
# Exported ONNX encoders (and their int8 copies), shared by every worker on the machine and kept across restarts.
HOSTING_ONNX_CACHE_DIR = Path(os.environ.get("HOSTING_ONNX_CACHE_DIR", VAR_DIR / "onnx"))
# dtype int8 is refused at load when a sample's minimum cosine to the fp32 vectors falls under this.
HOSTING_INT8_MIN_COSINE = float(os.environ.get("HOSTING_INT8_MIN_COSINE", "0.99"))
# Scheduling niceness the worker adds to itself (0 = none): web processes on the same cores go first.
HOSTING_WORKER_NICE = int(os.environ.get("HOSTING_WORKER_NICE", "5"))
HOSTING_METRICS_TOKEN = os.environ.get("HOSTING_METRICS_TOKEN", "")
HOSTING_MAX_INPUTS = int(os.environ.get("HOSTING_MAX_INPUTS", 256))
# Which models this worker serves (comma list, empty = all enabled).
HOSTING_WORKER_MODELS = [m.strip() for m in os.environ.get("HOSTING_WORKER_MODELS", "").split(",") if m.strip()]
# Per-token usage accounting and rate limits through Redis (off: no limits, no usage counts).
HOSTING_RATE_LIMITS = _flag("HOSTING_RATE_LIMITS", True)
# Response cache: results larger than this are not stored (bounds one entry's memory).
HOSTING_CACHE_MAX_ENTRY_BYTES = int(os.environ.get("HOSTING_CACHE_MAX_ENTRY_BYTES", 256 * 1024))
# ... and holds at most this much per API token and overall (entries over a cap are not stored;
# nothing is evicted: the broker's maxmemory stays 0 for the queues' sake).
HOSTING_CACHE_MAX_TOKEN_BYTES = _bytes("HOSTING_CACHE_MAX_TOKEN_BYTES") or 64 * 1024 * 1024
HOSTING_CACHE_MAX_BYTES = _bytes("HOSTING_CACHE_MAX_BYTES") or 512 * 1024 * 1024
# Distinct token names with their own /metrics label; the rest share "other".
HOSTING_METRICS_MAX_TOKENS = int(os.environ.get("HOSTING_METRICS_MAX_TOKENS", "100"))
# Token names (not ids) as /metrics labels; names are shown anyway when HOSTING_METRICS_TOKEN protects /metrics.
HOSTING_METRICS_TOKEN_NAMES = _flag("HOSTING_METRICS_TOKEN_NAMES", False)
# prometheus_client's multiprocess directory (read by prometheus_client itself at import): several web
# processes on one port share their counters there. `manage.py serve` sets it to var/prometheus, emptied
# at its start, for the web processes it starts; the image's web role does the same.
HOSTING_PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
# Slow clients (hosting/http_protocol.py, the uvicorn protocol of `make run` and the image):
# a request's headers must arrive within HEADER_TIMEOUT_S, its body within BODY_TIMEOUT_S
# (plus 1 s per MiB it declares); connections beyond MAX_CONNECTIONS are closed at once.
HOSTING_HEADER_TIMEOUT_S = float(os.environ.get("HOSTING_HEADER_TIMEOUT_S", "10"))
HOSTING_BODY_TIMEOUT_S = float(os.environ.get("HOSTING_BODY_TIMEOUT_S", "30"))
# An answer whose client takes nothing written for this long (its socket's buffers full) is cut and its work
# cancelled (hosting.http_protocol); 0 = no deadline.
HOSTING_WRITE_TIMEOUT_S = float(os.environ.get("HOSTING_WRITE_TIMEOUT_S", "30"))
HOSTING_MAX_CONNECTIONS = int(os.environ.get("HOSTING_MAX_CONNECTIONS", "1000"))
# A request line and headers over this many bytes are answered 431 (httptools has no limit of its own).
HOSTING_MAX_HEADER_BYTES = int(os.environ.get("HOSTING_MAX_HEADER_BYTES", 64 * 1024))
# A worker's memory budget for its models and batches (0 = auto: a share of the machine's or cgroup's
# memory, or the GPU's), how many models it holds at once (0 = the budget alone decides; more load on
# demand and the least recently used idle one is unloaded), and whether batches are capped to the budget.
HOSTING_WORKER_MEMORY_BYTES = _bytes("HOSTING_WORKER_MEMORY_BYTES")
HOSTING_MAX_LOADED_MODELS = int(os.environ.get("HOSTING_MAX_LOADED_MODELS") or 0)
HOSTING_MEMORY_CAP = _flag("HOSTING_MEMORY_CAP", True)
# The class a worker runs models with (dotted path; called as PipelineRunner is): wrap it to trace or test.
HOSTING_MODEL_RUNNER = os.environ.get("HOSTING_MODEL_RUNNER") or "models_registry.inference.model_runner.PipelineRunner"
# Media tasks (README "Media"): a declared size over these is a 413 read from the file's header.
HOSTING_MAX_IMAGE_PIXELS = int(os.environ.get("HOSTING_MAX_IMAGE_PIXELS", 40_000_000))
HOSTING_MAX_AUDIO_SECONDS = float(os.environ.get("HOSTING_MAX_AUDIO_SECONDS", "60"))
# Pixels all the images of one request may hold together: what one request makes a worker decode and hold
# (3 bytes each as RGB, several copies while a processor resizes them). 100 MP: two or three large photos.
HOSTING_MAX_REQUEST_PIXELS = int(os.environ.get("HOSTING_MAX_REQUEST_PIXELS", 100_000_000))
# What one request's answer may weigh (JSON bytes, estimated before compute): a fill-mask input full of masks
# with top_k 100 answers every mask with top_k copies of the text. Over it: 413 before anything is computed.
HOSTING_MAX_ANSWER_BYTES = int(os.environ.get("HOSTING_MAX_ANSWER_BYTES", 16 * 1024 * 1024))
# Hosts whose http(s) URLs a media input may name (comma list; empty = no URL is ever fetched).
HOSTING_MEDIA_FETCH_HOSTS = [h.strip().lower() for h in os.environ.get("HOSTING_MEDIA_FETCH_HOSTS", "").split(",")
                             if h.strip()]
HOSTING_MEDIA_FETCH_TIMEOUT_S = float(os.environ.get("HOSTING_MEDIA_FETCH_TIMEOUT_S", "5"))
HOSTING_MEDIA_FETCH_MAX_BYTES = int(os.environ.get("HOSTING_MEDIA_FETCH_MAX_BYTES", HOSTING_MAX_BODY_BYTES))
# Threads a worker decodes images and audio in, while the device computes the previous batch.
HOSTING_MEDIA_DECODE_THREADS = int(os.environ.get("HOSTING_MEDIA_DECODE_THREADS", "2"))
HOSTING_HEARTBEAT_S = 1.0
HOSTING_WORKER_STALE_S = 10.0
# A worker whose event loop has not ticked this long stops being announced alive (its liveness
# thread vouches for it while it computes, however long a batch takes): its messages are requeued.
HOSTING_WORKER_HUNG_S = float(os.environ.get("HOSTING_WORKER_HUNG_S", "120"))
HOSTING_CONFIG_REFRESH_S = 1.0
# Every web process moves the usage ledger's Redis counters to the database this often (0: never; the Django
# test tier flushes by hand). GET /v1/usage and the admin's usage page read the database.
HOSTING_USAGE_FLUSH_S = float(os.environ.get("HOSTING_USAGE_FLUSH_S", "5"))

DATA_UPLOAD_MAX_MEMORY_SIZE = max(HOSTING_MAX_BODY_BYTES, 2_621_440)

# --- Batch jobs (Files and Batches API) ------------------------------------------------
# Files (batch inputs, outputs, error files) live in the default storage: the filesystem
# under var/ unless STORAGES["default"] names another backend (e.g. S3 via django-storages).
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(VAR_DIR / "files")},
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
HOSTING_BATCH_MAX_FILE_BYTES = int(os.environ.get("HOSTING_BATCH_MAX_FILE_BYTES", 200 * 1024 * 1024))
HOSTING_BATCH_MAX_LINES = int(os.environ.get("HOSTING_BATCH_MAX_LINES", 1_000_000))
# Lines a job commits at a time, and lines one job has in flight at once (never the whole job).
HOSTING_BATCH_CHUNK_LINES = int(os.environ.get("HOSTING_BATCH_CHUNK_LINES", 256))
HOSTING_BATCH_IN_FLIGHT = int(os.environ.get("HOSTING_BATCH_IN_FLIGHT", 128))
# A worker's claim on a job; another worker resumes the job this long after the holder died.
HOSTING_BATCH_LEASE_S = float(os.environ.get("HOSTING_BATCH_LEASE_S", 15))
HOSTING_BATCH_POLL_S = 1.0
# Jobs one worker's driver runs side by side (each of a different owner; their lines share
# the HOSTING_BATCH_IN_FLIGHT slots round-robin by owner), and how often one line answered
# 429/503/504 is tried again before its error goes to the error file.
HOSTING_BATCH_MAX_JOBS = int(os.environ.get("HOSTING_BATCH_MAX_JOBS", 8))
HOSTING_BATCH_LINE_RETRIES = int(os.environ.get("HOSTING_BATCH_LINE_RETRIES", 20))
# Files (inputs, outputs, error files) are deleted this long after their creation unless
# the upload's expires_after (or the batch's output_expires_after) says otherwise; 0 = kept
# until deleted.
HOSTING_FILE_RETENTION_S = int(os.environ.get("HOSTING_FILE_RETENTION_S", 30 * 24 * 3600))
# Bytes of files (uploads and batch outputs) one API token may keep at once (0 = no quota).
HOSTING_FILE_STORAGE_BYTES = _bytes("HOSTING_FILE_STORAGE_BYTES") if os.environ.get("HOSTING_FILE_STORAGE_BYTES") \
    else 1024 ** 3

# --- Traces and logs ----------------------------------------------------------------------
# OpenTelemetry traces (models_registry.observe.tracing) when an OTLP endpoint is set; the SDK reads the
# rest of the standard OTEL_* environment itself (service name, sampler, headers, batch processor).
HOSTING_TRACING = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) and not _flag("OTEL_SDK_DISABLED", False) \
    and os.environ.get("OTEL_TRACES_EXPORTER", "otlp") != "none"
if HOSTING_TRACING and os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") != "http/protobuf":
    raise ImproperlyConfigured("OTEL_EXPORTER_OTLP_PROTOCOL: this server exports over http/protobuf only (port 4318 "
                               "of a collector); unset it or set it to http/protobuf")
# plain (default) or json: every log line one JSON object (python-json-logger).
HOSTING_LOG_FORMAT = os.environ.get("HOSTING_LOG_FORMAT", "plain").strip().lower()
if HOSTING_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"HOSTING_LOG_FORMAT={HOSTING_LOG_FORMAT!r}: use plain or json")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": LOG_FORMAT},
                   "json": {"()": "pythonjsonlogger.json.JsonFormatter", "fmt": LOG_FORMAT,
                            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": HOSTING_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"},
                # JSON lines: the ASGI server's own lines too (uvicorn configured its loggers before Django's).
                **({name: {"handlers": ["console"], "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")} if HOSTING_LOG_FORMAT == "json" else {})},
}
