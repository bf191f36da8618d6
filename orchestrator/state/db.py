"""SQLite state under $DLRUN_HOME: jobs, their status history, clusters, schedules.

WAL mode plus a busy timeout and short write transactions (BEGIN IMMEDIATE) let several dlrun
processes (a foreground submit, a supervisor, the scheduler, `dlrun status`) share one file.
The schema is versioned with PRAGMA user_version (state/migrations.py). Reads return the records of
state/records.py, never rows; writes are named after what happened (start_attempt, finish, ...).
"""
from __future__ import annotations

import json
import secrets
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from orchestrator.paths import dlrun_home
from orchestrator.state.migrations import MIGRATIONS, migrate
from orchestrator.state.records import ClusterRecord, EventRecord, JobRecord
from orchestrator.states import LIVE, TERMINAL, IllegalTransition, JobStatus, can_move

__all__ = ["LIVE", "MIGRATIONS", "TERMINAL", "Store", "default_store", "dlrun_home", "new_id"]


def new_id(prefix: str = "j") -> str:
    return f"{prefix}-{time.strftime('%m%d')}-{secrets.token_hex(3)}"


class Store:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else dlrun_home() / "state.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction; IMMEDIATE takes the write lock up front (no upgrade deadlock)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self.tx() as c:
            migrate(c, c.execute("PRAGMA user_version").fetchone()[0])

    @property
    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        """Rows for the modules of orchestrator/state/ only: everything outside gets records."""
        return self._conn.execute(sql, args).fetchall()

    # --- jobs: reads -----------------------------------------------------------------------------
    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, else the newest whose id starts with it or whose name it is."""
        rows = self._query("SELECT * FROM jobs WHERE id=?", (job_id,)) or self._query(
            "SELECT * FROM jobs WHERE id LIKE ? OR name=? ORDER BY created_at DESC LIMIT 1", (job_id + "%", job_id))
        return JobRecord.from_row(rows[0]) if rows else None

    def list_jobs(self, limit: int = 50, live_only: bool = False) -> list[JobRecord]:
        where = f"WHERE status IN ({','.join('?' * len(LIVE))})" if live_only else ""
        rows = self._query(f"SELECT * FROM jobs {where} ORDER BY created_at DESC LIMIT ?",
                           (*(LIVE if live_only else ()), limit))
        return [JobRecord.from_row(r) for r in rows]

    def events(self, job_id: str) -> list[EventRecord]:
        return [EventRecord.from_row(r) for r in self._query("SELECT * FROM events WHERE job_id=? ORDER BY id",
                                                             (job_id,))]

    def job_run_by(self, pid: int, since: float) -> JobRecord | None:
        """The newest job created since `since` whose supervisor is (or was last) process `pid`."""
        rows = self._query("SELECT * FROM jobs WHERE supervisor_pid=? AND created_at>=? "
                           "ORDER BY created_at DESC LIMIT 1", (pid, since))
        return JobRecord.from_row(rows[0]) if rows else None

    def finished_runs(self) -> list[JobRecord]:
        """Succeeded jobs with an estimated and a measured run time, oldest first (the estimator's history)."""
        rows = self._query("SELECT * FROM jobs WHERE status=? AND est_run_seconds > 0 AND actual_run_seconds > 0 "
                           "ORDER BY created_at", (JobStatus.SUCCEEDED.value,))
        return [self._with_planned_start(JobRecord.from_row(r)) for r in rows]

    def _with_planned_start(self, job: JobRecord) -> JobRecord:
        # Deprecated bridge: until runs/executor.record_job passes est_start_seconds to create_job, a new
        # job has it only in its "plan" event (as every job had before schema version 2).
        if job.est_start_seconds is not None:
            return job
        plan = next((e.data for e in self.events(job.id) if e.kind == "plan"), {})
        start = plan.get("est_start_seconds")
        return replace(job, est_start_seconds=start) if isinstance(start, (int, float)) else job

    def checkpoint_locations(self, job_id: str) -> dict[str, str]:
        """cloud -> the checkpoint location the job's first attempt there used (later ones resume from it)."""
        found: dict[str, str] = {}
        for r in self._query("SELECT cloud, location FROM job_checkpoints WHERE job_id=? ORDER BY attempt, id",
                             (job_id,)):
            found.setdefault(r["cloud"], r["location"])
        return found

    # --- jobs: writes ----------------------------------------------------------------------------
    def create_job(self, *, name: str, spec_hash: str, spec_json: str, job_id: str | None = None,
                   schedule_id: str | None = None, max_cost: float | None = None, **fields: Any) -> str:
        """A PENDING job; fields: any other columns known at planning (est_*, model_family, run_key...)."""
        job_id = job_id or new_id("j")
        now = time.time()
        cols = dict(id=job_id, name=name, spec_hash=spec_hash, spec_json=spec_json, status=JobStatus.PENDING.value,
                    schedule_id=schedule_id, max_cost=max_cost, created_at=now, **fields)
        with self.tx() as c:
            c.execute(f"INSERT INTO jobs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                      tuple(cols.values()))
            c.execute("INSERT INTO events (job_id, ts, kind, status) VALUES (?,?,?,?)",
                      (job_id, now, "status", JobStatus.PENDING.value))
        return job_id

    def _set(self, job_id: str, **columns: Any) -> None:
        sets = ",".join(f"{k}=?" for k in columns)
        with self.tx() as c:
            c.execute(f"UPDATE jobs SET {sets} WHERE id=?", (*columns.values(), job_id))

    def set_supervisor(self, job_id: str, pid: int | None) -> None:
        self._set(job_id, supervisor_pid=pid)

    def claim_supervisor(self, job_id: str, *, expected: int | None, claim: int) -> bool:
        """Compare-and-set of supervisor_pid, so that one process takes over a dead supervisor's job."""
        with self.tx() as c:
            cur = c.execute("UPDATE jobs SET supervisor_pid=? WHERE id=? AND supervisor_pid IS ?",
                            (claim, job_id, expected))
            return cur.rowcount == 1

    def set_run_key(self, job_id: str, run_key: str) -> None:
        self._set(job_id, run_key=run_key)

    def start_attempt(self, job_id: str, *, attempt: int, backend: str, offer_key: str, instance_type: str | None,
                      accelerator: str | None, accelerator_count: int | None, spot: bool,
                      price_per_hour: float, price_date: str | None, cluster_id: str) -> None:
        """The offer an attempt runs on (price_per_hour: all its nodes, at launch) and its cluster."""
        self._set(job_id, attempts=attempt, backend=backend, offer_key=offer_key, instance_type=instance_type,
                  accelerator=accelerator, accelerator_count=accelerator_count, spot=int(spot),
                  price_per_hour=price_per_hour, price_date=price_date, cluster_id=cluster_id)

    def set_ray_address(self, job_id: str, address: str) -> None:
        self._set(job_id, ray_address=address)

    def set_preemptions(self, job_id: str, n: int) -> None:
        self._set(job_id, preemptions=n)

    def set_actual_cost(self, job_id: str, cost: float) -> None:
        self._set(job_id, actual_cost=cost)

    def set_metrics(self, job_id: str, metrics: dict) -> None:
        self._set(job_id, metrics_json=json.dumps(metrics))

    def record_checkpoint(self, job_id: str, cloud: str, location: str, attempt: int) -> None:
        """Where an attempt on `cloud` keeps its checkpoints (and an event for the job's history)."""
        with self.tx() as c:
            c.execute("INSERT INTO job_checkpoints (job_id, cloud, location, attempt) VALUES (?,?,?,?)",
                      (job_id, cloud, location, attempt))
            c.execute("INSERT INTO events (job_id, ts, kind, status, detail) VALUES (?,?,?,?,?)",
                      (job_id, time.time(), "checkpoint", None,
                       json.dumps({"cloud": cloud, "location": location, "attempt": attempt})))

    def _move(self, c: sqlite3.Connection, job_id: str, status: JobStatus | str, detail: str,
              columns: dict[str, Any]) -> bool:
        """Inside a transaction: the status change, its event and `columns`; False if the job had ended."""
        status = JobStatus(status)
        now = time.time()
        row = c.execute("SELECT status FROM jobs WHERE id=?", (job_id,)).fetchone()
        current = row[0] if row else None
        if current in TERMINAL:
            return False
        if not can_move(current, status):
            raise IllegalTransition(f"job {job_id}: {current} -> {status}")
        columns = dict(columns)
        if status.terminal:
            columns.setdefault("ended_at", now)
        sets = ",".join(f"{k}=?" for k in ("status", *columns))
        if status is JobStatus.RUNNING:
            sets += ",started_at=COALESCE(started_at, ?)"
            columns["started_at"] = now
        c.execute(f"UPDATE jobs SET {sets} WHERE id=?", (status.value, *columns.values(), job_id))
        c.execute("INSERT INTO events (job_id, ts, kind, status, detail) VALUES (?,?,?,?,?)",
                  (job_id, now, "status", status.value, detail))
        return True

    def set_status(self, job_id: str, status: JobStatus | str, detail: str = "", *,
                   message: str | None = None) -> bool:
        """Record a status change (with its timestamp), atomically. A job that has ended keeps its final
        status: the call changes nothing and returns False."""
        columns = {"message": message} if message is not None else {}
        with self.tx() as c:
            return self._move(c, job_id, status, detail, columns)

    def mark_submitted(self, job_id: str, submission_id: str, address: str) -> bool:
        """SUBMITTED, with the Ray submission id and the address it was submitted to."""
        with self.tx() as c:
            return self._move(c, job_id, JobStatus.SUBMITTED, submission_id,
                              {"ray_submission_id": submission_id, "ray_address": address})

    def finish(self, job_id: str, status: JobStatus, detail: str, *, actual_seconds: float,
               actual_run_seconds: float | None = None, result: dict | None = None) -> JobStatus:
        """The job's end and its numbers. Returns the status it ends with: one it already had (e.g. after
        `dlrun cancel`) stands, and the numbers are recorded all the same."""
        numbers: dict[str, Any] = {"actual_seconds": actual_seconds}
        if actual_run_seconds is not None:
            numbers["actual_run_seconds"] = actual_run_seconds
        if result:
            numbers["metrics_json"] = json.dumps(result)
        with self.tx() as c:
            if self._move(c, job_id, status, detail, numbers):
                return JobStatus(status)
            c.execute(f"UPDATE jobs SET {','.join(f'{k}=?' for k in numbers)} WHERE id=?",
                      (*numbers.values(), job_id))
            return JobStatus(c.execute("SELECT status FROM jobs WHERE id=?", (job_id,)).fetchone()[0])

    def cancel(self, job_id: str, why: str, *, actual_seconds: float) -> bool:
        with self.tx() as c:
            return self._move(c, job_id, JobStatus.CANCELLED, why, {"actual_seconds": actual_seconds})

    def fail(self, job_id: str, status: JobStatus, message: str) -> bool:
        """FAILED or BUDGET_EXCEEDED with the message saying why, if the job is still live."""
        if JobStatus(status) not in (JobStatus.FAILED, JobStatus.BUDGET_EXCEEDED):
            raise ValueError(f"fail() records FAILED or BUDGET_EXCEEDED, not {status}")
        with self.tx() as c:
            return self._move(c, job_id, status, message, {"message": message})

    def add_event(self, job_id: str, kind: str, detail: str | dict = "", status: str | None = None) -> None:
        if isinstance(detail, dict):
            detail = json.dumps(detail)
        with self.tx() as c:
            c.execute("INSERT INTO events (job_id, ts, kind, status, detail) VALUES (?,?,?,?,?)",
                      (job_id, time.time(), kind, status, detail))

    # --- clusters --------------------------------------------------------------------------------
    def cluster_launching(self, cluster_id: str, *, provider: str, job_id: str | None, region: str | None,
                          instance_type: str | None, spot: bool, num_nodes: int, price_per_hour: float,
                          launched_at: float) -> None:
        """A cluster being launched; price_per_hour is per node, at launch, and never rewritten."""
        with self.tx() as c:
            c.execute("INSERT INTO clusters (id, job_id, provider, region, instance_type, spot, price_per_hour, "
                      "num_nodes, state, launched_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                      (cluster_id, job_id, provider, region, instance_type, int(spot), price_per_hour, num_nodes,
                       "launching", launched_at))

    def cluster_up(self, cluster_id: str, *, zone: str | None, launched_at: float, cluster_json: str) -> None:
        """The launch returned: where it landed, when billing started, the Cluster to reach it again."""
        with self.tx() as c:
            c.execute("UPDATE clusters SET state='up', zone=?, launched_at=?, cluster_json=? WHERE id=?",
                      (zone, launched_at, cluster_json, cluster_id))

    def cluster_terminated(self, cluster_id: str) -> None:
        """Idempotent: the first call's time stays."""
        with self.tx() as c:
            c.execute("UPDATE clusters SET state='terminated', terminated_at=COALESCE(terminated_at, ?) "
                      "WHERE id=?", (time.time(), cluster_id))

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        rows = self._query("SELECT * FROM clusters WHERE id=?", (cluster_id,))
        return ClusterRecord.from_row(rows[0]) if rows else None

    def clusters(self, live_only: bool = True) -> list[ClusterRecord]:
        where = "WHERE state != 'terminated'" if live_only else ""
        return [ClusterRecord.from_row(r) for r in self._query(f"SELECT * FROM clusters {where} ORDER BY launched_at")]

    def job_clusters(self, job_id: str) -> list[ClusterRecord]:
        return [ClusterRecord.from_row(r)
                for r in self._query("SELECT * FROM clusters WHERE job_id=? ORDER BY launched_at", (job_id,))]


_default: Store | None = None


def default_store() -> Store:
    """One Store per process and $DLRUN_HOME."""
    global _default
    path = dlrun_home() / "state.db"
    if _default is None or _default.path != path:
        _default = Store(path)
    return _default
