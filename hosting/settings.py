"""Django settings of this install: a project that adds the app (models_registry) as any project would.

The environment is read here for the project's own settings (database, secret, hosts, TLS,
the embedded Redis, slow clients) and by the app for its HOSTING_* settings
(models_registry.core.conf, with their defaults). README "Configuration" lists them.
"""

from __future__ import annotations

import logging
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


var_dir.prepare(VAR_DIR)  # 0700: the key, the SQLite file, the Redis socket, batch files
SECRET_KEY = secret_key.load(VAR_DIR, os.environ.get("SECRET_KEY", ""))
DEBUG = _flag("DEBUG", False)
if not DEBUG and (_weak := secret_key.refusal(SECRET_KEY)):
    raise ImproperlyConfigured(_weak)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h.strip()]

INSTALLED_APPS = [
    # This install's own commands first: `serve`, and a `runworker` that starts the embedded Redis.
    "hosting",
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_prometheus",
    "axes",  # admin login throttling (AXES_* below)
]
INSTALLED_APPS += ["models_registry"]  # as README "Add to an existing Django project" says

# The full stack serves the admin, the dashboard and /metrics.
MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "models_registry.api.server.middleware.RequestIdMiddleware",
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
# The app builds its channel layer on REDIS_URL (models_registry.broker.work_layer.default_layer_config);
# unset, this install runs its own Redis under var/ (hosting.embedded_redis).
REDIS_URL = os.environ.get("REDIS_URL") or ""
EMBEDDED_REDIS = not REDIS_URL
if EMBEDDED_REDIS:
    from hosting import embedded_redis

    REDIS_URL = embedded_redis.url(VAR_DIR)

# --- The app's settings ------------------------------------------------------------------
# The app reads its HOSTING_* settings from the environment itself, with defaults (models_registry.core.conf);
# this install keeps what the app writes (exported ONNX models) under var/ with the rest.
HOSTING_VAR_DIR = VAR_DIR
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

# Django-served API routes read a body of up to HOSTING_MAX_BODY_BYTES whole (Django's own cap is 2.5 MB).
DATA_UPLOAD_MAX_MEMORY_SIZE = max(int(os.environ.get("HOSTING_MAX_BODY_BYTES") or 0), 2_621_440)

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

# --- Logs ---------------------------------------------------------------------------------
# plain (default) or json: every log line one JSON object (python-json-logger). Traces: the app reads the
# standard OTEL_* environment itself (models_registry.core.conf TRACING, models_registry.observe.tracing).
HOSTING_LOG_FORMAT = os.environ.get("HOSTING_LOG_FORMAT", "plain").strip().lower()
if HOSTING_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"HOSTING_LOG_FORMAT={HOSTING_LOG_FORMAT!r}: use plain or json")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# The format names no source line, thread or process: logging need not look them up for every record
# (the logging HOWTO's "Optimization"; each served request logs a line).
logging._srcfile = None
logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"class": "hosting.log_lines.PlainFormatter", "format": LOG_FORMAT},
                   "json": {"()": "hosting.log_lines.JsonLinesFormatter", "fmt": LOG_FORMAT,
                            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": HOSTING_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"},
                # JSON lines: the ASGI server's own lines too (uvicorn configured its loggers before Django's).
                **({name: {"handlers": ["console"], "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")} if HOSTING_LOG_FORMAT == "json" else {})},
}
