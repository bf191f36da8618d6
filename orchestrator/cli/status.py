"""`dlrun status`, `logs` and `cancel`: read the store (and the Ray head while the job lives)."""
from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from orchestrator.errors import UsageError
from orchestrator.monitoring.costs import accrued_cost
from orchestrator.state.db import Store, default_store
from orchestrator.state.records import EventRecord, JobRecord
from orchestrator.states import JobStatus

if TYPE_CHECKING:
    from orchestrator.runs.cancel import CancelResult


def _job(store: Store, job_id: str) -> JobRecord:
    job = store.get_job(job_id)
    if job is None:
        raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
    return job


TIME_FIELDS = ("created_at", "started_at", "ended_at")


def job_dict(store: Store, job: JobRecord) -> dict:
    """A job for --json: times in ISO 8601 (with the UTC offset), null where there is none, spot a boolean
    (null before the job was launched anywhere)."""
    from dataclasses import fields

    from orchestrator.cli.render.summary import iso_time

    d = {f.name: getattr(job, f.name) for f in fields(job) if f.name not in ("spec_json", "metrics")}
    d["status"] = job.status.value
    for k in TIME_FIELDS:
        d[k] = iso_time(d[k])
    d["spot"] = job.spot if job.backend else None
    d["accrued_cost"] = round(accrued_cost(store, job), 6)
    d["metrics"] = job.metrics or None
    return d


def event_dict(e: EventRecord) -> dict:
    from orchestrator.cli.render.summary import iso_time

    detail: str | dict | list | None = e.detail or None
    if detail and detail[:1] in "{[":
        try:
            detail = json.loads(detail)
        except ValueError:
            pass
    return {"ts": iso_time(e.ts), "kind": e.kind, "status": e.status, "detail": detail}


def show_jobs(limit: int = 20, as_json: bool = False) -> None:
    from orchestrator.cli.render.summary import job_backend_name, reported

    store = default_store()
    jobs = store.list_jobs(limit=limit)
    if as_json:
        click.echo(json.dumps([job_dict(store, j) for j in jobs], indent=2))
        return
    if not jobs:
        click.echo("no jobs yet: `dlrun plan JOB_FILE` says where a job would run and what it costs, "
                   "`dlrun submit JOB_FILE` runs it (examples: configs/examples/)")
        return
    from orchestrator.cli.render.summary import console

    now = time.time()
    rows = [(j.id, j.name, _colour(j.status), job_backend_name(store, j) if j.backend else "-", _money(j.est_cost),
             _money(accrued_cost(store, j, now)), _money(j.max_cost), _age(now - j.created_at),
             reported(j.metrics, skip=("epochs",)) or "-") for j in jobs]
    out = console()
    out.print(_jobs_table(rows, out.width))


def _jobs_table(rows: list[tuple], width: int):
    """The jobs at the terminal's width: the id (for `dlrun logs`), the status and the cost stay whole; name,
    backend and what the job reported are cut first, then max $, est $ and age are left out."""
    from orchestrator.cli.render.fit import Col, fit_table

    cols = [Col("job"), Col("name", free=True), Col("status"), Col("backend", free=True),
            Col("est.", right=True, spare=2), Col("cost", right=True), Col("max", right=True, spare=3),
            Col("age", spare=1), Col("reported", free=True)]
    return fit_table("dlrun jobs", cols, rows, width)[0]


def show_job(job_id: str, as_json: bool = False) -> None:
    from orchestrator.cli.render.summary import duration, job_backend_name, reported

    store = default_store()
    job = _job(store, job_id)
    events = store.events(job.id)
    if as_json:
        click.echo(json.dumps({**job_dict(store, job), "events": [event_dict(e) for e in events]}, indent=2))
        return
    fields = [("id", job.id), ("name", job.name), ("status", job.status),
              ("backend", job_backend_name(store, job) if job.backend else "-"),
              ("spot", "-" if not job.backend else "yes" if job.spot else "no"),
              ("ray submission", job.ray_submission_id or "-"), ("ray address", job.ray_address or "-"),
              ("est. cost", _money(job.est_cost, "$")), ("cost so far" if job.live else "cost",
                                                          _money(accrued_cost(store, job), "$")),
              ("max cost", _money(job.max_cost, "$")), ("ran", duration(job.actual_seconds)
                                                         if job.actual_seconds is not None else "-"),
              ("preemptions", job.preemptions), ("attempts", job.attempts),
              ("reported", reported(job.metrics) or "-")]
    error = _last_line(next((e.detail for e in reversed(events) if e.kind == "status"), "")) \
        if job.status in (JobStatus.FAILED, JobStatus.BUDGET_EXCEEDED, JobStatus.CANCELLED) else ""
    if error:  # why it ended, its last line (a traceback's error), right under its status
        fields.insert(3, ("why", error))
    for k, v in fields:
        click.echo(f"{k:>16}: {v}")
    click.echo(f"history (local time, {time.strftime('%Z %z')}):")
    for e in events:
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.ts))
        detail = event_dict(e)["detail"]
        if isinstance(detail, dict):
            detail = _words(detail)
        else:
            detail = _last_line(str(detail or ""))
        click.echo(f"  {ts}  {e.kind:<16} {e.status or ''} {detail or ''}".rstrip())


def _last_line(text: str) -> str:
    """The last non-empty line of a detail (a traceback's error), marked when lines came before it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return ("… " if len(lines) > 1 else "") + lines[-1] if lines else ""


def _words(detail: dict) -> str:
    """An event's fields as `name=value`, lists joined by commas, yes/no for flags (not JSON)."""
    from orchestrator.cli.render.summary import fmt_value

    def value(v) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, (list, tuple)) and any(isinstance(x, dict) for x in v):
            return str(len(v))  # records (a plan's candidates): their count; `dlrun ui` and --json have them
        if isinstance(v, (list, tuple)):
            return ",".join(value(x) for x in v) or "-"
        if isinstance(v, dict):
            return "{" + _words(v) + "}"
        return fmt_value(v) if isinstance(v, (int, float)) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in detail.items())


COLOUR = {JobStatus.SUCCEEDED: "green", JobStatus.FAILED: "red", JobStatus.BUDGET_EXCEEDED: "red",
          JobStatus.CANCELLED: "yellow"}


def _colour(status: JobStatus) -> str:
    return f"[{COLOUR.get(status, 'cyan')}]{status}[/]"


def _money(v, sign: str = "") -> str:
    """dlrun's one money format (orchestrator/cost.usd); `sign` is kept for the callers' sake."""
    from orchestrator.cost import usd

    return "-" if v is None else usd(v)


def _age(s: float) -> str:
    """dlrun's one duration format (12 s, 6 min, 3.2 h, 9 d), as the plan's."""
    from orchestrator.cli.render.plan_table import human_duration

    return f"{s:.0f} s" if s < 10 else human_duration(s)  # an age needs no tenths of a second


def render_log_line(line: str) -> str | None:
    """A log line as `dlrun logs` shows it: progress for the job's DLRUN_METRIC/RESULT lines, None for
    Ray's own messages (they stay in the file: --raw), the line itself otherwise."""
    from jobs.metrics import METRIC_PREFIX, RESULT_PREFIX, parse_line
    from orchestrator.cli.render.summary import reported
    from orchestrator.runs.watch import is_ray_line

    parsed = parse_line(line)
    if parsed is None:
        return None if is_ray_line(line) else line
    kind, data = parsed
    at = min(i for i in (line.find(METRIC_PREFIX), line.find(RESULT_PREFIX)) if i >= 0)
    prefix = line[:at]  # e.g. "(RayTrainWorker pid=42) "
    if kind == "result":
        return f"{prefix}result: {reported(data)}"
    if data.get("event") == "resumed":
        return f"{prefix}resumed from checkpoint at epoch {data.get('epoch')}"
    if "event" in data:
        return f"{prefix}{data['event']}: {reported(data, skip=('event',))}".rstrip(": ")
    epoch = f"epoch {data['epoch']}/{data['epochs']}" if "epoch" in data and "epochs" in data else \
        f"epoch {data['epoch']}" if "epoch" in data else "progress"
    return f"{prefix}{epoch}  {reported(data, skip=('epoch', 'epochs'))}".rstrip()


def print_logs(job_id: str, follow: bool = False, raw: bool = False, poll_s: float = 0.5) -> int:
    """Print the job's log (the copy dlrun keeps as the job runs), rendered; with follow, keep printing
    until the job ends, then say how it ended. Returns the exit code: with follow, the job's."""
    from orchestrator.cli.render.summary import result_line
    from orchestrator.monitoring.job_log import read_log
    from orchestrator.paths import job_log_path

    store = default_store()
    job = _job(store, job_id)
    for text in read_log(store, job.id, follow=follow, poll_s=poll_s):
        _write_log(text, raw)
    job = _job(store, job.id)  # as it is now the log is read (with follow: ended)
    if not follow:
        if job.live and not job_log_path(job.id).exists():
            click.echo(f"(job {job.id} is {job.status}; no output yet)", err=True)
        return 0
    click.echo(result_line(store, job.id), err=True)
    from orchestrator.states import exit_code_for

    return exit_code_for(job.status)


def _write_log(text: str, raw: bool) -> None:
    if raw:
        sys.stdout.write(text)
    else:
        from jobs.progress import terminal_lines

        for line in terminal_lines(text):  # a tqdm bar's \r updates: its latest state only
            shown = render_log_line(line)
            if shown is not None:
                sys.stdout.write(shown + "\n")
    sys.stdout.flush()


def cancel(job_id: str) -> str:
    """What `dlrun cancel` prints: how the cancel went, and a note when the Ray job could not be stopped."""
    from orchestrator.runs.cancel import cancel_job

    store = default_store()
    return cancel_text(cancel_job(store, _job(store, job_id)))


def cancel_text(result: CancelResult) -> str:
    from orchestrator.runs.cancel import CancelOutcome

    if result.outcome is CancelOutcome.ALREADY_ENDED:
        return f"{result.job_id} already ended ({result.status})"
    if result.outcome is CancelOutcome.LEFT_TO_SUPERVISOR:
        line = f"{result.job_id}: cancel requested; its supervisor stops the job and tears down the cluster"
    else:
        line = f"{result.job_id} cancelled"
    stop = result.ray_stop
    if stop is not None and not stop.stopped:
        line += f"\n  (Ray job {stop.submission_id} at {stop.address} not stopped: {stop.why_not})"
    return line
