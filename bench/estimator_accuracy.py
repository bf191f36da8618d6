"""Predicted vs actual run time of every example job (configs/examples/**/*.yaml) on this machine's CPU.

    python bench/estimator_accuracy.py [--examples DIR] [--goal 0.20]

Each example is planned for the local backend (the estimate a user sees: measured steps, the measured
fixed start of a job process, the data-load prior) and then run by `dlrun submit --backend local` on a
local Ray head, each example in its own fresh $DLRUN_HOME (no history corrects its first estimate) that
holds only this machine's measured job start (startup.py: a no-op Ray job on the bench's head, timed
once before the first example). The actual figure is the Ray job's own run time (start to end, as dlrun
records it). A job file the planner cannot estimate
here (no workload) is listed and skipped. With --runs 2 (the default) each example runs again after the
first run finished: the second estimate carries the corrections dlrun learnt from the first (step time
and start-up term apart), as a user's next submission would.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
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
    from orchestrator.state.db import default_store

    plan = make_plan(restrict(load_job(job_file), "local"), store=default_store())  # with the history, as submit
    if plan.chosen is None:
        raise RuntimeError(plan.nothing_fits_message())
    return plan.chosen.estimate


def actual(job_file: Path, home: Path, address: str) -> float:
    from orchestrator.state.db import default_store

    shutil.rmtree(home / "checkpoints", ignore_errors=True)  # else a second run resumes at the end
    env = dict(os.environ, DLRUN_RAY_ADDRESS=address, DLRUN_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file), "--backend",
                           "local", "--fresh"], cwd=job_file.parent, env=env, capture_output=True, text=True)
    if proc.returncode == 2 and "--fresh" in proc.stderr:  # a checkout without --fresh yet
        proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file), "--backend",
                               "local"], cwd=job_file.parent, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"dlrun submit exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    job_id = proc.stdout.split()[0]
    own = re.search(r"elapsed_s=([0-9.]+)", proc.stdout)  # the job's own clock: data load, training, eval
    return float(default_store().get_job(job_id).actual_run_seconds), float(own[1]) if own else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default=str(ROOT / "configs" / "examples"))
    ap.add_argument("--goal", type=float, default=0.20)
    ap.add_argument("--runs", type=int, default=2, help="runs per example (the later ones use the history)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="dlrun-bench-"))
    os.environ["DLRUN_HOME"] = str(home)
    os.environ.setdefault("DLRUN_LOCAL_GPUS", "none")
    files = sorted(Path(args.examples).rglob("*.yaml"))

    from bench_head import bench_head

    worst = {}
    with bench_head(home) as head:
        from orchestrator.planning.startup import measure

        machine = measure()
        print(f"job start on this machine: {machine['seconds']:.1f} s ({machine['basis']}; the job process's "
              f"imports alone {machine['process_seconds']:.1f} s)", flush=True)
        print(f"{'example':<26} {'run':>3} {'predicted s':>11} {'(start)':>7} {'actual s':>8} {'(start)':>7} "
              f"{'pred/actual':>11}   start: predicted = measured Ray job start + data-load prior; "
              "actual = Ray run - the job's own elapsed_s (which includes its data load)")
        for i, f in enumerate(files):
            name = str(f.relative_to(args.examples))
            own_home = home / f"example-{i}"  # its own history; the machine's measured start and the head copied in
            shutil.copytree(home / "profiles", own_home / "profiles")
            shutil.copytree(home / "tokens", own_home / "tokens")
            shutil.copy(home / "local_head.json", own_home / "local_head.json")
            os.environ["DLRUN_HOME"] = str(own_home)
            for run in range(1, args.runs + 1):
                try:
                    est = predicted(f)
                except Exception as e:  # noqa: BLE001 - a bench lists what it could not measure
                    print(f"{name:<30} skipped: {str(e).splitlines()[0][:80]}", flush=True)
                    break
                real, own = actual(f, own_home, head.dashboard_url)
                ratio = est.run_seconds / real
                worst[run] = max(worst.get(run, 0.0), abs(ratio - 1))
                outside = real - own  # Ray's supervisor, the job's process start and imports
                print(f"{name:<26} {run:>3} {est.run_seconds:>11.1f} {est.start_seconds:>7.1f} {real:>8.1f} "
                      f"{outside:>7.1f} {ratio:>11.2f}", flush=True)
    for run, w in sorted(worst.items()):
        label = "first runs (no history)" if run == 1 else f"run {run} (history of {run - 1})"
        print(f"worst error, {label}: {w * 100:.0f} % ({'within' if w <= args.goal else 'OUTSIDE'} "
              f"the ±{args.goal * 100:.0f} % goal)")
    print(f"load average at the end of the bench (1/5/15 min): {'/'.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores")

if __name__ == "__main__":
    main()
