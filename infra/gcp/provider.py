"""GCP backend: Compute Engine VMs (on-demand or SPOT, guest or built-in GPUs) with google-cloud-compute.

launch() tries the region's zones in order (DEFAULT_ZONES, overridable): a stockout deletes what
was made in that zone and moves on; quota, credentials and other errors remove everything this
launch created and raise. Every instance carries dlrun's labels, so launch is idempotent by cluster
id and list_owned() finds leftovers for `dlrun down --orphans`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import google.auth
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from infra.gcp import errors as gcp_errors, network as net
from infra.base import (TAG_CLUSTER, BootstrapConfig, CapacityError, Cluster, ClusterRequest,
                        CredentialsError, Node, NodeState, ProviderError, ProvisionError)
from infra.vm.bootstrap import startup_script
from infra.gcp.compute import (DEFAULT_ZONES, META_CLUSTER_ID, META_JOB_ID, META_PRICE,
                                 addresses_of, instance_body, instance_names, metadata_of)

PREEMPTED_OPERATION = "compute.instances.preempted"
PENDING_STATES = {"PROVISIONING", "STAGING", "REPAIRING"}
DOWN_STATES = {"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED"}


@dataclass
class _Created:
    """What one launch call created, so a failure removes exactly that."""

    instances: list[tuple[str, str]] = field(default_factory=list)  # (zone, name)
    firewalls: list[str] = field(default_factory=list)
    ssh_key: str = ""  # cluster id whose key file this launch made


class GcpProvider:
    name = "gcp"
    network = "global/networks/default"
    operation_timeout_s = 600.0

    def __init__(self, project: str | None = None, credentials=None, api_endpoint: str | None = None,
                 ssh_cidr: str | None = None, zones: dict[str, list[str]] | None = None):
        # DLRUN_GCP_API_ENDPOINT points the client at a Compute Engine emulator (the tests' fake server)
        api_endpoint = api_endpoint or os.environ.get("DLRUN_GCP_API_ENDPOINT") or None
        self._project, self._credentials, self.api_endpoint = project, credentials, api_endpoint
        self.ssh_cidr = ssh_cidr or os.environ.get("DLRUN_SSH_CIDR") or None
        self.zones = {**DEFAULT_ZONES, **(zones or {})}
        self._clients: dict[str, object] | None = None
        self._terminated: set[str] = set()

    # ---------------------------------------------------------------- clients
    @property
    def project(self) -> str:
        self._connect()
        return self._project

    def _connect(self) -> dict[str, object]:
        """Clients are made on first use, so a missing login surfaces as CredentialsError in launch."""
        if self._clients is not None:
            return self._clients
        credentials, default_project, options = self._credentials, None, None
        if self.api_endpoint:
            credentials = credentials or AnonymousCredentials()
            options = ClientOptions(api_endpoint=self.api_endpoint)
        elif credentials is None:
            try:
                credentials, default_project = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/cloud-platform"])
            except auth_exc.DefaultCredentialsError:
                raise CredentialsError(f"no GCP application default credentials: {gcp_errors.CREDENTIALS_HOWTO}",
                                       cloud="gcp") from None
        self._project = (self._project or os.environ.get("GOOGLE_CLOUD_PROJECT") or default_project
                         or getattr(credentials, "project_id", None))
        if not self._project:
            raise CredentialsError("no GCP project configured: set GOOGLE_CLOUD_PROJECT or run "
                                   "`gcloud config set project PROJECT_ID`", cloud="gcp")
        kw = dict(credentials=credentials, client_options=options, transport="rest")
        self._clients = {"instances": compute_v1.InstancesClient(**kw),
                         "zone_ops": compute_v1.ZoneOperationsClient(**kw),
                         "firewalls": compute_v1.FirewallsClient(**kw),
                         "global_ops": compute_v1.GlobalOperationsClient(**kw)}
        return self._clients

    def _c(self, name: str):
        return self._connect()[name]

    # ---------------------------------------------------------------- launch
    def launch(self, request: ClusterRequest) -> Cluster:
        offer = request.offer
        region = offer.region
        if offer.cloud != "gcp":
            raise ProvisionError(f"{offer.key} is not a GCP offer", cloud="gcp")
        if region not in self.zones:
            raise ProvisionError(f"no zones known for GCP region {region}; add them to the zone table",
                                 cloud="gcp", region=region)
        if request.num_nodes < 1:
            raise ProvisionError("a cluster needs at least one node", cloud="gcp", region=region)
        ssh_cidr = self._ssh_cidr(request)  # before anything is created
        try:
            existing = self._find_instances(request.cluster_id, self.zones[region])
        except Exception as e:
            raise gcp_errors.from_exception(e, region=region) from None
        created = _Created()
        try:
            return self._launch(request, ssh_cidr, existing, created)
        except (Exception, KeyboardInterrupt) as e:
            self._cleanup(created)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise gcp_errors.from_exception(e, region=region) from None

    def _ssh_cidr(self, request: ClusterRequest) -> str:
        cidr = request.ssh_cidr or self.ssh_cidr or net.discover_caller_cidr()
        if not cidr:
            raise ProvisionError("could not find this machine's public address for the SSH firewall rule "
                                 "(no answer from the address lookup); set ssh_cidr, e.g. 203.0.113.7/32 "
                                 "— dlrun never opens SSH to 0.0.0.0/0", cloud="gcp", region=request.offer.region)
        return net.checked_cidr(cidr)

    def _launch(self, request: ClusterRequest, ssh_cidr: str, existing: dict[str, list],
                created: _Created) -> Cluster:
        region = request.offer.region
        self._ensure_firewalls(request.cluster_id, ssh_cidr, created)
        if not net.key_path(request.cluster_id).exists():
            created.ssh_key = request.cluster_id
        key_file, public_key = net.ensure_ssh_key(request.cluster_id)
        zones = list(existing) or self.zones[region]  # a half-made cluster is finished where it is
        last: CapacityError | None = None
        for zone in zones:
            try:
                instances = self._launch_in_zone(request, zone, existing.get(zone, []), created, public_key)
            except CapacityError as e:
                last = e
                self._delete_instances([k for k in created.instances if k[0] == zone])
                created.instances = [k for k in created.instances if k[0] != zone]
                continue
            return self._cluster(request.cluster_id, request.job_id, region, zone, instances,
                                 key_file=str(key_file), spot=request.spot,
                                 price=request.offer.hourly(request.spot),
                                 instance_type=request.offer.instance_type)
        raise CapacityError(f"no capacity for {request.offer.instance_type} in any zone of {region} "
                            f"({', '.join(zones)}): {last.message if last else ''}".strip(),
                            cloud="gcp", region=region)

    def _launch_in_zone(self, request: ClusterRequest, zone: str, existing: list, created: _Created,
                        public_key: str) -> list:
        cfg = request.bootstrap or BootstrapConfig(ray_version=_local_ray_version())
        names = instance_names(request.cluster_id, request.num_nodes)
        have = {i.name for i in existing}
        what = f"{request.offer.instance_type}{' (spot)' if request.spot else ''}"
        if names[0] not in have:
            script = startup_script(cfg, is_head=True, cluster_id=request.cluster_id)
            op = self._insert(request, zone, names[0], True, script, public_key, created)
            self._wait(op, zone, what=what)
        head_ip = addresses_of(self._get_instance(zone, names[0]))[0]
        script = startup_script(cfg, is_head=False, head_ip=head_ip, cluster_id=request.cluster_id)
        ops = [self._insert(request, zone, name, False, script, public_key, created)
               for name in names[1:] if name not in have]
        errors = []
        for op in ops:  # wait for all, so none is still being made when a failure is cleaned up
            try:
                self._wait(op, zone, what=what)
            except ProviderError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        return [self._get_instance(zone, name) for name in names]

    def _insert(self, request: ClusterRequest, zone: str, name: str, is_head: bool, script: str,
                public_key: str, created: _Created) -> str:
        body = instance_body(request, name=name, zone=zone, project=self.project, network=self.network,
                             is_head=is_head, script=script, ssh_public_key=public_key)
        try:
            op = self._c("instances").insert(project=self.project, zone=zone, instance_resource=body)
        except gexc.GoogleAPICallError as e:
            raise gcp_errors.from_exception(e, region=request.offer.region, zone=zone,
                                            what=request.offer.instance_type) from None
        created.instances.append((zone, name))
        return op.name

    def _wait(self, op_name: str, zone: str | None, *, what: str = "") -> None:
        """Wait for a zone (or global) operation; raise its error mapped to a provider error.

        Not ExtendedOperation.result(): its poller is a ZoneOperationsClient the library makes
        itself, without our client_options (endpoint), and it ignores an `error` without HTTP status.
        """
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            if zone:
                op = self._c("zone_ops").wait(project=self.project, zone=zone, operation=op_name)
            else:
                op = self._c("global_ops").wait(project=self.project, operation=op_name)
            if op.status == compute_v1.Operation.Status.DONE:
                break
            if time.monotonic() > deadline:
                raise ProvisionError(f"GCP operation {op_name} not done after {self.operation_timeout_s:.0f}s",
                                     cloud="gcp", zone=zone or "")
        region = zone.rsplit("-", 1)[0] if zone else ""
        error = gcp_errors.from_operation(op, region=region, zone=zone or "", what=what)
        if error:
            raise error

    def _ensure_firewalls(self, cluster_id: str, ssh_cidr: str, created: _Created) -> None:
        for rule in net.firewall_rules(cluster_id, ssh_cidr, self.network):
            try:
                op = self._c("firewalls").insert(project=self.project, firewall_resource=rule)
            except gexc.Conflict:
                continue  # made by an earlier launch of this cluster
            created.firewalls.append(rule.name)
            self._wait(op.name, None)

    def _get_instance(self, zone: str, name: str):
        return self._c("instances").get(project=self.project, zone=zone, instance=name)

    def _find_instances(self, cluster_id: str, zones: list[str]) -> dict[str, list]:
        """{zone: instances} of this cluster, by label."""
        found = {}
        for zone in zones:
            items = list(self._c("instances").list(request=compute_v1.ListInstancesRequest(
                project=self.project, zone=zone, filter=f'labels.{TAG_CLUSTER} = "{net.slug(cluster_id)}"')))
            if items:
                found[zone] = items
        return found

    def _cluster(self, cluster_id: str, job_id: str, region: str, zone: str, instances: list, *,
                 key_file: str, spot: bool, price: float, instance_type: str) -> Cluster:
        head_name = instance_names(cluster_id, 1)[0]
        nodes = []
        for inst in sorted(instances, key=lambda i: (i.name != head_name, i.name)):
            private_ip, public_ip = addresses_of(inst)
            nodes.append(Node(node_id=inst.name, private_ip=private_ip, public_ip=public_ip, zone=zone,
                              is_head=inst.name == head_name))
        head = nodes[0] if nodes else None
        return Cluster(
            cluster_id=cluster_id, provider=self.name, region=region, zone=zone, instance_type=instance_type,
            spot=spot, price_per_hour=price, nodes=nodes, job_id=job_id,
            head_address=f"ssh://{net.SSH_USER}@{head.public_ip or head.private_ip}" if head else "",
            ssh_user=net.SSH_USER, ssh_key_path=key_file,
            extra={"project": self.project, "network_tag": net.cluster_tag(cluster_id),
                   "firewalls": list(net.firewall_names(cluster_id))})

    # ---------------------------------------------------------------- status
    def status(self, cluster: Cluster) -> list[NodeState]:
        try:
            preempted = self._preempted_names({n.zone or cluster.zone for n in cluster.nodes})
            return [self._node_state(n.node_id, self._maybe_instance(n.zone or cluster.zone, n.node_id),
                                     cluster, preempted) for n in cluster.nodes]
        except Exception as e:
            raise gcp_errors.from_exception(e, region=cluster.region) from None

    def _maybe_instance(self, zone: str, name: str):
        try:
            return self._get_instance(zone, name)
        except gexc.NotFound:
            return None

    def _preempted_names(self, zones: set[str]) -> set[str]:
        names = set()
        for zone in zones:
            for op in self._c("zone_ops").list(request=compute_v1.ListZoneOperationsRequest(
                    project=self.project, zone=zone, filter=f'operationType = "{PREEMPTED_OPERATION}"')):
                names.add(op.target_link.rsplit("/", 1)[-1])
        return names

    def _node_state(self, name: str, inst, cluster: Cluster, preempted: set[str]) -> NodeState:
        if inst is None:
            if cluster.cluster_id in self._terminated:
                return NodeState(name, "terminated", "deleted by dlrun")
            if name in preempted or cluster.spot:
                return NodeState(name, "preempted", "spot VM reclaimed by GCP (instance deleted)")
            return NodeState(name, "gone", "instance no longer exists")
        if inst.status == "RUNNING":
            return NodeState(name, "running")
        if inst.status in PENDING_STATES:
            return NodeState(name, "pending", inst.status)
        if name in preempted:
            return NodeState(name, "preempted", f"spot VM reclaimed by GCP ({inst.status})")
        return NodeState(name, "terminated", inst.status)

    # ---------------------------------------------------------------- teardown
    def terminate(self, cluster: Cluster) -> None:
        zones = {n.zone for n in cluster.nodes if n.zone} | ({cluster.zone} if cluster.zone else set())
        try:
            keys = {(n.zone or cluster.zone, n.node_id) for n in cluster.nodes}
            for zone, items in self._find_instances(cluster.cluster_id, sorted(zones)).items():
                keys |= {(zone, i.name) for i in items}
            self._delete_instances(sorted(keys), strict=True)
            self._delete_firewalls(list(net.firewall_names(cluster.cluster_id)), strict=True)
        except Exception as e:
            raise gcp_errors.from_exception(e, region=cluster.region) from None
        net.remove_ssh_key(cluster.cluster_id)
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

    def _cleanup(self, created: _Created) -> None:
        """Best effort: what cannot be removed now is found later by list_owned()."""
        self._delete_instances(created.instances)
        self._delete_firewalls(created.firewalls)
        if created.ssh_key:
            net.remove_ssh_key(created.ssh_key)
        created.instances, created.firewalls, created.ssh_key = [], [], ""

    # ---------------------------------------------------------------- orphans
    def list_owned(self) -> list[Cluster]:
        try:
            return self._list_owned()
        except Exception as e:
            raise gcp_errors.from_exception(e) from None

    def _list_owned(self) -> list[Cluster]:
        by_cluster: dict[str, dict] = {}
        for region, zones in self.zones.items():
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
            clusters.append(self._cluster(
                cluster_id, meta.get(META_JOB_ID, ""), entry["region"], entry["zone"], instances,
                key_file=str(net.key_path(cluster_id)),
                spot=bool(first and first.scheduling.provisioning_model == "SPOT"),
                price=float(meta.get(META_PRICE) or 0.0),
                instance_type=first.machine_type.rsplit("/", 1)[-1] if first else ""))
        return clusters


def _local_ray_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("ray")
    except PackageNotFoundError:
        raise ProvisionError("Ray is not installed here; the cluster must run the client's Ray "
                             "version, so install ray first", cloud="gcp") from None
