"""Taking GCP clusters down: the cloud part of terminate (instances, firewall rules, the node account),
`--fresh` in dlrun's buckets, and the orphan search of `dlrun down --orphans`.

A GcpProvider mixin: the declarations at the top of the class are what it uses of the provider. The local
part of a teardown (SSH key, known_hosts, Ray token) is infra/vm/provider.py's, the same for every cloud.
"""
from __future__ import annotations

from typing import Any, Callable

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from infra.base import TAG_CLUSTER, Cluster, CredentialsError
from infra.gcp import errors as gcp_errors, network as net
from infra.gcp.compute import META_CLUSTER_ID, META_JOB_ID, META_PRICE, metadata_of
from infra.gcp.launch_storage import clear_run_prefix, leftover_node_accounts, remove_node_account
from infra.gcp.records import cluster_from_instances, with_accounts
from infra.gcp.storage import account_email, account_id


class GcpTeardown:
    # what this mixin uses of GcpProvider (infra/gcp/provider.py)
    project: str
    zone_table: dict[str, list[str]]
    storage_endpoint: str | None
    iam_endpoint: str | None
    _credentials: Any
    _terminated: set[str]  # cluster ids dlrun terminated itself (not a preemption: status)
    _c: Callable[[str], Any]
    _wait: Callable[..., None]
    _find_instances: Callable[[str, list[str]], dict[str, list]]

    # ---------------------------------------------------------------- teardown
    def remove_cluster(self, cluster: Cluster) -> None:
        zones = {n.zone for n in cluster.nodes if n.zone} | ({cluster.zone} if cluster.zone else set())
        try:
            keys = {(n.zone or cluster.zone, n.node_id) for n in cluster.nodes}
            accounts = {cluster.extra.get("node_account", "")}
            for zone, items in self._find_instances(cluster.cluster_id, sorted(zones)).items():
                keys |= {(zone, i.name) for i in items}
                accounts |= {a.email for i in items for a in i.service_accounts}
            self._delete_instances(sorted(keys), strict=True)
            self._delete_firewalls(list(net.firewall_names(cluster.cluster_id)), strict=True)
            mine = account_email(account_id(cluster.cluster_id), self.project)
            if mine in accounts:  # only the account made for this cluster (never one the user named)
                remove_node_account(self._credentials, self.project, mine, self.storage_endpoint, self.iam_endpoint)
        except Exception as e:
            raise gcp_errors.from_exception(e, region=cluster.region) from None
        self._terminated.add(cluster.cluster_id)

    def _delete_instances(self, keys: list[tuple[str, str]], strict: bool = False) -> None:
        ops = []
        for zone, name in keys:
            try:
                ops.append((zone, self._c("instances").delete(project=self.project, zone=zone, instance=name).name))
            except gexc.NotFound:
                pass
            except Exception:
                if strict:
                    raise
        for zone, op in ops:
            try:
                self._wait(op, zone)
            except Exception:
                if strict:
                    raise

    def _delete_firewalls(self, names: list[str], strict: bool = False) -> None:
        for name in names:
            try:
                self._wait(self._c("firewalls").delete(project=self.project, firewall=name).name, None)
            except gexc.NotFound:
                pass
            except Exception:
                if strict:
                    raise

    def clear_run_prefix(self, owner: str, relative: str) -> dict[str, list[str]]:
        """`--fresh` in dlrun's own buckets (launch_storage.clear_run_prefix); {} without a GCP login."""
        try:
            project = self.project
        except CredentialsError:
            return {}  # no attempt of the run could reach them then
        try:
            return clear_run_prefix(self._credentials, project, owner, relative, self.storage_endpoint)
        except Exception as e:
            raise gcp_errors.from_exception(e) from None

    # ---------------------------------------------------------------- orphans
    def list_owned(self) -> list[Cluster]:
        try:
            return self._list_owned()
        except Exception as e:
            raise gcp_errors.from_exception(e) from None

    def _list_owned(self) -> list[Cluster]:
        by_cluster: dict[str, dict] = {}
        for region, zones in self.zone_table.items():
            for zone in zones:
                for inst in self._c("instances").list(request=compute_v1.ListInstancesRequest(
                        project=self.project, zone=zone, filter=f"labels.{TAG_CLUSTER}:*")):
                    meta = metadata_of(inst)
                    cluster_id = meta.get(META_CLUSTER_ID) or inst.labels[TAG_CLUSTER]
                    entry = by_cluster.setdefault(cluster_id, {"region": region, "zone": zone, "instances": [],
                                                               "meta": meta})
                    entry["instances"].append(inst)
        for fw in self._c("firewalls").list(project=self.project):
            cluster_id = net.cluster_id_of_firewall(fw)
            if fw.name.startswith(net.NAME_PREFIX) and cluster_id:
                by_cluster.setdefault(cluster_id, {"region": "", "zone": "", "instances": [], "meta": {}})
        clusters = []
        for cluster_id, entry in sorted(by_cluster.items()):
            instances, meta = entry["instances"], entry["meta"]
            first = instances[0] if instances else None
            clusters.append(cluster_from_instances(
                cluster_id, meta.get(META_JOB_ID, ""), entry["region"], entry["zone"], instances,
                project=self.project, spot=bool(first and first.scheduling.provisioning_model == "SPOT"),
                price=float(meta.get(META_PRICE) or 0.0),
                instance_type=first.machine_type.rsplit("/", 1)[-1] if first else ""))
        accounts = leftover_node_accounts(self._credentials, self.project, iam_endpoint=self.iam_endpoint)
        return with_accounts(clusters, accounts, project=self.project)
