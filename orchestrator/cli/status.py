"""`dlrun status`, `logs` and `cancel`: read the store (and the Ray head while the job lives)."""
from __future__ import annotations

import json
import sys
import time

import click

from orchestrator.cost import node_seconds_cost
from orchestrator.errors import UsageError
from orchestrator.state.db import LIVE, TERMINAL, Store, default_store


def _job(store: Store, job_id: str):
    row = store.get_job(job_id)
    if row is None:
        raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
    return row


def accrued_cost(store: Store, row, now: float | None = None) -> float:
    """Spent so far: finished attempts (recorded) + the live cluster's node-seconds × launch price."""
    now = now or time.time()
    spent = row["actual_cost"] or 0.0
    if row["status"] in LIVE:
        for c in store.job_clusters(row["id"]):
            if c["state"] != "terminated":
                spent += node_seconds_cost(c["price_per_hour"] * (c["num_nodes"] or 1), c["launched_at"], now)
    return spent


TIME_FIELDS = ("created_at", "started_at", "ended_at")


def job_dict(store: Store, row) -> dict:
    """A job for --json: times in ISO 8601 (with the UTC offset), null where there is none, spot a boolean."""
    from orchestrator.cli.render.summary import iso_time

    d = {k: row[k] for k in row.keys() if k not in ("spec_json", "metrics_json")}
    for k in TIME_FIELDS:
        d[k] = iso_time(row[k])
    d["spot"] = None if row["spot"] is None else bool(row["spot"])
    d["accrued_cost"] = round(accrued_cost(store, row), 6)
    d["metrics"] = json.loads(row["metrics_json"]) if row["metrics_json"] else None
    return d


def event_dict(e) -> dict:
    from orchestrator.cli.render.summary import iso_time

    detail = e["detail"] or None
    if detail and detail[:1] in "{[":
        try:
            detail = json.loads(detail)
        except ValueError:
            pass
    return {"ts": iso_time(e["ts"]), "kind": e["kind"], "status": e["status"], "detail": detail}


def show_jobs(limit: int = 20, as_json: bool = False) -> None:
    from orchestrator.cli.render.summary import job_backend_name, reported

    store = default_store()
    rows = store.list_jobs(limit=limit)
    if as_json:
        click.echo(json.dumps([job_dict(store, r) for r in rows], indent=2))
        return
    from rich.table import Table

    from orchestrator.cli.render.summary import console

    t = Table(title="dlrun jobs")
    for col in ("job", "name", "status", "backend", "est $", "cost $", "max $", "age", "reported"):
        t.add_column(col, justify="right" if col.endswith("$") else "left")
    now = time.time()
    for r in rows:
        m = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
        t.add_row(r["id"], r["name"], _colour(r["status"]), job_backend_name(store, r) if r["backend"] else "-",
                  _money(r["est_cost"]), _money(accrued_cost(store, r, now)), _money(r["max_cost"]),
                  _age(now - r["created_at"]), reported(m, skip=("epochs",)) or "-")
    console().print(t)


def show_job(job_id: str, as_json: bool = False) -> None:
    from orchestrator.cli.render.summary import duration, job_backend_name, reported

    store = default_store()
    row = _job(store, job_id)
    events = [event_dict(e) for e in store.events(row["id"])]
    if as_json:
        click.echo(json.dumps({**job_dict(store, row), "events": events}, indent=2))
        return
    metrics = json.loads(row["metrics_json"]) if row["metrics_json"] else {}
    fields = [("id", row["id"]), ("name", row["name"]), ("status", row["status"]),
              ("backend", job_backend_name(store, row) if row["backend"] else "-"),
              ("spot", "-" if row["spot"] is None else "yes" if row["spot"] else "no"),
              ("ray submission", row["ray_submission_id"] or "-"), ("ray address", row["ray_address"] or "-"),
              ("est. cost", _money(row["est_cost"], "$")), ("cost so far" if row["status"] in LIVE else "cost",
                                                             _money(accrued_cost(store, row), "$")),
              ("max cost", _money(row["max_cost"], "$")), ("ran", duration(row["actual_seconds"])
                                                            if row["actual_seconds"] is not None else "-"),
              ("preemptions", row["preemptions"]), ("attempts", row["attempts"]),
              ("reported", reported(metrics) or "-")]
    for k, v in fields:
        click.echo(f"{k:>16}: {v}")
    click.echo("history:")
    for e, raw in zip(events, store.events(row["id"])):
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(raw["ts"]))
        detail = e["detail"]
        if isinstance(detail, dict):
            detail = reported(detail) or json.dumps(detail)
        click.echo(f"  {ts}  {e['kind']:<16} {e['status'] or ''} {detail or ''}".rstrip())


def _colour(status: str) -> str:
    colour = {"SUCCEEDED": "green", "FAILED": "red", "BUDGET_EXCEEDED": "red", "CANCELLED": "yellow"}.get(status, "cyan")
    return f"[{colour}]{status}[/]"


def _money(v, sign: str = "") -> str:
    return "-" if v is None else f"{sign}{v:.4f}"


def _age(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


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
    from orchestrator.paths import job_log_path

    store = default_store()
    row = _job(store, job_id)
    saved = job_log_path(row["id"])
    offset, partial = 0, b""
    while True:
        ended = store.get_job(row["id"])["status"] in TERMINAL  # read before the file: nothing is missed
        if saved.exists():
            with open(saved, "rb") as f:  # only what was added since the last read
                f.seek(offset)
                data = f.read()
            offset += len(data)
            data, partial = partial + data, b""
            cut = len(data) if ended else data.rfind(b"\n") + 1
            data, partial = data[:cut], data[cut:]
            _write_log(data.decode(errors="replace"), raw)
        if ended or not follow:
            break
        time.sleep(poll_s)
    row = store.get_job(row["id"])
    if not follow:
        if row["status"] in LIVE and not saved.exists():
            click.echo(f"(job {row['id']} is {row['status']}; no output yet)", err=True)
        return 0
    click.echo(result_line(store, row["id"]), err=True)
    from orchestrator.runs.executor import EXIT_BY_STATUS

    return EXIT_BY_STATUS.get(row["status"], 1)


def _write_log(text: str, raw: bool) -> None:
    if not text:
        return
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
    store = default_store()
    row = _job(store, job_id)
    if row["status"] in TERMINAL:
        return f"{row['id']} already ended ({row['status']})"
    if row["ray_submission_id"] and row["ray_address"]:
        from orchestrator.runs.ray_jobs import RayJobs

        try:
            RayJobs(row["ray_address"]).stop(row["ray_submission_id"])
        except Exception:
            pass
    from orchestrator.runs.reconcile import process_alive

    if row["supervisor_pid"] and process_alive(row["supervisor_pid"]):
        return f"{row['id']}: cancel requested; its supervisor stops the job and tears down the cluster"
    from orchestrator.runs.teardown import terminate_recorded

    for c in store.job_clusters(row["id"]):
        if c["state"] != "terminated":
            terminate_recorded(store, c)
    store.set_status(row["id"], "CANCELLED", "dlrun cancel")
    return f"{row['id']} cancelled"
