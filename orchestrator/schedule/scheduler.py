"""`dlrun scheduler`: the foreground loop that fires due schedules, one plan + submit per firing.

Policies, checked at each firing (every decision is a row in schedule_runs):
- no overlap: while the previous run of a schedule is live, its next occurrence is skipped;
- after downtime at most one catch-up run: missed occurrences are recorded once, one run fires now;
- a monthly cap: this calendar month's spend (in the schedule's zone) + the run's max_cost <= cap;
- a firing that raises or whose job fails is recorded and the loop goes on.
The loop sleeps until the earliest next_run_at (no polling); `dlrun schedule add/remove/...` wake it
with SIGUSR1, and it re-reads the schedules at least every `recheck_s` seconds anyway.
Each firing runs in a worker thread, so a long job never delays other schedules; the default fire
runs runner.submit in a child process (own SQLite connection, own signals, a log file per run).
Only one scheduler runs per $DLRUN_HOME: it holds an exclusive flock on $DLRUN_HOME/scheduler.lock.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from orchestrator.state import schedules as ss
from orchestrator.schedule import cron as st
from orchestrator.errors import DlrunError, UsageError
from orchestrator.state.db import Store, dlrun_home
from orchestrator.state.records import ScheduleRecord

log = logging.getLogger("dlrun.scheduler")
LOCK_NAME = "scheduler.lock"
MAX_MISSED_COUNTED = 1000


class SchedulerRunningError(UsageError):
    pass


# --- the lock ------------------------------------------------------------------------------------

class SchedulerLock:
    """An exclusive flock on $DLRUN_HOME/scheduler.lock, holding the owner's pid."""

    def __init__(self, home: Path | None = None):
        self.path = Path(home or dlrun_home()) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, wait_s: float = 1.0) -> "SchedulerLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s  # rides over a `schedule add` probing the lock
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                    os.close(fd)
                    raise SchedulerRunningError(
                        f"another dlrun scheduler (pid {pid}) already runs for {self.path.parent}; "
                        f"stop it first, or set DLRUN_HOME to another directory") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def running_scheduler_pid(home: Path | None = None) -> int | None:
    """The pid of the scheduler holding the lock, or None when none runs."""
    path = Path(home or dlrun_home()) / LOCK_NAME
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
    finally:
        os.close(fd)


def notify_scheduler(home: Path | None = None) -> bool:
    """Wake a running scheduler so it re-reads the schedules now (it would within recheck_s anyway)."""
    pid = running_scheduler_pid(home)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGUSR1)
        return True
    except OSError:
        return False


# --- firing --------------------------------------------------------------------------------------

@dataclass
class FireResult:
    job_id: str | None
    status: str
    message: str = ""


Fire = Callable[..., FireResult]  # fire(spec, schedule_id=...)


def submit_in_child(spec, *, schedule_id: str, run_label: str = "") -> FireResult:
    """The default fire: runner.submit(spec, schedule_id=..., detach=False) in a child process."""
    logs = dlrun_home() / "scheduler-logs"
    logs.mkdir(exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{schedule_id}{run_label}"
    log_path, result_path = logs / f"{stem}.log", logs / f"{stem}.result.json"
    with open(log_path, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "orchestrator.schedule.scheduler", "fire", schedule_id,
                               str(result_path)], input=spec.model_dump_json(), text=True,
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        data = json.loads(result_path.read_text())
        result_path.unlink()
    except (OSError, ValueError):
        raise RuntimeError(f"the run process exited with code {proc.returncode} without a result; "
                           f"see {log_path}") from None
    return FireResult(data.get("job_id"), data["status"], data.get("message", ""))


def _child_main(schedule_id: str, result_path: str) -> int:
    from orchestrator.runs import executor as runner
    from orchestrator.planning.spec import JobSpec

    spec = JobSpec.model_validate_json(sys.stdin.read())
    try:
        res = runner.submit(spec, schedule_id=schedule_id, detach=False)
        data = {"job_id": res.job_id, "status": str(res.status)}  # why a job failed: in its record
    except DlrunError as e:
        data = {"job_id": None, "status": "error", "message": f"{type(e).__name__}: {e.message}"}
    Path(result_path).write_text(json.dumps(data))
    return 0


# --- the loop ------------------------------------------------------------------------------------

class Clock(Protocol):
    def now(self) -> float: ...
    def wait(self, event: threading.Event, timeout: float) -> bool: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


@dataclass
class Decision:
    schedule: str
    due_at: float
    outcome: str
    detail: str = ""


class Scheduler:
    def __init__(self, store: Store, fire: Fire | None = None, clock: Clock | None = None,
                 recheck_s: float = 60.0):
        self.store = store
        self.fire = fire or submit_in_child
        self.clock = clock or SystemClock()
        self.recheck_s = recheck_s
        self.wakeups = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._inflight: dict[str, threading.Thread] = {}
        self._done: queue.Queue = queue.Queue()

    # one pass ----------------------------------------------------------------------------------
    def run_once(self, now: float | None = None) -> list[Decision]:
        """Record finished runs, then decide and start every schedule due at `now`."""
        now = self.clock.now() if now is None else now
        self.collect_finished()
        due = ss.due_schedules(self.store, now)
        if not due:
            return []
        live = ss.live_jobs_by_schedule(self.store)
        plans = []
        for sched, due_at in due:
            try:
                plans.append(self._decide(sched, due_at, now, live))
            except Exception as e:  # one broken schedule never stops the others
                log.exception("schedule %s: cannot decide", sched.name)
                nxt = self._next_or_none(sched, now)
                plans.append((sched, due_at, nxt, [("error", f"{type(e).__name__}: {e}")], None))
        decisions, starts = [], []
        with self.store.tx() as c:
            for sched, due_at, nxt, outcomes, spec in plans:
                run_id = None
                for outcome, detail in outcomes:
                    run_id = ss.record_run(c, sched.id, due_at, now, outcome, detail)
                    decisions.append(Decision(sched.name, due_at, outcome, detail))
                fired = spec is not None
                ss.advance(c, sched.id, nxt, now if fired else None)
                if fired:
                    starts.append((sched, run_id, spec))
        for sched, run_id, spec in starts:
            self._start(sched, run_id, spec)
        for d in decisions:
            log.info("%s due %s: %s%s", d.schedule, st.utc_iso(d.due_at), d.outcome,
                     f" ({d.detail})" if d.detail else "")
        return decisions

    def _next_or_none(self, sched: ScheduleRecord, now: float) -> float | None:
        try:
            return st.next_fire_after(sched.cron, sched.tz, now)
        except Exception:
            return None  # an unparseable row stays out of the loop instead of spinning it

    def _decide(self, sched: ScheduleRecord, due_at: float, now: float, live: dict[str, str]):
        """-> (sched, due_at, next_run_at, [(outcome, detail)...], spec to fire or None)."""
        cron, tz = sched.cron, sched.tz
        nxt = st.next_fire_after(cron, tz, now)
        outcomes: list[tuple[str, str]] = []
        missed, latest, t = 0, due_at, due_at
        while missed < MAX_MISSED_COUNTED:
            t = st.next_fire_after(cron, tz, t)
            if t > now:
                break
            missed, latest = missed + 1, t
        if missed:
            more = "+" if missed >= MAX_MISSED_COUNTED else ""
            outcomes.append(("missed", f"{missed}{more} occurrence(s) from {st.utc_iso(due_at)} passed while "
                                       f"the scheduler was down; one catch-up run instead"))
        due_at = latest if missed else due_at
        running = self._inflight.get(sched.id)
        if (running and running.is_alive()) or sched.id in live:
            job = live.get(sched.id, "")
            outcomes.append(("skipped-overlap", f"previous run {job or 'still starting'} is still live".strip()))
            return sched, due_at, nxt, outcomes, None
        spec, note = ss.job_for_run(self.store, sched)
        cap = sched.monthly_cap or spec.budget.monthly_cap
        if cap is not None:
            month = ss.spent(self.store, sched.id, st.month_start(now, tz))
            run_cost = spec.budget.max_cost
            if run_cost is None or month + run_cost > cap + 1e-9:
                outcomes.append(("skipped-budget", f"spent ${month:.2f} this month + max ${run_cost or 0:.2f} "
                                                   f"per run would pass the ${cap:.2f} monthly cap"))
                return sched, due_at, nxt, outcomes, None
        outcomes.append(("fired", note))
        return sched, due_at, nxt, outcomes, spec

    def _start(self, sched: ScheduleRecord, run_id: int, spec) -> None:
        sid = sched.id

        def work():
            try:
                res = self.fire(spec, schedule_id=sid)
                self._done.put((run_id, str(res.status), res.message, res.job_id))
            except BaseException as e:  # noqa: BLE001 - recorded, and the loop goes on
                msg = e.message if isinstance(e, DlrunError) else str(e)
                self._done.put((run_id, "error", f"{type(e).__name__}: {msg}", None))
            finally:
                self._wake.set()

        t = threading.Thread(target=work, name=f"fire-{sched.name}", daemon=True)
        self._inflight[sid] = t
        t.start()

    def collect_finished(self) -> int:
        done = []
        while True:
            try:
                done.append(self._done.get_nowait())
            except queue.Empty:
                break
        if done:
            ss.finish_runs(self.store, done)
        for run_id, outcome, detail, job_id in done:
            log.info("run %s finished: %s%s%s", run_id, outcome, f" job {job_id}" if job_id else "",
                     f" ({detail})" if detail else "")
        for sid in [s for s, t in self._inflight.items() if not t.is_alive()]:
            del self._inflight[sid]
        return len(done)

    def wait_idle(self, timeout: float | None = 30.0) -> None:
        """Join every running firing (all of them with timeout=None) and record the outcomes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in list(self._inflight.values()):
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.collect_finished()

    @property
    def running(self) -> int:
        return sum(t.is_alive() for t in self._inflight.values())

    # forever -----------------------------------------------------------------------------------
    def sleep_seconds(self, now: float) -> float:
        nxt = ss.next_wakeup(self.store)
        if nxt is None:
            return self.recheck_s
        return min(max(nxt - now, 0.0) + 0.002, self.recheck_s)

    def run_forever(self, should_stop: Callable[[], bool] | None = None) -> None:
        restore = self._install_signals()
        try:
            while not self._stop.is_set() and not (should_stop and should_stop()):
                self._wake.clear()
                now = self.clock.now()
                self.run_once(now)
                self.clock.wait(self._wake, self.sleep_seconds(now))
                self.wakeups += 1
        finally:
            restore()
            self.collect_finished()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _install_signals(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
        signal.signal(signal.SIGUSR1, lambda *_: self._wake.set())
        signal.signal(signal.SIGTERM, lambda *_: self.stop())

        def restore():
            for s, h in previous.items():
                signal.signal(s, h)
        return restore


def serve(store: Store | None = None, fire: Fire | None = None, recheck_s: float = 60.0,
          home: Path | None = None) -> Scheduler:
    """`dlrun scheduler`: take the lock, loop until SIGTERM/SIGINT, then wait for running firings."""
    with SchedulerLock(home):
        sched = Scheduler(store or Store(), fire=fire, recheck_s=recheck_s)
        n = len(ss.list_schedules(sched.store))
        log.info("scheduler started for %s (%d schedule(s), pid %d)", sched.store.path.parent, n, os.getpid())
        try:
            sched.run_forever()
        except KeyboardInterrupt:
            sched.stop()
        if sched.running:
            log.info("stopping: waiting for %d running firing(s) to finish", sched.running)
            sched.wait_idle(timeout=None)
        return sched


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "fire":
    sys.exit(_child_main(sys.argv[2], sys.argv[3]))
