#!/usr/bin/env bash
# One run on a lent GPU machine (the device tool): this GPU's kernels, then the estimator against real steps.
#
# The device image has torch, transformers and numpy but not pydantic: carry its wheels. Here, once, in the
# repository's root (the .whl folder is ignored, never committed):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-extensions==4.16.0 typing-inspection==0.4.5
# (the versions .venv has: `.venv/bin/pip list | grep -i -e pydantic -e annotated -e typing`), then run
#   bash bench/gpu_device_run.sh            with carry [".whl"], timeout_s ~540
# Everything it prints is also under $OUT: kernels.csv (commit it as configs/catalog/gpu_kernels_<GPU>.csv) and
# estimator_gpu.txt (the closing note's figures); breakdown.csv says per model and kernel class where the measured
# step's time went against the prediction, and which ops took the most (what to correct the model with afterwards);
# host_steps.csv / host_ops.csv the host side of each loop. Without a GPU, afterwards:
#   python bench/estimator_gpu.py --measured DIR     the table again, against the model as it is now
#   python bench/host_fit.py DIR                     the host model's constants, from the seen loops
#   python bench/step_kernels.py DIR GPU             kernel rows from the seen loops' profiled steps
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 DLRUN_HOME=/tmp/dlrun-home
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
# ≤ 410 s in all: each step has its own limit, and each writes as it goes (a timeout keeps what was measured)
timeout 130 python3 bench/calibrate_gpu.py --out "$OUT/kernels.csv" 2>&1 | tee "$OUT/calibrate.txt"
# what real models run that generic shapes miss: depthwise convs, vocabulary GEMMs, few-channel BatchNorm, a large
# cross-entropy, and the host's cost per parameter tensor by optimizer implementation
timeout 40 python3 bench/calibrate_model_kernels.py --out "$OUT/kernels.csv" 2>&1 | tee -a "$OUT/calibrate.txt"
# the fits with this GPU's own rows: the estimator then predicts from what this GPU measured
cp "$OUT/kernels.csv" configs/catalog/gpu_kernels_device.csv 2>/dev/null
timeout 180 python3 bench/estimator_gpu.py --budget-seconds 140 --steps 15 --breakdown "$OUT/breakdown.csv" \
  --local-check 2>&1 \
  | tee "$OUT/estimator_gpu.txt"
# the host side of the same loops (step wall, dispatch, thread CPU, per-op self CPU): bench/host_fit.py reads it
timeout 55 python3 bench/host_steps.py --out "$OUT" --budget-seconds 40 2>&1 | tail -3
rm -f configs/catalog/gpu_kernels_device.csv
