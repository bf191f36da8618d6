"""Predicted vs actual run time of every example job (configs/examples/**/*.yaml) on this machine's CPU.

    python bench/estimator_accuracy.py [--examples DIR] [--goal 0.20]

Each example is planned for the local backend (the estimate a user sees: measured steps, the measured
fixed start of a job process, the data-load prior) and then run by `dlrun submit --backend local` on a
local Ray head, in a fresh $DLRUN_HOME (no history corrects the estimate). The actual figure is the
Ray job's own run time (start to end, as dlrun records it). A job file the planner cannot estimate
here (no workload) is listed and skipped.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def predicted(job_file: Path):
    from orchestrator.planning.spec import load_job
    from orchestrator.runs.executor import make_plan, restrict

    plan = make_plan(restrict(load_job(job_file), "local"))
    if plan.chosen is None:
        raise RuntimeError(plan.nothing_fits_message())
    return plan.chosen.estimate


def actual(job_file: Path, home: Path, address: str) -> float:
    from orchestrator.state.db import default_store

    env = dict(os.environ, DLRUN_RAY_ADDRESS=address, DLRUN_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file), "--backend",
                           "local", "--fresh"], cwd=job_file.parent, env=env, capture_output=True, text=True)
    if proc.returncode == 2 and "--fresh" in proc.stderr:  # a checkout without --fresh yet
        proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file), "--backend",
                               "local"], cwd=job_file.parent, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"dlrun submit exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    job_id = proc.stdout.split()[0]
    return float(default_store().get_job(job_id)["actual_run_seconds"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default=str(ROOT / "configs" / "examples"))
    ap.add_argument("--goal", type=float, default=0.20)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="dlrun-bench-"))
    os.environ["DLRUN_HOME"] = str(home)
    os.environ.setdefault("DLRUN_LOCAL_GPUS", "none")
    files = sorted(Path(args.examples).rglob("*.yaml"))

    from bench_head import bench_head

    worst = 0.0
    with bench_head(home) as head:
        print(f"{'example':<36} {'predicted s':>11} {'(start s)':>9} {'actual s':>9} {'pred/actual':>11}")
        for f in files:
            name = str(f.relative_to(args.examples))
            try:
                est = predicted(f)
            except Exception as e:  # noqa: BLE001 - a bench lists what it could not measure
                print(f"{name:<36} skipped: {str(e).splitlines()[0][:80]}", flush=True)
                continue
            real = actual(f, home, head.dashboard_url)
            ratio = est.run_seconds / real
            worst = max(worst, abs(ratio - 1))
            print(f"{name:<36} {est.run_seconds:>11.1f} {est.start_seconds:>9.1f} {real:>9.1f} {ratio:>11.2f}",
                  flush=True)
    verdict = "within" if worst <= args.goal else "OUTSIDE"
    print(f"worst error: {worst * 100:.0f} % ({verdict} the ±{args.goal * 100:.0f} % goal)")


if __name__ == "__main__":
    main()
