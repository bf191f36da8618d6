"""One attempt of a job on one candidate: launch, submit, watch, and always tear down.

`run_attempt` starts a fresh cluster; `reattach` picks up the attempt of a supervisor that died
(kill -9, a reboot of the laptop): it watches the same Ray job on the same cluster when the
cluster is still whole, and otherwise cleans it up and reports a preemption so the runner relaunches.
Either way the cluster is terminated in `finally`, and the cost recorded is node-seconds × the
price stored at launch, up to the moment termination was requested.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from orchestrator.cli.render.summary import offer_name
from orchestrator.cost import node_seconds_cost
from orchestrator.planning.spec import JobSpec
from orchestrator.runs.context import AttemptContext, GetProvider
from orchestrator.runs.entrypoint import (attempt_checkpoint, entrypoint, image_mode, node_storage_env,
                                          num_workers, runtime_env)
from orchestrator.runs.on_cluster import ClusterRun, provider_cleanup, record_teardown
from orchestrator.runs.watch import Outcome
from orchestrator.state.db import new_id
from orchestrator.states import Ending, JobStatus
from orchestrator.settings import env_float

if TYPE_CHECKING:
    from infra.base import Cluster, NodeState, Provider
    from infra.catalog import Offer
    from orchestrator.planning.planner import Candidate

DEADLINE_MARGIN_S = 1800.0  # a node powers off at the job's deadline plus this, whatever happens
# a re-attaching supervisor that cannot reach the cloud asks again after 5, 10, 20 ... 120 s, for
# DLRUN_CLOUD_RETRY_S (settings.py)
CLOUD_RETRY_FIRST_S, CLOUD_RETRY_MAX_S = 5.0, 120.0


def run_attempt(ctx: AttemptContext, cand: Candidate, get_provider: GetProvider) -> Outcome:
    """Launch + run on one candidate. A launch that failed is NOT_READY, with its ProviderError."""
    from infra import runs_here
    from infra.identity import owner_identity
    from infra.base import BootstrapConfig, ClusterRequest, ProviderError

    spec, store, offer = ctx.spec, ctx.store, cand.offer
    provider = get_provider(offer.cloud)
    job = ctx.job()
    attempt = job.attempts + 1
    cluster_id = new_id("c")
    nodes = spec.resources.num_nodes
    price_all = offer.hourly(cand.spot) * nodes
    started, wall_started = ctx.clock(), time.time()
    store.start_attempt(ctx.job_id, attempt=attempt, backend=offer.cloud, offer_key=offer.key,
                        instance_type=offer.instance_type, accelerator=offer.accelerator or "CPU",
                        accelerator_count=offer.accelerator_count, spot=cand.spot, price_per_hour=price_all,
                        price_date=offer.spot_price_date if cand.spot else offer.price_date, cluster_id=cluster_id)
    store.cluster_launching(cluster_id, provider=offer.cloud, job_id=ctx.job_id, region=offer.region,
                            instance_type=offer.instance_type, spot=cand.spot, num_nodes=nodes,
                            price_per_hour=offer.hourly(cand.spot), launched_at=started)
    store.set_status(ctx.job_id, JobStatus.PROVISIONING, offer.label)
    ctx.view.phase, ctx.view.backend = "provisioning", offer_name(offer, cand.spot)
    ctx.display.update(ctx.view)
    from orchestrator.runs.entrypoint import checkpoint_packages
    from orchestrator.runs.ray_jobs import ray_version  # not `import ray`: a second of imports
    from orchestrator.planning.software import boot_settings, job_env

    # a later attempt on the same cloud resumes from the first one's bucket, whatever region it lands in
    checkpoint = ctx.cloud_checkpoints.setdefault(
        offer.cloud, attempt_checkpoint(spec, ctx.run_key, cand.checkpoint, default=ctx.checkpoint))
    if "://" in checkpoint:
        store.record_checkpoint(ctx.job_id, offer.cloud, checkpoint, attempt)
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
                             data_read=data_read, data_uploads=uploads, progress=ctx.display.message)
    cluster = None
    try:
        cluster = provider.launch(request)
    except ProviderError as e:  # the launch rolled back what it made: nothing ran, nothing is billed
        record_teardown(ctx, cluster_id, job.actual_cost, started, 0.0)
        return Outcome.not_ready(e)
    except BaseException:
        provider_cleanup(provider, cluster_id)
        record_teardown(ctx, cluster_id, job.actual_cost, started, price_all)
        raise
    if cluster.extra.get("notice"):  # e.g. the local head on the dashboard port was someone else's
        ctx.display.message(cluster.extra["notice"])
    # billing starts when the cloud says the instances launched (LaunchTime / creationTimestamp)
    started = min(ctx.clock(), started + max(0.0, cluster.launched_at - wall_started))
    store.cluster_up(cluster_id, zone=cluster.zone, launched_at=started, cluster_json=json.dumps(cluster.to_dict()))
    est = cand.estimate
    workers = num_workers(spec, offer.accelerator_count)
    image = image_mode(spec, offer.cloud)
    submission = dict(
        entrypoint=entrypoint(spec, local=local, workers=workers,
                              notice_cloud=offer.cloud if cand.spot and not local else None,
                              image=image, gpus=bool(offer.accelerator)),
        submission_id=f"dlrun-{ctx.job_id}-{attempt}",
        runtime_env=runtime_env(spec, job_id=ctx.job_id, checkpoint=checkpoint, price_per_hour=price_all, local=local,
                                extra_env={**job_env(offer), **data_vars,
                                           **({} if local else node_storage_env(checkpoint, offer.region))},
                                image=image),
        metadata={"dlrun_job_id": ctx.job_id, "dlrun_name": spec.name, "job_name": spec.name, "backend": offer.cloud,
                  "instance": offer.instance_type, "gpu": f"{offer.accelerator}:{offer.accelerator_count}"
                  if offer.accelerator else "CPU", "spot": str(cand.spot).lower(),
                  "est_hours": f"{est.hours:.4f}", "est_cost": f"{est.cost:.4f}",
                  "max_cost": spec.budget.max_cost, "schedule": job.schedule_id or "", "attempt": attempt},
        entrypoint_num_gpus=_entrypoint_gpus(offer, workers))
    _backend_submission(provider, submission, offer, workers, cluster)
    return ClusterRun(ctx, provider, cluster, started=started, previous=job.actual_cost,
                      price_all=price_all).run(submission)


def _entrypoint_gpus(offer: Offer, workers: int) -> float | None:
    """A single-worker job on a GPU offer holds one GPU; Ray Train workers ask for their own."""
    return 1 if offer.accelerator and workers == 1 else None


def _backend_submission(provider: Provider, submission: dict, offer: Offer, workers: int, cluster: Cluster) -> None:
    """The backend's additions to the submission (a shared cluster's entrypoint resources, metadata and
    runtime_env: infra/ray_cluster), merged into it."""
    for key, value in provider.submission_extras(offer, workers, cluster).items():
        if isinstance(value, dict) and isinstance(submission.get(key), dict):
            submission[key].update(value)
        else:
            submission[key] = value
    renv = submission.get("runtime_env") or {}
    if "image_uri" in renv:  # Ray refuses any other field beside it (its pip: the image must carry the packages)
        submission["runtime_env"] = {k: v for k, v in renv.items() if k in ("image_uri", "env_vars", "config")}


def reattach(ctx: AttemptContext, get_provider: GetProvider) -> Outcome | None:
    """Pick up the live attempt a dead supervisor left. None when there is nothing to pick up."""
    from infra.base import Cluster

    store = ctx.store
    job = ctx.job()
    crow = store.get_cluster(job.cluster_id) if job.cluster_id else None
    if crow is None or crow.terminated:
        return None
    previous = job.actual_cost
    price_all = crow.price_per_hour * crow.num_nodes
    if not crow.cluster_json:  # died mid-launch: remove whatever the launch made
        provider_cleanup(get_provider(crow.provider), crow.id)
        record_teardown(ctx, crow.id, previous, crow.launched_at, price_all)
        store.add_event(ctx.job_id, "reattach", {"cluster": crow.id, "found": "half-launched; removed"})
        return Outcome(Ending.RELAUNCH, "the previous supervisor died while launching")
    cluster = Cluster.from_dict(json.loads(crow.cluster_json))
    provider, states = ask_cloud(ctx, get_provider, cluster, price_all, previous)
    lost = [s for s in states if s.status != "running"]
    if lost or not states:
        provider.terminate(cluster)
        record_teardown(ctx, crow.id, previous, crow.launched_at, price_all)
        store.add_event(ctx.job_id, "reattach", {"cluster": crow.id, "found": "nodes lost; terminated"})
        return Outcome(Ending.PREEMPTED, "nodes lost while dlrun was away: "
                       + ", ".join(f"{s.node_id} {s.status}" for s in lost))
    store.add_event(ctx.job_id, "reattach", {"cluster": crow.id, "submission": job.ray_submission_id})
    ctx.display.message(f"re-attached to {job.ray_submission_id} on cluster {crow.id}")
    ctx.view.backend = f"{job.offer_key or crow.provider}{' spot' if crow.spot else ''}"
    outcome = ClusterRun(ctx, provider, cluster, started=crow.launched_at, previous=previous,
                         price_all=price_all, submission_id=job.ray_submission_id).run(None)
    if outcome.kind == Ending.NOT_READY:  # the head no longer answers: relaunch from the checkpoint
        return Outcome(Ending.RELAUNCH, f"could not reach the cluster again: {outcome.detail}")
    return outcome


def ask_cloud(ctx: AttemptContext, get_provider: GetProvider, cluster: Cluster, price_all: float,
              previous: float) -> tuple[Provider, list[NodeState]]:
    """The provider and the cluster's node states. While the cloud cannot be asked (credentials gone from
    this shell, the network down), nothing is known about the nodes: the job stays RECOVERING with its
    cluster (so its cost keeps accruing in `dlrun status`), says why, and asks again with backoff for
    DLRUN_CLOUD_RETRY_S; then CloudUnreachableError leaves it so to the next `dlrun status`."""
    from infra.base import ProviderError
    from orchestrator.errors import CloudUnreachableError

    give_up = time.monotonic() + env_float("DLRUN_CLOUD_RETRY_S")
    delay, tries = CLOUD_RETRY_FIRST_S, 0
    while True:
        try:
            provider = get_provider(cluster.provider)  # anew each time: credentials may be back in their files
            return provider, provider.status(cluster)
        except ProviderError as e:
            why = e.message or f"{type(e).__name__}: {e}"
        except OSError as e:
            why = f"{type(e).__name__}: {e}"
        tries += 1
        left = give_up - time.monotonic()
        accrued = previous + node_seconds_cost(price_all, cluster.launched_at, time.time())
        if tries == 1:  # the status history says why once; each try is an event
            ctx.store.set_status(ctx.job_id, JobStatus.RECOVERING, f"cannot reach {cluster.provider} to check cluster "
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


def watchdog_limits(spec: JobSpec) -> dict:
    """How long a cloud node lives without dlrun's heartbeat, and at most (the deadline plus a margin)."""
    deadline = spec.budget.deadline_seconds
    return {"heartbeat_timeout_s": int(env_float("DLRUN_HEARTBEAT_TIMEOUT_S")),
            "max_run_s": int(deadline + DEADLINE_MARGIN_S) if deadline else 0}
