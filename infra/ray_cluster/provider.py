"""A team's existing Ray cluster behind the provider contract (infra/base.py).

launch reserves nothing (it checks that the cluster answers and its token is taken); connect is the
cluster's own Jobs API with the bearer token read from token_file; terminate stops dlrun's job there
(the cluster stays: it is the team's); status says whether the cluster still answers (a cluster that
vanished is a lost node: the run recovers as after a preemption); list_owned finds dlrun's jobs there
by their metadata (dlrun_job_id, dlrun_cluster_id, dlrun_owner).
"""
from __future__ import annotations

import time
from urllib.parse import quote

import infra
from infra.base import Cluster, ClusterRequest, Connection, Node, NodeState, Provider, ProviderError
from infra.catalog import Offer
from infra.ray_cluster import KIND, cluster_name
from infra.ray_cluster.live import live_offers  # noqa: F401  (the provider's offers)
from infra.ray_cluster.resources import get_json
from infra.ray_cluster.settings import ClusterSettings, cluster_settings, load_clusters

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
STATUS_TRIES = 3  # a cluster counts as gone after this many unanswered pings in a row (one status call)


class RayClusterProvider(Provider):
    """`cluster:NAME`: that cluster; `cluster`: every configured one (for list_owned / `dlrun down --orphans`)."""

    name = KIND
    capabilities = infra.capabilities(KIND)

    def __init__(self, name: str = KIND, **_ignored):
        self.name = name
        self._settings: ClusterSettings | None = None

    @property
    def settings(self) -> ClusterSettings:
        if self._settings is None:
            self._settings = cluster_settings(cluster_name(self.name))
        return self._settings

    def _for(self, cluster: Cluster) -> ClusterSettings:
        return cluster_settings(cluster.extra.get("cluster") or cluster_name(cluster.provider))

    def preflight(self) -> None:
        s = self.settings
        get_json(s.address, "/api/version", s.headers(), backend=s.backend, timeout=5.0)

    def offers(self) -> list[Offer]:
        return live_offers(self.settings)

    def launch(self, request: ClusterRequest) -> Cluster:
        s = self.settings
        get_json(s.address, "/api/version", s.headers(), backend=s.backend, timeout=10.0)  # answers, takes the token
        return Cluster(cluster_id=request.cluster_id, provider=s.backend, region="", zone="",
                       instance_type=request.offer.instance_type, spot=False,
                       price_per_hour=request.offer.price_per_hour, job_id=request.job_id, launched_at=time.time(),
                       nodes=[Node(node_id=s.name, is_head=True)], head_address=s.address,
                       extra={"cluster": s.name, "owner": request.owner,
                              # what the job needs on the nodes (its requirements, a bucket client): dlrun
                              # installs nothing there, so Ray's pip runtime_env brings them per job
                              "python_packages": list(request.bootstrap.python_packages if request.bootstrap else [])})

    def connect(self, cluster: Cluster) -> Connection:
        s = self._for(cluster)
        return Connection(s.address, headers=s.headers())

    def status(self, cluster: Cluster) -> list[NodeState]:
        s = self._for(cluster)
        error = None
        for attempt in range(STATUS_TRIES):
            try:
                get_json(s.address, "/api/version", s.headers(), backend=s.backend, timeout=3.0)
                return [NodeState(s.name, "running")]
            except ProviderError as e:
                error = e
                time.sleep(0.5 * (attempt + 1))
        return [NodeState(s.name, "gone", error.message if error else "")]

    def _jobs(self, s: ClusterSettings) -> list[dict]:
        return get_json(s.address, "/api/jobs/", s.headers(), backend=s.backend) or []

    def terminate(self, cluster: Cluster) -> None:
        """Stop dlrun's job of this attempt there if it still runs; the cluster itself is left as it is."""
        s = self._for(cluster)
        try:
            for job in self._jobs(s):
                meta = job.get("metadata") or {}
                mine = meta.get("dlrun_cluster_id") == cluster.cluster_id or \
                    (not meta.get("dlrun_cluster_id") and cluster.job_id and meta.get("dlrun_job_id") == cluster.job_id)
                if mine and job.get("status") not in TERMINAL and job.get("submission_id"):
                    get_json(s.address, f"/api/jobs/{quote(job['submission_id'])}/stop", s.headers(),
                             backend=s.backend, method="POST")
        except ProviderError:
            pass  # a cluster that is gone runs nothing of dlrun's any more

    def list_owned(self) -> list[Cluster]:
        """dlrun's jobs that still run on the cluster(s), one Cluster each (keyed by the attempt's cluster id)."""
        clusters = list(load_clusters().values()) if self.name == KIND else [self.settings]
        found = []
        for s in clusters:
            try:
                jobs = self._jobs(s)
            except ProviderError:
                continue
            for job in jobs:
                meta = job.get("metadata") or {}
                if "dlrun_job_id" not in meta or job.get("status") in TERMINAL:
                    continue
                found.append(Cluster(cluster_id=meta.get("dlrun_cluster_id") or job.get("submission_id", ""),
                                     provider=s.backend, region="", zone="", instance_type=meta.get("instance", ""),
                                     spot=False, price_per_hour=0.0, job_id=meta["dlrun_job_id"],
                                     head_address=s.address, extra={"cluster": s.name,
                                                                    "owner": meta.get("dlrun_owner", "")}))
        return found

    def submission_extras(self, offer: Offer, workers: int, cluster: Cluster) -> dict:
        """What makes Ray place the job on the planned resources, and finds it again: entrypoint GPUs of the
        planned type (Ray's accelerator_type resource, asked for a sliver as Ray's own accelerator_type=
        option does), or the planned CPUs; the attempt's cluster id and owner in the metadata."""
        extra: dict = {"metadata": {"dlrun_cluster_id": cluster.cluster_id,
                                    "dlrun_owner": cluster.extra.get("owner", ""), "cluster": self.settings.name}}
        if offer.accelerator and workers == 1:
            extra["entrypoint_num_gpus"] = offer.accelerator_count
            extra["entrypoint_resources"] = {f"accelerator_type:{offer.extra['ray_accelerator']}": 0.001}
        elif not offer.accelerator:
            extra["entrypoint_num_cpus"] = offer.vcpus
        if cluster.extra.get("python_packages"):
            extra["runtime_env"] = {"pip": {"packages": cluster.extra["python_packages"], "pip_check": False}}
        return extra
