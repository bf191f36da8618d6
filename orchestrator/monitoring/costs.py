"""What jobs cost, read from the store: a job's spend so far (finished attempts plus its live cluster's
node-seconds), and the cost report's per-job rows with their per-day and overall totals."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from orchestrator.cost import node_seconds_cost
from orchestrator.state.db import Store
from orchestrator.state.records import JobRecord


def accrued_cost(store: Store, job: JobRecord, now: float | None = None) -> float:
    """Spent so far: finished attempts (recorded) + the live cluster's node-seconds × launch price."""
    now = now or time.time()
    spent = job.actual_cost
    if job.live:
        for c in store.job_clusters(job.id):
            if not c.terminated:
                spent += node_seconds_cost(c.price_per_hour * c.num_nodes, c.launched_at, now)
    return spent


@dataclass(frozen=True)
class JobCost:
    """One job's line of the cost report (its fields, in this order, are the --json keys)."""

    job: str
    name: str
    day: str  # the local date the job was created
    status: str
    backend: str | None
    instance: str | None
    gpu: str | None
    spot: bool
    preemptions: int
    est_hours: float
    actual_hours: float
    est_cost: float
    actual_cost: float
    schedule: str | None


@dataclass
class CostTotal:
    jobs: int = 0
    est_cost: float = 0.0
    actual_cost: float = 0.0


@dataclass
class CostReport:
    jobs: list[JobCost]
    days: dict[str, CostTotal] = field(default_factory=dict)  # in the order the jobs list them
    total: CostTotal = field(default_factory=CostTotal)

    def to_json(self) -> dict:
        return {"jobs": [asdict(j) for j in self.jobs], "days": {d: asdict(t) for d, t in self.days.items()},
                "total": asdict(self.total)}


def job_cost(store: Store, job: JobRecord) -> JobCost:
    return JobCost(
        job=job.id, name=job.name, day=time.strftime("%Y-%m-%d", time.localtime(job.created_at)),
        status=job.status.value, backend=job.backend, instance=job.instance_type, gpu=job.accelerator,
        spot=job.spot, preemptions=job.preemptions, est_hours=(job.est_seconds or 0) / 3600,
        actual_hours=(job.actual_seconds or 0) / 3600, est_cost=job.est_cost or 0.0,
        actual_cost=round(accrued_cost(store, job), 6), schedule=job.schedule_id)


def build_cost_report(store: Store) -> CostReport:
    """Every job's cost, totalled per day (the day it was created) and overall."""
    jobs = [job_cost(store, j) for j in store.list_jobs(limit=100000)]
    days: dict[str, CostTotal] = {}
    for j in jobs:
        d = days.setdefault(j.day, CostTotal())
        d.jobs += 1
        d.est_cost += j.est_cost
        d.actual_cost += j.actual_cost
    total = CostTotal(len(jobs), sum(j.est_cost for j in jobs), sum(j.actual_cost for j in jobs))
    return CostReport(jobs, days, total)
