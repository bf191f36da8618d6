"""Schedules in the store: add / list / remove / pause / resume, and the facts the loop's policies need.

A schedule keeps its own copy of the job file (job_yaml + job_hash) taken at add time, so editing the
file later does not silently change what runs at night; follow_file=1 re-reads the file at each firing.
Outcomes written to schedule_runs.outcome:
    fired            the run was started; replaced by the job's final status when it returns
    SUCCEEDED/FAILED/CANCELLED/BUDGET_EXCEEDED   the job's final status
    error            the firing itself raised (detail says why); the loop goes on
    skipped-overlap  the previous run of this schedule was still live
    skipped-budget   this month's spend + the run's max_cost would pass the monthly cap
    missed           occurrences that fell in a scheduler outage (at most one catch-up runs)
"""
from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.schedule import cron as st
from orchestrator.errors import SpecError, UsageError
from orchestrator.planning.overrides import Overrides, with_overrides
from orchestrator.planning.spec import JobSpec, apply_overrides, load_job, parse_job
from orchestrator.state.db import LIVE, Store, new_id
from orchestrator.state.records import ScheduleRecord, ScheduleRunRecord

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def add_schedule(store: Store, job_path: str | Path, cron: str, *, tz: str | None = None,
                 max_cost: float | None = None, name: str | None = None, follow_file: bool = False,
                 monthly_cap: float | None = None, now: float | None = None,
                 overrides: Overrides | None = None) -> ScheduleRecord:
    """Validate everything, copy the job file into the store, and compute the first run time. `overrides`
    (--gpus, --cloud, ...) are checked now by the job file's rules and applied to every run."""
    path = Path(job_path).expanduser().resolve()
    spec = with_overrides(load_job(path, max_cost=max_cost), overrides or Overrides())
    cron = st.validate_cron(cron)
    tz = tz or st.local_tz_name()
    st.zone(tz)
    if monthly_cap is not None and not monthly_cap > 0:
        raise UsageError(f"--monthly-cap: must be a positive number of USD (got {monthly_cap})")
    _check_cap(monthly_cap or spec.budget.monthly_cap, spec.budget.max_cost)
    name = name or spec.name
    if not _NAME.match(name):
        raise UsageError(f"--name '{name}': use letters, digits, '-', '_' or '.' (up to 63)")
    if get_schedule(store, name):
        raise UsageError(f"a schedule named '{name}' already exists; pick another --name or remove it first")
    now = time.time() if now is None else now
    text = path.read_text()
    sid = new_id("s")
    with store.tx() as c:
        c.execute("INSERT INTO schedules (id, name, cron, tz, job_path, job_yaml, job_hash, follow_file,"
                  " max_cost, monthly_cap, paused, created_at, next_run_at, overrides_json)"
                  " VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?,?)",
                  (sid, name, cron, tz, str(path), text, text_hash(text), int(follow_file), max_cost,
                   monthly_cap, now, st.next_fire_after(cron, tz, now), overrides.to_json() if overrides else None))
    return _require(store, sid)


def _check_cap(cap: float | None, per_run: float | None) -> None:
    """A monthly cap needs a per-run bound no larger than itself."""
    if cap is None:
        return
    if per_run is None:
        raise UsageError("--monthly-cap needs a per-run bound: add --max-cost (or budget.max_cost in the job file)")
    if per_run > cap:
        raise UsageError(f"--max-cost {per_run:g} is above the monthly cap {cap:g}: no run could fire")


def get_schedule(store: Store, name_or_id: str) -> ScheduleRecord | None:
    rows = store._query("SELECT * FROM schedules WHERE name=? OR id=?", (name_or_id, name_or_id))
    return ScheduleRecord.from_row(rows[0]) if rows else None


def _require(store: Store, name: str) -> ScheduleRecord:
    row = get_schedule(store, name)
    if row is None:
        names = [s.name for s in list_schedules(store)]
        known = ", ".join(names) if names else "none yet; add one with `dlrun schedule add`"
        raise UsageError(f"no schedule named '{name}' (schedules: {known})")
    return row


def due_schedules(store: Store, now: float) -> list[tuple[ScheduleRecord, float]]:
    """The schedules not paused whose next run is at or before `now`, each with that run's time, earliest first."""
    rows = store._query("SELECT * FROM schedules WHERE paused=0 AND next_run_at<=? ORDER BY next_run_at", (now,))
    return [(ScheduleRecord.from_row(r), r["next_run_at"]) for r in rows]


def next_wakeup(store: Store) -> float | None:
    """The earliest next run of a schedule not paused; None when there is none."""
    return store._query("SELECT MIN(next_run_at) FROM schedules WHERE paused=0")[0][0]


def advance(c: sqlite3.Connection, schedule_id: str, next_run_at: float | None, fired_at: float | None) -> None:
    """Inside the loop's transaction: the schedule's next run, and when it last fired (None: it did not)."""
    c.execute("UPDATE schedules SET next_run_at=?, last_fired_at=COALESCE(?, last_fired_at) WHERE id=?",
              (next_run_at, fired_at, schedule_id))


def remove_schedule(store: Store, name: str) -> ScheduleRecord:
    """Delete a schedule and its firing history; its jobs stay (with their schedule_id)."""
    sched = _require(store, name)
    with store.tx() as c:
        c.execute("DELETE FROM schedule_runs WHERE schedule_id=?", (sched.id,))
        c.execute("DELETE FROM schedules WHERE id=?", (sched.id,))
    return sched


def set_paused(store: Store, name: str, paused: bool, now: float | None = None) -> ScheduleRecord:
    """Pause, or resume from now on: occurrences missed while paused are not caught up."""
    sched = _require(store, name)
    now = time.time() if now is None else now
    nxt = sched.next_run_at if paused else st.next_fire_after(sched.cron, sched.tz, now)
    with store.tx() as c:
        c.execute("UPDATE schedules SET paused=?, next_run_at=? WHERE id=?", (int(paused), nxt, sched.id))
    return _require(store, sched.id)


def list_schedules(store: Store) -> list[ScheduleRecord]:
    return [ScheduleRecord.from_row(r) for r in store._query("SELECT * FROM schedules ORDER BY name")]


# --- what the loop needs ---------------------------------------------------------------------------

@dataclass
class ScheduleView:
    """One line of `dlrun schedule list`: instants as epoch seconds (None: there is none)."""
    name: str
    cron: str
    tz: str
    paused: bool
    next_run_at: float | None  # None while paused
    last_run_at: float | None
    last_result: str | None
    last_job_id: str | None
    spent_total: float
    spent_month: float
    monthly_cap: float | None

    @property
    def next_run_text(self) -> str:
        return "paused" if self.paused else st.fmt_local(self.next_run_at, self.tz)

    @property
    def last_run_text(self) -> str:
        return st.fmt_local(self.last_run_at, self.tz)

    def to_json(self) -> dict:
        """Times in ISO 8601 with the schedule's UTC offset; null where there is none."""
        return {"name": self.name, "cron": self.cron, "tz": self.tz, "paused": self.paused,
                "next_run": st.iso_local(self.next_run_at, self.tz),
                "last_run": st.iso_local(self.last_run_at, self.tz), "last_result": self.last_result,
                "last_job_id": self.last_job_id, "spent_total": round(self.spent_total, 6),
                "spent_month": round(self.spent_month, 6), "monthly_cap": self.monthly_cap}


def describe(store: Store, sched: ScheduleRecord, now: float | None = None) -> ScheduleView:
    now = time.time() if now is None else now
    last = store._query("SELECT * FROM schedule_runs WHERE schedule_id=? ORDER BY id DESC LIMIT 1", (sched.id,))
    last_run, result, job_id = None, None, None
    if last:
        r = ScheduleRunRecord.from_row(last[0])
        last_run, result, job_id = r.fired_at, r.outcome, r.job_id
        if r.outcome == "fired":  # still going: show the job's live status
            job = store._query("SELECT id, status FROM jobs WHERE schedule_id=? AND created_at>=? "
                               "ORDER BY created_at LIMIT 1", (sched.id, r.fired_at - 1))
            if job:
                job_id, result = job[0]["id"], job[0]["status"]
    return ScheduleView(
        name=sched.name, cron=sched.cron, tz=sched.tz, paused=sched.paused,
        next_run_at=None if sched.paused else sched.next_run_at,
        last_run_at=last_run, last_result=result, last_job_id=job_id,
        spent_total=spent(store, sched.id), spent_month=spent(store, sched.id, st.month_start(now, sched.tz)),
        monthly_cap=sched.monthly_cap or _spec_cap(sched))


def _spec_cap(sched: ScheduleRecord) -> float | None:
    try:
        return parse_job(sched.job_yaml, sched.job_path).budget.monthly_cap
    except SpecError:
        return None


def spent(store: Store, schedule_id: str, since: float | None = None) -> float:
    """USD spent by the schedule's jobs (actual cost), optionally only those created since `since`."""
    sql = "SELECT COALESCE(SUM(actual_cost), 0) FROM jobs WHERE schedule_id=?"
    args: list[str | float] = [schedule_id]
    if since is not None:
        sql += " AND created_at>=?"
        args.append(since)
    return float(store._query(sql, tuple(args))[0][0])


def live_jobs_by_schedule(store: Store) -> dict[str, str]:
    """schedule_id -> id of a live job of that schedule (a job whose supervisor died is not live)."""
    rows = store._query(f"SELECT id, schedule_id, supervisor_pid FROM jobs WHERE schedule_id IS NOT NULL "
                       f"AND status IN ({','.join('?' * len(LIVE))})", LIVE)
    return {r["schedule_id"]: r["id"] for r in rows if _alive(r["supervisor_pid"])}


def _alive(pid: int | None) -> bool:
    from orchestrator.runs.reconcile import process_alive

    return True if not pid else process_alive(pid)  # nobody recorded a supervisor: trust the status


def job_for_run(store: Store, sched: ScheduleRecord) -> tuple[JobSpec, str]:
    """The spec a firing runs (stored copy, or the file itself with follow_file) and a note."""
    note = ""
    text = sched.job_yaml
    if sched.follow_file:
        try:
            text = Path(sched.job_path).read_text()
        except OSError as e:
            raise SpecError(f"{sched.job_path}: cannot read the followed job file ({e.__class__.__name__})") from None
        if text_hash(text) != sched.job_hash:
            parse_job(text, sched.job_path)  # refuse a broken edit before recording it
            note = f"job file changed ({sched.job_hash} -> {text_hash(text)})"
            with store.tx() as c:
                c.execute("UPDATE schedules SET job_yaml=?, job_hash=? WHERE id=?",
                          (text, text_hash(text), sched.id))
    spec = parse_job(text, sched.job_path)
    spec = apply_overrides(spec, sched.job_path, max_cost=sched.max_cost)
    return with_overrides(spec, Overrides.from_json(sched.overrides_json)), note


def record_run(c: sqlite3.Connection, schedule_id: str, due_at: float, fired_at: float, outcome: str,
               detail: str = "", job_id: str | None = None) -> int:
    cur = c.execute("INSERT INTO schedule_runs (schedule_id, due_at, fired_at, job_id, outcome, detail) "
                    "VALUES (?,?,?,?,?,?)", (schedule_id, due_at, fired_at, job_id, outcome, detail))
    assert cur.lastrowid is not None  # sqlite sets it on every INSERT into a rowid table
    return cur.lastrowid


def finish_runs(store: Store, results: list[tuple[int, str, str, str | None]]) -> None:
    """Write the final (run_id, outcome, detail, job_id) of finished firings in one transaction."""
    with store.tx() as c:
        for run_id, outcome, detail, job_id in results:
            # keep the firing's own note (e.g. "job file changed") ahead of the result's detail
            c.execute("UPDATE schedule_runs SET outcome=?, job_id=COALESCE(?, job_id), detail=CASE "
                      "WHEN ?='' THEN detail WHEN COALESCE(detail,'')='' THEN ? ELSE detail||'; '||? END "
                      "WHERE id=?", (outcome, job_id, detail, detail, detail, run_id))


def runs(store: Store, name: str) -> list[ScheduleRunRecord]:
    sched = _require(store, name)
    return [ScheduleRunRecord.from_row(r)
            for r in store._query("SELECT * FROM schedule_runs WHERE schedule_id=? ORDER BY id", (sched.id,))]


def outcome_counts(store: Store) -> dict[str, int]:
    """outcome -> how many firings of every schedule ended so (a summary for benchmarks and reports)."""
    return {r[0]: r[1] for r in store._query("SELECT outcome, COUNT(*) FROM schedule_runs GROUP BY outcome")}
