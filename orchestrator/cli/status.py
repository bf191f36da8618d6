"""`dlrun status`, `logs` and `cancel`: read the store (and the Ray head while the job lives)."""
from __future__ import annotations

import json
import sys
import time

import click

from orchestrator.cost import node_seconds_cost
from orchestrator.errors import UsageError
from orchestrator.state.db import LIVE, TERMINAL, Store, default_store


def _job(store: Store, job_id: str):
    row = store.get_job(job_id)
    if row is None:
        raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
    return row


def accrued_cost(store: Store, row, now: float | None = None) -> float:
    """Spent so far: finished attempts (recorded) + the live cluster's node-seconds × launch price."""
    now = now or time.time()
    spent = row["actual_cost"] or 0.0
    if row["status"] in LIVE:
        for c in store.job_clusters(row["id"]):
            if c["state"] != "terminated":
                spent += node_seconds_cost(c["price_per_hour"] * (c["num_nodes"] or 1), c["launched_at"], now)
    return spent


def job_dict(store: Store, row) -> dict:
    d = {k: row[k] for k in row.keys() if k not in ("spec_json",)}
    d["accrued_cost"] = round(accrued_cost(store, row), 6)
    d["metrics"] = json.loads(row["metrics_json"]) if row["metrics_json"] else None
    d.pop("metrics_json", None)
    return d


def show_jobs(limit: int = 20, as_json: bool = False) -> None:
    store = default_store()
    rows = store.list_jobs(limit=limit)
    if as_json:
        click.echo(json.dumps([job_dict(store, r) for r in rows], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="dlrun jobs")
    for col in ("job", "name", "status", "backend", "instance", "spot", "est $", "cost $", "max $", "age",
                "accuracy"):
        t.add_column(col, justify="right" if col.endswith("$") else "left")
    now = time.time()
    for r in rows:
        m = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
        acc = m.get("accuracy")
        t.add_row(r["id"], r["name"], _colour(r["status"]), r["backend"] or "-", r["instance_type"] or "-",
                  "yes" if r["spot"] else "no", _money(r["est_cost"]), _money(accrued_cost(store, r, now)),
                  _money(r["max_cost"]), _age(now - r["created_at"]), f"{acc:.3f}" if acc is not None else "-")
    Console().print(t)


def show_job(job_id: str, as_json: bool = False) -> None:
    store = default_store()
    row = _job(store, job_id)
    events = [dict(e) for e in store.events(row["id"])]
    if as_json:
        click.echo(json.dumps({**job_dict(store, row), "events": events}, indent=2))
        return
    d = job_dict(store, row)
    for k in ("id", "name", "status", "backend", "instance_type", "accelerator", "spot", "ray_submission_id",
              "ray_address", "est_cost", "accrued_cost", "max_cost", "preemptions", "attempts", "metrics"):
        click.echo(f"{k:>18}: {d.get(k)}")
    click.echo("history:")
    for e in events:
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts"]))
        click.echo(f"  {ts}  {e['kind']:<16} {e['status'] or ''} {e['detail'] or ''}".rstrip())


def _colour(status: str) -> str:
    colour = {"SUCCEEDED": "green", "FAILED": "red", "BUDGET_EXCEEDED": "red", "CANCELLED": "yellow"}.get(status, "cyan")
    return f"[{colour}]{status}[/]"


def _money(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def _age(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def print_logs(job_id: str, follow: bool = False) -> None:
    from orchestrator.runs.attempt import job_log_path

    store = default_store()
    row = _job(store, job_id)
    saved = job_log_path(row["id"])
    if row["status"] in TERMINAL or not row["ray_submission_id"]:
        if saved.exists():
            sys.stdout.write(saved.read_text())
        elif row["status"] in LIVE:
            click.echo(f"(job {row['id']} is {row['status']}; no output yet)", err=True)
        if not follow or row["status"] in TERMINAL:
            return
    from orchestrator.runs.ray_jobs import RayJobs

    while not row["ray_submission_id"]:
        time.sleep(1)
        row = store.get_job(row["id"])
        if row["status"] in TERMINAL:
            return
    jobs = RayJobs(row["ray_address"])
    printed = 0
    while True:
        try:
            text = jobs.logs(row["ray_submission_id"])
        except Exception:
            text = saved.read_text() if saved.exists() else ""
        sys.stdout.write(text[printed:])
        sys.stdout.flush()
        printed = len(text)
        row = store.get_job(row["id"])
        if not follow or row["status"] in TERMINAL:
            return
        time.sleep(1)


def cancel(job_id: str) -> str:
    store = default_store()
    row = _job(store, job_id)
    if row["status"] in TERMINAL:
        return f"{row['id']} already ended ({row['status']})"
    if row["ray_submission_id"] and row["ray_address"]:
        from orchestrator.runs.ray_jobs import RayJobs

        try:
            RayJobs(row["ray_address"]).stop(row["ray_submission_id"])
        except Exception:
            pass
    from orchestrator.runs.reconcile import process_alive

    if row["supervisor_pid"] and process_alive(row["supervisor_pid"]):
        return f"{row['id']}: cancel requested; its supervisor stops the job and tears down the cluster"
    from orchestrator.runs.teardown import terminate_recorded

    for c in store.job_clusters(row["id"]):
        if c["state"] != "terminated":
            terminate_recorded(store, c)
    store.set_status(row["id"], "CANCELLED", "dlrun cancel")
    return f"{row['id']} cancelled"
