"""The watch loop of one attempt: Ray job status, log tail and metrics, node state, accrued cost."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from jobs.metrics import parse_line as parse_metric_line
from orchestrator.cli.render.display import JobView
from orchestrator.cost import CostMeter

HEAD_FAILURES_BEFORE_CHECK = 10  # failed status polls in a row before the cloud is asked about the nodes
HEAD_LOST_AFTER_S = 600.0  # a head unreachable this long while its instances run is lost


@dataclass
class Outcome:
    kind: str  # SUCCEEDED, FAILED, STOPPED, PREEMPTED, BUDGET_EXCEEDED, INTERRUPTED
    detail: str = ""
    result: dict = field(default_factory=dict)
    run_seconds: float | None = None


@dataclass
class Watcher:
    jobs: object  # raycluster.RayJobs
    submission_id: str
    view: JobView
    display: object
    meter: CostMeter
    node_states: Callable[[], list] | None = None  # provider.status(cluster) -> [NodeState]
    on_event: Callable[[str, dict], None] = lambda kind, detail: None
    max_cost: float | None = None
    poll_s: float = 0.5
    node_poll_s: float = 5.0
    confirm_cancel: Callable[[], bool] = lambda: True  # asked on Ctrl-C
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    _log_len: int = 0
    _warned: bool = False
    result: dict = field(default_factory=dict)
    log_path: object = None  # the job's log is kept here too: readable after the cluster is gone

    def _consume_logs(self, final: bool = False) -> None:
        try:
            text = self.jobs.logs(self.submission_id)
        except Exception:
            return
        if len(text) < self._log_len:
            self._log_len = 0
        # only whole lines: a line still being written is read complete at the next poll
        end = text.rfind("\n", self._log_len) + 1 if not final else len(text)
        if end <= self._log_len:
            return
        fresh, self._log_len = text[self._log_len:end], end
        if fresh and self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(fresh)
        for line in fresh.splitlines():
            parsed = parse_metric_line(line)
            if parsed is None:
                self.display.log(line)
                continue
            kind, data = parsed
            if kind == "result":
                self.result = data
            elif data.get("event") == "resumed":
                self.display.message(f"resumed from checkpoint at epoch {data.get('epoch')}")
                self.on_event("resumed", data)
            else:
                v = self.view
                v.epoch = int(data.get("epoch", v.epoch))
                v.epochs = int(data.get("epochs", v.epochs))
                v.loss = data.get("loss", v.loss)
                v.accuracy = data.get("accuracy", v.accuracy)
                v.samples_per_s = data.get("samples_per_s", v.samples_per_s)
                self.on_event("epoch", data)

    def _check_budget(self, now: float) -> bool:
        if not self.max_cost:
            return False
        accrued = self.meter.accrued(now)
        if not self._warned and accrued >= 0.8 * self.max_cost:
            self._warned = True
            self.display.message(f"budget warning: ${accrued:.4f} of ${self.max_cost:g} spent (80 %)")
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

    def run(self) -> Outcome:
        while True:
            try:
                return self._loop()
            except KeyboardInterrupt:
                if self.confirm_cancel():
                    self.jobs.stop(self.submission_id)
                    self.on_event("cancel_requested", {"by": "Ctrl-C"})
                    return Outcome("STOPPED", "cancelled with Ctrl-C", run_seconds=self._run_seconds())

    def _loop(self) -> Outcome:
        from orchestrator.runs.ray_jobs import TERMINAL_RAY_STATUSES

        last_nodes = self.clock()
        last_status = None
        head_failures, unreachable_since = 0, 0.0
        while True:
            now = self.clock()
            self.view.accrued = self.meter.accrued(now)
            try:
                status = self.jobs.status(self.submission_id)
                head_failures = 0
            except Exception as e:
                status = None
                head_failures += 1
                if head_failures == 1:
                    unreachable_since = now
                if head_failures % HEAD_FAILURES_BEFORE_CHECK == 0:
                    gone = self._head_lost(e, now - unreachable_since)
                    if gone:
                        return Outcome("PREEMPTED", gone)
            if status and status != last_status:
                last_status = status
                self.on_event("ray_status", {"status": status})
                if status == "RUNNING":
                    self.view.phase = "running"
            self._consume_logs(final=status in TERMINAL_RAY_STATUSES)
            self.display.update(self.view)
            if status in TERMINAL_RAY_STATUSES:
                return Outcome(status, result=self.result, run_seconds=self._run_seconds())
            if self._check_budget(now):
                return Outcome("BUDGET_EXCEEDED", f"accrued ${self.meter.accrued(now):.4f} reached max ${self.max_cost:g}")
            if now - last_nodes >= self.node_poll_s:
                last_nodes = now
                why = self._preempted()
                if why:
                    return Outcome("PREEMPTED", why)
            self.sleep(self.poll_s)

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
            return f"{reason} for {unreachable_s:.0f}s while its instances run"
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
