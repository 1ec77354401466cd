#!/usr/bin/env bash
# The GPU figures of the README in one run, most important first: fold-4panel 8192 x 10 s
# (diffmb float64 and float32), then the map folds and Miura-ori beside MuJoCo MJX, 1 s at
# 1 ms (experiments/bench_batch.py). Each result is written as it comes, into DIR (default
# out/gpu), so a run cut short keeps what it finished.
#
#     bash experiments/bench_gpu.sh [DIR]
set -u
DIR=${1:-out/gpu}
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import jax, diffrax, equinox; print('jax', jax.__version__, jax.devices(), 'diffrax', diffrax.__version__, 'equinox', equinox.__version__)"
  "$PY" -c "import mujoco; from mujoco import mjx; print('mujoco', mujoco.__version__)" 2>&1 | tail -1
} | tee "$DIR/env.txt"
"$PY" -c "import diffmb" || exit 2

bench() { "$PY" experiments/bench_batch.py --dt 0.001 --repeats 1 "$@"; }
bench --cases fold4 --batches 8192 --horizon 10 --engines diffmb-f64 diffmb-f32 --timeout 120 --out "$DIR/fold4.json"
bench --cases map6 --batches 1024 --horizon 1 --timeout 100 --out "$DIR/map6.json"
bench --cases map2 --batches 8192 --horizon 1 --timeout 80 --out "$DIR/map2.json"
bench --cases miura5 --batches 1024 --horizon 1 --timeout 80 --out "$DIR/miura5.json"
bench --cases map4 --batches 4096 --horizon 1 --engines diffmb-f64 mjx --timeout 80 --out "$DIR/map4.json"
bench --cases map10 --batches 1024 --horizon 1 --engines diffmb-f64 mjx --timeout 100 --out "$DIR/map10.json"
