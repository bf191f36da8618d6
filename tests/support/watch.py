"""One attempt's watch loop (orchestrator/runs/watch.py) driven in tests: a fake Jobs API playing a script
of statuses and logs, a fake clock that moves only when the API is polled, a recording display."""
from __future__ import annotations

from orchestrator.cli.render.display import JobView
from orchestrator.cost import CostMeter
from orchestrator.runs.watch import Watcher
from tests.support.fakes_runs import FakeClock, FakeJobs, RecordingDisplay


T0 = 1000.0


PRICE = 3.6  # $/h for all nodes: $0.001 a second


class Harness:
    def __init__(self, script, *, dt=10.0, max_cost=None, previous=0.0, node_states=None, node_poll_s=1e9,
                 cancel=True, log_path=None, jobs_cls=FakeJobs, on_status=None):
        self.clock = FakeClock(T0)
        self.jobs = jobs_cls("http://fake-head", script, self.clock, dt, on_status)
        self.display = RecordingDisplay(cancel=cancel)
        self.events: list[tuple[str, dict]] = []
        self.view = JobView(job_id="j-1", name="w", max_cost=max_cost)
        self.sleeps: list[float] = []
        self.watcher = Watcher(jobs=self.jobs, submission_id="sub-1", view=self.view, display=self.display,
                               meter=CostMeter(previous, PRICE, self.clock()), node_states=node_states,
                               on_event=lambda kind, detail: self.events.append((kind, detail)),
                               max_cost=max_cost, poll_s=0.5, node_poll_s=node_poll_s,
                               confirm_cancel=self.display.confirm_cancel, clock=self.clock,
                               sleep=self.sleeps.append, log_path=log_path)

    def run(self):
        return self.watcher.run()

    def of_kind(self, kind) -> list[dict]:
        return [d for k, d in self.events if k == kind]
