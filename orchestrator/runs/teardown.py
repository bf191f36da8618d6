"""`dlrun down`: stop the local head dlrun started, a recorded cluster, or orphaned cloud resources."""
from __future__ import annotations

import json

from infra import CLOUD_NAMES, capabilities

from orchestrator.errors import UsageError
from orchestrator.state.db import Store, default_store
from orchestrator.state.records import ClusterRecord
from orchestrator.settings import env_int, env_str

CLOUDS = CLOUD_NAMES


def terminate_recorded(store: Store, cluster: ClusterRecord) -> str:
    """Terminate one cluster from its store record (the Cluster saved at launch)."""
    from infra import get_provider
    from infra.base import Cluster

    if capabilities(cluster.provider).remote and cluster.cluster_json:
        get_provider(cluster.provider).terminate(Cluster.from_dict(json.loads(cluster.cluster_json)))
    store.cluster_terminated(cluster.id)
    return f"terminated {cluster.id} ({cluster.provider})"


def local_head() -> tuple[str | None, bool]:
    """The local Ray dashboard dlrun would use for a local job, and whether dlrun started that head:
    its own recorded head, else DLRUN_RAY_ADDRESS, else a head answering on the dashboard port that
    `dlrun submit` would attach to without owning it (not another user's head it cannot use: a token it
    lacks, another Ray version). (None, False) when none answers."""

    from infra.local.head import recorded_head, why_unusable
    from infra.reach import dashboard_alive

    head = recorded_head()
    if head is not None:
        return head.dashboard_url, bool(head.started_by_dlrun)
    explicit = env_str("DLRUN_RAY_ADDRESS")
    if explicit and dashboard_alive(explicit):
        return explicit.rstrip("/"), False
    url = f"http://127.0.0.1:{env_int('DLRUN_DASHBOARD_PORT')}"
    if dashboard_alive(url) and why_unusable(url) is None:
        return url, False
    return None, False


def down(cluster_id: str | None = None, orphans: bool = False, *, all_owners: bool = False,
         confirm=None) -> list[str]:
    """confirm(lines) -> bool is asked before orphans are removed (None: remove without asking)."""
    store = default_store()
    out: list[str] = []
    if cluster_id:
        row = store.get_cluster(cluster_id)
        if row is None:
            raise UsageError(f"no cluster '{cluster_id}'; `dlrun status --json` shows each job's cluster_id")
        return [terminate_recorded(store, row)]
    from infra.local.head import recorded_head, stop_local_head

    head = recorded_head()
    if head and stop_local_head(head):
        out.append(f"stopped the local Ray head dlrun started (process group {head.pgid})")
    for cluster in store.clusters(live_only=True):
        job = store.get_job(cluster.job_id) if cluster.job_id else None
        if capabilities(cluster.provider).remote and (job is None or not job.live):
            out.append(terminate_recorded(store, cluster))
    if orphans:
        out += remove_orphans(store, all_owners=all_owners, confirm=confirm)
    if out:
        return out
    url, _ = local_head()
    if url:  # dlrun never stops a head it did not start
        return [f"nothing to stop: the Ray head at {url} was not started by dlrun (dlrun only attached to it "
                "for local jobs); stop it where it was started"]
    why = "no local Ray head dlrun started is running and no cluster of a finished job is left"
    return [f"nothing to stop: {why}" + ("" if orphans else " (`dlrun down --orphans` also looks in the clouds)")]


def remove_orphans(store: Store, clouds=CLOUDS, providers: dict | None = None, *, all_owners: bool = False,
                   confirm=None, owner: str | None = None) -> list[str]:
    """Remove the dlrun-tagged cloud clusters of this owner (every owner with all_owners) whose job is
    not live in this store. Another owner's clusters are listed as left alone, never touched."""
    from infra import get_provider
    from infra.base import CredentialsError
    from infra.identity import owner_identity, same_owner

    me = owner or owner_identity()
    out, doomed = [], []
    for cloud in clouds:
        try:
            provider = (providers or {}).get(cloud) or get_provider(cloud)
            owned = provider.list_owned()
            out += [f"left {line}" for line in provider.kept_resources()]  # e.g. dlrun's VPC
        except CredentialsError as e:
            out.append(f"{cloud}: skipped ({e.message})")
            continue
        except ImportError:
            continue
        for cluster in owned:
            job = store.get_job(cluster.job_id) if cluster.job_id else None
            if job is not None and job.live:
                continue
            theirs = cluster.extra.get("owner", "")
            if not all_owners and not same_owner(theirs, me):
                out.append(f"left {cloud} cluster {cluster.cluster_id}: owned by {theirs or 'an unknown owner'} "
                           "(--all-owners removes it)")
                continue
            doomed.append((cloud, provider, cluster))
    if doomed and confirm is not None:
        if not confirm([f"{cloud} cluster {c.cluster_id} (job {c.job_id or '?'}, {c.region or 'no region'})"
                        for cloud, _, c in doomed]):
            return out + ["nothing removed"]
    for cloud, provider, cluster in doomed:
        provider.terminate(cluster)
        store.cluster_terminated(cluster.cluster_id)  # when recorded here
        where = cluster.provider or cloud  # a team cluster's own name (cluster:NAME), not its registry kind
        out.append(f"removed orphan {where} cluster {cluster.cluster_id} (job {cluster.job_id or '?'})")
    return out
