"""What the store hands out: frozen records built from rows at the store boundary (stdlib only).

One field per column. A NULL becomes the natural empty value where every reader would otherwise write
`or 0` (costs, counters, metrics, flags); it stays None where "not known" means something (estimates,
times, the backend of a job not launched yet).
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, TypeVar

from orchestrator.states import JobStatus

__all__ = ["ClusterRecord", "EventRecord", "JobRecord", "ScheduleRecord", "ScheduleRunRecord"]


def _json_dict(text: str | None) -> dict:
    """A JSON object stored as text; {} for NULL, for text that is not JSON, or for JSON that is not an object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


R = TypeVar("R", bound="_Record")


class _Record:
    """Shared by the records: built from a row at the store boundary."""

    _convert: ClassVar[dict[str, Any]] = {}  # field -> how its column value becomes the field's

    @classmethod
    def from_row(cls: type[R], row: sqlite3.Row | Mapping[str, Any]) -> R:
        raw = dict(zip(row.keys(), tuple(row), strict=True)) if isinstance(row, sqlite3.Row) else dict(row)
        columns = {**raw, **cls._derived(raw)}
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name.startswith("_"):
                continue
            convert = cls._convert.get(f.name)
            value = columns.get(f.name)
            values[f.name] = convert(value) if convert else value
        return cls(**values)

    @classmethod
    def _derived(cls, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Fields not stored under their own name (e.g. a parsed JSON column)."""
        return {}


def _float0(v) -> float:
    return float(v) if v is not None else 0.0


def _int0(v) -> int:
    return int(v) if v is not None else 0


@dataclass(frozen=True)
class JobRecord(_Record):
    id: str
    name: str
    spec_hash: str
    spec_json: str
    status: JobStatus
    backend: str | None
    offer_key: str | None
    instance_type: str | None
    accelerator: str | None
    accelerator_count: int | None
    spot: bool
    price_per_hour: float | None
    price_date: str | None
    cluster_id: str | None
    ray_address: str | None
    ray_submission_id: str | None
    schedule_id: str | None
    est_seconds: float | None
    est_cost: float | None
    est_run_seconds: float | None
    est_start_seconds: float | None  # the start-up share of est_run_seconds (the estimator's own term)
    max_cost: float | None
    actual_seconds: float | None
    actual_cost: float  # what the finished attempts cost (0.0 before any)
    actual_run_seconds: float | None
    preemptions: int
    attempts: int
    model_family: str | None
    metrics: dict  # the last metrics (or the result) the job reported; {} before any
    message: str | None
    supervisor_pid: int | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    run_key: str | None = None  # which training run (checkpoints) the job continues; None: recorded before

    _convert: ClassVar[dict[str, Any]] = {"status": JobStatus, "spot": bool, "actual_cost": _float0,
                                          "preemptions": _int0, "attempts": _int0}

    @classmethod
    def _derived(cls, raw):
        return {"metrics": _json_dict(raw.get("metrics_json"))}

    @property
    def live(self) -> bool:
        return not self.status.terminal


@dataclass(frozen=True)
class ClusterRecord(_Record):
    id: str
    job_id: str | None
    provider: str
    region: str | None
    zone: str | None
    instance_type: str | None
    spot: bool
    price_per_hour: float  # per node, at launch: never rewritten
    num_nodes: int
    state: str  # launching | up | terminated
    launched_at: float
    terminated_at: float | None
    cluster_json: str | None  # infra.base.Cluster.to_dict() as JSON, once the launch returned

    _convert: ClassVar[dict[str, Any]] = {"spot": bool, "price_per_hour": _float0,
                                          "num_nodes": lambda v: int(v) if v is not None else 1}

    @property
    def terminated(self) -> bool:
        return self.state == "terminated"


@dataclass(frozen=True)
class EventRecord(_Record):
    id: int
    job_id: str
    ts: float
    kind: str
    status: str | None
    detail: str

    _convert: ClassVar[dict[str, Any]] = {"detail": lambda v: v or ""}

    @property
    def data(self) -> dict:
        """The detail's JSON object; {} when there is none or it is plain text."""
        return _json_dict(self.detail)


@dataclass(frozen=True)
class ScheduleRecord(_Record):
    id: str
    name: str
    cron: str
    tz: str
    job_path: str
    job_yaml: str
    job_hash: str
    follow_file: bool
    max_cost: float | None
    monthly_cap: float | None
    paused: bool
    created_at: float
    last_fired_at: float | None
    next_run_at: float | None
    overrides_json: str | None = None  # the flags it was added with (planning/overrides.py Overrides.to_json)

    _convert: ClassVar[dict[str, Any]] = {"follow_file": bool, "paused": bool}


@dataclass(frozen=True)
class ScheduleRunRecord(_Record):
    id: int
    schedule_id: str
    due_at: float
    fired_at: float
    job_id: str | None
    outcome: str  # see orchestrator/state/schedules.py
    detail: str

    _convert: ClassVar[dict[str, Any]] = {"detail": lambda v: v or ""}
