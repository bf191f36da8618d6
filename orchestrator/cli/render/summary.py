"""A job in words: its backend as a person names it, the one line that says how it ended, and the
values the job reported under the names it used."""
from __future__ import annotations

import json

from orchestrator.cli.render.plan_table import human_duration
from orchestrator.cost import usd
from orchestrator.states import JobStatus

ENDED_PHRASE = {JobStatus.SUCCEEDED: "in"}  # every other end: "after"


def console():
    """A rich Console for tables: the terminal's width, or room for a whole row when piped/captured."""
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=200)


def backend_name(cloud: str, region: str | None, instance_type: str | None, accelerator: str | None,
                 count: int | None = 1, spot: bool = False) -> str:
    """`local CPU`, `local 2×A100`, `aws us-east-1 g4dn.xlarge T4 spot` (one rule: infra.catalog's)."""
    from infra.catalog import backend_name as name

    return name(cloud, region, instance_type, accelerator, count, spot)


def offer_name(offer, spot: bool = False) -> str:
    return offer.label + (" spot" if spot else "")


def job_backend_name(store, job) -> str:
    if not job.backend:
        return "no backend yet"
    cluster = store.get_cluster(job.cluster_id) if job.cluster_id else None
    return backend_name(job.backend, cluster.region if cluster else None, job.instance_type,
                        job.accelerator, job.accelerator_count, job.spot)


def fmt_value(v) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return json.dumps(v) if not isinstance(v, str) else v
    if isinstance(v, int):
        return str(v)
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def reported(values: dict, skip: tuple[str, ...] = ()) -> str:
    """`accuracy=0.9722 loss=0.0911`: the numbers the job reported, under its own names, in its order."""
    return " ".join(f"{k}={fmt_value(v)}" for k, v in values.items()
                    if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool))


def duration(seconds: float | None) -> str:
    """dlrun's one duration format (render/plan_table.human_duration); "?" when unknown."""
    return "?" if seconds is None else human_duration(seconds)


def iso_time(ts: float | None) -> str | None:
    """ISO 8601 in this machine's zone with its UTC offset (2026-11-24T02:00:00+01:00); None for None."""
    if ts is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _last_status_detail(store, job_id: str) -> str:
    """Why the job has its current status (the detail of its last status change)."""
    changes = [e for e in store.events(job_id) if e.kind == "status"]
    return changes[-1].detail if changes else ""


def teardown_note(store, job) -> str:
    """What was stopped and torn down for an ended job, and whether anything is left running."""
    from infra import capabilities

    said = []
    if job.ray_submission_id:
        said.append(f"Ray job {job.ray_submission_id} stopped")
    left = []
    for c in store.job_clusters(job.id):
        remote = capabilities(c.provider).remote
        if c.terminated:
            if remote:
                said.append(f"cluster {c.id} terminated")
        elif remote:
            left.append(f"cluster {c.id} is still {c.state} (`dlrun down {c.id}` removes it)")
    if left:
        return "; ".join(said + left)
    here = bool(job.backend) and not capabilities(job.backend).remote  # a head on this machine, kept
    tail = "nothing is left running" + (" (the local Ray head stays up for its dashboard; `dlrun down` "
                                        "stops it)" if here else "")
    return "; ".join(said + [tail])


def result_line(store, job_id: str) -> str:
    """`j-… SUCCEEDED on local CPU in 14 s, $0.0000: accuracy=0.9722 loss=0.0911` (what the job reported,
    by its names); for a cancelled job, why and what was stopped and torn down."""
    job = store.get_job(job_id)
    status = job.status
    line = (f"{job.id} {status} on {job_backend_name(store, job)} {ENDED_PHRASE.get(status, 'after')} "
            f"{duration(job.actual_seconds)}, {usd(job.actual_cost)}")
    if status is JobStatus.SUCCEEDED and job.metrics:
        return f"{line}: {reported(job.metrics)}"
    why = _last_status_detail(store, job.id) if status is not JobStatus.SUCCEEDED else ""
    line += f" ({why})" if why else ""
    if status in (JobStatus.CANCELLED, JobStatus.BUDGET_EXCEEDED):
        return f"{line}: {teardown_note(store, job)}"
    return line
