"""The job lifecycle: plan -> launch -> submit -> watch -> teardown, with failover and recovery.

    submit(spec)        plan once (errors surface before anything starts), record the job, then
                        run execute() here (foreground) or in a detached supervisor process.
    execute(job_id)     the loop: pick the chosen candidate, launch it, run the job on its Ray
                        head, watch it; on a provider error block what failed and re-plan; on a
                        preemption block the zone and relaunch (the job resumes from its checkpoint);
                        the cluster is always terminated in `finally`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from orchestrator.cli.render.display import JobView, PlainDisplay
from orchestrator.runs.entrypoint import checkpoint_location
from orchestrator.runs.run_identity import record_run, recorded_run_key, start_fresh
from orchestrator.errors import (EXIT_TERMINATED, CloudCredentialsError, CloudUnreachableError, JobFailedError,
                                 NothingFitsError, ProvisioningFailedError)
from orchestrator.paths import node_poll_s as node_poll_default
from orchestrator.planning.planner import restrict, spot_block_key
from orchestrator.planning.spec import JobSpec
from orchestrator.state.db import LIVE, Store, default_store
from orchestrator.runs.failures import Failures, preflight
from orchestrator.runs.attempt import AttemptContext, reattach, run_attempt
from orchestrator.runs import sigterm
from orchestrator.runs.sigterm import Terminated
from orchestrator.runs.watch import Outcome

EXIT_BY_STATUS = {"SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 130, "BUDGET_EXCEEDED": 1}


@dataclass
class SubmitResult:
    job_id: str
    status: str
    exit_code: int = 0
    result: dict = field(default_factory=dict)


def make_plan(spec: JobSpec, blocked: frozenset[str] = frozenset(), store: Store | None = None):
    from orchestrator.planning.planner import plan_job

    return plan_job(spec, blocked=blocked, store=store)


def _require_choice(plan, spec: JobSpec) -> None:
    if plan.chosen is None:
        if getattr(plan, "quota_raise", None):  # the account's quotas, not the budget: say which to raise
            raise NothingFitsError(f"{spec.name}: {plan.nothing_fits_message()}", plan=plan)
        cheapest = getattr(plan, "cheapest_feasible_cost_ignoring_budget", None)
        hint = f"; the cheapest that would work costs ${cheapest:.2f} (raise --max-cost)" if cheapest else \
            "; relax the deadline, accelerators or clouds"
        raise NothingFitsError(f"{spec.name}: no backend fits the budget/deadline{hint}", plan=plan)


def submit(spec: JobSpec, *, backend: str | None = None, detach: bool = False, schedule_id: str | None = None,
           store: Store | None = None, display=None, plan=None, fresh: bool = False) -> SubmitResult:
    store = store or default_store()
    spec = restrict(spec, backend)
    plan = plan or make_plan(spec, store=store)
    _require_choice(plan, spec)
    removed = start_fresh(spec, plan) if fresh and schedule_id is None else None
    job_id = record_job(spec, plan, store=store, schedule_id=schedule_id)
    if removed is not None:
        store.add_event(job_id, "fresh", {"removed_epochs": removed})
        if removed and display is not None:
            display.message(f"--fresh: removed the checkpoints of epochs {', '.join(map(str, removed))}")
    if detach:
        pid = spawn_supervisor(job_id)
        store.update_job(job_id, supervisor_pid=pid)
        return SubmitResult(job_id, "PENDING", 0)
    return execute(job_id, store=store, display=display, first_plan=plan)


def _model_family(plan, spec: JobSpec) -> str:
    """The family the estimator keys its corrections by (the profile's), so that finished runs apply."""
    family = getattr(getattr(plan, "profile", None), "model_family", None)
    if family and family != "unknown":
        return family
    return spec.workload.label if spec.workload else (spec.job or "custom")


def record_job(spec: JobSpec, plan, *, store: Store | None = None, schedule_id: str | None = None) -> str:
    """The job's row and its plan in the store (nothing started yet); exits 3 when nothing fits."""
    store = store or default_store()
    _require_choice(plan, spec)
    est = plan.chosen.estimate
    job_id = store.create_job(name=spec.name, spec_hash=spec.spec_hash(), spec_json=spec.model_dump_json(),
                              schedule_id=schedule_id, max_cost=spec.budget.max_cost, est_cost=est.cost,
                              est_seconds=est.hours * 3600, est_run_seconds=getattr(est, "run_seconds", None),
                              model_family=_model_family(plan, spec),
                              supervisor_pid=os.getpid())  # until a supervisor takes over
    store.add_event(job_id, "plan", {"chosen": plan.chosen.offer.label, "spot": plan.chosen.spot,
                                     "est_hours": est.hours, "est_cost": est.cost,
                                     "est_start_seconds": getattr(est, "start_seconds", None)})
    record_run(store, job_id, spec, schedule_id=schedule_id)
    return job_id


def spawn_supervisor(job_id: str, resume: bool = False) -> int:
    """A small process that outlives the terminal and runs execute(job_id) (restartable: --resume)."""
    from orchestrator.state.db import dlrun_home

    log = open(dlrun_home() / f"supervisor-{job_id}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.runs.supervisor", job_id,
                             *(["--resume"] if resume else [])], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    return proc.pid


def _block_key(offer, scope: str, cloud_error_region: str = "", quota=None) -> str:
    if scope == "quota" and quota is not None:
        return quota.key()
    if scope == "cloud":
        return offer.cloud
    if scope == "region":
        return f"{offer.cloud}/{cloud_error_region or offer.region}"
    return offer.key


def execute(job_id: str, *, store: Store | None = None, display=None, first_plan=None, poll_s: float = 0.5,
            node_poll_s: float | None = None, clock=time.time, resume: bool = False,
            get_provider=None, jobs_client=None) -> SubmitResult:
    """Run job_id to its end. resume=True first re-attaches to the attempt a dead supervisor left.

    get_provider (name -> backend) and jobs_client (address -> Jobs API client) default to the real ones.
    """
    if get_provider is None:
        from infra import get_provider
    from infra.base import ProviderError

    store = store or default_store()
    row = store.get_job(job_id)
    spec = JobSpec.model_validate_json(row["spec_json"])
    store.update_job(job_id, supervisor_pid=os.getpid())
    display = display or PlainDisplay()
    view = JobView(job_id=job_id, name=spec.name, max_cost=spec.budget.max_cost)
    key = recorded_run_key(store, job_id, spec, row["schedule_id"])
    ctx = AttemptContext(job_id=job_id, spec=spec, store=store, display=display, view=view,
                         checkpoint=checkpoint_location(spec, key), poll_s=poll_s,
                         node_poll_s=node_poll_s if node_poll_s is not None else node_poll_default(),
                         clock=clock, jobs_client=jobs_client, run_key=key,
                         cloud_checkpoints=_used_checkpoints(store, job_id))
    blocked: set[str] = set()
    tried = Failures()
    checked: set[str] = set()
    preemptions = row["preemptions"] or 0
    restarts = 0
    plan = first_plan
    cand = None
    skipped = None  # a cloud the preflight ruled out
    try:
        outcome = reattach(ctx, get_provider) if resume else None
        while True:
            if outcome is None:
                if plan is None:
                    store.set_status(job_id, "PLANNING")
                    view.phase = "planning"
                    display.update(view)
                    on_demand = preemptions >= spec.max_preemptions
                    plan = make_plan(_recovery_spec(spec, on_demand, store, job_id), frozenset(blocked), store)
                    try:
                        plan = _fit_remaining_budget(plan, spec, store, job_id)
                    except BudgetExhaustedError as e:
                        if tried and remaining_fraction(store, job_id) >= 1.0:  # no work done: say why
                            raise ProvisioningFailedError(
                                tried.summary(f"provisioning failed everywhere it fits ({e.message})")) from None
                        raise
                if plan.chosen is None:
                    if tried:
                        err = CloudCredentialsError if tried.only_credentials else ProvisioningFailedError
                        raise err(tried.summary("provisioning failed everywhere"))
                    _require_choice(plan, spec)
                cand, plan = plan.chosen, None
                if skipped:  # said only when the run goes on elsewhere; else the final error says it once
                    display.message(skipped)
                    skipped = None
                if cand.offer.cloud not in checked:  # once per cloud, before anything is provisioned there
                    checked.add(cand.offer.cloud)
                    error = preflight(cand.offer.cloud, get_provider)
                    if error is not None:
                        blocked.add(cand.offer.cloud)
                        tried.add(cand.offer.cloud, error)
                        skipped = f"{cand.offer.cloud} skipped: {error.message}"
                        store.add_event(job_id, "preflight_failed", {"cloud": cand.offer.cloud, "error": error.message})
                        continue
                outcome = run_attempt(ctx, cand, get_provider)
            if isinstance(outcome, ProviderError):
                scope = outcome.scope
                blocked.add(_block_key(cand.offer, scope, outcome.region, getattr(outcome, "quota", None)))
                tried.add(f"{cand.offer.label}{' spot' if cand.spot else ''}", outcome)
                display.message(f"{cand.offer.label}: {outcome.message} — trying the next candidate")
                store.add_event(job_id, "provision_failed", {"offer": cand.offer.key, "error": outcome.message})
            elif outcome.kind in ("PREEMPTED", "RELAUNCH"):
                if outcome.kind == "PREEMPTED":
                    preemptions += 1
                    store.update_job(job_id, preemptions=preemptions)
                    display.message(f"preempted ({outcome.detail}); recovering from the last checkpoint")
                    lost = _lost_pool(cand) if cand is not None else _reattached_pool(store, job_id)
                    if lost:  # block that spot pool, or the region of an on-demand loss
                        blocked.add(lost)
                store.set_status(job_id, "RECOVERING", outcome.detail)
            elif outcome.kind == "FAILED" and restarts < spec.max_restarts_on_errors:
                restarts += 1  # a user-code failure is not a preemption: retried only this often
                store.add_event(job_id, "restart_on_error", {"restart": restarts, "detail": outcome.detail})
                display.message(f"the job failed; restart {restarts} of {spec.max_restarts_on_errors}")
            else:
                return _finish(job_id, spec, outcome, store, display, view)
            outcome = None
    except KeyboardInterrupt as e:  # the time spent is kept (the attempt recorded the cost when it tore down)
        why = "interrupted by SIGTERM" if isinstance(e, Terminated) else "interrupted with Ctrl-C"
        store.set_status(job_id, "CANCELLED", why, actual_seconds=time.time() - row["created_at"])
        raise
    except CloudUnreachableError:  # the job and its live cluster stay as they are (attempt.ask_cloud)
        raise
    except Exception as e:
        current = store.get_job(job_id)["status"]
        if current in LIVE:
            status = "BUDGET_EXCEEDED" if isinstance(e, BudgetExhaustedError) else "FAILED"
            store.set_status(job_id, status, str(e)[:500], message=str(e)[:500])
        raise


def _lost_pool(cand) -> str:
    return spot_block_key(cand.offer) if cand.spot else f"{cand.offer.cloud}/{cand.offer.region}"


def _reattached_pool(store: Store, job_id: str) -> str | None:
    """The pool of the attempt a restarted supervisor picked up (it has no candidate of its own)."""
    row = store.get_job(job_id)
    crow = store.get_cluster(row["cluster_id"]) if row["cluster_id"] else None
    if crow is None or not row["offer_key"]:
        return None
    cloud, region = row["offer_key"].split("/")[:2]
    return f"spot:{row['offer_key']}" if crow["spot"] else f"{cloud}/{region}"


def _used_checkpoints(store: Store, job_id: str) -> dict:
    """cloud -> the bucket location earlier attempts there used (a restarted supervisor keeps them)."""
    used = {}
    for ev in store.events(job_id):
        if ev["kind"] == "checkpoint":
            loc = json.loads(ev["detail"]).get("location", "")
            cloud = {"s3": "aws", "gs": "gcp"}.get(loc.split("://", 1)[0]) if "://" in loc else None
            if cloud:
                used.setdefault(cloud, loc)
    return used


class BudgetExhaustedError(NothingFitsError):
    """Recovery would need more than what is left of max_cost."""


def _recovery_spec(spec: JobSpec, on_demand: bool, store: Store, job_id: str) -> JobSpec:
    """After a first attempt: the budget is checked against the remaining work (_fit_remaining_budget),
    and after max_preemptions only on-demand offers are considered."""
    updates = {}
    if on_demand:
        updates["resources"] = spec.resources.model_copy(update={"spot": "never"})
    if store.get_job(job_id)["attempts"]:
        updates["budget"] = spec.budget.model_copy(update={"max_cost": None})
    return spec.model_copy(update=updates) if updates else spec


def remaining_fraction(store: Store, job_id: str) -> float:
    """The share of the epochs still to train, from the last epoch the job reported."""
    raw = store.get_job(job_id)["metrics_json"]
    m = json.loads(raw) if raw else {}
    if m.get("epoch") and m.get("epochs"):
        return max(0.0, 1.0 - float(m["epoch"]) / float(m["epochs"]))
    return 1.0


def remaining_cost(estimate, fraction: float) -> float:
    """Start-up again, plus the remaining share of the run (and of its expected preemption overhead)."""
    seconds = estimate.startup_seconds + (estimate.run_seconds + estimate.preemption_seconds) * fraction
    return seconds * estimate.price_per_hour / 3600.0


def _fit_remaining_budget(plan, spec: JobSpec, store: Store, job_id: str):
    """Recovery never launches when the remaining budget cannot cover the remaining work."""
    row = store.get_job(job_id)
    if not row["attempts"] or not spec.budget.max_cost:
        return plan
    left = spec.budget.max_cost - (row["actual_cost"] or 0.0)
    fraction = remaining_fraction(store, job_id)
    ranked = [c for c in plan.ranked if c.feasible]
    for c in ranked:
        c.chosen = False
    fits = [c for c in ranked if remaining_cost(c.estimate, fraction) <= left]
    plan.chosen = min(fits, key=lambda c: (remaining_cost(c.estimate, fraction), c.estimate.hours), default=None)
    if plan.chosen is not None:
        plan.chosen.chosen = True
    elif ranked:
        need = min(remaining_cost(c.estimate, fraction) for c in ranked)
        raise BudgetExhaustedError(f"{spec.name}: ${left:.4f} of the budget is left, the remaining "
                                   f"{fraction:.0%} of the work needs ${need:.4f}; not relaunching")
    return plan


def _finish(job_id, spec, outcome: Outcome, store: Store, display, view) -> SubmitResult:
    status = {"SUCCEEDED": "SUCCEEDED", "STOPPED": "CANCELLED", "BUDGET_EXCEEDED": "BUDGET_EXCEEDED"}.get(
        outcome.kind, "FAILED")
    row = store.get_job(job_id)
    fields = {"actual_seconds": time.time() - row["created_at"]}
    if outcome.run_seconds:
        fields["actual_run_seconds"] = outcome.run_seconds
    if outcome.result:
        fields["metrics_json"] = json.dumps(outcome.result)
    if not store.set_status(job_id, status, outcome.detail, **fields):
        status = store.get_job(job_id)["status"]  # ended meanwhile (`dlrun cancel`): that status stands
        store.update_job(job_id, **fields)
    view.phase = status.lower()
    display.update(view)  # the result line is the caller's to print, once (cli/render/summary.result_line)
    if status == "FAILED":
        code = f" (exit code {outcome.exit_code})" if getattr(outcome, "exit_code", None) is not None else ""
        raise JobFailedError(f"job {job_id} failed on {view.backend}{code}; see `dlrun logs {job_id}`")
    code = EXIT_TERMINATED if status == "CANCELLED" and sigterm.received() else EXIT_BY_STATUS.get(status, 1)
    return SubmitResult(job_id, status, code, outcome.result)
