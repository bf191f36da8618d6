"""`dlrun cost-report`'s numbers (orchestrator/monitoring/costs.py): one line per job, totals per creation day
and overall, as --json prints them. The store is a file under the test's $DLRUN_HOME; no Ray, no cloud."""
from __future__ import annotations

import json
import sqlite3
import time

from orchestrator.cli.main import main
from orchestrator.monitoring.costs import build_cost_report
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus

DAY = 86400.0


def _job(store, name: str, *, created_at: float, est_cost: float | None, cost: float, spot: bool) -> str:
    job_id = store.create_job(name=name, spec_hash="h", spec_json="{}", est_cost=est_cost, est_seconds=1800.0)
    store.start_attempt(job_id, attempt=1, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=spot,
                        price_per_hour=0.5, price_date="2026-11-01", cluster_id=None)
    store.set_actual_cost(job_id, cost)
    store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=3600.0)
    with sqlite3.connect(store.path) as c:  # the creation time is the store's own clock: set it back here
        c.execute("UPDATE jobs SET created_at=? WHERE id=?", (created_at, job_id))
    return job_id


def test_jobs_are_totalled_per_creation_day_and_overall():
    store = default_store()
    noon = time.mktime(time.strptime("2026-11-20 12:00", "%Y-%m-%d %H:%M"))
    first = _job(store, "a", created_at=noon, est_cost=0.25, cost=0.5, spot=True)
    _job(store, "b", created_at=noon + 60, est_cost=None, cost=0.125, spot=False)
    _job(store, "c", created_at=noon + DAY, est_cost=1.0, cost=2.0, spot=False)

    report = build_cost_report(store)

    assert {d: (t.jobs, t.est_cost, t.actual_cost) for d, t in report.days.items()} == {
        "2026-11-21": (1, 1.0, 2.0), "2026-11-20": (2, 0.25, 0.625)}
    assert (report.total.jobs, report.total.est_cost, report.total.actual_cost) == (3, 1.25, 2.625)
    line = next(j for j in report.jobs if j.job == first)
    assert (line.status, line.spot, line.est_hours, line.actual_hours, line.gpu) == ("SUCCEEDED", True, 0.5, 1.0, "T4")


def test_cost_report_json_has_the_report_keys(capsys):
    store = default_store()
    _job(store, "a", created_at=time.time(), est_cost=0.25, cost=0.5, spot=True)
    main(["cost-report", "--json"])  # returns: only a failing command exits
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["jobs", "days", "total"]
    assert list(out["jobs"][0]) == ["job", "name", "day", "status", "backend", "instance", "gpu", "spot",
                                    "preemptions", "est_hours", "actual_hours", "est_cost", "actual_cost", "schedule"]
    assert out["total"] == {"jobs": 1, "est_cost": 0.25, "actual_cost": 0.5}
