"""Predicted vs actual runtime of the built-in jobs on this machine (goal: within ±25 %).

    python bench/estimator_accuracy.py [--epochs-scale 1.0] [--device cpu|cuda]

The prediction comes from the estimator: a handful of measured training steps on synthetic data of
the job's shape (profile.measure, in a fresh $DLRUN_HOME, so nothing is reused) extrapolated to the
whole run. The actual figure is the job's own `elapsed_s` (data loading, training, per-epoch
evaluation), from `python -m jobs.<name>` run as a separate process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> (workload fields, epochs, batch size); dataset: the 1437 training digits
JOBS = {
    "cnn": ({"model": "jobs.cnn:SimpleCNN", "input_shape": [1, 8, 8]}, 60, 64),
    "lstm": ({"model": "jobs.lstm:StackedLSTM", "input_shape": [8, 8]}, 60, 64),
    "resnet": ({"model": "jobs.resnet:ResNetSmall", "input_shape": [1, 32, 32]}, 6, 64),
}
TRAIN_SIZE = 1437


def predict(name: str, epochs: int, batch: int, device: str) -> tuple[float, float]:
    from orchestrator.planning import estimator, profile
    from infra.catalog import Offer
    from orchestrator.planning.spec import Workload

    fields, _, _ = JOBS[name]
    w = Workload(**fields, batch_size=batch, dataset_size=TRAIN_SIZE, epochs=epochs)
    t0 = time.perf_counter()
    p = profile.measure(w)
    if device == "cuda":
        p.local_step_seconds["cuda"] = profile.measure_local_step(w, "cuda")
    took = time.perf_counter() - t0
    offer = Offer(cloud="local", region="local", instance_type=device, accelerator=None if device == "cpu" else "T4",
                  accelerator_count=0 if device == "cpu" else 1, gpu_memory_gb=0.0 if device == "cpu" else 80.0,
                  vcpus=os.cpu_count() or 1, memory_gb=0.0, price_per_hour=0.0, spot_price_per_hour=None)
    return estimator.estimate(p, offer, spot=False).run_seconds, took


def actual(name: str, epochs: int, batch: int, device: str) -> float:
    out = subprocess.run([sys.executable, "-m", f"jobs.{name}", "--epochs", str(epochs), "--batch-size", str(batch),
                          "--device", device], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    result = next(line for line in out.splitlines() if line.startswith("DLRUN_RESULT "))
    return float(json.loads(result.split(" ", 1)[1])["elapsed_s"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs-scale", type=float, default=1.0)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--jobs", default=",".join(JOBS))
    args = ap.parse_args()
    os.environ["DLRUN_HOME"] = tempfile.mkdtemp(prefix="dlrun-bench-")
    print(f"{'job':<8} {'epochs':>6} {'batch':>5} {'predicted s':>12} {'actual s':>9} {'pred/actual':>11} "
          f"{'profiling s':>11}")
    worst = 0.0
    for name in args.jobs.split(","):
        _, epochs, batch = JOBS[name]
        epochs = max(1, round(epochs * args.epochs_scale))
        pred, took = predict(name, epochs, batch, args.device)
        real = actual(name, epochs, batch, args.device)
        ratio = pred / real
        worst = max(worst, abs(ratio - 1))
        print(f"{name:<8} {epochs:>6} {batch:>5} {pred:>12.2f} {real:>9.2f} {ratio:>11.2f} {took:>11.2f}", flush=True)
    print(f"worst error: {worst * 100:.0f} % ({'within' if worst <= 0.25 else 'OUTSIDE'} the ±25 % goal)")


if __name__ == "__main__":
    main()
