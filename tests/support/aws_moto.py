"""AWS under moto for the AWS tests: the credentials and region (aws_env), moto in-process with dlrun's image
parameters seeded (moto) or its server on 127.0.0.1 (moto_server), a boto3 session, a provider and a cluster
request as the executor builds them, and what EC2 itself then reports (live instances, what is left)."""
from __future__ import annotations

import base64
import gzip
import os
import stat

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from infra.aws.provider import AwsProvider
from infra.base import BootstrapConfig, ClusterRequest
from infra.catalog import load_offers
from infra.vm.keys import key_path
from tests.support.aws_images import seed_image_parameters

REGION = "us-east-1"
SSH_CIDR = "203.0.113.7/32"
SECRET = "s3cr3t-value-never-in-user-data"
LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]


@pytest.fixture
def aws_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def moto(aws_env):
    with mock_aws():
        seed_image_parameters()
        yield


@pytest.fixture
def session(moto):
    return boto3.Session(region_name=REGION)


def offer(instance_type="g4dn.xlarge", region=REGION):
    return next(o for o in load_offers() if o.cloud == "aws" and o.instance_type == instance_type
                and o.region == region)


def make_request(cluster_id="c1", *, spot=False, nodes=1, region=REGION, **kw) -> ClusterRequest:
    kw.setdefault("bootstrap", BootstrapConfig(ray_version="2.60.0", python_packages=["einops==0.8.0"]))
    kw.setdefault("owner", "alice")
    return ClusterRequest(cluster_id=cluster_id, job_id=f"job-{cluster_id}", offer=offer(region=region),
                          spot=spot, num_nodes=nodes, **kw)


def make_provider(session, **kw) -> AwsProvider:
    kw.setdefault("ssh_cidr", SSH_CIDR)
    return AwsProvider(region=REGION, session=session, poll_interval_s=0.01, regions=[REGION], **kw)


def live_instances(ec2, cluster_id=None) -> list[dict]:
    filters = [{"Name": "instance-state-name", "Values": LIVE}]
    if cluster_id:
        filters.append({"Name": "tag:dlrun-cluster", "Values": [cluster_id]})
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def tags(resource) -> dict:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def user_data(ec2, instance_id) -> str:
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    data = base64.b64decode(raw)
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()  # as cloud-init reads it


def assert_nothing_left(ec2, cluster_id):
    assert live_instances(ec2, cluster_id) == []
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "tag:dlrun-cluster", "Values": [cluster_id]}])["SecurityGroups"]
    assert groups == []
    assert ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"dlrun-{cluster_id}"]}])["SecurityGroups"] == []
    assert [k for k in ec2.describe_key_pairs()["KeyPairs"] if k["KeyName"] == f"dlrun-{cluster_id}"] == []
    assert not key_path(cluster_id).exists()


def check_launched_cluster(ec2, cluster, request):
    """Everything the issue asks of a launched cluster, read back from EC2 itself."""
    instances = live_instances(ec2, request.cluster_id)
    assert len(instances) == request.num_nodes == len(cluster.nodes)
    by_id = {i["InstanceId"]: i for i in instances}
    assert set(by_id) == {n.node_id for n in cluster.nodes}
    assert {i["InstanceType"] for i in instances} == {request.offer.instance_type}
    assert {i.get("InstanceLifecycle", "on-demand") for i in instances} == \
        {"spot" if request.spot else "on-demand"}
    assert len({i["Placement"]["AvailabilityZone"] for i in instances}) == 1  # one zone per cluster
    assert cluster.price_per_hour == request.offer.hourly(request.spot)
    assert cluster.spot == request.spot and cluster.job_id == request.job_id
    for inst in instances:
        t = tags(inst)
        assert t["dlrun-cluster"] == request.cluster_id and t["dlrun-job"] == request.job_id
        assert t["dlrun-owner"] == "alice"
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": list(by_id)}])["Volumes"]
    assert volumes and all(tags(v)["dlrun-cluster"] == request.cluster_id for v in volumes)

    # security group: SSH only from the caller, everything else only from its own members
    (group,) = ec2.describe_security_groups(
        Filters=[{"Name": "tag:dlrun-cluster", "Values": [request.cluster_id]}])["SecurityGroups"]
    assert all(g["GroupId"] == group["GroupId"] for i in instances for g in i["SecurityGroups"])
    assert tags(group)["dlrun-job"] == request.job_id
    for rule in group["IpPermissions"]:
        cidrs = [r["CidrIp"] for r in rule.get("IpRanges", [])]
        assert "0.0.0.0/0" not in cidrs and not rule.get("Ipv6Ranges")
        if cidrs:
            assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"], cidrs) == ("tcp", 22, 22, [SSH_CIDR])
        else:
            assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [group["GroupId"]]
    assert sum(1 for r in group["IpPermissions"] if r.get("IpRanges")) == 1

    # key pair: tagged in EC2, private half kept locally with 0600
    (key,) = [k for k in ec2.describe_key_pairs()["KeyPairs"] if k["KeyName"] == f"dlrun-{request.cluster_id}"]
    assert tags(key)["dlrun-cluster"] == request.cluster_id
    assert {i["KeyName"] for i in instances} == {key["KeyName"]}
    assert cluster.ssh_key_path == str(key_path(request.cluster_id))
    assert stat.S_IMODE(os.stat(cluster.ssh_key_path).st_mode) == 0o600

    # user-data: pinned Ray; head starts the cluster, workers join the head's private IP
    head = cluster.head
    assert head is cluster.nodes[0] and tags(by_id[head.node_id])["dlrun-role"] == "head"
    head_script = user_data(ec2, head.node_id)
    assert "ray[default,train]==2.60.0" in head_script and "start --head" in head_script
    assert "--dashboard-host=127.0.0.1" in head_script
    for node in cluster.nodes[1:]:
        script = user_data(ec2, node.node_id)
        assert f"start --address={head.private_ip}:6379" in script and "--head" not in script
    for node in cluster.nodes:
        script = user_data(ec2, node.node_id)
        assert SECRET not in script and "testing" not in script and "einops==0.8.0" in script


@pytest.fixture(scope="module")
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
