"""GCP backend: Compute Engine VMs (on-demand or SPOT, guest or built-in GPUs) with google-cloud-compute.

The region's zones that offer the GPU are tried in order (DEFAULT_ZONES, overridable, filtered by
infra/gcp/zones.py); the launch order, rollback and zone failover are infra/vm/provider.py's, this file
is the Compute Engine calls. Clusters live on dlrun's own network (infra/gcp/network.py), made on the
first launch in a region and kept. Every instance sets `enable-oslogin=FALSE` (overriding a project
that turns OS Login on); an organisation policy that forbids it fails the insert and ends every GCP attempt
(errors.py). Every instance carries dlrun's labels, so launch is idempotent by cluster id (a half-made
cluster is finished in its zone) and list_owned() finds leftovers for `dlrun down --orphans`.

Every node runs as its cluster's own service account (made per launch, removed at teardown), which may
delete its own instance and boot disk and nothing else: the node's watchdog deletes the instance when dlrun
stopped watching (self_end.py), since a guest power-off only stops a GCE instance. Every API call retries
rate limits (retry.py); an insert retries while a new node account has not reached Compute Engine.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import google.auth
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

import infra
from infra.base import (TAG_CLUSTER, BootstrapConfig, Cluster, ClusterRequest, CredentialsError, NodeState,
                        ProviderError, ProvisionError)
from infra.buckets import node_client_packages
from infra.catalog import sold_markets
from infra.gcp import errors as gcp_errors, network as net
from infra.gcp.compute import DEFAULT_ZONES, GcpPrepared, addresses_of, instance_body, instance_names
from infra.gcp.launch_storage import prepare_node_account, prepare_storage, remove_node_account
from infra.gcp.records import cluster_from_instances, node_state
from infra.gcp.retry import RateLimited
from infra.gcp.self_end import SELF_DELETE_ROLE, self_end_script
from infra.gcp.storage import account_email, account_id
from infra.gcp.teardown import GcpTeardown
from infra.gcp.zones import zones_for
from infra.identity import owner_identity
from infra.refresh.clients import gcp_emulated
from infra.vm.bootstrap import startup_script
from infra.vm.keys import ensure_cluster_key, key_path
from infra.vm.provider import Created, Found, VmProvider, local_ray_version

PREEMPTED_OPERATION = "compute.instances.preempted"
# an insert naming a node account IAM has not propagated to Compute Engine yet is tried again for this long
ACCOUNT_PROPAGATION_S, ACCOUNT_RETRY_S = 180.0, 5.0


class GcpProvider(GcpTeardown, VmProvider[GcpPrepared]):
    name = "gcp"
    capabilities = infra.capabilities("gcp")
    operation_timeout_s = 600.0

    def __init__(self, project: str | None = None, credentials=None, api_endpoint: str | None = None,
                 ssh_cidr: str | None = None, zones: dict[str, list[str]] | None = None,
                 storage_endpoint: str | None = None, iam_endpoint: str | None = None, sleep=time.sleep):
        # DLRUN_GCP_API_ENDPOINT points the client at another Compute Engine endpoint (Private Service Connect, or an
        # emulator when DLRUN_GCP_EMULATOR=1: then without credentials)
        api_endpoint = api_endpoint or os.environ.get("DLRUN_GCP_API_ENDPOINT") or None
        self._project, self._credentials, self.api_endpoint = project, credentials, api_endpoint
        # ... and these the checkpoint bucket's Cloud Storage and IAM calls (infra/gcp/launch_storage.py)
        self.storage_endpoint = storage_endpoint or os.environ.get("DLRUN_GCS_ENDPOINT") or None
        self.iam_endpoint = iam_endpoint or os.environ.get("DLRUN_GCP_IAM_ENDPOINT") or None
        self.ssh_cidr = ssh_cidr
        from infra.refresh.zones import gcp_region_zones  # regions `dlrun catalog refresh` found

        self.zone_table = {**DEFAULT_ZONES, **gcp_region_zones(), **(zones or {})}
        self._clients: dict[str, Any] | None = None  # name -> a RateLimited Compute Engine client
        self._terminated: set[str] = set()
        self._access_checked = False
        self._networked: set[str] = set()  # regions whose network and subnet are known to exist
        self._sleep = sleep

    # ---------------------------------------------------------------- clients
    @property
    def project(self) -> str:
        self._connect()  # sets the project, or raises CredentialsError without one
        return self._project or ""

    def _connect(self) -> dict[str, Any]:
        """Clients are made on first use, so a missing login surfaces as CredentialsError in launch."""
        if self._clients is not None:
            return self._clients
        credentials, default_project, options = self._credentials, None, None
        if self.api_endpoint:
            options = ClientOptions(api_endpoint=self.api_endpoint)
        if credentials is None and self.api_endpoint and gcp_emulated():
            credentials = AnonymousCredentials()  # an emulator (DLRUN_GCP_EMULATOR=1); an endpoint alone is Google's
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
        self._credentials = credentials
        kw = dict(credentials=credentials, client_options=options, transport="rest")
        clients = {"instances": compute_v1.InstancesClient, "zone_ops": compute_v1.ZoneOperationsClient,
                   "firewalls": compute_v1.FirewallsClient, "global_ops": compute_v1.GlobalOperationsClient,
                   "networks": compute_v1.NetworksClient, "subnetworks": compute_v1.SubnetworksClient,
                   "region_ops": compute_v1.RegionOperationsClient, "projects": compute_v1.ProjectsClient,
                   "disks": compute_v1.DisksClient}
        self._clients = {name: RateLimited(cls(**kw), sleep=self._sleep) for name, cls in clients.items()}
        return self._clients

    def _c(self, name: str):
        return self._connect()[name]

    def check_credentials(self) -> None:
        self._connect()  # application default credentials and a project, or CredentialsError
        self._check_project()

    def _check_project(self) -> None:
        """The project answers (credentials and project id are usable) before anything is made. OS Login in
        the project's common metadata is no obstacle: every instance overrides it (compute.py)."""
        if self._access_checked:
            return
        self._c("projects").get(project=self.project)
        self._access_checked = True

    def offers(self):
        out = []
        for o in super().offers():
            if o.region in self.zone_table and not zones_for(o, self.zone_table[o.region]):
                continue
            markets = sold_markets(o)
            if markets is not None:
                o.extra["markets"] = markets  # e.g. a3-highgpu-1g: spot only (configs/catalog/gcp_markets.csv)
            out.append(o)
        return out

    # ---------------------------------------------------------------- launch (VmProvider hooks)
    def to_provider_error(self, e: BaseException, **where) -> ProviderError:
        return gcp_errors.from_exception(e, **where)

    def check_region(self, region: str) -> None:
        if region not in self.zone_table:
            raise ProvisionError(f"no zones known for GCP region {region}; add them to the zone table",
                                 cloud="gcp", region=region)

    def zones(self, region: str) -> list[str]:
        return self.zone_table[region]

    def zones_for(self, request: ClusterRequest) -> list[str]:
        return zones_for(request.offer, self.zone_table[request.offer.region])

    def find(self, request: ClusterRequest) -> Found | None:
        existing = self._find_instances(request.cluster_id, self.zone_table[request.offer.region])
        # a half-made cluster is finished where it is (never complete here: launch_in_zone waits for it)
        return Found(None, complete=False, zones=list(existing), instances=existing) if existing else None

    def prepare(self, request: ClusterRequest, ssh_cidr: str, created: Created) -> GcpPrepared:
        self._check_project()
        markets = sold_markets(request.offer)
        market = "spot" if request.spot else "on-demand"
        if markets is not None and market not in markets:
            raise ProvisionError(f"GCP does not sell {request.offer.instance_type} {market} (only "
                                 f"{' / '.join(markets)}: configs/catalog/gcp_markets.csv)",
                                 cloud="gcp", region=request.offer.region)
        cfg = request.bootstrap or BootstrapConfig(ray_version=local_ray_version("gcp"))
        # every node runs as its cluster's account: it may delete its own instance (self_end.py), and with a
        # gs:// checkpoint reach that run's prefix; a failure after this line removes the account
        created.identity = account_email(account_id(request.cluster_id), self.project)
        owner = request.owner or owner_identity()
        if request.storage:
            account = prepare_storage(self._credentials, self.project, request.storage, region=request.offer.region,
                                      owner=owner, cluster_id=request.cluster_id,
                                      job_id=request.job_id, storage_endpoint=self.storage_endpoint,
                                      iam_endpoint=self.iam_endpoint)
            cfg = replace(cfg, python_packages=[*cfg.python_packages, *node_client_packages("gs")])
        else:
            account = prepare_node_account(self._credentials, self.project, region=request.offer.region, owner=owner,
                                           cluster_id=request.cluster_id, job_id=request.job_id,
                                           iam_endpoint=self.iam_endpoint)
        cfg = replace(cfg, self_end=self_end_script(self.api_endpoint))
        self._ensure_network(request.offer.region)
        for rule in net.firewall_rules(request.cluster_id, ssh_cidr, net.network_link(self.project)):
            try:
                op = self._c("firewalls").insert(project=self.project, firewall_resource=rule)
            except gexc.Conflict:
                continue  # made by an earlier launch of this cluster
            created.firewalls.append(rule.name)
            self._wait(op.name, None)
        if not key_path(request.cluster_id).exists():
            created.key = request.cluster_id
        _, public_key = ensure_cluster_key(request.cluster_id, comment=net.SSH_USER)
        return GcpPrepared(cfg=cfg, public_key=public_key, service_account=account)

    def _ensure_network(self, region: str) -> None:
        """dlrun's network and this region's subnet: made once (by whichever launch comes first), then reused."""
        if region in self._networked:
            return
        try:
            self._c("networks").get(project=self.project, network=net.NETWORK)
        except gexc.NotFound:
            try:
                self._wait(self._c("networks").insert(project=self.project,
                                                      network_resource=net.network_resource()).name, None)
            except gexc.Conflict:
                pass  # another launch made it meanwhile
        try:
            self._c("subnetworks").get(project=self.project, region=region, subnetwork=net.subnetwork_name(region))
        except gexc.NotFound:
            try:
                op = self._c("subnetworks").insert(project=self.project, region=region,
                                                   subnetwork_resource=net.subnetwork_resource(self.project, region))
                self._wait(op.name, None, region=region)
            except gexc.Conflict:
                pass
        self._networked.add(region)

    def launch_in_zone(self, request: ClusterRequest, zone: str, prepared: GcpPrepared, existing: Found | None,
                       created: Created) -> Cluster:
        cfg, public_key, account = prepared.cfg, prepared.public_key, prepared.service_account
        names = instance_names(request.cluster_id, request.num_nodes)
        have = {i.name for i in (existing.instances.get(zone, []) if existing else [])}
        what = f"{request.offer.instance_type}{' (spot)' if request.spot else ''}"
        if names[0] not in have:
            script = startup_script(cfg, is_head=True, cluster_id=request.cluster_id, login_user=net.SSH_USER)
            op = self._insert(request, zone, names[0], True, script, public_key, created, account)
            self._wait(op, zone, what=what, spot=request.spot)
            self._grant_self_delete(zone, names[0], account)
        head_ip = addresses_of(self._get_instance(zone, names[0]))[0]
        script = startup_script(cfg, is_head=False, head_ip=head_ip, cluster_id=request.cluster_id,
                                login_user=net.SSH_USER)
        ops = [(name, self._insert(request, zone, name, False, script, public_key, created, account))
               for name in names[1:] if name not in have]
        errors = []
        for name, op in ops:  # wait for all, so none is still being made when a failure is cleaned up
            try:
                self._wait(op, zone, what=what, spot=request.spot)
                self._grant_self_delete(zone, name, account)
            except ProviderError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        for name in names:
            if name in have:  # made by an earlier launch of this cluster, which may have died before granting
                self._grant_self_delete(zone, name, account)
        instances = [self._get_instance(zone, name) for name in names]
        return cluster_from_instances(request.cluster_id, request.job_id, request.offer.region, zone, instances,
                                      project=self.project, spot=request.spot,
                                      price=request.offer.hourly(request.spot),
                                      instance_type=request.offer.instance_type)

    def _insert(self, request: ClusterRequest, zone: str, name: str, is_head: bool, script: str,
                public_key: str, created: Created, account: str = "") -> str:
        body = instance_body(request, name=name, zone=zone, project=self.project,
                             is_head=is_head, script=script, ssh_public_key=public_key,
                             service_account=account)
        deadline = time.monotonic() + ACCOUNT_PROPAGATION_S
        while True:
            try:
                op = self._c("instances").insert(project=self.project, zone=zone, instance_resource=body)
                break
            except gexc.GoogleAPICallError as e:
                # IAM is eventually consistent (cloud.google.com/iam/docs/overview#consistency): the account
                # made a moment ago may not be known to Compute Engine yet. Only dlrun's own account is waited
                # for; the same answer after the deadline is the permission problem it names.
                mine = account and account == account_email(account_id(request.cluster_id), self.project)
                if not (mine and gcp_errors.is_account_not_ready(e.code, e.message or "")
                        and time.monotonic() < deadline):
                    raise gcp_errors.from_exception(e, region=request.offer.region, zone=zone,
                                                    what=request.offer.instance_type, spot=request.spot) from None
                self._sleep(ACCOUNT_RETRY_S)
        created.instances.append((zone, name))
        return op.name

    def _grant_self_delete(self, zone: str, name: str, account: str) -> None:
        """The node account may delete this instance and its boot disk, and nothing else (self_end.py): an
        instance-level and a disk-level IAM policy, each with one binding."""
        if not account:
            return
        policy = compute_v1.Policy(bindings=[compute_v1.Binding(role=SELF_DELETE_ROLE,
                                                                members=[f"serviceAccount:{account}"])])
        request = compute_v1.ZoneSetPolicyRequest(policy=policy)
        try:
            self._c("instances").set_iam_policy(project=self.project, zone=zone, resource=name,
                                                zone_set_policy_request_resource=request)
            self._c("disks").set_iam_policy(project=self.project, zone=zone, resource=name,
                                            zone_set_policy_request_resource=request)
        except gexc.GoogleAPICallError as e:
            err = gcp_errors.from_exception(e, region=zone.rsplit("-", 1)[0], zone=zone)
            if isinstance(err, CredentialsError):
                raise CredentialsError(f"dlrun could not let node {name} delete itself ({e.message}): it needs "
                                       "compute.instances.setIamPolicy and compute.disks.setIamPolicy "
                                       "(roles/compute.instanceAdmin.v1 or roles/compute.admin on the project); "
                                       "without them an unwatched node would only stop, its disk still billed",
                                       cloud="gcp", region=err.region, zone=zone) from None
            raise err from None

    def undo_zone(self, created: Created, zone: str) -> None:
        self._delete_instances([k for k in created.instances if k[0] == zone])
        created.instances = [k for k in created.instances if k[0] != zone]

    def cleanup(self, cluster_id: str, created: Created) -> None:
        self._delete_instances(created.instances)
        self._delete_firewalls(created.firewalls)
        if created.identity:
            remove_node_account(self._credentials, self.project, created.identity, self.storage_endpoint,
                                self.iam_endpoint)
        created.instances, created.firewalls, created.key, created.identity = [], [], "", ""

    def _wait(self, op_name: str, zone: str | None, *, what: str = "", region: str = "",
              spot: bool | None = None) -> None:
        """Wait for a zone (or region, or global) operation; raise its error mapped to a provider error.

        Not ExtendedOperation.result(): its poller is a ZoneOperationsClient the library makes
        itself, without our client_options (endpoint), and it ignores an `error` without HTTP status.
        """
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            if zone:
                op = self._c("zone_ops").wait(project=self.project, zone=zone, operation=op_name)
            elif region:
                op = self._c("region_ops").wait(project=self.project, region=region, operation=op_name)
            else:
                op = self._c("global_ops").wait(project=self.project, operation=op_name)
            if op.status == compute_v1.Operation.Status.DONE:
                break
            if time.monotonic() > deadline:  # each wait() call itself blocks up to two minutes
                raise ProvisionError(f"GCP operation {op_name} not done after {self.operation_timeout_s:.0f}s",
                                     cloud="gcp", zone=zone or "")
        region = zone.rsplit("-", 1)[0] if zone else region
        error = gcp_errors.from_operation(op, region=region, zone=zone or "", what=what, spot=spot)
        if error:
            raise error

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

    # ---------------------------------------------------------------- status
    def status(self, cluster: Cluster) -> list[NodeState]:
        try:
            preempted = self._preempted_names({n.zone or cluster.zone for n in cluster.nodes})
            return [node_state(n.node_id, self._maybe_instance(n.zone or cluster.zone, n.node_id), spot=cluster.spot,
                               terminated_by_us=cluster.cluster_id in self._terminated, preempted=preempted)
                    for n in cluster.nodes]
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
