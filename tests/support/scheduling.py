"""What the scheduler's tests share (tests/unit/test_cron_firing_times.py, test_scheduler_loop.py): the example
job file and the store dlrun's CLI reads, instants in UTC and local time, a clock the loop jumps forward, a
stand-in for the submission a schedule fires, and `dlrun ARGV` run in this process."""
from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest

from orchestrator.cli.main import main
from orchestrator.planning.spec import JobSpec
from orchestrator.schedule.scheduler import FireResult, Scheduler
from orchestrator.state import schedules as ss
from orchestrator.state.db import Store
from orchestrator.state.records import ScheduleRecord
from orchestrator.states import JobStatus

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "digits_cnn.yaml"


def utc(*a) -> float:
    return datetime(*a, tzinfo=timezone.utc).timestamp()


def local(ts: float, tz: str) -> datetime:
    return datetime.fromtimestamp(ts, ZoneInfo(tz))


@pytest.fixture(name="job_file")
def example_job_file(tmp_path) -> Path:
    """A copy of the example job, to schedule (and edit)."""
    p = tmp_path / "job.yaml"
    shutil.copy(EXAMPLE, p)
    return p


@pytest.fixture(name="store")
def home_store(dlrun_home):
    """The store in $DLRUN_HOME: the one `dlrun schedule ...` reads and writes."""
    s = Store(dlrun_home / "state.db")
    yield s
    s.close()


def schedule(store: Store, name: str) -> ScheduleRecord:
    """The test's own schedule, which exists."""
    row = ss.get_schedule(store, name)
    assert row is not None, f"no schedule {name}"
    return row


class JumpingClock:
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
        self.calls: list[tuple[str, JobSpec]] = []
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


def simulate(sched: Scheduler, clock: JumpingClock, until: float) -> None:
    def stop():
        sched.wait_idle()  # deterministic: every firing is recorded before time moves on
        return clock.t >= until
    sched.run_forever(should_stop=stop)


def fired_at(store: Store, name: str) -> list[float]:
    """The instants the schedule fired (to the second; the loop wakes a hair after each due time)."""
    rows = [r for r in ss.runs(store, name) if r.outcome not in ("missed", "skipped-overlap", "skipped-budget")]
    assert all(0 <= r.fired_at - r.due_at < 0.01 for r in rows)
    return [float(int(r.fired_at)) for r in rows]


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
        except SystemExit as e:  # its code as the interpreter's exit would give it (None: 0, a message: 1)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return Ran(code, out.getvalue() + err.getvalue())
