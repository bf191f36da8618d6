"""The reads `dlrun ui` pages are made of: a filtered page of jobs (newest first, by the jobs_created index,
so that ten thousand jobs open as fast as ten), the values the filters offer, a schedule's jobs, and the
recorded cost per day and backend. Reads only: nothing here writes."""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.state.db import Store
from orchestrator.state.records import JobRecord
from orchestrator.states import LIVE

LIVE_FILTER = "live"  # the status filter's value for every job not ended yet
NOT_LAUNCHED = "not launched"  # the cost's backend of a job that never got one


@dataclass(frozen=True)
class JobFilter:
    status: str | None = None  # a JobStatus value, or LIVE_FILTER
    backend: str | None = None
    schedule: str | None = None  # a schedule id
    name: str | None = None  # a part of the job's name or id

    def where(self) -> tuple[str, tuple]:
        clauses: list[str] = []
        args: list = []
        if self.status == LIVE_FILTER:
            clauses.append(f"status IN ({','.join('?' * len(LIVE))})")
            args.extend(LIVE)
        elif self.status:
            clauses.append("status=?")
            args.append(self.status)
        if self.backend:
            clauses.append("backend=?")
            args.append(self.backend)
        if self.schedule:
            clauses.append("schedule_id=?")
            args.append(self.schedule)
        if self.name:  # instr, not LIKE: a name with % or _ is matched as written
            clauses.append("(instr(name, ?) > 0 OR instr(id, ?) > 0)")
            args.extend((self.name, self.name))
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), tuple(args)


def job_page(store: Store, flt: JobFilter, *, offset: int = 0, limit: int = 50) -> tuple[list[JobRecord], int]:
    """One page of the jobs the filter keeps, newest first, and how many it keeps in all."""
    where, args = flt.where()
    rows = store._query(f"SELECT * FROM jobs {where} ORDER BY created_at DESC LIMIT ? OFFSET ?",
                        (*args, max(1, limit), max(0, offset)))
    total = store._query(f"SELECT COUNT(*) AS n FROM jobs {where}", args)[0]["n"]
    return [JobRecord.from_row(r) for r in rows], int(total)


def backends_used(store: Store) -> list[str]:
    """The backends jobs ran on (the backend filter's choices)."""
    return [r["backend"] for r in store._query("SELECT DISTINCT backend FROM jobs WHERE backend IS NOT NULL "
                                               "ORDER BY backend")]


def schedule_jobs(store: Store, schedule_id: str, limit: int = 365) -> list[JobRecord]:
    """The jobs a schedule started, oldest first (its last `limit` runs)."""
    rows = store._query("SELECT * FROM (SELECT * FROM jobs WHERE schedule_id=? ORDER BY created_at DESC LIMIT ?) "
                        "ORDER BY created_at", (schedule_id, limit))
    return [JobRecord.from_row(r) for r in rows]


@dataclass(frozen=True)
class CostCell:
    """What the jobs created on one local day on one backend were estimated to cost and cost (recorded)."""
    day: str
    backend: str  # NOT_LAUNCHED for jobs that never launched
    jobs: int
    est_hours: float
    actual_hours: float
    est_cost: float
    actual_cost: float


def cost_cells(store: Store, days: int = 90) -> list[CostCell]:
    """Per local day and backend, newest day first, the last `days` days that had jobs. actual_cost is what
    the store has recorded (a live job's running cluster is not in it: the caller adds it)."""
    rows = store._query(
        "SELECT date(created_at, 'unixepoch', 'localtime') AS day, COALESCE(backend, ?) AS backend, "
        "COUNT(*) AS jobs, SUM(COALESCE(est_seconds, 0)) / 3600.0 AS est_hours, "
        "SUM(COALESCE(actual_seconds, 0)) / 3600.0 AS actual_hours, SUM(COALESCE(est_cost, 0)) AS est_cost, "
        "SUM(COALESCE(actual_cost, 0)) AS actual_cost FROM jobs "
        "WHERE date(created_at, 'unixepoch', 'localtime') IN (SELECT DISTINCT date(created_at, 'unixepoch', "
        "'localtime') AS d FROM jobs ORDER BY d DESC LIMIT ?) GROUP BY day, backend ORDER BY day DESC, backend",
        (NOT_LAUNCHED, days))
    return [CostCell(r["day"], r["backend"], int(r["jobs"]), float(r["est_hours"]), float(r["actual_hours"]),
                     float(r["est_cost"]), float(r["actual_cost"])) for r in rows]
