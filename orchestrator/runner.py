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

from orchestrator.display import JobView, PlainDisplay
from orchestrator.entrypoint import checkpoint_location, entrypoint, num_workers, run_key, runtime_env
from orchestrator.errors import (CloudCredentialsError, JobFailedError, NothingFitsError,
                                 ProvisioningFailedError)
from orchestrator.spec import JobSpec
from orchestrator.store import LIVE, Store, default_store, new_id
from orchestrator.watch import CostMeter, Outcome, Watcher

EXIT_BY_STATUS = {"SUCCEEDED": 0, "FAILED": 1, "CANCELLED": 130, "BUDGET_EXCEEDED": 1}


@dataclass
class SubmitResult:
    job_id: str
    status: str
    exit_code: int = 0
    result: dict = field(default_factory=dict)


def restrict(spec: JobSpec, backend: str | None) -> JobSpec:
    """--backend local|aws|gcp narrows the spec's clouds to one."""
    if not backend:
        return spec
    res = spec.resources.model_copy(update={"clouds": [backend]})
    return spec.model_copy(update={"resources": res})


def make_plan(spec: JobSpec, blocked: frozenset[str] = frozenset(), store: Store | None = None):
    from infra.local import local_offers
    from orchestrator import planner
    from orchestrator.catalog import load_offers

    offers = load_offers() if set(spec.resources.clouds) - {"local"} else []
    locals_ = local_offers() if "local" in spec.resources.clouds else []
    return planner.plan(spec, offers, blocked=blocked, local_offers=locals_, store=store)


def _require_choice(plan, spec: JobSpec) -> None:
    if plan.chosen is None:
        cheapest = getattr(plan, "cheapest_feasible_cost_ignoring_budget", None)
        hint = f"; the cheapest that would work costs ${cheapest:.2f} (raise --max-cost)" if cheapest else \
            "; relax the deadline, accelerators or clouds"
        raise NothingFitsError(f"{spec.name}: no backend fits the budget/deadline{hint}", plan=plan)


def submit(spec: JobSpec, *, backend: str | None = None, detach: bool = False, schedule_id: str | None = None,
           store: Store | None = None, display=None, plan=None) -> SubmitResult:
    store = store or default_store()
    spec = restrict(spec, backend)
    plan = plan or make_plan(spec, store=store)
    _require_choice(plan, spec)
    est = plan.chosen.estimate
    job_id = store.create_job(name=spec.name, spec_hash=spec.spec_hash(), spec_json=spec.model_dump_json(),
                              schedule_id=schedule_id, max_cost=spec.budget.max_cost, est_cost=est.cost,
                              est_seconds=est.hours * 3600, est_run_seconds=getattr(est, "run_seconds", None),
                              model_family=spec.workload.model if spec.workload else (spec.job or "custom"))
    store.add_event(job_id, "plan", {"chosen": plan.chosen.offer.label, "spot": plan.chosen.spot,
                                     "est_hours": est.hours, "est_cost": est.cost})
    if detach:
        pid = spawn_supervisor(job_id)
        store.update_job(job_id, supervisor_pid=pid)
        return SubmitResult(job_id, "PENDING", 0)
    return execute(job_id, store=store, display=display, first_plan=plan)


def spawn_supervisor(job_id: str) -> int:
    """A small process that outlives the terminal and runs execute(job_id) (restartable)."""
    from orchestrator.store import dlrun_home

    log = open(dlrun_home() / f"supervisor-{job_id}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.supervisor", job_id], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    return proc.pid


def _block_key(offer, scope: str, cloud_error_region: str = "") -> str:
    if scope == "cloud":
        return offer.cloud
    if scope == "region":
        return f"{offer.cloud}/{cloud_error_region or offer.region}"
    return offer.key


def execute(job_id: str, *, store: Store | None = None, display=None, first_plan=None,
            poll_s: float = 0.5) -> SubmitResult:
    from infra import get_provider
    from infra.base import ProviderError

    store = store or default_store()
    row = store.get_job(job_id)
    spec = JobSpec.model_validate_json(row["spec_json"])
    display = display or PlainDisplay()
    view = JobView(job_id=job_id, name=spec.name, max_cost=spec.budget.max_cost)
    blocked: set[str] = set()
    tried: list[str] = []
    only_credentials = True
    preemptions = row["preemptions"] or 0
    force_on_demand = False
    key = run_key(spec) if row["schedule_id"] is None else job_id
    checkpoint = checkpoint_location(spec, key)
    plan = first_plan
    try:
        while True:
            store.set_status(job_id, "PLANNING")
            view.phase = "planning"
            display.update(view)
            plan_spec = spec
            if force_on_demand:
                plan_spec = spec.model_copy(update={"resources": spec.resources.model_copy(update={"spot": "never"})})
            if plan is None:
                plan = make_plan(plan_spec, frozenset(blocked), store)
                plan = _remaining_budget_plan(plan, spec, store, job_id)
            if plan.chosen is None:
                if tried:
                    err = CloudCredentialsError if only_credentials else ProvisioningFailedError
                    raise err("provisioning failed everywhere: " + "; ".join(tried))
                _require_choice(plan, spec)
            cand, plan = plan.chosen, None
            outcome = _attempt(job_id, spec, cand, store, display, view, checkpoint, get_provider, poll_s)
            if isinstance(outcome, ProviderError):
                scope = outcome.scope
                blocked.add(_block_key(cand.offer, scope, outcome.region))
                only_credentials &= scope == "cloud" and type(outcome).__name__ == "CredentialsError"
                tried.append(f"{cand.offer.label}{' spot' if cand.spot else ''}: {outcome.message}")
                display.message(f"{cand.offer.label}: {outcome.message} — trying the next candidate")
                store.add_event(job_id, "provision_failed", {"offer": cand.offer.key, "error": outcome.message})
                continue
            if outcome.kind == "PREEMPTED":
                preemptions += 1
                store.update_job(job_id, preemptions=preemptions)
                store.set_status(job_id, "RECOVERING", outcome.detail)
                display.message(f"preempted ({outcome.detail}); recovering from the last checkpoint")
                blocked.add(cand.offer.key if cand.spot else f"{cand.offer.cloud}/{cand.offer.region}")
                if preemptions >= spec.max_preemptions:
                    force_on_demand = True
                continue
            return _finish(job_id, spec, outcome, store, display, view)
    except KeyboardInterrupt:
        store.set_status(job_id, "CANCELLED", "interrupted")
        raise
    except Exception as e:
        current = store.get_job(job_id)["status"]
        if current in LIVE:
            store.set_status(job_id, "FAILED", str(e)[:500], message=str(e)[:500])
        raise


def _remaining_budget_plan(plan, spec: JobSpec, store: Store, job_id: str):
    """Recovery never launches when the remaining budget cannot cover the remaining work."""
    spent = store.get_job(job_id)["actual_cost"] or 0.0
    if not spec.budget.max_cost or not spent or plan.chosen is None:
        return plan
    if plan.chosen.estimate.cost > spec.budget.max_cost - spent:
        plan.chosen = None
    return plan


def _attempt(job_id, spec, cand, store, display, view, checkpoint, get_provider, poll_s):
    """One launch + run on one candidate. Returns an Outcome, or the ProviderError that stopped it."""
    from infra.base import BootstrapConfig, ClusterRequest, ProviderError
    from orchestrator.raycluster import RayJobs

    offer = cand.offer
    provider = get_provider(offer.cloud)
    row = store.get_job(job_id)
    attempt = (row["attempts"] or 0) + 1
    cluster_id = new_id("c")
    nodes = spec.resources.num_nodes
    price_all = offer.hourly(cand.spot) * nodes
    store.update_job(job_id, attempts=attempt, backend=offer.cloud, offer_key=offer.key,
                     instance_type=offer.instance_type, accelerator=offer.accelerator or "CPU",
                     accelerator_count=offer.accelerator_count, spot=int(cand.spot),
                     price_per_hour=price_all, price_date=offer.spot_price_date if cand.spot else offer.price_date,
                     cluster_id=cluster_id)
    store.record_cluster(cluster_id, provider=offer.cloud, job_id=job_id, state="launching",
                         price_per_hour=offer.hourly(cand.spot), region=offer.region,
                         instance_type=offer.instance_type, spot=int(cand.spot), num_nodes=nodes)
    store.set_status(job_id, "PROVISIONING", offer.label)
    view.phase, view.backend = "provisioning", f"{offer.label}{' spot' if cand.spot else ''}"
    display.update(view)
    import ray

    request = ClusterRequest(cluster_id=cluster_id, job_id=job_id, offer=offer, spot=cand.spot, num_nodes=nodes,
                             bootstrap=BootstrapConfig(ray_version=ray.__version__,
                                                       python_packages=list(spec.requirements)),
                             image=spec.resources.image, owner=os.environ.get("USER", "dlrun"))
    started = time.time()
    cluster = None
    tunnel = None
    try:
        try:
            cluster = provider.launch(request)
        except ProviderError as e:
            return e
        store.record_cluster(cluster_id, provider=offer.cloud, job_id=job_id, state="up", zone=cluster.zone,
                             cluster_json=json.dumps(cluster.to_dict()))
        view.phase = "bootstrapping"
        display.update(view)
        address, tunnel = _head_address(cluster)
        jobs = RayJobs(address)
        submission_id = f"dlrun-{job_id}-{attempt}"
        local = offer.cloud == "local"
        workers = num_workers(spec, offer.accelerator_count)
        est = cand.estimate
        jobs.submit(
            entrypoint=entrypoint(spec, local=local, workers=workers), submission_id=submission_id,
            runtime_env=runtime_env(spec, job_id=job_id, checkpoint=checkpoint, price_per_hour=price_all, local=local),
            metadata={"dlrun_job_id": job_id, "dlrun_name": spec.name, "backend": offer.cloud,
                      "instance": offer.instance_type, "gpu": f"{offer.accelerator}:{offer.accelerator_count}"
                      if offer.accelerator else "CPU", "spot": str(cand.spot).lower(),
                      "est_hours": f"{est.hours:.4f}", "est_cost": f"{est.cost:.4f}",
                      "max_cost": spec.budget.max_cost, "schedule": row["schedule_id"] or "",
                      "attempt": attempt},
            entrypoint_num_gpus=1 if offer.accelerator and workers == 1 else None)
        store.set_status(job_id, "SUBMITTED", submission_id, ray_submission_id=submission_id, ray_address=address)
        meter = CostMeter(row["actual_cost"] or 0.0, price_all, started)
        watcher = Watcher(jobs=jobs, submission_id=submission_id, view=view, display=display, meter=meter,
                          node_states=None if local else (lambda: provider.status(cluster)),
                          on_event=lambda kind, detail: _on_event(store, job_id, kind, detail),
                          max_cost=spec.budget.max_cost, poll_s=poll_s,
                          confirm_cancel=getattr(display, "confirm_cancel", lambda: True),
                          log_path=job_log_path(job_id))
        outcome = watcher.run()
        if outcome.kind == "BUDGET_EXCEEDED":
            jobs.stop(submission_id)
        return outcome
    finally:
        view.phase = "tearing down"
        display.update(view)
        if tunnel is not None:
            tunnel.close()
        if cluster is not None:
            provider.terminate(cluster)
        spent = (row["actual_cost"] or 0.0) + (time.time() - started) * price_all / 3600.0
        store.update_job(job_id, actual_cost=spent)
        store.record_cluster(cluster_id, provider=offer.cloud, job_id=job_id, state="terminated",
                             terminated_at=time.time())


def job_log_path(job_id: str):
    from orchestrator.store import dlrun_home

    d = dlrun_home() / "logs"
    d.mkdir(exist_ok=True)
    return d / f"{job_id}.log"


def _head_address(cluster):
    """(Jobs API address, tunnel or None) for the cluster's head."""
    if cluster.provider == "local":
        return cluster.head_address, None
    from infra.ssh import open_tunnel
    from orchestrator.raycluster import _wait_dashboard

    tunnel = open_tunnel(cluster, 8265)
    _wait_dashboard(tunnel.local_address, timeout=float(os.environ.get("DLRUN_BOOT_TIMEOUT", 900)))
    return tunnel.local_address, tunnel


def _on_event(store: Store, job_id: str, kind: str, detail: dict) -> None:
    if kind == "ray_status" and detail.get("status") == "RUNNING":
        store.set_status(job_id, "RUNNING")
    elif kind == "epoch":
        store.update_job(job_id, metrics_json=json.dumps(detail))
    else:
        store.add_event(job_id, kind, detail)


def _finish(job_id, spec, outcome: Outcome, store: Store, display, view) -> SubmitResult:
    status = {"SUCCEEDED": "SUCCEEDED", "STOPPED": "CANCELLED", "BUDGET_EXCEEDED": "BUDGET_EXCEEDED"}.get(
        outcome.kind, "FAILED")
    row = store.get_job(job_id)
    fields = {"actual_seconds": time.time() - row["created_at"]}
    if outcome.run_seconds:
        fields["actual_run_seconds"] = outcome.run_seconds
    if outcome.result:
        fields["metrics_json"] = json.dumps(outcome.result)
    store.set_status(job_id, status, outcome.detail, **fields)
    view.phase = status.lower()
    display.update(view)
    acc = outcome.result.get("accuracy")
    display.message(f"{job_id} {status}" + (f" — held-out accuracy {acc:.4f}" if acc is not None else "")
                    + f" — cost ${store.get_job(job_id)['actual_cost'] or 0:.4f}")
    if status == "FAILED":
        raise JobFailedError(f"job {job_id} failed on {view.backend}; see `dlrun logs {job_id}`")
    return SubmitResult(job_id, status, EXIT_BY_STATUS[status], outcome.result)
