"""The scheduler loop on a jumping clock: what it does when runs overlap, the scheduler was down, the monthly
cap is reached, a firing fails or its followed job file breaks, a schedule is paused; how seldom it wakes;
on the real clock, a seconds-level schedule; the lock that keeps one scheduler per $DLRUN_HOME; and the
schedule commands (add, list, pause, resume, remove)."""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from orchestrator.errors import UsageError
from orchestrator.schedule.scheduler import (FireResult, Scheduler, SchedulerLock, SchedulerRunningError,
                                             notify_scheduler, running_scheduler_pid)
from orchestrator.state import schedules as ss
from orchestrator.state.db import Store
from orchestrator.states import JobStatus
from tests.support.scheduling import (  # noqa: F401  (example_job_file, home_store: fixtures)
    EXAMPLE, JumpingClock, RecordingFire, dlrun, example_job_file, fired_at, home_store, local, schedule, simulate,
    utc)


# --- policies ----------------------------------------------------------------------------------------

def test_overlapping_run_is_skipped_and_recorded(store, job_file):
    start = utc(2025, 6, 10, 0)
    ss.add_schedule(store, job_file, "0 * * * *", tz="UTC", name="hourly", now=start)
    fire = RecordingFire(store.path)
    fire.release.clear()  # the first run keeps going
    sched = Scheduler(store, fire=fire, clock=JumpingClock(start))
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
    sched = Scheduler(store, fire=fire, clock=JumpingClock(start))
    d = sched.run_once(utc(2025, 6, 10, 1))
    assert d[0].outcome == "skipped-overlap" and job in d[0].detail and not fire.calls
    store.set_status(job, JobStatus.SUCCEEDED)
    assert sched.run_once(utc(2025, 6, 10, 2))[0].outcome == "fired"
    sched.wait_idle()


def test_three_day_outage_gives_exactly_one_catch_up_run(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="nightly", now=start)
    fire = RecordingFire(store.path)
    sched = Scheduler(store, fire=fire, clock=JumpingClock(start))
    sched.run_once(utc(2025, 6, 11, 2))
    sched.wait_idle()
    # the scheduler is down from 11 June 03:00 to 14 June 10:00: the 12th, 13th and 14th are missed
    back = utc(2025, 6, 14, 10)
    decisions = Scheduler(store, fire=fire, clock=JumpingClock(back)).run_once(back)
    assert [d.outcome for d in decisions] == ["missed", "fired"]
    assert decisions[0].detail.startswith("2 occurrence(s) from 2025-06-12T02:00:00Z")
    assert decisions[1].due_at == utc(2025, 6, 14, 2)
    assert schedule(store, "nightly").next_run_at == utc(2025, 6, 15, 2)
    time.sleep(0.2)
    assert len(fire.calls) == 2


def test_monthly_cap_stops_firings_until_next_month(store, job_file):
    start = utc(2025, 1, 28, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="Europe/Madrid", name="capped", max_cost=5,
                    monthly_cap=12, now=start)
    clock = JumpingClock(start)
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
    sids = {n: schedule(store, n).id for n in ("raises", "fails")}

    def fire(spec, *, schedule_id):
        if schedule_id == sids["raises"]:
            raise RuntimeError("cluster exploded")
        return (bad if schedule_id == sids["fails"] else ok)(spec, schedule_id=schedule_id)

    clock = JumpingClock(start)
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
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=JumpingClock(start))
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
    sched = Scheduler(store, fire=fire, clock=JumpingClock(start))
    sched.run_once(utc(2025, 6, 11, 2))
    sched.wait_idle()
    workload = fire.calls[0][1].workload
    assert workload is not None and workload.epochs == 3
    assert "job file changed" in ss.runs(store, "follows")[0].detail


def test_paused_schedule_does_not_fire_and_resume_skips_the_past(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", name="p", now=start)
    ss.set_paused(store, "p", True, now=start)
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=JumpingClock(start))
    assert sched.run_once(utc(2025, 6, 13, 3)) == []
    ss.set_paused(store, "p", False, now=utc(2025, 6, 13, 3))
    assert schedule(store, "p").next_run_at == utc(2025, 6, 14, 2)


def test_loop_sleeps_until_something_is_due(store, job_file):
    start = utc(2025, 6, 10, 0, 0, 30)
    ss.add_schedule(store, job_file, "0 */6 * * *", tz="UTC", name="six", now=start)
    clock = JumpingClock(start)
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
    succeeded = [r for r in ss.runs(store, "every-second") if r.outcome == "SUCCEEDED"]
    lags = [t - r.due_at for t, r in zip(fire_times, succeeded, strict=True)]  # each firing recorded once
    assert lags and max(lags) < 0.6
    assert sched.wakeups < 20


# --- the lock ------------------------------------------------------------------------------------------

def test_lock_refuses_a_second_scheduler(dlrun_home):
    first = SchedulerLock(dlrun_home).acquire()
    try:
        assert running_scheduler_pid(dlrun_home) == os.getpid()
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


# --- the schedule commands -----------------------------------------------------------------------------

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
    row = schedule(store, "nightly-cnn")
    assert row.next_run_at and local(row.next_run_at, "Europe/Madrid").strftime("%A %H:%M") == "Sunday 02:00"
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


def test_cli_add_keeps_the_override_flags_for_every_run_and_refuses_a_bad_one_before_storing(job_file, store):
    """--gpus, --cloud, --region, --spot/--on-demand, --env on `schedule add` (orchestrator/planning/overrides.py):
    checked by the job file's rules when added, stored with the schedule, applied to each firing's spec."""
    r = dlrun(["schedule", "add", str(job_file), "--cron", "0 2 * * *", "--tz", "UTC", "--name", "t4-nightly",
               "--gpus", "T4:1", "--cloud", "gcp", "--region", "us-central1", "--on-demand", "--env", "SEED=7"])
    assert r.exit_code == 0, r.output
    assert "every run with --gpus T4:1 --cloud gcp --region us-central1 --on-demand --env SEED=7" in r.output
    row = schedule(store, "t4-nightly")
    sched = Scheduler(store, fire=RecordingFire(store.path), clock=JumpingClock(row.next_run_at))
    [fired] = sched.run_once(row.next_run_at)
    sched.wait_idle()
    assert fired.outcome == "fired"
    [(_, spec)] = sched.fire.calls
    assert (spec.resources.accelerators, spec.resources.clouds, spec.resources.regions, spec.resources.spot) == (
        "T4:1", ["gcp"], ["us-central1"], "never")
    assert spec.env["SEED"] == "7"
    bad = dlrun(["schedule", "add", str(job_file), "--cron", "0 2 * * *", "--name", "t5", "--gpus", "T5:1"])
    assert bad.exit_code == 2 and bad.output.startswith("dlrun: error: --gpus: unknown accelerator 'T5'")
    assert len(bad.output.strip().splitlines()) == 1
    assert ss.get_schedule(store, "t5") is None


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
