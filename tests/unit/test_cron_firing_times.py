"""When a schedule fires: cron's five or six fields and weekday names, in the schedule's time zone, across
the clock changes of daylight saving time; and the cron, zone and bound input `dlrun schedule add` refuses.
The scheduler loop runs on a clock that jumps to each wake-up."""
from __future__ import annotations

import pytest

from orchestrator.schedule.scheduler import Scheduler
from orchestrator.state import schedules as ss
from tests.support.scheduling import (  # noqa: F401  (example_job_file, home_store: fixtures)
    JumpingClock, RecordingFire, dlrun, example_job_file, fired_at, home_store, local, simulate, utc)


# --- firing instants -------------------------------------------------------------------------------

def test_daily_job_fires_at_its_local_time_each_day(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "0 2 * * *", tz="Europe/Madrid", name="nightly", now=start)
    clock = JumpingClock(start)
    fire = RecordingFire(store.path)
    simulate(Scheduler(store, fire=fire, clock=clock, recheck_s=3600), clock, start + 3 * 86400)
    times = fired_at(store, "nightly")
    assert [local(t, "Europe/Madrid").strftime("%d %H:%M") for t in times] == ["11 02:00", "12 02:00", "13 02:00"]
    assert all(r.outcome == "SUCCEEDED" and r.job_id for r in ss.runs(store, "nightly"))
    assert len(fire.calls) == 3


def test_six_fields_put_the_seconds_first(store, job_file):
    start = utc(2025, 6, 10, 12)
    ss.add_schedule(store, job_file, "30 0 2 * * *", tz="Europe/Madrid", name="half-past", now=start)
    clock = JumpingClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 2 * 86400)
    assert [local(t, "Europe/Madrid").strftime("%d %H:%M:%S") for t in fired_at(store, "half-past")] == [
        "11 02:00:30", "12 02:00:30"]


@pytest.mark.parametrize("dow", ["0", "7", "SUN"])
def test_weekly_sunday_job_fires_on_sundays_only(store, job_file, dow):
    start = utc(2025, 6, 2, 0)  # a Monday
    ss.add_schedule(store, job_file, f"30 9 * * {dow}", tz="America/New_York", name="weekly", now=start)
    clock = JumpingClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=86400), clock, start + 15 * 86400)
    days = [local(t, "America/New_York") for t in fired_at(store, "weekly")]
    assert [(d.strftime("%A %H:%M"), d.day) for d in days] == [("Sunday 09:30", 8), ("Sunday 09:30", 15)]


@pytest.mark.parametrize("start, fired", [
    # Madrid 2025-03-30: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day: it fires at the jump
    (utc(2025, 3, 28, 12), [utc(2025, 3, 29, 1, 30), utc(2025, 3, 30, 1, 0),
                            utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]),
    # Madrid 2025-10-26: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice: it fires at the first
    (utc(2025, 10, 24, 12), [utc(2025, 10, 25, 0, 30), utc(2025, 10, 26, 0, 30),
                             utc(2025, 10, 27, 1, 30), utc(2025, 10, 28, 1, 30)]),
], ids=["spring-forward-gap", "fall-back-repeat"])
def test_a_daily_time_on_a_clock_change_day_fires_once(store, job_file, start, fired):
    ss.add_schedule(store, job_file, "30 2 * * *", tz="Europe/Madrid", name="dst", now=start)
    clock = JumpingClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 4 * 86400)
    assert fired_at(store, "dst") == fired


def test_hourly_job_across_spring_forward_has_no_duplicate(store, job_file):
    start = utc(2025, 3, 29, 23, 0)  # 00:00 CET on the day of the jump
    ss.add_schedule(store, job_file, "30 * * * *", tz="Europe/Madrid", name="hourly", now=start)
    clock = JumpingClock(start)
    simulate(Scheduler(store, fire=RecordingFire(store.path), clock=clock, recheck_s=3600), clock, start + 4 * 3600)
    walls = [local(t, "Europe/Madrid").strftime("%H:%M %Z") for t in fired_at(store, "hourly")]
    assert walls == ["00:30 CET", "01:30 CET", "03:00 CEST", "03:30 CEST", "04:30 CEST"]


# --- what schedule add refuses ------------------------------------------------------------------------

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
