"""The watch loop of one attempt: Ray job status, log tail and metrics, node state, accrued cost.

The log is followed incrementally (the Jobs client's tail(): each character read once) and only
whole lines are interpreted. Status is polled every 0.1 s for the first 10 s, then less often up to
poll_s, and every FAST_POLL_S once the job printed its result or its log stream ended: a short job's
end is seen within a tenth of a second or so.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from jobs.metrics import parse_line as parse_metric_line
from jobs.progress import terminal_lines
from orchestrator.cli.render.display import Display, JobView
from orchestrator.cost import CostMeter, usd, usd_apart
from orchestrator.runs import sigterm
from orchestrator.states import Ending, RayJobStatus

if TYPE_CHECKING:
    from infra.base import NodeState, ProviderError
    from orchestrator.runs.ray_jobs import JobInfo, JobsClient, LogFollower

HEAD_FAILURES_BEFORE_CHECK = 10  # failed status polls in a row before the cloud is asked about the nodes
HEAD_LOST_AFTER_S = 600.0  # a head unreachable this long while its instances run is lost
FIRST_POLL_S = 0.1  # status polls: this often for the first FAST_S seconds (a short job's end is seen
FAST_S = 10.0       # within a tenth of a second), then slower and slower, up to poll_s at RAMP_S
RAMP_S = 60.0
FAST_POLL_S = 0.05  # once the end is near (the result line arrived, the log stream closed) ...
END_NEAR_S = 10.0  # ... for this long at most
# Ray's own lines in a job's log: its job manager's messages and the entrypoint it runs. They stay
# in the job's log file and out of the live display.
RAY_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\s+(DEBUG|INFO)\s+\S+:\d+ -- "
                      r"|^Running entrypoint for job \S+: ")
# how far the run is (shown as progress, not as the job's metrics); the rest are the job's own metrics
REPORTED_SKIP = ("epoch", "epochs", "event", "progress", "eta_s", "step", "steps", "batch", "batches", "it_per_s")


def is_ray_line(line: str) -> bool:
    return bool(RAY_LINE.match(line))


@dataclass
class Outcome:
    """How one attempt ended (states.Ending says what that leads to) and what it left to record."""

    kind: Ending
    detail: str = ""
    result: dict = field(default_factory=dict)
    run_seconds: float | None = None
    exit_code: int | None = None  # the job's own exit code, when Ray knows it
    error: ProviderError | None = None  # NOT_READY: what stopped the launch or the boot (its scope is blocked)

    @classmethod
    def not_ready(cls, error: ProviderError) -> "Outcome":
        return cls(Ending.NOT_READY, error.message, error=error)


@dataclass
class Watcher:
    jobs: JobsClient
    submission_id: str
    view: JobView
    display: Display
    meter: CostMeter
    node_states: Callable[[], list[NodeState]] | None = None  # provider.status(cluster)
    on_event: Callable[[str, dict], None] = lambda kind, detail: None
    max_cost: float | None = None
    poll_s: float = 0.5
    node_poll_s: float = 5.0
    confirm_cancel: Callable[[], bool] = lambda: True  # asked on Ctrl-C
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    _warned: bool = False
    result: dict = field(default_factory=dict)
    log_path: Path | None = None  # the job's log is kept here too: readable after the cluster is gone
    _tail: LogFollower | None = None
    _partial: str = ""  # the start of a line still being written
    _end_near: float | None = None  # when the end looked near (result printed, stream closed)
    _started: float | None = None
    noticed: str | None = None  # why the job stopped early on a preemption notice (its checkpoint)

    def _consume_logs(self, final: bool = False) -> None:
        """What the log says since the last poll. The tail is opened once the job runs (or ended): the
        head's work to follow a log is not added to its work of starting the job."""
        try:
            if self._tail is None:
                self._tail = self.jobs.tail(self.submission_id)
            text = self._tail.finish() if final else self._tail.read()
        except Exception:
            return
        if self._tail.ended and self._end_near is None:
            self._end_near = self.clock()
        text = self._partial + text
        # only whole lines: a line still being written is read complete at a later poll
        cut = len(text) if final else text.rfind("\n") + 1
        fresh, self._partial = text[:cut], text[cut:]
        if not fresh:
            return
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(fresh)
        for line in terminal_lines(fresh):  # a tqdm bar's \r updates: its latest state only
            self._line(line)

    def _line(self, line: str) -> None:
        parsed = parse_metric_line(line)
        if parsed is None:
            if not is_ray_line(line):
                self.display.log(line)
            return
        kind, data = parsed
        if kind == "result":
            self.result = data
            if self._end_near is None:
                self._end_near = self.clock()
        elif data.get("event") == "resumed":
            step = f" step {data['step']}" if data.get("step") else ""
            self.display.message(f"resuming {self.view.name} from epoch {data.get('epoch')}{step} "
                                 "(--fresh to start over)")
            self.on_event("resumed", data)
        elif data.get("event") in ("preemption_notice", "preempted_notice"):
            self._notice_line(data)
        else:
            v = self.view
            v.epoch = int(data.get("epoch", v.epoch))
            v.epochs = int(data.get("epochs", v.epochs))
            v.progress = data.get("progress", v.progress)
            v.eta_s = data.get("eta_s", v.eta_s)
            v.loss = data.get("loss", v.loss)
            v.accuracy = data.get("accuracy", v.accuracy)
            v.samples_per_s = data.get("samples_per_s", v.samples_per_s)
            v.metrics.update({k: x for k, x in data.items() if k not in REPORTED_SKIP})
            self.on_event("epoch", data)

    def _notice_line(self, data: dict) -> None:
        """The node saw a preemption notice (jobs/notice.py), or the job stopped on it with a checkpoint."""
        if data["event"] == "preemption_notice":
            self.noticed = self.noticed or f"preemption notice ({data.get('reason', '')})"
            self.display.message(f"preemption notice: {data.get('reason', '')}; the job writes a checkpoint")
            self.on_event("preemption_notice", data)
            return
        where = f"epoch {data.get('epoch')}" + (f" step {data['step']}" if data.get("step") else "")
        self.noticed = f"preempted with notice, checkpoint at {where}"
        self.display.message(self.noticed)
        self.on_event("preempted_notice", data)

    def _check_budget(self, now: float) -> bool:
        if not self.max_cost:
            return False
        accrued = self.meter.accrued(now)
        if not self._warned and accrued >= 0.8 * self.max_cost:
            self._warned = True
            self.display.message(f"budget warning: {usd(accrued)} of {usd(self.max_cost)} spent (80 %)")
            self.on_event("budget_warning", {"accrued": accrued, "max_cost": self.max_cost})
        return accrued >= self.max_cost

    def _preempted(self) -> str | None:
        if self.node_states is None:
            return None
        try:
            states = self.node_states()
        except Exception as e:  # an unreachable provider API is not a preemption
            self.on_event("provider_error", {"error": str(e)[:200]})
            return None
        gone = [s for s in states if s.status in ("preempted", "gone", "terminated")]
        if gone:
            return ", ".join(f"{s.node_id} {s.status}" for s in gone)
        return None

    def _interval(self, now: float) -> float:
        if self._end_near is not None and now - self._end_near < END_NEAR_S:
            return min(self.poll_s, FAST_POLL_S)
        started = self._started if self._started is not None else now  # set when the loop began
        elapsed = max(0.0, now - started - FAST_S)
        ramp = FIRST_POLL_S + (self.poll_s - FIRST_POLL_S) * elapsed / (RAMP_S - FAST_S)
        return max(min(self.poll_s, FIRST_POLL_S), min(self.poll_s, ramp))

    def run(self) -> Outcome:
        try:
            while True:
                try:
                    return self._loop()
                except KeyboardInterrupt:
                    if self.confirm_cancel():
                        self.jobs.stop(self.submission_id)
                        reason = sigterm.cancel_reason()
                        self.on_event("cancel_requested", {"by": "SIGTERM" if sigterm.received() else "Ctrl-C"})
                        self._consume_logs(final=True)
                        return Outcome(Ending.STOPPED, reason, run_seconds=self._run_seconds())
        finally:
            if self._tail is not None:
                self._tail.close()

    def _loop(self) -> Outcome:
        last_nodes = self.clock()
        self._started = self._started if self._started is not None else last_nodes
        last_status: RayJobStatus | None = None
        head_failures, unreachable_since = 0, 0.0
        while True:
            now = self.clock()
            self.view.accrued = self.meter.accrued(now)
            try:
                status: RayJobStatus | None = RayJobStatus(self.jobs.status(self.submission_id))
                head_failures = 0
            except Exception as e:
                status = None
                head_failures += 1
                if head_failures == 1:
                    unreachable_since = now
                if head_failures % HEAD_FAILURES_BEFORE_CHECK == 0:
                    gone = self._head_lost(e, now - unreachable_since)
                    if gone:
                        return Outcome(Ending.PREEMPTED, gone)
            if status is not None:
                last_status = self._saw(status, last_status)
            if status not in (None, RayJobStatus.PENDING) or self._tail is not None:
                self._consume_logs(final=status is not None and status.terminal)
            self.display.update(self.view)
            if status is not None and status.terminal:
                return self._ended(status.ending())
            if self._check_budget(now):
                spent, cap = usd_apart(self.meter.accrued(now), self.max_cost or 0.0)
                return Outcome(Ending.BUDGET_EXCEEDED, f"accrued {spent} reached max {cap}")
            if now - last_nodes >= self.node_poll_s:
                last_nodes = now
                why = self._preempted()
                if why:
                    return Outcome(Ending.PREEMPTED, why)
            self.sleep(self._interval(now))

    def _saw(self, status: RayJobStatus, last: RayJobStatus | None) -> RayJobStatus:
        """A status told once it changes (an event); the view's phase once the job runs."""
        if status != last:
            self.on_event("ray_status", {"status": status.value})
            if status == RayJobStatus.RUNNING:
                self.view.phase = "running"
        return status

    def _ended(self, ending: Ending) -> Outcome:
        """The Ray job ended: a failure after a preemption notice is the preemption (it stopped with a
        checkpoint: recover); else its ending, with what it reported."""
        if ending == Ending.FAILED and self.noticed is not None:
            return Outcome(Ending.PREEMPTED, self.noticed, run_seconds=self._run_seconds())
        from orchestrator.runs.ray_jobs import setup_failure

        info = self._info()
        code = info.driver_exit_code if info is not None else None
        detail = ""
        if ending == Ending.FAILED:  # with no exit code the driver never ran: Ray's message says why
            detail = f"the job exited with code {code}" if code is not None else \
                setup_failure(info.message if info is not None else None)
        return Outcome(ending, detail, result=self.result, run_seconds=self._run_seconds(), exit_code=code)

    def _head_lost(self, error: Exception, unreachable_s: float) -> str | None:
        """Why the head counts as lost after a run of failed polls, or None to keep waiting.

        A blip (Wi-Fi, a laptop that slept, a tunnel being re-opened) is not a preemption: where the
        cloud can be asked, only its word that a node is gone ends the attempt — or a head that stays
        unreachable for HEAD_LOST_AFTER_S while its instances run (Ray itself died there).
        """
        reason = f"head unreachable: {str(error)[:120]}"
        if self.node_states is None:
            return reason
        why = self._preempted()
        if why:
            return why
        if unreachable_s >= HEAD_LOST_AFTER_S:
            return f"{reason} for {unreachable_s:.0f} s while its instances run"
        self.on_event("head_unreachable", {"seconds": round(unreachable_s, 1), "error": str(error)[:200]})
        return None

    def _run_seconds(self) -> float | None:
        try:
            info = self.jobs.info(self.submission_id)
            if info.start_time and info.end_time:
                return (info.end_time - info.start_time) / 1000.0
        except Exception:
            pass
        return None

    def _info(self) -> JobInfo | None:
        try:
            return self.jobs.info(self.submission_id)
        except Exception:
            return None
