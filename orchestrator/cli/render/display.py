"""The live view of a job: a rich panel on a terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.cli.render.summary import duration, fmt_value, reported
from orchestrator.cost import usd

ENDED_PHASES = ("succeeded", "failed", "cancelled", "budget_exceeded")


@dataclass
class JobView:
    job_id: str = ""
    name: str = ""
    phase: str = "planning"  # planning, provisioning, bootstrapping, running, recovering, tearing down, done
    backend: str = ""
    epoch: int = 0
    epochs: int = 0
    loss: float | None = None
    accuracy: float | None = None
    samples_per_s: float | None = None
    progress: float | None = None  # share of the run done, 0-1 (jobs.metrics `progress`, or read by jobs/tee.py)
    eta_s: float | None = None  # seconds left, as the job's output says
    accrued: float = 0.0
    max_cost: float | None = None
    started: float = field(default_factory=time.time)
    log_tail: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # the job's last reported values, by the names it used


def progress_text(view: JobView) -> str:
    """`epoch 3/30`, or `42 % epoch 2/5 ETA 31 s` when the share of the run is known."""
    epoch = f"epoch {view.epoch}/{view.epochs}" if view.epochs else f"epoch {view.epoch}" if view.epoch else ""
    if view.progress is None:
        return epoch
    eta = f" ETA {duration(view.eta_s)}" if view.eta_s is not None and view.progress < 1 else ""
    return f"{view.progress * 100:.0f} %{' ' + epoch if epoch else ''}{eta}"


class Display(Protocol):
    """What the run loop shows a job's progress on: PlainDisplay, RichDisplay (the tests' RecordingDisplay)."""

    def update(self, view: JobView) -> None:
        """The view changed (phase, progress, cost)."""
        ...

    def log(self, line: str) -> None:
        """A line of the job's own output."""
        ...

    def message(self, text: str) -> None:
        """A line of dlrun's about the run (a preemption, a failover)."""
        ...

    def confirm_cancel(self) -> bool:
        """Asked on Ctrl-C: whether to cancel the job (True) or go on watching."""
        ...


class PlainDisplay:
    """One line per change: for pipes, CI logs and the detached supervisor's log file."""

    def __init__(self, stream=None, quiet_logs: bool = False):
        self.stream = stream or sys.stderr
        self.quiet_logs = quiet_logs
        self._last_phase = None
        self._last_progress = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def update(self, view: JobView) -> None:
        elapsed = time.time() - view.started
        if view.phase != self._last_phase:
            self._last_phase = view.phase
            if view.phase not in ENDED_PHASES:  # how it ended is the result line's to say, once
                where = f" on {view.backend}" if view.backend else ""
                self._say(f"[dlrun] {view.job_id} {view.phase}{where} ({duration(elapsed)})")
        key = (view.epoch, None if view.progress is None else round(view.progress * 100))
        if key != self._last_progress and (view.epochs or view.progress is not None or view.epoch):
            self._last_progress = key
            cost = f" {usd(view.accrued)}" + (f" of {usd(view.max_cost)}" if view.max_cost else "")
            values = reported(view.metrics)
            self._say(f"[dlrun] {progress_text(view)}{' ' + values if values else ''}{cost} ({duration(elapsed)})")

    def log(self, line: str) -> None:
        if not self.quiet_logs:
            self._say(line)

    def message(self, text: str) -> None:
        self._say(f"[dlrun] {text}")

    def confirm_cancel(self) -> bool:
        """Ctrl-C: cancel the job? Without a terminal to ask, yes."""
        if not sys.stdin.isatty():
            return True
        try:
            answer = input("\n[dlrun] cancel the job? [Y/n] (n keeps watching) ")
        except (EOFError, KeyboardInterrupt):
            return True
        return answer.strip().lower() not in ("n", "no")

    def close(self) -> None:
        pass


class RichDisplay(PlainDisplay):
    """A live panel: phase, progress over epochs, elapsed, accrued vs max cost, the log's last lines."""

    def __init__(self, stream=None, tail: int = 8):
        super().__init__(stream)
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=self.stream)
        self.tail = tail
        self._closed = False
        self.view = JobView()
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def _render(self):
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        v = self.view
        grid = Table.grid(padding=(0, 2))
        elapsed = time.time() - v.started
        where = f" on {v.backend}" if v.backend else ""
        # what dlrun shows is text, never markup: a backend's or a metric's name with '[' in it stays as written
        grid.add_row("phase", Text.assemble((v.phase, "bold"), where), "elapsed", duration(elapsed))
        if v.progress is not None:
            bar = ProgressBar(total=1000, completed=round(v.progress * 1000), width=30)
            grid.add_row("progress", progress_text(v), "", bar)
        elif v.epochs:
            bar = ProgressBar(total=v.epochs, completed=v.epoch, width=30)
            grid.add_row("epoch", f"{v.epoch}/{v.epochs}", "", bar)
        elif v.epoch:
            grid.add_row("epoch", str(v.epoch), "", "")
        # the values the job reported, under its own names
        metrics = [f"{k} {fmt_value(x)}" for k, x in v.metrics.items() if isinstance(x, (int, float))]
        if metrics:
            grid.add_row("metrics", Text("  ".join(metrics)), "", "")
        budget = usd(v.accrued) + (f" of {usd(v.max_cost)}" if v.max_cost else "")
        grid.add_row("cost", budget, "", "")
        for line in v.log_tail[-self.tail:]:
            grid.add_row("", Text(line[:110], style="dim"), "", "")  # a log line is text, never markup
        return Panel(grid, title=Text(f"dlrun {v.name} {v.job_id}"), expand=False)

    def update(self, view: JobView) -> None:
        self.view = view
        self.live.update(self._render())

    def log(self, line: str) -> None:
        self.view.log_tail.append(line)
        del self.view.log_tail[:-self.tail]

    def message(self, text: str) -> None:
        self.live.console.print(f"[dlrun] {text}", markup=False, highlight=False)

    def confirm_cancel(self) -> bool:
        self.live.stop()
        try:
            return super().confirm_cancel()
        finally:
            self.live.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.live.update(self._render())
        self.live.stop()


@contextmanager
def profiling_notice(model: str, stream=None):
    """Says that the model is being profiled (seconds, once per workload): a spinner on a terminal,
    one line otherwise."""
    stream = stream or sys.stderr
    text = f"profiling {model} on this CPU… (once: the next plan reuses it)"
    if getattr(stream, "isatty", lambda: False)():
        from rich.console import Console

        with Console(file=stream).status(text, spinner="dots"):
            yield
    else:
        print(f"[dlrun] {text}", file=stream, flush=True)
        yield


def make_display(stream=None):
    stream = stream or sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        return RichDisplay(stream)
    return PlainDisplay(stream)
