"""AWS backend: a Ray cluster of EC2 instances (on-demand or spot), tagged, firewalled and torn down.

Node 0 is the Ray head; workers get its private IP in their start-up script, so the head is
launched (and given an address) first. Every resource carries the dlrun tags, which is how a
cluster is found again: for idempotent launches, for `status`, and for `dlrun down --orphans`.
The launch order, rollback and zone failover are infra/vm/provider.py's; this file is the EC2 calls.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

import infra
from infra.aws import compute, network as net, quotas, vpc, zones
from infra.aws.compute import AwsPrepared
from infra.aws.errors import CREDENTIALS_HOWTO, START_CAPACITY_REASONS, error_code, quota_error, to_provider_error
from infra.aws.images import find_image, root_volume
from infra.aws.launch_storage import prepare_storage, remove_node_role, run_instances
from infra.aws.records import TAG_PRICE, TAG_SPOT, TAG_SSH_USER, UP_STATES, cluster_from_instances, node_state
from infra.aws.storage import role_name
from infra.aws.teardown import AwsTeardown
from infra.base import (TAG_CLUSTER, TAG_JOB, TAG_OWNER, BootstrapConfig, CapacityError, Cluster, ClusterRequest,
                        CredentialsError, NodeState, ProvisionError)
from infra.buckets import node_client_packages
from infra.identity import owner_identity
from infra.vm.poll import poll_until
from infra.vm.provider import Created, Found, VmProvider, local_ray_version

log = logging.getLogger(__name__)


class AwsProvider(AwsTeardown, VmProvider[AwsPrepared]):
    name = "aws"
    capabilities = infra.capabilities("aws")

    def __init__(self, region: str | None = None, endpoint_url: str | None = None, session=None,
                 ssh_cidr: str | None = None, *, regions: list[str] | None = None,
                 key_name: str | None = None, key_path: str | None = None,
                 launch_timeout_s: float = 600.0, poll_interval_s: float = 5.0,
                 max_attempts: int = 6, subnets: dict[str, str] | None = None):
        self._session = session or boto3.Session()
        self.region = region or self._session.region_name
        self.endpoint_url = endpoint_url
        self.ssh_cidr = ssh_cidr
        self.regions = regions
        self.key_name, self.key_path = key_name, key_path  # the user's own key, used instead of a per-cluster one
        self.launch_timeout_s, self.poll_interval_s = launch_timeout_s, poll_interval_s
        # botocore's "standard" mode retries RequestLimitExceeded/throttling with exponential backoff
        self._config = Config(retries={"mode": "standard", "max_attempts": max_attempts},
                              connect_timeout=10, read_timeout=60)
        self._clients: dict[str, Any] = {}  # region -> boto3 EC2 client
        self._amis: dict[tuple[str, str], tuple[str, str]] = {}
        self._terminated: set[str] = set()
        # region -> the subnet the user chose ($DLRUN_HOME/config.yaml aws.subnets; infra/aws/vpc.py): read
        # here because every caller builds providers with infra.get_provider(name), no settings passed
        self.subnets = vpc.configured_subnets() if subnets is None else dict(subnets)
        self._networks: dict[str, vpc.Network] = {}
        self._roots: dict[tuple[str, int, bool], dict] = {}

    def _ec2(self, region: str | None):
        region = region or self.region
        if not region:
            raise CredentialsError("no AWS region configured: run `aws configure` or set "
                                   "AWS_DEFAULT_REGION", cloud="aws")
        if region not in self._clients:
            if self._session.get_credentials() is None:
                raise CredentialsError(CREDENTIALS_HOWTO, cloud="aws", region=region)
            self._clients[region] = self._session.client(
                "ec2", region_name=region, endpoint_url=self.endpoint_url, config=self._config)
        return self._clients[region]

    def _ssm(self, region: str):
        """The public SSM parameters that name the current AMIs (AWS publishes them per region)."""
        return self._session.client("ssm", region_name=region, endpoint_url=self.endpoint_url, config=self._config)

    def check_credentials(self) -> None:
        """One cheap call: missing keys fail here, and so do keys AWS refuses (AuthFailure)."""
        region = self.region or next((o.region for o in self.offers()), None)
        self._ec2(region).describe_availability_zones()

    def _poll(self, check, what: str):
        return poll_until(check, timeout_s=self.launch_timeout_s, interval_s=self.poll_interval_s,
                          what=what, cloud="aws")

    # ---------------------------------------------------------------- launch (VmProvider hooks)
    def to_provider_error(self, e: BaseException, **where):
        return to_provider_error(e, **where)

    def find(self, request: ClusterRequest) -> Found | None:
        region = request.offer.region
        existing = compute.of_cluster(self._ec2(region), request.cluster_id, UP_STATES)
        return Found(self._cluster(region, request.cluster_id, existing), complete=True) if existing else None

    def zones(self, region: str) -> list[str]:
        return zones.available_zones(self._ec2(region))

    def zone_ids(self, region: str) -> dict[str, str]:
        return zones.zone_ids(self._ec2(region))

    def zones_for(self, request: ClusterRequest) -> list[str]:
        """A subnet the user named lives in one zone: only that one."""
        network = self._networks.get(request.offer.region)
        if network is not None and network.fixed_zone:
            return [network.fixed_zone]
        return self.zones(request.offer.region)

    def network(self, region: str, owner: str = "", *, fresh: bool = False) -> vpc.Network:
        """The VPC this region's clusters go in (infra/aws/vpc.py): chosen again by each launch's prepare
        (a long-lived scheduler must notice a VPC or subnet that changed since), reused within it."""
        if fresh or region not in self._networks:
            self._networks[region] = vpc.choose(self._ec2(region), region, user_subnet=self.subnets.get(region, ""),
                                                owner=owner or owner_identity())
        return self._networks[region]

    def prepare(self, request: ClusterRequest, ssh_cidr: str, created: Created) -> AwsPrepared:
        region = request.offer.region
        ec2 = self._ec2(region)
        gpu = bool(request.offer.accelerator)
        key = (region, request.image or ("gpu" if gpu else "cpu"))
        if key not in self._amis:
            self._amis[key] = find_image(ec2, region, request.image, ssm=self._ssm(region), gpu=gpu)
        ami, ssh_user = self._amis[key]
        tags = {TAG_CLUSTER: request.cluster_id, TAG_JOB: request.job_id,
                TAG_OWNER: request.owner or owner_identity()}
        network = self.network(region, tags[TAG_OWNER], fresh=True)
        group_id, made_group = net.ensure_security_group(ec2, request.cluster_id, tags, ssh_cidr, network.vpc_id)
        if made_group:
            created.firewalls.append(group_id)
        if self.key_name:
            key_name = self.key_name
        else:
            key_name, made_key = net.register_key(ec2, request.cluster_id, tags)
            created.key = key_name if made_key else ""
        instance_tags = {**tags, TAG_PRICE: f"{request.offer.hourly(request.spot):.6g}",
                         TAG_SPOT: str(bool(request.spot)).lower(), TAG_SSH_USER: ssh_user}
        cfg = request.bootstrap or BootstrapConfig(ray_version=local_ray_version("aws"))
        root_key = (ami, int(cfg.root_volume_gb or 0), gpu)
        if root_key not in self._roots:
            self._roots[root_key] = root_volume(ec2, ami, cfg.root_volume_gb, gpu=gpu)
        profile = ""
        if request.storage:
            created.identity = role_name(request.cluster_id)  # set first: a failure halfway still removes it
            profile = prepare_storage(self._session, request.storage, region=region,
                                      owner=tags[TAG_OWNER], endpoint_url=self.endpoint_url,
                                      cluster_id=request.cluster_id, job_id=request.job_id,
                                      data_read=request.data_read, data_uploads=request.data_uploads)
            cfg = replace(cfg, python_packages=[*cfg.python_packages, *node_client_packages("s3")])
        return AwsPrepared(cfg=cfg, ami=ami, login_user=ssh_user, group_id=group_id, key_name=key_name,
                           tags=instance_tags, profile=profile, root=self._roots[root_key])

    def launch_in_zone(self, request: ClusterRequest, zone: str, prepared: AwsPrepared, existing: Found | None,
                       created: Created) -> Cluster:
        region = request.offer.region
        ec2 = self._ec2(region)
        network = self.network(region, request.owner)
        subnet = vpc.subnet_in(ec2, network, zone, count=request.num_nodes, owner=request.owner or owner_identity())
        if subnet is None:  # CapacityError: the skeleton moves on to the next zone
            raise CapacityError(f"no usable subnet in {zone}: {network.why_none.get(zone, 'none found')}",
                                cloud="aws", region=region, zone=zone)
        head = self._run(ec2, request, prepared, created, zone=zone, subnet=subnet, count=1, head_ip=None)[0]
        head_ip = self._poll(lambda: next((i.get("PrivateIpAddress") for i in compute.by_ids(ec2, [head])), None),
                             f"{head} got no private IP")
        if request.num_nodes > 1:
            self._run(ec2, request, prepared, created, zone=zone, subnet=subnet, count=request.num_nodes - 1,
                      head_ip=head_ip)
        ids = [i for z, i in created.instances if z == zone]
        instances = self._poll(lambda: self._all_running(ec2, ids), f"instances not running ({ids})")
        return self._cluster(request.offer.region, request.cluster_id, instances)

    def _run(self, ec2, request: ClusterRequest, prepared: AwsPrepared, created: Created, *, zone: str, subnet: str,
             count: int, head_ip: str | None) -> list[str]:
        params = compute.run_params(request, prepared, zone=zone, count=count, head_ip=head_ip, subnet_id=subnet)
        try:
            ids = [i["InstanceId"] for i in run_instances(ec2, params, self._poll)["Instances"]]
        except ClientError as e:
            if error_code(e) not in quotas.VCPU_CODES:
                raise
            offer = request.offer
            raise quota_error(e, instance_type=offer.instance_type, region=offer.region, spot=request.spot,
                              vcpus_needed=(offer.vcpus or 0) * request.num_nodes, zone=zone) from None
        created.instances.extend((zone, i) for i in ids)
        return ids

    def _all_running(self, ec2, ids: list[str]) -> list[dict] | None:
        found = compute.by_ids(ec2, ids)
        ended = [i for i in found if i["State"]["Name"] not in UP_STATES]
        if ended:
            state_reason = ended[0].get("StateReason") or {}
            reason = state_reason.get("Message") or ended[0]["State"]["Name"]
            message = f"{ended[0]['InstanceId']} stopped while starting: {reason}"
            if state_reason.get("Code") in START_CAPACITY_REASONS:  # EC2 ran out of capacity after accepting it
                raise CapacityError(message, cloud="aws")
            raise ProvisionError(message, cloud="aws")
        if len(found) == len(ids) and all(i["State"]["Name"] == "running" for i in found):
            return found
        return None

    def undo_zone(self, created: Created, zone: str) -> None:
        ids = [i for z, i in created.instances if z == zone]
        if ids:
            self._terminate_ids(self._ec2(created.region), ids)
        created.instances = [(z, i) for z, i in created.instances if z != zone]

    def cleanup(self, cluster_id: str, created: Created) -> None:
        ec2 = self._ec2(created.region)
        ids = [i for _, i in created.instances]
        self._terminate_ids(ec2, ids)
        self._wait_gone(ec2, ids)
        for group_id in created.firewalls:
            self._delete_group_when_free(ec2, group_id)
        if created.key:
            net.delete_key_pair(ec2, created.key)
        if created.identity:
            remove_node_role(self._session, created.identity, self.endpoint_url)

    # ---------------------------------------------------------------- status
    def status(self, cluster: Cluster) -> list[NodeState]:
        try:
            ec2 = self._ec2(cluster.region)
            found = {i["InstanceId"]: i for i in compute.by_ids(ec2, [n.node_id for n in cluster.nodes])}
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e, region=cluster.region) from None
        return [node_state(n.node_id, found.get(n.node_id), spot=cluster.spot,
                           terminated_by_us=n.node_id in self._terminated) for n in cluster.nodes]

    def _cluster(self, region: str, cluster_id: str, instances: list[dict]) -> Cluster:
        return cluster_from_instances(region, cluster_id, instances,
                                      own_key_name=self.key_name, own_key_path=self.key_path)


__all__ = ["AwsProvider"]
