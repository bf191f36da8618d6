"""The job lifecycle: plan -> launch -> submit -> watch -> teardown, with failover and recovery.

    submit(spec)        plan once (errors surface before anything starts), record the job, then
                        run execute() here (foreground) or in a detached supervisor process.
    execute(job_id)     the run loop (run_loop.RunLoop): launch the chosen candidate, run the job on its
                        Ray head, watch it; on a provider error block what failed and re-plan; on a
                        preemption block the pool and relaunch (the job resumes from its checkpoint);
                        every cluster is terminated when its attempt ends (on_cluster.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Callable

from orchestrator.cli.render.display import Display, JobView, PlainDisplay
from orchestrator.errors import CloudUnreachableError
from orchestrator.paths import node_poll_s as node_poll_default
from orchestrator.planning.planner import Plan, restrict  # noqa: F401  (restrict: the CLI's)
from orchestrator.planning.spec import JobSpec
from orchestrator.runs.attempt import reattach
from orchestrator.runs.context import AttemptContext, GetProvider, job_record
from orchestrator.runs.entrypoint import checkpoint_location
from orchestrator.runs.plans import (BudgetExhaustedError, make_plan, plan_for_submit,  # noqa: F401  (one home)
                                     require_choice)
from orchestrator.runs.run_identity import record_run, recorded_run_key, start_fresh
from orchestrator.runs.run_loop import RunLoop, SubmitResult
from orchestrator.runs.sigterm import Terminated
from orchestrator.state.db import Store, default_store
from orchestrator.states import JobStatus

if TYPE_CHECKING:
    from orchestrator.runs.ray_jobs import JobsClient

def submit(spec: JobSpec, *, backend: str | None = None, detach: bool = False, schedule_id: str | None = None,
           store: Store | None = None, display: Display | None = None, plan: Plan | None = None,
           fresh: bool = False) -> SubmitResult:
    store = store or default_store()
    plan = plan or plan_for_submit(spec, backend, store=store)
    spec = restrict(spec, backend)
    require_choice(plan, spec)
    removed = start_fresh(spec, plan) if fresh and schedule_id is None else None
    job_id = record_job(spec, plan, store=store, schedule_id=schedule_id)
    if removed is not None:
        store.add_event(job_id, "fresh", {"removed_epochs": removed})
        if removed and display is not None:
            display.message(f"--fresh: removed the checkpoints of epochs {', '.join(map(str, removed))}")
    if detach:
        pid = spawn_supervisor(job_id)
        store.set_supervisor(job_id, pid)
        return SubmitResult(job_id, JobStatus.PENDING, 0)
    return execute(job_id, store=store, display=display, first_plan=plan)


def _model_family(plan: Plan, spec: JobSpec) -> str:
    """The family the estimator keys its corrections by (the profile's), so that finished runs apply."""
    from orchestrator.estimate.profile import WorkloadProfile

    family = plan.profile.model_family if isinstance(plan.profile, WorkloadProfile) else None
    if family and family != "unknown":
        return family
    return spec.workload.label if spec.workload else (spec.job or "custom")


def record_job(spec: JobSpec, plan: Plan, *, store: Store | None = None, schedule_id: str | None = None) -> str:
    """The job's row and its plan in the store (nothing started yet); exits 3 when nothing fits."""
    store = store or default_store()
    chosen = require_choice(plan, spec)
    est = chosen.estimate
    job_id = store.create_job(name=spec.name, spec_hash=spec.spec_hash(), spec_json=spec.model_dump_json(),
                              schedule_id=schedule_id, max_cost=spec.budget.max_cost, est_cost=est.cost,
                              est_seconds=est.hours * 3600, est_run_seconds=est.run_seconds,
                              est_start_seconds=est.start_seconds,
                              model_family=_model_family(plan, spec),
                              supervisor_pid=os.getpid())  # until a supervisor takes over
    store.add_event(job_id, "plan", {"chosen": chosen.offer.label, "spot": chosen.spot,
                                     "est_hours": est.hours, "est_cost": est.cost,
                                     "est_start_seconds": est.start_seconds,
                                     "unusable": sorted(plan.unusable),  # no credentials: out of re-plans too
                                     "candidates": candidate_points(plan)})  # what `dlrun ui` draws
    record_run(store, job_id, spec, schedule_id=schedule_id)
    return job_id


PLAN_POINTS_MAX = 400  # candidates kept with a job's plan (ranked: the feasible ones first)


def candidate_points(plan: Plan) -> list[dict]:
    """Every candidate as the job's page draws it: hours against dollars, chosen or why it was left out."""
    import math

    points = []
    for c in plan.ranked[:PLAN_POINTS_MAX]:
        hours, cost = c.estimate.hours, c.estimate.cost
        if not (math.isfinite(hours) and math.isfinite(cost)):
            continue
        points.append({"offer": c.offer.label + (" spot" if c.spot else ""), "backend": c.backend,
                       "hours": round(hours, 5), "cost": round(cost, 5), "feasible": c.feasible,
                       "chosen": c.chosen, "why": c.reason})
    return points


def spawn_supervisor(job_id: str, resume: bool = False) -> int:
    """A small process that outlives the terminal and runs execute(job_id) (restartable: --resume)."""
    from orchestrator.state.db import dlrun_home

    log = open(dlrun_home() / f"supervisor-{job_id}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.runs.supervisor", job_id,
                             *(["--resume"] if resume else [])], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    return proc.pid


def execute(job_id: str, *, store: Store | None = None, display: Display | None = None,
            first_plan: Plan | None = None, poll_s: float = 0.5, node_poll_s: float | None = None,
            clock: Callable[[], float] = time.time, resume: bool = False, get_provider: GetProvider | None = None,
            jobs_client: Callable[[str], JobsClient] | None = None) -> SubmitResult:
    """Run job_id to its end. resume=True first re-attaches to the attempt a dead supervisor left.

    get_provider (name -> backend) and jobs_client (address -> Jobs API client) default to the real ones.
    """
    if get_provider is None:
        from infra import get_provider

    store = store or default_store()
    job = job_record(store, job_id)
    spec = JobSpec.model_validate_json(job.spec_json)
    store.set_supervisor(job_id, os.getpid())
    display = display or PlainDisplay()
    view = JobView(job_id=job_id, name=spec.name, max_cost=spec.budget.max_cost)
    key = recorded_run_key(store, job_id, spec, job.schedule_id)
    ctx = AttemptContext(job_id=job_id, spec=spec, store=store, display=display, view=view,
                         checkpoint=checkpoint_location(spec, key), poll_s=poll_s,
                         node_poll_s=node_poll_s if node_poll_s is not None else node_poll_default(),
                         clock=clock, jobs_client=jobs_client, run_key=key,
                         cloud_checkpoints=store.checkpoint_locations(job_id))
    loop = RunLoop(ctx, get_provider, first_plan=first_plan, preemptions=job.preemptions)
    try:
        return loop.run(reattach(ctx, get_provider) if resume else None)
    except KeyboardInterrupt as e:  # the time spent is kept (the attempt recorded the cost when it tore down)
        why = "interrupted by SIGTERM" if isinstance(e, Terminated) else "interrupted with Ctrl-C"
        store.cancel(job_id, why, actual_seconds=time.time() - job.created_at)
        raise
    except CloudUnreachableError:  # the job and its live cluster stay as they are (attempt.ask_cloud)
        raise
    except Exception as e:  # recorded while the job is live (store.fail): one that had ended keeps its status
        store.fail(job_id, JobStatus.BUDGET_EXCEEDED if isinstance(e, BudgetExhaustedError) else JobStatus.FAILED,
                   str(e)[:500])
        raise
