"""`python -m jobs.<name>`: parse the flags, train in this process or across Ray Train workers,
print the DLRUN_RESULT line."""
from __future__ import annotations

import sys

from jobs.checkpoint import CheckpointError
from jobs.metrics import report_result
from jobs.train import Job, JobConfigError, parse_args, train


def run_job(job: Job, argv: list[str] | None = None) -> dict:
    """Train, print DLRUN_RESULT, return the result."""
    cfg = parse_args(job, argv)
    try:
        if cfg.num_workers > 1:
            from jobs.ray_train import train_with_ray

            result = train_with_ray(job, cfg)
        else:
            result = train(job, cfg)
    except (CheckpointError, JobConfigError) as e:
        print(f"{job.name}: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    report_result(**result)
    return result
