"""The schema, as the steps that built it: PRAGMA user_version counts the steps a database has had.

MIGRATIONS only ever grows, and a step never changes once released: a database written by any earlier
dlrun upgrades in place when a Store opens it. A step is SQL (statements separated by `;`) or a function
of the connection (for a backfill that has to read JSON tolerantly); every step of one upgrade runs in
the one transaction the Store opens for it.
"""
from __future__ import annotations

import json
import sqlite3
from typing import Callable, Union

Step = Union[str, Callable[[sqlite3.Connection], None]]

V1_SCHEMA = """
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
"""

# 2: facts that version 1 kept only inside event JSON get their own columns and table
V2_COLUMNS = """
    ALTER TABLE jobs ADD COLUMN est_start_seconds REAL;
    ALTER TABLE jobs ADD COLUMN run_key TEXT;
    CREATE TABLE job_checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs(id),
        cloud TEXT NOT NULL,
        location TEXT NOT NULL,
        attempt INTEGER NOT NULL
    );
    CREATE INDEX job_checkpoints_job ON job_checkpoints(job_id, attempt);
"""

# The bucket schemes as version 1's executor mapped them to clouds when it read its "checkpoint" events
# back; frozen here on purpose (the live map may grow; what these old events meant does not change).
_V1_SCHEME_CLOUD = {"s3": "aws", "gs": "gcp"}


def _first_detail(c: sqlite3.Connection, job_id: str, kind: str) -> dict:
    for (text,) in c.execute("SELECT detail FROM events WHERE job_id=? AND kind=? ORDER BY id", (job_id, kind)):
        try:
            data = json.loads(text or "")
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return {}


def _v2_backfill(c: sqlite3.Connection) -> None:
    """Copy each job's start-up estimate (its "plan" event), run key ("run" event) and checkpoint
    locations ("checkpoint" events) out of the event JSON version 1 wrote them to."""
    for (job_id,) in c.execute("SELECT id FROM jobs").fetchall():
        start = _first_detail(c, job_id, "plan").get("est_start_seconds")
        key = _first_detail(c, job_id, "run").get("run_key")
        c.execute("UPDATE jobs SET est_start_seconds=?, run_key=? WHERE id=?",
                  (start if isinstance(start, (int, float)) else None, key if isinstance(key, str) else None,
                   job_id))
    rows = c.execute("SELECT job_id, detail FROM events WHERE kind='checkpoint' ORDER BY id").fetchall()
    for job_id, text in rows:
        try:
            data = json.loads(text or "")
            location, attempt = str(data["location"]), int(data.get("attempt") or 0)
        except (ValueError, TypeError, KeyError):
            continue
        cloud = _V1_SCHEME_CLOUD.get(location.split("://", 1)[0]) if "://" in location else None
        if cloud:
            c.execute("INSERT INTO job_checkpoints (job_id, cloud, location, attempt) VALUES (?,?,?,?)",
                      (job_id, cloud, location, attempt))


# 3: a schedule keeps the flags it was added with (`dlrun schedule add --gpus T4:1 ...`); NULL: none
V3_SCHEDULE_OVERRIDES = "ALTER TABLE schedules ADD COLUMN overrides_json TEXT"

MIGRATIONS: list[list[Step]] = [
    [V1_SCHEMA],  # 1: the first schema
    [V2_COLUMNS, _v2_backfill],  # 2: est_start_seconds, run_key, job_checkpoints (from the events)
    [V3_SCHEDULE_OVERRIDES],  # 3: schedules.overrides_json
]


def migrate(c: sqlite3.Connection, version: int) -> int:
    """Run the steps after `version` on connection c (inside the caller's transaction); the new version."""
    for number, steps in enumerate(MIGRATIONS[version:], start=version + 1):
        for step in steps:
            if callable(step):
                step(c)
            else:
                for stmt in filter(str.strip, step.split(";")):
                    c.execute(stmt)
        c.execute(f"PRAGMA user_version={number}")
    return len(MIGRATIONS)
