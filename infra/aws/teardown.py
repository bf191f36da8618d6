"""Taking AWS clusters down: the cloud part of terminate (instances, security groups, key pairs, the node role),
`--fresh` in dlrun's buckets, the orphan search of `dlrun down --orphans` and what it keeps (dlrun's VPC).

An AwsProvider mixin: the declarations at the top of the class are what it uses of the provider. The local
part of a teardown (SSH key, known_hosts, Ray token) is infra/vm/provider.py's, the same for every cloud.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from botocore.exceptions import BotoCoreError, ClientError

from infra.aws import compute, network as net, vpc
from infra.aws.compute import LIVE_STATES
from infra.aws.errors import error_code, to_provider_error
from infra.aws.launch_storage import clear_run_prefix, leftover_node_roles, remove_node_role
from infra.aws.records import TAG_TERMINATING, tags_of
from infra.aws.storage import TAG_REGION, role_name
from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER, Cluster
from infra.catalog import Offer

log = logging.getLogger(__name__)


class AwsTeardown:
    # what this mixin uses of AwsProvider (infra/aws/provider.py)
    name: str
    region: str | None
    regions: list[str] | None
    endpoint_url: str | None
    _session: Any  # boto3.Session
    _terminated: set[str]  # instance ids dlrun terminated itself (not a preemption: status)
    offers: Callable[[], list[Offer]]
    _ec2: Callable[[str | None], Any]
    _poll: Callable[[Callable[[], Any], str], Any]
    _cluster: Callable[[str, str, list[dict]], Cluster]

    # ---------------------------------------------------------------- teardown
    def remove_cluster(self, cluster: Cluster) -> None:
        try:
            ec2 = self._ec2(cluster.region)
            self._remove_all(ec2, cluster.cluster_id, [n.node_id for n in cluster.nodes],
                             own_key=bool(cluster.extra.get("own_key")), role=cluster.extra.get("node_role", ""))
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e, region=cluster.region) from None

    def _remove_all(self, ec2, cluster_id: str, node_ids: list[str], own_key: bool, role: str = "") -> None:
        """Instances (by id and by tag), the security group(s), the key pair(s) and the node role (SSH to the
        cluster has ended: VmProvider.terminate)."""
        instances = compute.of_cluster(ec2, cluster_id, LIVE_STATES) + compute.by_ids(ec2, node_ids, LIVE_STATES)
        live = {i["InstanceId"] for i in instances}
        self._terminate_ids(ec2, sorted(live))
        self._wait_gone(ec2, sorted(live))
        for group in net.find_security_groups(ec2, cluster_id):
            self._delete_group_when_free(ec2, group["GroupId"])
        if not own_key:
            for key in net.find_key_pairs(ec2, cluster_id):
                net.delete_key_pair(ec2, key)
        if role or any(i.get("IamInstanceProfile") for i in instances):  # last: EC2's part is done first
            remove_node_role(self._session, role_name(cluster_id), self.endpoint_url)

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
        if ids:
            self._poll(lambda: not compute.by_ids(ec2, ids, LIVE_STATES), f"instances still shutting down ({ids})")

    def _delete_group_when_free(self, ec2, group_id: str) -> None:
        # an instance that is shutting down still holds the group for a little while
        def try_delete():
            try:
                net.delete_security_group(ec2, group_id)
                return True
            except ClientError as e:
                if error_code(e) != "DependencyViolation":
                    raise
                return False
        self._poll(try_delete, f"security group {group_id} still in use")

    def clear_run_prefix(self, owner: str, relative: str) -> dict[str, list[str]]:
        """`--fresh` in dlrun's own buckets (launch_storage.clear_run_prefix); {} without AWS credentials:
        no attempt of the run could reach them then."""
        if self._session.get_credentials() is None:
            return {}
        try:
            return clear_run_prefix(self._session, owner, relative, self.endpoint_url)
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e) from None

    # ---------------------------------------------------------------- list_owned
    def list_owned(self) -> list[Cluster]:
        clusters: list[Cluster] = []
        for region in self._search_regions():
            try:
                clusters.extend(self._owned_in(region))
            except (ClientError, BotoCoreError) as e:
                raise to_provider_error(e, region=region) from None
        try:
            roles = leftover_node_roles(self._session, self.endpoint_url)
        except (ClientError, BotoCoreError) as e:
            raise to_provider_error(e) from None
        return self._with_roles(clusters, roles)

    def _with_roles(self, clusters: list[Cluster], roles: dict[str, dict[str, str]]) -> list[Cluster]:
        """IAM is global: each node role goes with its cluster, or is a leftover of its own (a launch that
        died after making the role and before its instances)."""
        by_id = {c.cluster_id: c for c in clusters}
        for name, tags in sorted(roles.items()):
            cid = tags[TAG_CLUSTER]
            if name != role_name(cid):
                continue  # not the name dlrun gives that cluster's role: never touched
            if cid not in by_id:
                by_id[cid] = Cluster(cluster_id=cid, provider=self.name,
                                     region=tags.get(TAG_REGION) or self.region or "",
                                     zone="", instance_type="", spot=False, price_per_hour=0.0,
                                     job_id=tags.get(TAG_JOB, ""), extra={"owner": tags.get(TAG_OWNER, "")})
                clusters.append(by_id[cid])
            by_id[cid].extra["node_role"] = name
        return clusters

    def kept_resources(self) -> list[str]:
        """What `dlrun down --orphans` lists and leaves: dlrun's VPC in each region it searches."""
        lines: list[str] = []
        for region in self._search_regions():
            try:
                lines += vpc.describe_kept(self._ec2(region), region)
            except (ClientError, BotoCoreError) as e:
                raise to_provider_error(e, region=region) from None
        return lines

    def _search_regions(self) -> list[str]:
        if self.regions:
            return list(dict.fromkeys(self.regions))
        regions = [o.region for o in self.offers()]
        return list(dict.fromkeys(([self.region] if self.region else []) + regions))

    def _owned_in(self, region: str) -> list[Cluster]:
        ec2 = self._ec2(region)
        tagged = [{"Name": "tag-key", "Values": [TAG_CLUSTER]}]
        by_cluster: dict[str, list[dict]] = {}
        for inst in compute.describe(ec2, tagged + [{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]):
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
