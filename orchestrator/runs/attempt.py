"""One attempt of a job on one candidate: launch, submit, watch, and always tear down.

`run_attempt` starts a fresh cluster; `reattach` picks up the attempt of a supervisor that died
(kill -9, a reboot of the laptop): it watches the same Ray job on the same cluster when the
cluster is still whole, and otherwise cleans it up and reports a preemption so the runner relaunches.
Either way the cluster is terminated in `finally`, and the cost recorded is node-seconds × the
price stored at launch, up to the moment termination was requested.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from orchestrator.cli.render.display import JobView
from orchestrator.cli.render.summary import offer_name
from orchestrator.runs.entrypoint import (attempt_checkpoint, entrypoint, node_storage_env, num_workers,
                                          runtime_env)
from orchestrator.planning.spec import JobSpec
from orchestrator.paths import job_log_path
from orchestrator.state.db import Store, new_id
from orchestrator.cost import CostMeter, node_seconds_cost
from orchestrator.runs import sigterm
from orchestrator.runs.watch import Outcome, Watcher

# outcomes after which the Ray job may still be running and must be stopped before teardown
HEARTBEAT_ENV = "DLRUN_HEARTBEAT_S"  # how often dlrun beats a cloud cluster's watchdog (default 60)
HEARTBEAT_TIMEOUT_ENV = "DLRUN_HEARTBEAT_TIMEOUT_S"  # silence after which nodes power off (default 900)
DEADLINE_MARGIN_S = 1800.0  # a node powers off at the job's deadline plus this, whatever happens
UNFINISHED = ("PREEMPTED", "BUDGET_EXCEEDED", "INTERRUPTED")
# a re-attaching supervisor that cannot reach the cloud asks again after 5, 10, 20 ... 120 s, this long
CLOUD_RETRY_ENV = "DLRUN_CLOUD_RETRY_S"
CLOUD_RETRY_DEFAULT_S = 900.0
CLOUD_RETRY_FIRST_S, CLOUD_RETRY_MAX_S = 5.0, 120.0


@dataclass
class AttemptContext:
    job_id: str
    spec: JobSpec
    store: Store
    display: object
    view: JobView
    checkpoint: str
    poll_s: float = 0.5
    node_poll_s: float = 5.0
    clock: Callable[[], float] = time.time
    jobs_client: Callable[[str], object] | None = None  # address -> Jobs API client (default: RayJobs)
    run_key: str = ""
    cloud_checkpoints: dict = field(default_factory=dict)  # cloud -> the location its first attempt used


def run_attempt(ctx: AttemptContext, cand, get_provider):
    """Launch + run on one candidate. Returns an Outcome, or the ProviderError that stopped the launch."""
    from infra import runs_here
    from infra.identity import owner_identity
    from infra.base import BootstrapConfig, ClusterRequest, ProviderError

    spec, store, offer = ctx.spec, ctx.store, cand.offer
    provider = get_provider(offer.cloud)
    row = store.get_job(ctx.job_id)
    attempt = (row["attempts"] or 0) + 1
    cluster_id = new_id("c")
    nodes = spec.resources.num_nodes
    price_all = offer.hourly(cand.spot) * nodes
    started, wall_started = ctx.clock(), time.time()
    store.update_job(ctx.job_id, attempts=attempt, backend=offer.cloud, offer_key=offer.key,
                     instance_type=offer.instance_type, accelerator=offer.accelerator or "CPU",
                     accelerator_count=offer.accelerator_count, spot=int(cand.spot), price_per_hour=price_all,
                     price_date=offer.spot_price_date if cand.spot else offer.price_date, cluster_id=cluster_id)
    store.record_cluster(cluster_id, provider=offer.cloud, job_id=ctx.job_id, state="launching",
                         price_per_hour=offer.hourly(cand.spot), region=offer.region, launched_at=started,
                         instance_type=offer.instance_type, spot=int(cand.spot), num_nodes=nodes)
    store.set_status(ctx.job_id, "PROVISIONING", offer.label)
    ctx.view.phase, ctx.view.backend = "provisioning", offer_name(offer, cand.spot)
    ctx.display.update(ctx.view)
    from orchestrator.runs.entrypoint import checkpoint_packages
    from orchestrator.runs.ray_jobs import ray_version  # not `import ray`: a second of imports
    from orchestrator.planning.software import boot_settings, job_env

    # a later attempt on the same cloud resumes from the first one's bucket, whatever region it lands in
    checkpoint = ctx.cloud_checkpoints.setdefault(
        offer.cloud, attempt_checkpoint(spec, ctx.run_key, cand, default=ctx.checkpoint))
    if "://" in checkpoint:
        store.add_event(ctx.job_id, "checkpoint", {"location": checkpoint, "attempt": attempt})
    local = runs_here(offer.cloud)
    from orchestrator.runs.entrypoint import data_env

    data_vars, uploads, data_read = data_env(spec, local=local, checkpoint=checkpoint)
    request = ClusterRequest(cluster_id=cluster_id, job_id=ctx.job_id, offer=offer, spot=cand.spot, num_nodes=nodes,
                             bootstrap=BootstrapConfig(ray_version=ray_version(),
                                                       python_packages=[*spec.requirements,
                                                                        *checkpoint_packages(checkpoint)],
                                                       **watchdog_limits(spec), **boot_settings(spec, offer)),
                             image=spec.resources.image, owner=owner_identity(),
                             storage=checkpoint if "://" in checkpoint else "",
                             data_read=data_read, data_uploads=uploads)
    cluster = None
    try:
        cluster = provider.launch(request)
    except ProviderError as e:  # the launch rolled back what it made: nothing ran, nothing is billed
        _record_teardown(ctx, cluster_id, offer.cloud, row["actual_cost"] or 0.0, started, 0.0)
        return e
    except BaseException:
        provider_cleanup(provider, cluster_id)
        _record_teardown(ctx, cluster_id, offer.cloud, row["actual_cost"] or 0.0, started, price_all)
        raise
    if cluster.extra.get("notice"):  # e.g. the local head on the dashboard port was someone else's
        ctx.display.message(cluster.extra["notice"])
    # billing starts when the cloud says the instances launched (LaunchTime / creationTimestamp)
    started = min(ctx.clock(), started + max(0.0, cluster.launched_at - wall_started))
    store.record_cluster(cluster_id, provider=offer.cloud, job_id=ctx.job_id, state="up", zone=cluster.zone,
                         launched_at=started, cluster_json=json.dumps(cluster.to_dict()))
    est = cand.estimate
    workers = num_workers(spec, offer.accelerator_count)
    submission = dict(
        entrypoint=entrypoint(spec, local=local, workers=workers,
                              notice_cloud=offer.cloud if cand.spot and not local else None),
        submission_id=f"dlrun-{ctx.job_id}-{attempt}",
        runtime_env=runtime_env(spec, job_id=ctx.job_id, checkpoint=checkpoint, price_per_hour=price_all, local=local,
                                extra_env={**job_env(offer), **data_vars,
                                           **({} if local else node_storage_env(checkpoint, offer.region))}),
        metadata={"dlrun_job_id": ctx.job_id, "dlrun_name": spec.name, "job_name": spec.name, "backend": offer.cloud,
                  "instance": offer.instance_type, "gpu": f"{offer.accelerator}:{offer.accelerator_count}"
                  if offer.accelerator else "CPU", "spot": str(cand.spot).lower(),
                  "est_hours": f"{est.hours:.4f}", "est_cost": f"{est.cost:.4f}",
                  "max_cost": spec.budget.max_cost, "schedule": row["schedule_id"] or "", "attempt": attempt},
        entrypoint_num_gpus=_entrypoint_gpus(offer, workers))
    _backend_submission(provider, submission, offer, workers, cluster)
    return _run_on_cluster(ctx, provider, cluster, started=started, previous=row["actual_cost"] or 0.0,
                           price_all=price_all, submission=submission)


def _entrypoint_gpus(offer, workers: int) -> float | None:
    """A single-worker job on a GPU offer holds one GPU; Ray Train workers ask for their own."""
    return 1 if offer.accelerator and workers == 1 else None


def _backend_submission(provider, submission: dict, offer, workers: int, cluster) -> None:
    """The backend's additions to the submission (a shared cluster's entrypoint resources, metadata and
    runtime_env: infra/ray_cluster), merged into it."""
    for key, value in provider.submission_extras(offer, workers, cluster).items():
        if isinstance(value, dict) and isinstance(submission.get(key), dict):
            submission[key].update(value)
        else:
            submission[key] = value


def reattach(ctx: AttemptContext, get_provider) -> Outcome | None:
    """Pick up the live attempt a dead supervisor left. None when there is nothing to pick up."""
    from infra.base import Cluster

    store = ctx.store
    row = store.get_job(ctx.job_id)
    crow = store.get_cluster(row["cluster_id"]) if row["cluster_id"] else None
    if crow is None or crow["state"] == "terminated":
        return None
    previous = row["actual_cost"] or 0.0
    price_all = (crow["price_per_hour"] or 0.0) * (crow["num_nodes"] or 1)
    if not crow["cluster_json"]:  # died mid-launch: remove whatever the launch made
        provider = get_provider(crow["provider"])
        provider_cleanup(provider, crow["id"])
        _record_teardown(ctx, crow["id"], crow["provider"], previous, crow["launched_at"], price_all)
        store.add_event(ctx.job_id, "reattach", {"cluster": crow["id"], "found": "half-launched; removed"})
        return Outcome("RELAUNCH", "the previous supervisor died while launching")
    cluster = Cluster.from_dict(json.loads(crow["cluster_json"]))
    provider, states = ask_cloud(ctx, get_provider, cluster, price_all, previous)
    lost = [s for s in states if s.status != "running"]
    if lost or not states:
        provider.terminate(cluster)
        _record_teardown(ctx, crow["id"], crow["provider"], previous, crow["launched_at"], price_all)
        store.add_event(ctx.job_id, "reattach", {"cluster": crow["id"], "found": "nodes lost; terminated"})
        return Outcome("PREEMPTED", "nodes lost while dlrun was away: "
                       + ", ".join(f"{s.node_id} {s.status}" for s in lost))
    store.add_event(ctx.job_id, "reattach", {"cluster": crow["id"], "submission": row["ray_submission_id"]})
    ctx.display.message(f"re-attached to {row['ray_submission_id']} on cluster {crow['id']}")
    ctx.view.backend = f"{row['offer_key'] or crow['provider']}{' spot' if crow['spot'] else ''}"
    outcome = _run_on_cluster(ctx, provider, cluster, started=crow["launched_at"], previous=previous,
                              price_all=price_all, submission=None, submission_id=row["ray_submission_id"])
    if not isinstance(outcome, Outcome):  # the head no longer answers: relaunch from the checkpoint
        return Outcome("RELAUNCH", f"could not reach the cluster again: {outcome.message}")
    return outcome


def ask_cloud(ctx: AttemptContext, get_provider, cluster, price_all: float, previous: float):
    """The provider and the cluster's node states. While the cloud cannot be asked (credentials gone from
    this shell, the network down), nothing is known about the nodes: the job stays RECOVERING with its
    cluster (so its cost keeps accruing in `dlrun status`), says why, and asks again with backoff for
    DLRUN_CLOUD_RETRY_S; then CloudUnreachableError leaves it so to the next `dlrun status`."""
    from infra.base import ProviderError
    from orchestrator.errors import CloudUnreachableError

    give_up = time.monotonic() + float(os.environ.get(CLOUD_RETRY_ENV, CLOUD_RETRY_DEFAULT_S))
    delay, tries = CLOUD_RETRY_FIRST_S, 0
    while True:
        try:
            provider = get_provider(cluster.provider)  # anew each time: credentials may be back in their files
            return provider, provider.status(cluster)
        except (ProviderError, OSError) as e:
            why = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        tries += 1
        left = give_up - time.monotonic()
        accrued = previous + node_seconds_cost(price_all, cluster.launched_at, time.time())
        if tries == 1:  # the status history says why once; each try is an event
            ctx.store.set_status(ctx.job_id, "RECOVERING", f"cannot reach {cluster.provider} to check cluster "
                                 f"{cluster.cluster_id}: {why}"[:500])
        ctx.store.add_event(ctx.job_id, "cloud_unreachable", {"cluster": cluster.cluster_id, "error": why[:300],
                                                              "try": tries, "retry_in": round(min(delay, left), 1)
                                                              if left > 0 else None, "accrued": round(accrued, 6)})
        if left <= 0:
            raise CloudUnreachableError(
                f"cannot reach {cluster.provider} ({why}); job {ctx.job_id} stays RECOVERING with its cluster "
                f"{cluster.cluster_id} (${accrued:.4f} so far); run `dlrun status` where the {cluster.provider} "
                "credentials are, to re-attach (or `dlrun cancel` there)")
        ctx.display.message(f"cannot reach {cluster.provider} to check cluster {cluster.cluster_id} ({why}); "
                            f"the job and its cluster are kept, asking again in {min(delay, left):.0f} s")
        time.sleep(min(delay, left))
        delay = min(delay * 2, CLOUD_RETRY_MAX_S)


def _run_on_cluster(ctx: AttemptContext, provider, cluster, *, started: float, previous: float,
                    price_all: float, submission: dict | None, submission_id: str | None = None):
    """Submit (unless re-attaching), watch until the job ends, then stop what is left and tear down.

    Returns the Outcome, or the ProviderError of a cluster that never became ready (a failed boot):
    the executor then tries the next candidate, as after a failed launch.
    """
    from infra.base import ProviderError

    store, job_id = ctx.store, ctx.job_id
    connection = jobs = beats = None
    outcome = Outcome("INTERRUPTED", "dlrun stopped while the job ran")
    try:
        ctx.view.phase = "bootstrapping"
        ctx.display.update(ctx.view)
        beats = Heartbeat(provider, cluster).start()  # from now: a boot that outlasts the limit is not idle
        try:
            connection = provider.connect(cluster)
        except ProviderError as e:
            outcome = Outcome("NOT_READY", e.message)
            return e
        address = connection.address
        jobs = ctx.jobs_client(address) if ctx.jobs_client else _ray_jobs(address, connection.headers)
        if submission is not None:
            submission_id = submission["submission_id"]
            jobs.submit(**submission)
            store.set_status(job_id, "SUBMITTED", submission_id, ray_submission_id=submission_id,
                             ray_address=address)
        else:
            store.update_job(job_id, ray_address=address)
        watcher = Watcher(jobs=jobs, submission_id=submission_id, view=ctx.view, display=ctx.display,
                          meter=CostMeter(previous, price_all, started),
                          node_states=(lambda: provider.status(cluster)) if provider.capabilities.billed else None,
                          on_event=lambda kind, detail: _on_event(store, job_id, kind, detail),
                          max_cost=ctx.spec.budget.max_cost, poll_s=ctx.poll_s, node_poll_s=ctx.node_poll_s,
                          confirm_cancel=lambda: sigterm.received() or getattr(ctx.display, "confirm_cancel",
                                                                               lambda: True)(),
                          clock=ctx.clock, log_path=job_log_path(job_id))
        outcome = watcher.run()
        return outcome
    finally:
        ctx.view.phase = "tearing down"
        ctx.display.update(ctx.view)
        if jobs is not None and submission_id and outcome.kind in UNFINISHED:
            jobs.stop(submission_id)  # the job writes no more; its checkpoints stay where they are
        stop_at = ctx.clock()
        if beats is not None:
            beats.stop()
        if connection is not None:
            connection.close()
        provider.terminate(cluster)
        _record_teardown(ctx, cluster.cluster_id, cluster.provider, previous, started, price_all, stop_at)


def _record_teardown(ctx: AttemptContext, cluster_id: str, cloud: str, previous: float, started: float,
                     price_all: float, stop_at: float | None = None) -> None:
    stop_at = ctx.clock() if stop_at is None else stop_at
    spent = previous + node_seconds_cost(price_all, started, stop_at)
    ctx.store.update_job(ctx.job_id, actual_cost=spent)
    ctx.store.record_cluster(cluster_id, provider=cloud, job_id=ctx.job_id, state="terminated",
                             terminated_at=time.time())


def provider_cleanup(provider, cluster_id: str) -> None:
    """Remove a cluster known only by its id (the launch never returned): found by its tags."""
    for owned in provider.list_owned():
        if owned.cluster_id == cluster_id:
            provider.terminate(owned)


def watchdog_limits(spec) -> dict:
    """How long a cloud node lives without dlrun's heartbeat, and at most (the deadline plus a margin)."""
    deadline = spec.budget.deadline_seconds
    return {"heartbeat_timeout_s": int(float(os.environ.get(HEARTBEAT_TIMEOUT_ENV, 900))),
            "max_run_s": int(deadline + DEADLINE_MARGIN_S) if deadline else 0}


class Heartbeat:
    """Beats the cluster's watchdog every interval while this attempt watches it (a thread)."""

    def __init__(self, provider, cluster, interval_s: float | None = None):
        self.provider, self.cluster = provider, cluster
        self.interval_s = interval_s if interval_s is not None else float(os.environ.get(HEARTBEAT_ENV, 60))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{cluster.cluster_id}")

    def start(self) -> "Heartbeat":
        if getattr(self.provider, "heartbeat", None) is not None:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.provider.heartbeat(self.cluster)
            except Exception:  # a missed beat is not an error: the watchdog allows many minutes
                pass

    def stop(self) -> None:
        self._stop.set()


def _ray_jobs(address: str, headers: dict[str, str]):
    from orchestrator.runs.ray_jobs import RayJobs

    return RayJobs(address, headers)


def _on_event(store: Store, job_id: str, kind: str, detail: dict) -> None:
    if kind == "ray_status" and detail.get("status") == "RUNNING":
        store.set_status(job_id, "RUNNING")
    elif kind == "epoch":
        store.update_job(job_id, metrics_json=json.dumps(detail))
    else:
        store.add_event(job_id, kind, detail)
