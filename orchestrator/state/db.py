"""SQLite state under $DLRUN_HOME: jobs, their status history, clusters, schedules.

WAL mode plus a busy timeout and short write transactions (BEGIN IMMEDIATE) let several dlrun
processes (a foreground submit, a supervisor, the scheduler, `dlrun status`) share one file.
The schema is versioned with PRAGMA user_version; MIGRATIONS only ever grows.
"""
from __future__ import annotations

import json
import secrets
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchestrator.paths import dlrun_home
from orchestrator.states import LIVE, TERMINAL, IllegalTransition, JobStatus, can_move

__all__ = ["LIVE", "TERMINAL", "Store", "default_store", "dlrun_home", "new_id"]

MIGRATIONS = [
    # 1: the first schema
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        spec_hash TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        status TEXT NOT NULL,
        backend TEXT, offer_key TEXT, instance_type TEXT, accelerator TEXT, accelerator_count INTEGER,
        spot INTEGER, price_per_hour REAL, price_date TEXT,
        cluster_id TEXT, ray_address TEXT, ray_submission_id TEXT,
        schedule_id TEXT,
        est_seconds REAL, est_cost REAL, est_run_seconds REAL, max_cost REAL,
        actual_seconds REAL, actual_cost REAL, actual_run_seconds REAL,
        preemptions INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
        model_family TEXT, metrics_json TEXT, message TEXT, supervisor_pid INTEGER,
        created_at REAL NOT NULL, started_at REAL, ended_at REAL
    );
    CREATE INDEX jobs_created ON jobs(created_at);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs(id),
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        status TEXT,
        detail TEXT
    );
    CREATE INDEX events_job ON events(job_id, ts);
    CREATE TABLE clusters (
        id TEXT PRIMARY KEY,
        job_id TEXT,
        provider TEXT NOT NULL, region TEXT, zone TEXT, instance_type TEXT,
        spot INTEGER, price_per_hour REAL NOT NULL DEFAULT 0, num_nodes INTEGER NOT NULL DEFAULT 1,
        state TEXT NOT NULL,
        launched_at REAL NOT NULL, terminated_at REAL,
        cluster_json TEXT
    );
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        name TEXT UNIQUE NOT NULL,
        cron TEXT NOT NULL, tz TEXT NOT NULL,
        job_path TEXT NOT NULL, job_yaml TEXT NOT NULL, job_hash TEXT NOT NULL,
        follow_file INTEGER NOT NULL DEFAULT 0,
        max_cost REAL, monthly_cap REAL,
        paused INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL, last_fired_at REAL, next_run_at REAL
    );
    CREATE TABLE schedule_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        schedule_id TEXT NOT NULL REFERENCES schedules(id),
        due_at REAL NOT NULL, fired_at REAL NOT NULL,
        job_id TEXT, outcome TEXT NOT NULL, detail TEXT
    );
    """,
]


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
            version = c.execute("PRAGMA user_version").fetchone()[0]
            for i, sql in enumerate(MIGRATIONS[version:], start=version + 1):
                for stmt in filter(str.strip, sql.split(";")):
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version={i}")

    @property
    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        return self._conn.execute(sql, args).fetchall()

    # --- jobs ------------------------------------------------------------------------------------
    def create_job(self, *, name: str, spec_hash: str, spec_json: str, job_id: str | None = None,
                   schedule_id: str | None = None, max_cost: float | None = None, **fields: Any) -> str:
        job_id = job_id or new_id("j")
        now = time.time()
        cols = dict(id=job_id, name=name, spec_hash=spec_hash, spec_json=spec_json, status="PENDING",
                    schedule_id=schedule_id, max_cost=max_cost, created_at=now, **fields)
        with self.tx() as c:
            c.execute(f"INSERT INTO jobs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                      tuple(cols.values()))
            c.execute("INSERT INTO events (job_id, ts, kind, status) VALUES (?,?,?,?)",
                      (job_id, now, "status", "PENDING"))
        return job_id

    def update_job(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        sets = ",".join(f"{k}=?" for k in fields)
        with self.tx() as c:
            c.execute(f"UPDATE jobs SET {sets} WHERE id=?", (*fields.values(), job_id))

    def claim_supervisor(self, job_id: str, *, expected: int | None, claim: int) -> bool:
        """Compare-and-set of supervisor_pid, so that one process takes over a dead supervisor's job."""
        with self.tx() as c:
            cur = c.execute("UPDATE jobs SET supervisor_pid=? WHERE id=? AND supervisor_pid IS ?",
                            (claim, job_id, expected))
            return cur.rowcount == 1

    def set_status(self, job_id: str, status: str, detail: str = "", **fields: Any) -> bool:
        """Record a status transition (with its timestamp) and any other fields, atomically.

        A job that has ended keeps its final status: the call changes nothing and returns False.
        """
        now = time.time()
        status = JobStatus(status).value
        if status in TERMINAL:
            fields.setdefault("ended_at", now)
        if status == "RUNNING":
            row = self.get_job(job_id)
            if row and not row["started_at"]:
                fields.setdefault("started_at", now)
        sets = ",".join(f"{k}=?" for k in ("status", *fields))
        with self.tx() as c:
            row = c.execute("SELECT status FROM jobs WHERE id=?", (job_id,)).fetchone()
            current = row[0] if row else None
            if current in TERMINAL:
                return False
            if not can_move(current, status):
                raise IllegalTransition(f"job {job_id}: {current} -> {status}")
            c.execute(f"UPDATE jobs SET {sets} WHERE id=?", (status, *fields.values(), job_id))
            c.execute("INSERT INTO events (job_id, ts, kind, status, detail) VALUES (?,?,?,?,?)",
                      (job_id, now, "status", status, detail))
        return True

    def add_event(self, job_id: str, kind: str, detail: str | dict = "", status: str | None = None) -> None:
        if isinstance(detail, dict):
            detail = json.dumps(detail)
        with self.tx() as c:
            c.execute("INSERT INTO events (job_id, ts, kind, status, detail) VALUES (?,?,?,?,?)",
                      (job_id, time.time(), kind, status, detail))

    def get_job(self, job_id: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM jobs WHERE id=?", (job_id,))
        if rows:
            return rows[0]
        rows = self.query("SELECT * FROM jobs WHERE id LIKE ? OR name=? ORDER BY created_at DESC",
                          (job_id + "%", job_id))
        return rows[0] if rows else None

    def list_jobs(self, limit: int = 50, live_only: bool = False) -> list[sqlite3.Row]:
        where = f"WHERE status IN ({','.join('?' * len(LIVE))})" if live_only else ""
        return self.query(f"SELECT * FROM jobs {where} ORDER BY created_at DESC LIMIT ?",
                          (*(LIVE if live_only else ()), limit))

    def events(self, job_id: str) -> list[sqlite3.Row]:
        return self.query("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))

    # --- clusters --------------------------------------------------------------------------------
    def record_cluster(self, cluster_id: str, *, provider: str, job_id: str | None, state: str,
                       price_per_hour: float = 0.0, cluster_json: str | None = None, **fields: Any) -> None:
        """Insert or update a cluster row; the launch price is written once and never rewritten."""
        existing = self.query("SELECT id FROM clusters WHERE id=?", (cluster_id,))
        with self.tx() as c:
            if existing:
                upd = dict(state=state, **fields)
                if cluster_json is not None:
                    upd["cluster_json"] = cluster_json
                c.execute(f"UPDATE clusters SET {','.join(f'{k}=?' for k in upd)} WHERE id=?",
                          (*upd.values(), cluster_id))
            else:
                cols = dict(id=cluster_id, provider=provider, job_id=job_id, state=state,
                            price_per_hour=price_per_hour, cluster_json=cluster_json,
                            launched_at=fields.pop("launched_at", time.time()), **fields)
                c.execute(f"INSERT INTO clusters ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                          tuple(cols.values()))

    def get_cluster(self, cluster_id: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM clusters WHERE id=?", (cluster_id,))
        return rows[0] if rows else None

    def clusters(self, live_only: bool = True) -> list[sqlite3.Row]:
        where = "WHERE state != 'terminated'" if live_only else ""
        return self.query(f"SELECT * FROM clusters {where} ORDER BY launched_at")

    def job_clusters(self, job_id: str) -> list[sqlite3.Row]:
        return self.query("SELECT * FROM clusters WHERE job_id=? ORDER BY launched_at", (job_id,))


_default: Store | None = None


def default_store() -> Store:
    """One Store per process and $DLRUN_HOME."""
    global _default
    path = dlrun_home() / "state.db"
    if _default is None or _default.path != path:
        _default = Store(path)
    return _default
