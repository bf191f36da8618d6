"""AWS backend: a Ray cluster of EC2 instances (on-demand or spot), tagged, firewalled and torn down.

Node 0 is the Ray head; workers get its private IP in their start-up script, so the head is
launched (and given an address) first. Every resource carries the dlrun tags, which is how a
cluster is found again: for idempotent launches, for `status`, and for `dlrun down --orphans`.
"""
from __future__ import annotations

import getpass
import logging
import os
import time
from dataclasses import dataclass, field

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from infra.aws import network as net
from infra.aws.errors import CREDENTIALS_HOWTO, error_code, to_provider_error
from infra.aws.records import (TAG_PRICE, TAG_ROLE, TAG_SPOT, TAG_SSH_USER, TAG_TERMINATING, UP_STATES,
                               cluster_from_instances, node_state, tags_of)
from infra.base import (TAG_CLUSTER, TAG_JOB, TAG_OWNER, BootstrapConfig, CapacityError, Cluster,
                        ClusterRequest, CredentialsError, NodeState, ProvisionError)
from infra.vm.bootstrap import startup_script

log = logging.getLogger(__name__)

# newest match wins; real DLAMIs are Ubuntu/Amazon Linux images published by Amazon
DEFAULT_AMI_NAME_PATTERNS = ("Deep Learning*",)
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass
class _Created:
    """What one launch call created, so a failure can remove exactly that."""

    instance_ids: list[str] = field(default_factory=list)
    security_group_id: str = ""
    key_name: str = ""


class AwsProvider:
    name = "aws"

    def __init__(self, region: str | None = None, endpoint_url: str | None = None, session=None,
                 ssh_cidr: str | None = None, *, regions: list[str] | None = None,
                 key_name: str | None = None, key_path: str | None = None,
                 launch_timeout_s: float = 600.0, poll_interval_s: float = 5.0,
                 max_attempts: int = 6):
        self._session = session or boto3.Session()
        self.region = region or self._session.region_name
        self.endpoint_url = endpoint_url
        self.ssh_cidr = ssh_cidr or os.environ.get("DLRUN_SSH_CIDR") or None
        self.regions = regions
        self.key_name, self.key_path = key_name, key_path  # the user's own key, used instead of a per-cluster one
        self.launch_timeout_s, self.poll_interval_s = launch_timeout_s, poll_interval_s
        # botocore's "standard" mode retries RequestLimitExceeded/throttling with exponential backoff
        self._config = Config(retries={"mode": "standard", "max_attempts": max_attempts},
                              connect_timeout=10, read_timeout=60)
        self._clients: dict[str, object] = {}
        self._amis: dict[tuple[str, str], tuple[str, str]] = {}
        self._terminated: set[str] = set()

    # ---------------------------------------------------------------- clients
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

    # ---------------------------------------------------------------- launch
    def launch(self, request: ClusterRequest) -> Cluster:
        region = request.offer.region
        try:
            ec2 = self._ec2(region)
            existing = self._instances(ec2, request.cluster_id, states=UP_STATES)
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e, region=region) from None
        if existing:
            return self._cluster(region, request.cluster_id, existing)
        if request.num_nodes < 1:
            raise ProvisionError("a cluster needs at least one node", cloud="aws", region=region)
        created = _Created()
        try:
            return self._launch_new(ec2, request, created)
        except (Exception, KeyboardInterrupt) as e:
            self._cleanup(ec2, request.cluster_id, created)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise to_provider_error(e, region=region, what=request.offer.instance_type) from None

    def _launch_new(self, ec2, request: ClusterRequest, created: _Created) -> Cluster:
        offer, region = request.offer, request.offer.region
        price = offer.hourly(request.spot)
        ssh_cidr = net.checked_cidr(request.ssh_cidr or self.ssh_cidr or net.discover_caller_cidr())
        ami, ssh_user = self._image(ec2, region, request.image)
        tags = {TAG_CLUSTER: request.cluster_id, TAG_JOB: request.job_id,
                TAG_OWNER: request.owner or getpass.getuser()}
        group_id, made_group = net.ensure_security_group(ec2, request.cluster_id, tags, ssh_cidr)
        created.security_group_id = group_id if made_group else ""
        if self.key_name:
            key_name = self.key_name
        else:
            key_name, _, made_key = net.ensure_key_pair(ec2, request.cluster_id, tags)
            created.key_name = key_name if made_key else ""
        instance_tags = {**tags, TAG_PRICE: f"{price:.6g}", TAG_SPOT: str(bool(request.spot)).lower(),
                         TAG_SSH_USER: ssh_user}
        cfg = request.bootstrap or BootstrapConfig(ray_version=_local_ray_version())
        launch = dict(ec2=ec2, request=request, ami=ami, group_id=group_id, key_name=key_name,
                      tags=instance_tags, cfg=cfg, created=created)

        failures: list[str] = []
        for zone in self._zones(ec2):
            before = len(created.instance_ids)
            try:
                head = self._run(zone=zone, count=1, head_ip=None, **launch)[0]
                head_ip = self._wait_private_ip(ec2, head)
                if request.num_nodes > 1:
                    self._run(zone=zone, count=request.num_nodes - 1, head_ip=head_ip, **launch)
            except ClientError as e:
                err = to_provider_error(e, region=region, zone=zone, what=offer.instance_type)
                if not isinstance(err, CapacityError):
                    raise err from None
                failures.append(f"{zone}: {error_code(e)}")
                self._terminate_ids(ec2, created.instance_ids[before:])
                continue
            instances = self._wait_running(ec2, created.instance_ids[before:])
            return self._cluster(region, request.cluster_id, instances)
        market = "spot" if request.spot else "on-demand"
        raise CapacityError(f"no {market} capacity for {offer.instance_type} in any zone of {region} "
                            f"({'; '.join(failures) or 'no zones'})", cloud="aws", region=region)

    def _run(self, *, ec2, request: ClusterRequest, ami: str, group_id: str, key_name: str,
             tags: dict[str, str], cfg: BootstrapConfig, created: _Created, zone: str, count: int,
             head_ip: str | None) -> list[str]:
        is_head = head_ip is None
        role = "head" if is_head else "worker"
        params = dict(
            ImageId=ami, InstanceType=request.offer.instance_type, MinCount=count, MaxCount=count,
            KeyName=key_name, SecurityGroupIds=[group_id], Placement={"AvailabilityZone": zone},
            UserData=startup_script(cfg, is_head=is_head, head_ip=head_ip, cluster_id=request.cluster_id),
            InstanceInitiatedShutdownBehavior="terminate",
            TagSpecifications=[
                net.tag_spec("instance", {**tags, TAG_ROLE: role,
                                          "Name": f"{net.resource_name(request.cluster_id)}-{role}"}),
                net.tag_spec("volume", {k: tags[k] for k in (TAG_CLUSTER, TAG_JOB, TAG_OWNER)}),
            ],
        )
        if request.spot:
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        ids = [i["InstanceId"] for i in ec2.run_instances(**params)["Instances"]]
        created.instance_ids.extend(ids)
        return ids

    def _zones(self, ec2) -> list[str]:
        zones = ec2.describe_availability_zones(
            Filters=[{"Name": "state", "Values": ["available"]}])["AvailabilityZones"]
        return sorted(z["ZoneName"] for z in zones if z.get("ZoneType", "availability-zone")
                      == "availability-zone")

    def _image(self, ec2, region: str, image: str | None) -> tuple[str, str]:
        """(AMI id, SSH user): the newest deep-learning AMI, or the one the request names."""
        key = (region, image or "")
        if key in self._amis:
            return self._amis[key]
        if image and image.startswith("ami-"):
            found = ec2.describe_images(ImageIds=[image])["Images"]
        else:
            found = ec2.describe_images(Owners=[] if image else ["amazon"], Filters=[
                {"Name": "name", "Values": [image] if image else list(DEFAULT_AMI_NAME_PATTERNS)},
                {"Name": "state", "Values": ["available"]},
            ])["Images"]
            found = [i for i in found if i.get("Architecture", "x86_64") == "x86_64"]
        if not found:
            raise ProvisionError(f"no AMI matching {image or DEFAULT_AMI_NAME_PATTERNS[0]!r} in {region}; "
                                 "set `image:` to an AMI id", cloud="aws", region=region)
        newest = max(found, key=lambda i: (i.get("CreationDate", ""), "ubuntu" in i.get("Name", "").lower()))
        user = "ubuntu" if "ubuntu" in newest.get("Name", "").lower() else "ec2-user"
        self._amis[key] = (newest["ImageId"], user)
        return self._amis[key]

    def _wait_private_ip(self, ec2, instance_id: str) -> str:
        deadline = time.monotonic() + self.launch_timeout_s
        while True:
            found = self._describe(ec2, [{"Name": "instance-id", "Values": [instance_id]}])
            if found and found[0].get("PrivateIpAddress"):
                return found[0]["PrivateIpAddress"]
            if time.monotonic() > deadline:
                raise ProvisionError(f"{instance_id} got no private IP in {self.launch_timeout_s:.0f}s",
                                     cloud="aws")
            time.sleep(self.poll_interval_s)

    def _wait_running(self, ec2, ids: list[str]) -> list[dict]:
        deadline = time.monotonic() + self.launch_timeout_s
        while True:
            found = self._describe(ec2, [{"Name": "instance-id", "Values": ids}])
            states = {i["InstanceId"]: i["State"]["Name"] for i in found}
            ended = [i for i in found if i["State"]["Name"] not in UP_STATES]
            if ended:
                reason = ended[0].get("StateReason", {}).get("Message", ended[0]["State"]["Name"])
                raise ProvisionError(f"{ended[0]['InstanceId']} stopped while starting: {reason}",
                                     cloud="aws")
            if len(found) == len(ids) and all(s == "running" for s in states.values()):
                return found
            if time.monotonic() > deadline:
                raise ProvisionError(f"instances not running after {self.launch_timeout_s:.0f}s: "
                                     f"{states}", cloud="aws")
            time.sleep(self.poll_interval_s)

    # ---------------------------------------------------------------- status
    def status(self, cluster: Cluster) -> list[NodeState]:
        try:
            ec2 = self._ec2(cluster.region)
            ids = [n.node_id for n in cluster.nodes]
            found = {i["InstanceId"]: i for i in self._describe(
                ec2, [{"Name": "instance-id", "Values": ids}])} if ids else {}
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e, region=cluster.region) from None
        return [node_state(n.node_id, found.get(n.node_id), spot=cluster.spot,
                           terminated_by_us=n.node_id in self._terminated) for n in cluster.nodes]

    # ---------------------------------------------------------------- terminate
    def terminate(self, cluster: Cluster) -> None:
        try:
            ec2 = self._ec2(cluster.region)
            self._remove_all(ec2, cluster.cluster_id, [n.node_id for n in cluster.nodes],
                             own_key=bool(cluster.extra.get("own_key")))
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e, region=cluster.region) from None

    def _remove_all(self, ec2, cluster_id: str, node_ids: list[str], own_key: bool) -> None:
        """Instances (by id and by tag), then the security group(s), then the key pair(s)."""
        live = {i["InstanceId"] for i in self._instances(ec2, cluster_id, states=LIVE_STATES)}
        if node_ids:
            live |= {i["InstanceId"] for i in self._describe(ec2, [
                {"Name": "instance-id", "Values": node_ids},
                {"Name": "instance-state-name", "Values": list(LIVE_STATES)}])}
        self._terminate_ids(ec2, sorted(live))
        self._wait_gone(ec2, sorted(live))
        for group in net.find_security_groups(ec2, cluster_id):
            self._delete_group_when_free(ec2, group["GroupId"])
        if not own_key:
            for key in net.find_key_pairs(ec2, cluster_id):
                net.delete_key_pair(ec2, key, cluster_id)
            if net.key_path(cluster_id).exists():
                net.key_path(cluster_id).unlink()

    def _terminate_ids(self, ec2, ids: list[str]) -> None:
        if not ids:
            return
        self._terminated.update(ids)
        try:
            ec2.create_tags(Resources=ids, Tags=[{"Key": TAG_TERMINATING, "Value": "true"}])
        except ClientError as e:
            log.warning("could not mark %s as terminating: %s", ids, e)
        ec2.terminate_instances(InstanceIds=ids)

    def _wait_gone(self, ec2, ids: list[str]) -> None:
        deadline = time.monotonic() + self.launch_timeout_s
        while ids:
            left = self._describe(ec2, [{"Name": "instance-id", "Values": ids},
                                        {"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
            if not left:
                return
            if time.monotonic() > deadline:
                raise ProvisionError(f"instances still shutting down after {self.launch_timeout_s:.0f}s: "
                                     f"{[i['InstanceId'] for i in left]}", cloud="aws")
            time.sleep(self.poll_interval_s)

    def _delete_group_when_free(self, ec2, group_id: str) -> None:
        # an instance that is shutting down still holds the group for a little while
        deadline = time.monotonic() + self.launch_timeout_s
        while True:
            try:
                return net.delete_security_group(ec2, group_id)
            except ClientError as e:
                if error_code(e) != "DependencyViolation" or time.monotonic() > deadline:
                    raise
            time.sleep(self.poll_interval_s)

    def _cleanup(self, ec2, cluster_id: str, created: _Created) -> None:
        """Remove what a failed launch created; never hides the launch's own error."""
        try:
            self._terminate_ids(ec2, created.instance_ids)
            self._wait_gone(ec2, created.instance_ids)
            if created.security_group_id:
                self._delete_group_when_free(ec2, created.security_group_id)
            if created.key_name:
                net.delete_key_pair(ec2, created.key_name, cluster_id)
        except (Exception, KeyboardInterrupt) as e:  # the orphan sweep (`dlrun down --orphans`) finds the rest
            log.warning("cleanup after a failed launch of %s was incomplete: %s", cluster_id, e)

    # ---------------------------------------------------------------- list_owned
    def list_owned(self) -> list[Cluster]:
        clusters: list[Cluster] = []
        for region in self._search_regions():
            try:
                clusters.extend(self._owned_in(region))
            except (ClientError, BotoCoreError) as e:
                raise to_provider_error(e, region=region) from None
        return clusters

    def _search_regions(self) -> list[str]:
        if self.regions:
            return list(dict.fromkeys(self.regions))
        from infra.catalog import load_offers
        regions = [o.region for o in load_offers() if o.cloud == "aws"]
        return list(dict.fromkeys(([self.region] if self.region else []) + regions))

    def _owned_in(self, region: str) -> list[Cluster]:
        ec2 = self._ec2(region)
        tagged = [{"Name": "tag-key", "Values": [TAG_CLUSTER]}]
        by_cluster: dict[str, list[dict]] = {}
        for inst in self._describe(ec2, tagged + [
                {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]):
            by_cluster.setdefault(tags_of(inst)[TAG_CLUSTER], []).append(inst)
        leftovers: dict[str, dict[str, str]] = {}
        for group in ec2.describe_security_groups(Filters=tagged)["SecurityGroups"]:
            leftovers.setdefault(tags_of(group)[TAG_CLUSTER], tags_of(group))
        for key in ec2.describe_key_pairs(Filters=tagged)["KeyPairs"]:
            leftovers.setdefault(tags_of(key)[TAG_CLUSTER], tags_of(key))
        clusters = [self._cluster(region, cid, insts) for cid, insts in by_cluster.items()]
        for cid, tags in leftovers.items():
            if cid not in by_cluster:
                clusters.append(Cluster(cluster_id=cid, provider=self.name, region=region, zone="",
                                        instance_type="", spot=False, price_per_hour=0.0,
                                        job_id=tags.get(TAG_JOB, ""), extra={"owner": tags.get(TAG_OWNER, "")}))
        return clusters

    # ---------------------------------------------------------------- helpers
    def _describe(self, ec2, filters: list[dict]) -> list[dict]:
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def _instances(self, ec2, cluster_id: str, states) -> list[dict]:
        return self._describe(ec2, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]},
                                    {"Name": "instance-state-name", "Values": list(states)}])

    def _cluster(self, region: str, cluster_id: str, instances: list[dict]) -> Cluster:
        return cluster_from_instances(region, cluster_id, instances,
                                      own_key_name=self.key_name, own_key_path=self.key_path)


def _local_ray_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("ray")
    except PackageNotFoundError:
        raise ProvisionError("Ray is not installed here; the cluster must run the client's Ray "
                             "version, so install ray first", cloud="aws") from None


__all__ = ["AwsProvider"]
