"""Which training run a job continues: its run key is fixed when the job is recorded (a resumed
supervisor must find the same checkpoints even if the workdir changed since), and `--fresh` starts
the run over by removing the checkpoints at its location."""
from __future__ import annotations

import json

from orchestrator.runs.entrypoint import checkpoint_location, run_key

RUN_EVENT = "run"


def record_run(store, job_id: str, spec, *, schedule_id: str | None) -> str:
    """The job's run key (scheduled runs: their own job id, always fresh), stored with the job."""
    key = job_id if schedule_id is not None else run_key(spec)
    store.add_event(job_id, RUN_EVENT, {"run_key": key, "checkpoint": checkpoint_location(spec, key)})
    return key


def recorded_run_key(store, job_id: str, spec, schedule_id: str | None) -> str:
    for e in store.events(job_id):
        if e["kind"] == RUN_EVENT:
            try:
                return json.loads(e["detail"])["run_key"]
            except (ValueError, KeyError, TypeError):
                break
    return job_id if schedule_id is not None else run_key(spec)  # a job recorded before run events


def start_fresh(spec, plan=None) -> list[int]:
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
