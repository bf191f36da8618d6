"""This machine as a backend: 'launching' means having a Ray head on 127.0.0.1.

The local head stays up after a job so its dashboard keeps the job history; `dlrun down`
stops it (only when dlrun started it).
"""
from __future__ import annotations

import os
import time

import infra
from infra.base import Cluster, ClusterRequest, Connection, Node, NodeState, Provider
from infra.catalog import Offer
from infra.local.gpus import local_offers
from infra.local.head import check_explicit_head, dashboard_alive, ensure_local_head, head_log, recorded_head


class LocalProvider(Provider):
    name = "local"
    capabilities = infra.capabilities("local")

    def __init__(self, **_ignored):
        pass

    def preflight(self) -> None:
        """This machine needs no login; a head named by DLRUN_RAY_ADDRESS must be one dlrun can use."""
        explicit = os.environ.get("DLRUN_RAY_ADDRESS")
        if explicit and recorded_head() is None:
            check_explicit_head(explicit)

    def offers(self) -> list[Offer]:
        return local_offers()

    def launch(self, request: ClusterRequest) -> Cluster:
        head = ensure_local_head(progress=request.progress)
        return Cluster(cluster_id=request.cluster_id, provider="local", region="local", zone="local",
                       instance_type=request.offer.instance_type, spot=False, price_per_hour=0.0,
                       nodes=[Node(node_id="local", private_ip="127.0.0.1", is_head=True)],
                       job_id=request.job_id, launched_at=time.time(), head_address=head.dashboard_url,
                       extra={"started_by_dlrun": head.started_by_dlrun, "pgid": head.pgid,
                              **({"head_log": str(head_log())} if head.started_by_dlrun else {}),
                              **({"notice": head.notice} if head.notice else {})})

    def connect(self, cluster: Cluster) -> Connection:
        from infra.local.head import local_head_headers

        return Connection(cluster.head_address, headers=local_head_headers(cluster.head_address))

    def status(self, cluster: Cluster) -> list[NodeState]:
        alive = dashboard_alive(cluster.head_address, timeout=2.0)
        return [NodeState("local", "running" if alive else "gone")]

    def terminate(self, cluster: Cluster) -> None:
        """The shared local head outlives single jobs (its dashboard keeps their history)."""

    def list_owned(self) -> list[Cluster]:
        """The local head is not a cluster of one job: nothing is left over."""
        return []
