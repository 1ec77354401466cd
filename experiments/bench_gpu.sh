#!/usr/bin/env bash
# The accelerator figures in one run (<= 8 minutes on one GPU), most important first, each
# result written as it comes into DIR (default out/gpu), so a run cut short keeps what it
# finished (experiments/bench_batch.py: diffmb beside MuJoCo MJX on the same folds, models
# built once per size, a time allowance per engine, what did not finish said):
#
#   1. the compiled program's counts (experiments/bench_census.py) on this device: fold-4panel
#      and the 6x6 map fold (the Miura-ori 5x5's were 287 kernels a step on 2026-12-04);
#   2. where a step's device time goes, by source file and function (experiments/profile_step.py:
#      fold-4panel at 32k members, the 6x6 map fold at 1k; the compiled programs' text kept);
#   3. fold-4panel, 1 s at 1 ms: 8k / 32k / 64k members in float64, 32k in float32, MJX at 8k;
#   4. 6x6 map fold, 0.2 s: 1k / 4k members in float64, 1k in float32;
#   5. 5x5 Miura-ori, 0.2 s: 1k members, float64;
#   6. what contact costs a sweep: the 4x4 map fold, 0.2 s, 1k members, contact 0 and 1
#      (experiments/bench_contact_sweep.py).
# MJX on the 6x6 map fold and the Miura-ori is left out: neither finished in 80-190 s on
# 2026-11-28 (fold-4panel at 32k did not finish in 60 s on 2026-12-04). About 8 minutes.
# At the end DIR is packed into DIR.tar.gz: one file to carry back.
#
# Each row: member-s/s, step time, compile time, peak device memory, worst closure violation.
# COMMAND_BUFFERS=1 lets XLA capture whole loops as CUDA graphs (+WHILE,+CONDITIONAL; CUDA
# >= 12.3): the counted loops hold no library call, so the time loop can be one graph.
#
#     bash experiments/bench_gpu.sh [DIR]
#     bash experiments/bench_gpu.sh --smoke [DIR]    # the same script on a CPU, tiny sizes (CI)
#
# The H200 image has jax 0.11.2, diffrax and equinox but no MuJoCo: MJX's rows need the
# wheels mujoco==3.17.0, mujoco-mjx==3.17.0, trimesh, glfw, pyopengl, websockets and etils
# (cp312, manylinux) installed ahead into a --target folder on PYTHONPATH. Before it was
# trimmed the script ran past 555 s on 2026-12-04: give it a timeout that leaves time to
# copy DIR.tar.gz back.
set -u
SMOKE=0
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
DIR=${1:-out/gpu}
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
if [ "${COMMAND_BUFFERS:-0}" = "1" ]; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"
fi

{
  if [ "$SMOKE" = "0" ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi
  "$PY" -c "import jax, diffrax, equinox; print('jax', jax.__version__, jax.devices(), 'diffrax', diffrax.__version__, 'equinox', equinox.__version__)"
  "$PY" -c "import mujoco; from mujoco import mjx; print('mujoco', mujoco.__version__)" 2>&1 | tail -1
  echo "XLA_FLAGS=${XLA_FLAGS:-}"
} | tee "$DIR/env.txt"
"$PY" -c "import diffmb" || exit 2

bench() { "$PY" experiments/bench_batch.py --dt 0.001 --repeats 1 "$@"; }
if [ "$SMOKE" = "1" ]; then
  "$PY" experiments/bench_census.py --cases fold4 --members 2 --steps 10 --out "$DIR/census.json" || exit 1
  "$PY" experiments/profile_step.py --case fold4 --batch 4 --steps 10 --out "$DIR/profile" || exit 1
  bench --cases fold4 --batches 4 --horizon 0.02 --engines diffmb-f64 diffmb-f32 mjx --timeout 240 --out "$DIR/fold4.json" || exit 1
  # the map folds run without MJX in the full script (they never finished within their allowance)
  bench --cases map2 --batches 2 --horizon 0.01 --engines diffmb-f64 --timeout 240 --out "$DIR/map2.json" || exit 1
  "$PY" experiments/bench_contact_sweep.py --smoke --out "$DIR/contact.json" || exit 1
  exit 0
fi
timeout 90 "$PY" experiments/bench_census.py --cases fold4 map6 --out "$DIR/census.json"
timeout 60 "$PY" experiments/profile_step.py --case fold4 --batch 32768 --steps 50 --out "$DIR/profile"
timeout 60 "$PY" experiments/profile_step.py --case map6 --batch 1024 --steps 50 --out "$DIR/profile"
bench --cases fold4 --batches 8192 32768 65536 --horizon 1 --engines diffmb-f64 --timeout 90 --out "$DIR/fold4.json"
bench --cases fold4 --batches 32768 --horizon 1 --engines diffmb-f32 --timeout 50 --out "$DIR/fold4_f32.json"
bench --cases fold4 --batches 8192 --horizon 1 --engines mjx --timeout 45 --out "$DIR/fold4_mjx.json"
bench --cases map6 --batches 1024 4096 --horizon 0.2 --engines diffmb-f64 --timeout 90 --out "$DIR/map6.json"
bench --cases map6 --batches 1024 --horizon 0.2 --engines diffmb-f32 --timeout 60 --out "$DIR/map6_f32.json"
bench --cases miura5 --batches 1024 --horizon 0.2 --engines diffmb-f64 --timeout 50 --out "$DIR/miura5.json"
timeout 60 "$PY" experiments/bench_contact_sweep.py --cases map4 --batches 1024 --horizon 0.2 --repeats 1 --out "$DIR/contact.json"
tar czf "$DIR.tar.gz" -C "$(dirname "$DIR")" "$(basename "$DIR")"
