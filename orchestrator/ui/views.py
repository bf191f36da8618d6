"""What each page of `dlrun ui` shows, read from the store as plain JSON-ready dicts (no HTML here: the
templates escape, the page's script sets text only)."""
from __future__ import annotations

import time
from pathlib import Path

from orchestrator.monitoring.costs import accrued_cost
from orchestrator.paths import job_log_path
from orchestrator.state import job_pages
from orchestrator.state.db import Store
from orchestrator.state.records import JobRecord
from orchestrator.state.schedules import describe, list_schedules
from orchestrator.states import JobStatus

LOG_FIRST_BYTES = 256 * 1024  # a job page shows at most the log's last 256 KiB at first, then what is added
CURVE_KEYS = ("loss", "accuracy", "samples_per_s")  # drawn first; any other number the job reported follows


def _local(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else None


def job_row(store: Store, job: JobRecord, now: float) -> dict:
    """A job as the jobs table lists it."""
    since = job.started_at or job.created_at
    return {"id": job.id, "name": job.name, "status": job.status.value, "live": job.live,
            "backend": job.backend, "gpu": job.accelerator, "spot": job.spot, "schedule": job.schedule_id,
            "created": _local(job.created_at), "started": _local(job.started_at),
            "elapsed_s": round((job.ended_at or now) - since, 1),
            "cost_so_far": round(accrued_cost(store, job, now), 6), "max_cost": job.max_cost,
            "est_hours": job.est_seconds / 3600 if job.est_seconds is not None else None,
            "actual_hours": job.actual_seconds / 3600 if job.actual_seconds is not None else None,
            "est_cost": job.est_cost, "message": job.message}


def jobs_view(store: Store, flt: job_pages.JobFilter, page: int, per_page: int) -> dict:
    now = time.time()
    jobs, total = job_pages.job_page(store, flt, offset=page * per_page, limit=per_page)
    return {"jobs": [job_row(store, j, now) for j in jobs], "total": total, "page": page, "per_page": per_page}


def filter_choices(store: Store) -> dict:
    return {"statuses": [job_pages.LIVE_FILTER, *(s.value for s in JobStatus)],
            "backends": job_pages.backends_used(store),
            "schedules": [{"id": s.id, "name": s.name} for s in list_schedules(store)]}


def pareto(points: list[dict]) -> list[int]:
    """Indices of the points no other beats in both hours and dollars, fastest first: for each deadline,
    the cheapest candidate that meets it."""
    order = sorted(range(len(points)), key=lambda i: (points[i]["hours"], points[i]["cost"]))
    front, best = [], float("inf")
    for i in order:
        if points[i]["cost"] < best:
            front.append(i)
            best = points[i]["cost"]
    return front


def plan_view(store: Store, job: JobRecord) -> dict:
    """The candidates recorded with the job's plan; a job recorded before they were kept has its chosen one."""
    data = next((e.data for e in store.events(job.id) if e.kind == "plan"), {})
    points = [p for p in data.get("candidates") or [] if isinstance(p, dict)
              and isinstance(p.get("hours"), (int, float)) and isinstance(p.get("cost"), (int, float))]
    complete = bool(points)
    if not points and isinstance(data.get("est_hours"), (int, float)):
        points = [{"offer": str(data.get("chosen", "")), "backend": job.backend, "hours": data["est_hours"],
                   "cost": data.get("est_cost") or 0.0, "feasible": True, "chosen": True, "why": None}]
    feasible = [i for i, p in enumerate(points) if p.get("feasible")]
    front = [feasible[i] for i in pareto([points[i] for i in feasible])]
    return {"points": points, "frontier": front, "complete": complete, "max_cost": job.max_cost}


def _log_text(path: Path, start: int) -> tuple[str, int]:
    """The log's whole lines from byte `start` (or from its last LOG_FIRST_BYTES when start < 0), and where
    the next read starts."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if start < 0:
                start = max(0, size - LOG_FIRST_BYTES)
            f.seek(min(start, size))
            data = f.read()
    except OSError:
        return "", max(start, 0)
    cut = data.rfind(b"\n") + 1
    return data[:cut].decode(errors="replace"), start + cut


def log_view(job_id: str, after: int) -> dict:
    """The job's log lines (rendered as `dlrun logs` renders them) after byte `after` (-1: its last part)."""
    from jobs.progress import terminal_lines
    from orchestrator.cli.status import render_log_line

    text, offset = _log_text(job_log_path(job_id), after)
    lines = [shown for line in terminal_lines(text) if (shown := render_log_line(line)) is not None]
    return {"lines": lines, "offset": offset}


class Curves:
    """Per reported epoch, every number each job reported (loss, accuracy, samples/s ...), read from its kept
    log: each log once, then only what was added since (a page polls a running job every 2 s)."""

    KEEP = 64  # jobs remembered (the pages open lately)

    def __init__(self) -> None:
        self._read: dict[str, tuple[int, dict[str, list[list[float]]]]] = {}

    def of(self, job_id: str) -> dict:
        offset, series = self._read.pop(job_id, (0, {}))
        text, offset = _log_text(job_log_path(job_id), offset)
        _add_points(series, text)
        self._read[job_id] = (offset, series)
        while len(self._read) > self.KEEP:
            self._read.pop(next(iter(self._read)))
        order = [k for k in CURVE_KEYS if k in series] + sorted(k for k in series if k not in CURVE_KEYS)
        return {"series": [{"name": k, "points": series[k]} for k in order]}


def _add_points(series: dict[str, list[list[float]]], text: str) -> None:
    from jobs.metrics import parse_line

    for line in text.splitlines():
        parsed = parse_line(line.rsplit("\r", 1)[-1])
        if parsed is None or parsed[0] == "result" or "event" in parsed[1] or "epoch" not in parsed[1]:
            continue
        data = parsed[1]
        try:
            epoch = float(data["epoch"])
        except (TypeError, ValueError):
            continue
        for key, value in data.items():
            if key in ("epoch", "epochs", "progress", "eta_s", "step", "steps") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                series.setdefault(str(key), []).append([epoch, float(value)])


def _detail(text: str, data: dict) -> str:
    """An event's detail in words: name=value, a list of records (the plan's candidates) by its count."""
    if not data:
        return text
    return " ".join(f"{k}={len(v)}" if isinstance(v, list) and any(isinstance(x, dict) for x in v)
                    else f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in data.items())


def job_view(store: Store, job: JobRecord, curves: Curves) -> dict:
    """Everything a job's page shows that changes while it runs (its log comes separately)."""
    now = time.time()
    events = [{"at": _local(e.ts), "kind": e.kind, "status": e.status, "detail": _detail(e.detail, e.data)}
              for e in store.events(job.id)]
    clusters = store.job_clusters(job.id)
    cluster_up = any(not c.terminated for c in clusters)
    dashboard = job.ray_address if job.live and cluster_up and (job.ray_address or "").startswith("http") else None
    return {"job": job_row(store, job, now), "events": events, "curves": curves.of(job.id),
            "dashboard": dashboard, "cluster_gone": bool(clusters) and not cluster_up,
            "submission": job.ray_submission_id}


def schedules_view(store: Store) -> list[dict]:
    """Each schedule: its next run and its past runs (duration and cost against the estimate)."""
    out = []
    for sched in list_schedules(store):
        view = describe(store, sched)
        runs = [{"job": j.id, "day": _local(j.created_at), "status": j.status.value,
                 "hours": (j.actual_seconds or 0) / 3600, "est_hours": (j.est_seconds or 0) / 3600,
                 "cost": round(accrued_cost(store, j), 6), "est_cost": j.est_cost or 0.0}
                for j in job_pages.schedule_jobs(store, sched.id)]
        out.append({"id": sched.id, "name": sched.name, "cron": sched.cron, "tz": sched.tz,
                    "paused": sched.paused, "next_run": view.next_run_text, "monthly_cap": sched.monthly_cap,
                    "spent_month": round(view.spent_month, 4), "runs": runs})
    return out


def cost_view(store: Store) -> dict:
    """Estimated against actual per day and backend, a live job's running cluster counted as far as now."""
    cells = {(c.day, c.backend): c.__dict__.copy() for c in job_pages.cost_cells(store)}
    for job in store.list_jobs(limit=10000, live_only=True):
        key = (time.strftime("%Y-%m-%d", time.localtime(job.created_at)), job.backend or job_pages.NOT_LAUNCHED)
        if key in cells:
            cells[key]["actual_cost"] += accrued_cost(store, job) - job.actual_cost
    rows = list(cells.values())
    days: dict[str, dict] = {}
    backends: dict[str, dict] = {}
    for r in rows:
        for table, key in ((days, r["day"]), (backends, r["backend"])):
            t = table.setdefault(key, {"key": key, "jobs": 0, "est_cost": 0.0, "actual_cost": 0.0,
                                       "est_hours": 0.0, "actual_hours": 0.0})
            for f in ("jobs", "est_cost", "actual_cost", "est_hours", "actual_hours"):
                t[f] += r[f]
    return {"cells": rows, "days": list(days.values()), "backends": sorted(backends.values(),
                                                                         key=lambda b: -b["actual_cost"])}
