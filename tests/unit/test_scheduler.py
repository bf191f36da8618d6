"""The schedule store, the cron/time-zone arithmetic and the scheduler loop, on an injected clock."""
from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest

from orchestrator.state import schedules as ss
from orchestrator.cli.main import main
from orchestrator.errors import UsageError
from orchestrator.schedule.scheduler import (FireResult, Scheduler, SchedulerLock, SchedulerRunningError,
                                             notify_scheduler, running_scheduler_pid)
from orchestrator.state.db import Store
from orchestrator.states import JobStatus

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "digits_cnn.yaml"
MADRID = ZoneInfo("Europe/Madrid")


def utc(*a) -> float:
    return datetime(*a, tzinfo=timezone.utc).timestamp()


def local(ts: float, tz: str) -> datetime:
    return datetime.fromtimestamp(ts, ZoneInfo(tz))


@pytest.fixture
def job_file(tmp_path) -> Path:
    p = tmp_path / "job.yaml"
    shutil.copy(EXAMPLE, p)
    return p


@pytest.fixture
def store(dlrun_home) -> Store:
    s = Store(dlrun_home / "state.db")
    yield s
    s.close()


class FakeClock:
    """Time stands still until the loop waits; a wait jumps straight to its deadline."""

    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t

    def wait(self, event, timeout):
        self.t += timeout
        return False


class RecordingFire:
    """Stands in for runner.submit: creates the job row (with a cost) and returns its final status."""

    def __init__(self, db: Path, status="SUCCEEDED", cost=0.0, raises: Exception | None = None, clock=None):
        self.db, self.status, self.cost, self.raises, self.clock = db, status, cost, raises, clock
        self.calls: list[tuple[str, object]] = []
        self.release = threading.Event()
        self.release.set()

    def __call__(self, spec, *, schedule_id):
        self.calls.append((schedule_id, spec))
        if self.raises:
            raise self.raises
        self.release.wait(10)
        s = Store(self.db)  # a worker thread never shares the loop's connection
        try:
            job_id = s.create_job(name=spec.name, spec_hash=spec.spec_hash(), spec_json=spec.model_dump_json(),
                                  schedule_id=schedule_id, max_cost=spec.budget.max_cost)
            s.set_actual_cost(job_id, self.cost)
            s.finish(job_id, JobStatus(self.status), "", actual_seconds=1.0)
            if self.clock:  # the job row carries the simulated time, as a real run's would
                with sqlite3.connect(self.db) as c:
                    c.execute("UPDATE jobs SET created_at=? WHERE id=?", (self.clock.now(), job_id))
        finally:
            s.close()
        return FireResult(job_id, self.status)


def simulate(sched: Scheduler, clock: FakeClock, until: float) -> None:
    def stop():
        sched.wait_idle()  # deterministic: every firing is recorded before time moves on
        return clock.t >= until
    sched.run_forever(should_stop=stop)


def fired_at(store: Store, name: str) -> list[float]:
    """The instants the schedule fired (to the second; the loop wakes a hair after each due time)."""
    rows = [r for r in ss.runs(store, name) if r.outcome not in ("missed", "skipped-overlap", "skipped-budget")]
    assert all(0 <= r.fired_at - r.due_at < 0.01 for r in rows)
    return [float(int(r.fired_at)) for r in rows]


# --- firing instants -------------------------------------------------------------------------------

def test_daily_job_fires_at_its_local_time_each_day(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="Europe/Madrid", name="nightly", now=start)
    clock = FakeClock(start)
    fire = RecordingFire(store.path)
    simulate(Scheduler(store, fire=fire, clock=clock, recheck_s=3600), clock, start + 3 * 86400)
    times = fired_at(store, "nightly")
    assert [local(t, "Europe/Madrid").strftime("%d %H:%M") for t in times] == ["11 02:00", "12 02:00", "13 02:00"]
    assert all(r.outcome == "SUCCEEDED" and r.job_id for r in ss.runs(store, "nightly"))
    assert len(fire.calls) == 3


def test_six_fields_put_the_seconds_first(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "30 0 2 * * *", tz="Europe/Madrid", name="half-past", now=start)
    clock = FakeClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 2 * 86400)
    assert [local(t, "Europe/Madrid").strftime("%d %H:%M:%S") for t in fired_at(store, "half-past")] == [
        "11 02:00:30", "12 02:00:30"]


@pytest.mark.parametrize("dow", ["0", "7", "SUN"])
def test_weekly_sunday_job_fires_on_sundays_only(store, job_file, dow):
    start = utc(2025, 6, 2, 0)  # a Monday
    ss.add_schedule(store, job_file, f"30 9 * * {dow}", tz="America/New_York", name="weekly", now=start)
    clock = FakeClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=86400), clock, start + 15 * 86400)
    days = [local(t, "America/New_York") for t in fired_at(store, "weekly")]
    assert [(d.strftime("%A %H:%M"), d.day) for d in days] == [("Sunday 09:30", 8), ("Sunday 09:30", 15)]


def test_spring_forward_gap_time_fires_once_at_the_jump(store, job_file):
    # Madrid 2025-03-30: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day
    start = utc(2025, 3, 28, 12)
    ss.add_schedule(store, job_file, "30 2 * * *", tz="Europe/Madrid", name="gap", now=start)
    clock = FakeClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 4 * 86400)
    assert fired_at(store, "gap") == [utc(2025, 3, 29, 1, 30), utc(2025, 3, 30, 1, 0),
                                      utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]


def test_fall_back_repeated_time_fires_once(store, job_file):
    # Madrid 2025-10-26: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice
    start = utc(2025, 10, 24, 12)
    ss.add_schedule(store, job_file, "30 2 * * *", tz="Europe/Madrid", name="fold", now=start)
    clock = FakeClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 4 * 86400)
    assert fired_at(store, "fold") == [utc(2025, 10, 25, 0, 30), utc(2025, 10, 26, 0, 30),
                                       utc(2025, 10, 27, 1, 30), utc(2025, 10, 28, 1, 30)]


def test_hourly_job_across_spring_forward_has_no_duplicate(store, job_file):
    start = utc(2025, 3, 29, 23, 0)  # 00:00 CET on the day of the jump
    ss.add_schedule(store, job_file, "30 * * * *", tz="Europe/Madrid", name="hourly", now=start)
    clock = FakeClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 4 * 3600)
    walls = [local(t, "Europe/Madrid").strftime("%H:%M %Z") for t in fired_at(store, "hourly")]
    assert walls == ["00:30 CET", "01:30 CET", "03:00 CEST", "03:30 CEST", "04:30 CEST"]


# --- policies ----------------------------------------------------------------------------------------

def test_overlapping_run_is_skipped_and_recorded(store, job_file):
    start = utc(2025, 6, 10, 0)
    ss.add_schedule(store, job_file, "0 * * * *", tz="UTC", name="hourly", now=start)
    fire = RecordingFire(store.path)
    fire.release.clear()  # the first run keeps going
    sched = Scheduler(store, fire=fire, clock=FakeClock(start))
    assert [d.outcome for d in sched.run_once(utc(2025, 6, 10, 1))] == ["fired"]
    d = sched.run_once(utc(2025, 6, 10, 2))
    assert [x.outcome for x in d] == ["skipped-overlap"]
    fire.release.set()
    sched.wait_idle()
    assert [d.outcome for d in sched.run_once(utc(2025, 6, 10, 3))] == ["fired"]
    sched.wait_idle()
    assert [r.outcome for r in ss.runs(store, "hourly")] == ["SUCCEEDED", "skipped-overlap", "SUCCEEDED"]
    assert len(fire.calls) == 2


def test_live_job_in_store_counts_as_overlap(store, job_file):
    """A run started by an earlier scheduler process (still live in the store) also blocks overlap."""
    start = utc(2025, 6, 10, 0)
    row = ss.add_schedule(store, job_file, "0 * * * *", tz="UTC", name="hourly", now=start)
    job = store.create_job(name="x", spec_hash="h", spec_json="{}", schedule_id=row.id)
    store.set_status(job, JobStatus.RUNNING)
    fire = RecordingFire(store.path)
    sched = Scheduler(store, fire=fire, clock=FakeClock(start))
    d = sched.run_once(utc(2025, 6, 10, 1))
    assert d[0].outcome == "skipped-overlap" and job in d[0].detail and not fire.calls
    store.set_status(job, JobStatus.SUCCEEDED)
    assert sched.run_once(utc(2025, 6, 10, 2))[0].outcome == "fired"
    sched.wait_idle()


def test_three_day_outage_gives_exactly_one_catch_up_run(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="nightly", now=start)
    fire = RecordingFire(store.path)
    sched = Scheduler(store, fire=fire, clock=FakeClock(start))
    sched.run_once(utc(2025, 6, 11, 2))
    sched.wait_idle()
    # the scheduler is down from 11 June 03:00 to 14 June 10:00: the 12th, 13th and 14th are missed
    back = utc(2025, 6, 14, 10)
    decisions = Scheduler(store, fire=fire, clock=FakeClock(back)).run_once(back)
    assert [d.outcome for d in decisions] == ["missed", "fired"]
    assert decisions[0].detail.startswith("2 occurrence(s) from 2025-06-12T02:00:00Z")
    assert decisions[1].due_at == utc(2025, 6, 14, 2)
    assert ss.get_schedule(store, "nightly").next_run_at == utc(2025, 6, 15, 2)
    time.sleep(0.2)
    assert len(fire.calls) == 2


def test_monthly_cap_stops_firings_until_next_month(store, job_file):
    start = utc(2025, 1, 28, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="Europe/Madrid", name="capped", max_cost=5,
                    monthly_cap=12, now=start)
    clock = FakeClock(start)
    fire = RecordingFire(store.path, cost=4.5, clock=clock)
    simulate(Scheduler(store, fire=fire, clock=clock, recheck_s=86400), clock, utc(2025, 2, 2, 12))
    outcomes = [(local(r.due_at, "Europe/Madrid").strftime("%m-%d"), r.outcome) for r in ss.runs(store, "capped")]
    # 4.5 + 5 <= 12 fires; 9 + 5 > 12 is skipped; February starts from zero
    assert outcomes == [("01-29", "SUCCEEDED"), ("01-30", "SUCCEEDED"), ("01-31", "skipped-budget"),
                        ("02-01", "SUCCEEDED"), ("02-02", "SUCCEEDED")]
    skipped = [r for r in ss.runs(store, "capped") if r.outcome == "skipped-budget"][0]
    assert "$9.00" in skipped.detail and "$12.00" in skipped.detail
    assert all(spec.budget.max_cost == 5 for _, spec in fire.calls)


def test_monthly_cap_needs_a_per_run_bound(store, tmp_path):
    text = EXAMPLE.read_text().replace("  max_cost: 5.0\n", "")
    p = tmp_path / "nomax.yaml"
    p.write_text(text)
    with pytest.raises(UsageError, match="--monthly-cap needs a per-run bound"):
        ss.add_schedule(store, p, "0 2 * * *", tz="UTC", monthly_cap=10)


def test_failing_firings_never_stop_the_loop(store, job_file):
    start = utc(2025, 6, 10, 12)
    for name in ("raises", "fails", "works"):
        ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name=name, now=start)
    ok, bad = RecordingFire(store.path), RecordingFire(store.path, status="FAILED")
    sids = {n: ss.get_schedule(store, n).id for n in ("raises", "fails")}

    def fire(spec, *, schedule_id):
        if schedule_id == sids["raises"]:
            raise RuntimeError("cluster exploded")
        return (bad if schedule_id == sids["fails"] else ok)(spec, schedule_id=schedule_id)

    clock = FakeClock(start)
    simulate(Scheduler(store, fire=fire, clock=clock, recheck_s=3600), clock, start + 2 * 86400)
    assert [r.outcome for r in ss.runs(store, "raises")] == ["error", "error"]
    assert "RuntimeError: cluster exploded" in ss.runs(store, "raises")[0].detail
    assert [r.outcome for r in ss.runs(store, "fails")] == ["FAILED", "FAILED"]
    assert [r.outcome for r in ss.runs(store, "works")] == ["SUCCEEDED", "SUCCEEDED"]


def test_broken_followed_file_is_recorded_and_others_still_fire(store, job_file, tmp_path):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="follows", follow_file=True, now=start)
    other = tmp_path / "other.yaml"
    shutil.copy(EXAMPLE, other)
    ss.add_schedule(store, other, "0 2 * * *", tz="UTC", name="copied", now=start)
    job_file.write_text("name: [oops\n")
    other.write_text("name: [oops\n")  # ignored: the copy taken at add time runs
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=FakeClock(start))
    sched.run_once(utc(2025, 6, 11, 2))
    sched.wait_idle()
    assert ss.runs(store, "follows")[0].outcome == "error"
    assert "YAML syntax error" in ss.runs(store, "follows")[0].detail
    assert ss.runs(store, "copied")[0].outcome == "SUCCEEDED"


def test_followed_file_edit_is_picked_up(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="follows", follow_file=True, now=start)
    job_file.write_text(EXAMPLE.read_text().replace("epochs: 20", "epochs: 3"))
    fire = RecordingFire(store.path)
    sched = Scheduler(store, fire=fire, clock=FakeClock(start))
    sched.run_once(utc(2025, 6, 11, 2))
    sched.wait_idle()
    assert fire.calls[0][1].workload.epochs == 3
    assert "job file changed" in ss.runs(store, "follows")[0].detail


def test_paused_schedule_does_not_fire_and_resume_skips_the_past(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="p", now=start)
    ss.set_paused(store, "p", True, now=start)
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=FakeClock(start))
    assert sched.run_once(utc(2025, 6, 13, 3)) == []
    ss.set_paused(store, "p", False, now=utc(2025, 6, 13, 3))
    assert ss.get_schedule(store, "p").next_run_at == utc(2025, 6, 14, 2)


def test_loop_sleeps_until_something_is_due(store, job_file):
    start = utc(2025, 6, 10, 0, 0, 30)
    ss.add_schedule(store, job_file, "0 */6 * * *", tz="UTC", name="six", now=start)
    clock = FakeClock(start)
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600)
    simulate(sched, clock, start + 86400)
    assert len(fired_at(store, "six")) == 4
    # one wake per firing plus the hourly re-read when idle: never a poll per second
    assert sched.wakeups <= 4 + 24 + 1


# --- real time: wake-ups and a seconds-level schedule ---------------------------------------------------

def test_real_clock_fires_seconds_schedule_promptly_and_sees_new_schedules(store, job_file):
    fire_times: list[float] = []

    def fire(spec, *, schedule_id):
        fire_times.append(time.time())
        return FireResult(None, "SUCCEEDED")

    sched = Scheduler(store, fire=fire, recheck_s=0.5)
    loop = threading.Thread(target=sched.run_forever)
    loop.start()
    try:
        time.sleep(0.3)
        other = Store(store.path)  # another process's connection adds the schedule
        ss.add_schedule(other, job_file, "* * * * * *", tz="UTC", name="every-second")
        other.close()
        time.sleep(2.6)
    finally:
        sched.stop()
        loop.join(5)
    sched.wait_idle()
    assert 2 <= len(fire_times) <= 4
    lags = [t - r.due_at for t, r in zip(fire_times, [r for r in ss.runs(store, "every-second")
                                                           if r.outcome == "SUCCEEDED"])]
    assert lags and max(lags) < 0.6
    assert sched.wakeups < 20


class Ran(NamedTuple):
    exit_code: int
    output: str  # stdout, then stderr


def dlrun(argv: list[str]) -> Ran:
    """`dlrun ARGV` in this process, as the dlrun command runs it (its errors: one line and an exit code)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code or 0
    return Ran(code, out.getvalue() + err.getvalue())


# --- the lock ------------------------------------------------------------------------------------------

def test_lock_refuses_a_second_scheduler(dlrun_home):
    first = SchedulerLock(dlrun_home).acquire()
    try:
        assert running_scheduler_pid(dlrun_home) == __import__("os").getpid()
        with pytest.raises(SchedulerRunningError, match=r"another dlrun scheduler \(pid \d+\) already runs"):
            SchedulerLock(dlrun_home).acquire(wait_s=0.1)
        result = dlrun(["scheduler"])
        assert result.exit_code == 2
        assert "already runs" in result.output
    finally:
        first.release()
    assert running_scheduler_pid(dlrun_home) is None
    assert notify_scheduler(dlrun_home) is False
    SchedulerLock(dlrun_home).acquire(wait_s=0).release()


# --- the CLI -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--cron", "0 25 * * *"], "not a valid cron expression"),
    (["--cron", "0 2 * *"], "needs 5 fields"),
    (["--cron", "0 0 2 * * * 2030"], "needs 5 fields"),
    (["--cron", "61 0 2 * * *"], "not a valid cron expression"),
    (["--cron", "0 2 * * *", "--tz", "Europe/Madird"], "unknown time zone"),
    (["--cron", "0 2 * * *", "--tz", "CET+5"], "unknown time zone"),
    (["--cron", "0 2 * * *", "--name", "bad name"], "--name"),
    (["--cron", "0 2 * * *", "--max-cost", "-1"], "--max-cost"),
])
def test_cli_add_refuses_bad_input_with_exit_2(job_file, args, message):
    result = dlrun(["schedule", "add", str(job_file), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "no schedules" in dlrun(["schedule", "list"]).output


def test_cli_add_refuses_a_bad_job_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njob: cnnn\n")
    result = dlrun(["schedule", "add", str(bad), "--cron", "0 2 * * *"])
    assert result.exit_code == 2
    assert "did you mean cnn" in result.output


def test_cli_add_list_pause_resume_remove(job_file, store):
    r = dlrun(["schedule", "add", str(job_file), "--cron", "0 2 * * 0", "--tz",
               "Europe/Madrid", "--max-cost", "5", "--name", "nightly-cnn", "--monthly-cap", "50"])
    assert r.exit_code == 0, r.output
    assert "next run" in r.output and "CE" in r.output
    row = ss.get_schedule(store, "nightly-cnn")
    assert local(row.next_run_at, "Europe/Madrid").strftime("%A %H:%M") == "Sunday 02:00"
    assert row.job_yaml == job_file.read_text() and row.job_hash in r.output
    dup = dlrun(["schedule", "add", str(job_file), "--cron", "0 2 * * *", "--name", "nightly-cnn"])
    assert dup.exit_code == 2 and "already exists" in dup.output

    job = store.create_job(name="digits-cnn", spec_hash="h", spec_json="{}", schedule_id=row.id)
    store.set_actual_cost(job, 1.25)
    store.set_status(job, JobStatus.SUCCEEDED)
    with store.tx() as c:
        ss.record_run(c, row.id, time.time() - 60, time.time() - 60, "SUCCEEDED", job_id=job)
    listing = dlrun(["schedule", "list"])
    assert listing.exit_code == 0
    assert "nightly-cnn" in listing.output and "$1.25" in listing.output and "$50.00" in listing.output
    assert "SUCCEEDED" in listing.output and job in listing.output

    assert dlrun(["schedule", "pause", "nightly-cnn"]).exit_code == 0
    assert "paused" in dlrun(["schedule", "list"]).output
    assert dlrun(["schedule", "resume", "nightly-cnn"]).exit_code == 0
    assert dlrun(["schedule", "remove", "nightly-cnn"]).exit_code == 0
    missing = dlrun(["schedule", "remove", "nightly-cnn"])
    assert missing.exit_code == 2 and "no schedule named 'nightly-cnn'" in missing.output


def test_cli_runs_lists_the_firings_in_the_schedules_time_zone(job_file, store):
    assert dlrun(["schedule", "add", str(job_file), "--cron", "0 2 * * *", "--tz", "Europe/Madrid",
                  "--name", "nightly"]).exit_code == 0
    assert dlrun(["schedule", "runs", "nightly"]).output.strip() == "nightly: no firings yet"
    row = ss.get_schedule(store, "nightly")
    job = store.create_job(name="digits-cnn", spec_hash="h", spec_json="{}", schedule_id=row.id)
    with store.tx() as c:
        ss.record_run(c, row.id, utc(2026, 1, 15, 1, 0), utc(2026, 1, 15, 1, 0), "SUCCEEDED", job_id=job)
    runs = dlrun(["schedule", "runs", "nightly"])
    assert runs.exit_code == 0 and "2026-01-15 02:00:00 CET  SUCCEEDED" in runs.output and job in runs.output
    missing = dlrun(["schedule", "runs", "weekly"])
    assert missing.exit_code == 2 and "no schedule named 'weekly' (schedules: nightly)" in missing.output
