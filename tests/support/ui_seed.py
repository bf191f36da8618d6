"""A store as `dlrun ui`'s pages read it, written through dlrun's own state API (no SQL): finished jobs
with their plans (every candidate, as executor.record_job keeps them), a schedule's nights, a job whose
name, log line and metric name hold HTML, and the log each job's watcher would have kept."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.paths import job_log_path
from orchestrator.state.db import Store
from orchestrator.state.schedules import add_schedule
from orchestrator.states import JobStatus

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert('x')</script><b>bold</b>"  # in a job name, a log line and a metric name

CANDIDATES = [  # hours against dollars: local is chosen; aws is faster and dearer; gcp is left out
    {"offer": "local CPU", "backend": "local", "hours": 0.20, "cost": 0.0, "feasible": True, "chosen": True,
     "why": None},
    {"offer": "aws us-east-1 g4dn.xlarge T4", "backend": "aws", "hours": 0.05, "cost": 0.04, "feasible": True,
     "chosen": False, "why": None},
    {"offer": "aws us-east-1 g4dn.xlarge T4 spot", "backend": "aws", "hours": 0.06, "cost": 0.015,
     "feasible": True, "chosen": False, "why": None},
    {"offer": "aws us-east-1 p3.2xlarge V100", "backend": "aws", "hours": 0.08, "cost": 0.30, "feasible": True,
     "chosen": False, "why": None},
    {"offer": "gcp us-central1 a2-highgpu-1g A100", "backend": "gcp", "hours": 0.03, "cost": 9.0,
     "feasible": False, "chosen": False, "why": "over the budget of $5.00"},
]


@dataclass
class Seeded:
    jobs: list[str] = field(default_factory=list)  # every job, oldest first
    hostile: str = ""  # the job whose name, log and metric hold HTML
    schedule: str = ""  # the schedule's name
    schedule_id: str = ""


def metric_line(**values) -> str:
    return "DLRUN_METRIC " + json.dumps(values, separators=(",", ":"))


def finished_job(store: Store, name: str, *, backend: str = "local", status: JobStatus = JobStatus.SUCCEEDED,
                 schedule_id: str | None = None, epochs: int = 5, cost: float = 0.0, est_cost: float = 0.0,
                 seconds: float = 600.0, extra_metric: str | None = None, log_lines: tuple[str, ...] = ()) -> str:
    """A job as its lifecycle leaves it: planned (every candidate), launched, run, finished, its log kept."""
    job_id = store.create_job(name=name, spec_hash="h", spec_json="{}", schedule_id=schedule_id, max_cost=5.0,
                              est_cost=est_cost, est_seconds=seconds * 0.9, est_run_seconds=seconds * 0.8)
    store.add_event(job_id, "plan", {"chosen": "local CPU", "spot": False, "est_hours": 0.2, "est_cost": est_cost,
                                     "unusable": [], "candidates": CANDIDATES})
    store.start_attempt(job_id, attempt=1, backend=backend, offer_key=f"{backend}/x", instance_type=None,
                        accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                        cluster_id=f"c-{job_id}")
    store.set_status(job_id, JobStatus.PROVISIONING)
    store.set_status(job_id, JobStatus.RUNNING)
    lines = []
    for epoch in range(1, epochs + 1):
        values = {"epoch": epoch, "epochs": epochs, "loss": round(1.0 / epoch, 4),
                  "accuracy": round(1 - 0.5 / epoch, 4), "samples_per_s": 1000.0 + epoch}
        if extra_metric:
            values[extra_metric] = epoch * 0.1
        lines.append(metric_line(**values))
    log = job_log_path(job_id)
    log.write_text("\n".join([*log_lines, *lines, 'DLRUN_RESULT {"accuracy":0.9}']) + "\n")
    store.set_actual_cost(job_id, cost)
    store.finish(job_id, status, "seeded", actual_seconds=seconds, actual_run_seconds=seconds * 0.8)
    return job_id


def seed_pages(store: Store, nights: int = 4) -> Seeded:
    """A schedule with `nights` runs, a few plain jobs on local and aws, and the hostile one (newest)."""
    out = Seeded()
    sched = add_schedule(store, ROOT / "configs/examples/digits_cnn.yaml", "0 2 * * *", tz="UTC",
                         name="nightly-digits")
    out.schedule, out.schedule_id = sched.name, sched.id
    for night in range(nights):
        out.jobs.append(finished_job(store, "digits-cnn", schedule_id=sched.id, cost=0.01 * (night + 1),
                                     est_cost=0.02, seconds=600 + 60 * night))
    out.jobs.append(finished_job(store, "resnet-aws", backend="aws", cost=0.05, est_cost=0.04,
                                 status=JobStatus.FAILED))
    out.hostile = finished_job(store, HOSTILE, extra_metric=HOSTILE, log_lines=(f"hello {HOSTILE}",))
    out.jobs.append(out.hostile)
    return out


def pending_job(store: Store, name: str = "waiting") -> str:
    """A job recorded and planned but not started (no supervisor, no cluster): a cancel records it here."""
    job_id = store.create_job(name=name, spec_hash="h", spec_json="{}", max_cost=1.0, est_cost=0.1, est_seconds=60)
    store.add_event(job_id, "plan", {"chosen": "local CPU", "est_hours": 0.01, "est_cost": 0.1, "unusable": [],
                                     "candidates": CANDIDATES})
    return job_id
