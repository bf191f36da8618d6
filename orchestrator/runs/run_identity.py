"""Which training run a job continues: its run key is fixed when the job is recorded (a resumed
supervisor must find the same checkpoints even if the workdir changed since), and `--fresh` starts
the run over by removing the checkpoints at its location."""
from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.planning.spec import JobSpec
from orchestrator.runs.entrypoint import checkpoint_location, run_key
from orchestrator.state.db import Store

if TYPE_CHECKING:
    from orchestrator.planning.planner import Plan

RUN_EVENT = "run"


def record_run(store: Store, job_id: str, spec: JobSpec, *, schedule_id: str | None) -> str:
    """The job's run key (scheduled runs: their own job id, always fresh), stored with the job; the event
    says where its checkpoints are, for the job's history."""
    key = job_id if schedule_id is not None else run_key(spec)
    store.set_run_key(job_id, key)
    store.add_event(job_id, RUN_EVENT, {"run_key": key, "checkpoint": checkpoint_location(spec, key)})
    return key


def recorded_run_key(store: Store, job_id: str, spec: JobSpec, schedule_id: str | None) -> str:
    job = store.get_job(job_id)
    if job is not None and job.run_key:
        return job.run_key
    return job_id if schedule_id is not None else run_key(spec)  # a job recorded before run keys


def start_fresh(spec: JobSpec, plan: Plan | None = None) -> list[int]:
    """Remove every checkpoint of the spec's run, in its location and in dlrun's buckets the plan's cloud
    candidates would use (the epochs removed, oldest first); an unusable location is the user's to fix
    (exit 2), before anything is recorded or started."""
    from jobs.checkpoint import CheckpointError, open_checkpoints
    from orchestrator.errors import SpecError
    from orchestrator.runs.fresh_buckets import clear_run_buckets

    key = run_key(spec)
    try:
        store = open_checkpoints(checkpoint_location(spec, key))
        removed = store.clear() if store else []
    except CheckpointError as e:
        raise SpecError(f"--fresh: {e}") from None
    return sorted(set(removed) | set(clear_run_buckets(spec, key, plan)))
