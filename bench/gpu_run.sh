#!/bin/sh
# On the GPU machine (no package index): install the wheels bench/gpu_wheels.sh prepared into
# DIR/site (no index, no dependencies resolved: every pin is there) and run the benchmark.
#   sh bench/gpu_run.sh [DIR] [python -m bench.gpu ARGS...]
# BENCH_MODULE=bench.gpu_generation runs the generation bench instead (its transformers serve extras: wheels
# that bench/gpu_wheels.sh puts in DIR-gen, installed into DIR-gen/site and put on PYTHONPATH here).
set -eu
dest=${1:-wheels/gpu}
[ "$#" -gt 0 ] && shift
python=${PYTHON:-python3}
if [ ! -f "$dest/site/.installed" ]; then
    rm -rf "$dest/site"  # a reused machine keeps old installs: never mix versions
    "$python" -m pip install --quiet --no-index --no-deps --target "$dest/site" "$dest"/wheels/*.whl
    touch "$dest/site/.installed"
fi
export PYTHONPATH="$PWD/$dest/site${PYTHONPATH:+:$PYTHONPATH}"
if [ -d "$dest-gen" ]; then
    [ -f "$dest-gen/site/.installed" ] || { "$python" -m pip install --quiet --no-index --no-deps --target "$dest-gen/site" "$dest-gen"/*.whl && touch "$dest-gen/site/.installed"; }
    export PYTHONPATH="$PYTHONPATH:$PWD/$dest-gen/site" HOSTING_BENCH_EXTRA_SITE="$PWD/$dest-gen/site"
fi
export HOSTING_BENCH_TOKENIZER_DIR="$PWD/$dest/tokenizer"
exec "$python" -m "${BENCH_MODULE:-bench.gpu}" "$@"
