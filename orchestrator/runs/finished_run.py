"""A run that already finished, submitted again: said before anything is planned, instead of a plan, a
cluster and a job that resumes from the last epoch and trains nothing.

The same run is the same run key (runs/entrypoint.run_key: the job, its workload, args, env, workdir and data);
it finished when the last job of that key SUCCEEDED having trained all its epochs (the `epochs` of the result
it reported: a built-in job's, or a user's script's report_result) and, for checkpoints on this machine, its
last epoch's checkpoint is still there (a bucket's is not asked: that would be a network call). A script
that reports no epochs is resumed as before. `--fresh` starts the run over; a scheduled run is always new.
"""
from __future__ import annotations

from orchestrator.planning.spec import JobSpec
from orchestrator.state.db import Store
from orchestrator.states import JobStatus


def finished_before(spec: JobSpec, store: Store) -> str | None:
    """The line that says this run already finished and what --fresh does; None when it did not."""
    from orchestrator.runs.entrypoint import checkpoint_location, run_key

    key = run_key(spec)
    same = [j for j in store.list_jobs(limit=100_000) if j.run_key == key]
    if not same:
        return None
    last = max(same, key=lambda j: j.created_at)
    epochs = last.metrics.get("epochs")
    location = last.metrics.get("checkpoint") or checkpoint_location(spec, key)  # a user's job: dlrun's location
    if last.status is not JobStatus.SUCCEEDED or not isinstance(epochs, int) or epochs < 1:
        return None
    if "://" not in str(location) and _last_epoch(str(location)) < epochs:
        return None  # its checkpoints were removed: a new submit trains from the start
    return (f"{spec.name}: this run already finished: job {last.id} trained its {epochs} epochs and its last "
            f"checkpoint is in {location}, so a new submit would resume there and train nothing; "
            "`dlrun submit --fresh` removes its checkpoints and trains it again (a changed job file is a new run)")


def _last_epoch(location: str) -> int:
    from jobs.checkpoint import CheckpointError, open_checkpoints

    try:
        found = open_checkpoints(location)
        return max(found.epochs(), default=0) if found is not None else 0
    except (CheckpointError, OSError):
        return 0
