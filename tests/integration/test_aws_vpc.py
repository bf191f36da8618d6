"""AWS accounts without a default VPC (tests/support/aws_vpc.py), a zone without a default subnet, a subnet the
user names in config.yaml, and the root volume: infra/aws/vpc.py and images.root_volume under moto."""
from __future__ import annotations

import boto3
import pytest

from infra.aws import vpc
from infra.aws.provider import AwsProvider
from infra.base import BootstrapConfig, CapacityError, ProvisionError
from tests.support.aws_faults import fail_run_instances
from tests.support.aws_vpc import delete_default_subnet, delete_default_vpc, ec2_as_ec2_answers, no_default_vpc
from tests.support.aws_moto import (  # noqa: F401
    REGION, SSH_CIDR, assert_nothing_left, aws_env, check_launched_cluster, live_instances, make_provider,
    make_request, moto, session, tags)

GPU_REQUEST = dict(bootstrap=BootstrapConfig(ray_version="2.60.0"))


@pytest.fixture
def bare(session):
    """us-east-1 and us-west-2 without a default VPC, moto answering as EC2 does there."""
    with no_default_vpc(lambda region: session.client("ec2", region_name=region), regions=(REGION, "us-west-2")):
        yield session


@pytest.fixture
def unkind(session):
    with ec2_as_ec2_answers():
        yield session


def dlrun_vpcs(ec2) -> list[dict]:
    return ec2.describe_vpcs(Filters=[{"Name": "tag:dlrun-network", "Values": ["dlrun"]}])["Vpcs"]


def test_the_fake_refuses_what_ec2_refuses_without_a_default_vpc(bare):
    """The fake itself: without a default VPC, the calls dlrun used to make fail as on EC2."""
    from botocore.exceptions import ClientError

    ec2 = bare.client("ec2")
    assert ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"] == []
    with pytest.raises(ClientError, match="VPCIdNotSpecified"):
        ec2.create_security_group(GroupName="x", Description="x")
    with pytest.raises(ClientError, match="VPCIdNotSpecified"):
        ec2.run_instances(ImageId="ami-785db401", MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"})
    vpc_id = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.9.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    assert (subnet["DefaultForAz"], subnet["MapPublicIpOnLaunch"]) == (False, False)
    other = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(GroupName="y", Description="y", VpcId=other)["GroupId"]
    with pytest.raises(ClientError, match="belong to different networks"):
        ec2.run_instances(ImageId="ami-785db401", MinCount=1, MaxCount=1, SubnetId=subnet["SubnetId"],
                          SecurityGroupIds=[group])


def test_without_a_default_vpc_dlrun_makes_its_own_vpc_once_and_keeps_it(bare):
    ec2, provider = bare.client("ec2"), make_provider(bare)
    request = make_request("novpc", nodes=2)
    cluster = provider.launch(request)
    check_launched_cluster(ec2, cluster, request)
    (own,) = dlrun_vpcs(ec2)
    assert own["CidrBlock"] == vpc.VPC_CIDR and tags(own)["dlrun-owner"]
    instances = live_instances(ec2, "novpc")
    assert {i["VpcId"] for i in instances} == {own["VpcId"]}
    assert all(i.get("PublicIpAddress") for i in instances)  # reachable over SSH: the subnet maps public IPs
    (group,) = ec2.describe_security_groups(Filters=[{"Name": "tag:dlrun-cluster", "Values": ["novpc"]}])["SecurityGroups"]
    assert group["VpcId"] == own["VpcId"]
    (subnet,) = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [own["VpcId"]]}])["Subnets"]
    assert subnet["MapPublicIpOnLaunch"] and subnet["AvailabilityZone"] == cluster.zone
    assert tags(subnet)["dlrun-network"] == "dlrun"
    (gateway,) = ec2.describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [own["VpcId"]]}])["InternetGateways"]
    (table,) = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [own["VpcId"]]}])["RouteTables"]
    assert {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": gateway["InternetGatewayId"]}.items() <= next(
        r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0").items()

    provider.terminate(cluster)
    assert_nothing_left(ec2, "novpc")
    assert [v["VpcId"] for v in dlrun_vpcs(ec2)] == [own["VpcId"]]  # kept
    assert provider.list_owned() == []  # not a leftover cluster
    (line,) = provider.kept_resources()
    assert own["VpcId"] in line and "kept" in line and REGION in line

    # a later launch (another dlrun process) reuses the VPC and its subnet
    again = make_provider(boto3.Session(region_name=REGION)).launch(make_request("novpc2"))
    assert [v["VpcId"] for v in dlrun_vpcs(ec2)] == [own["VpcId"]]
    assert len(ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [own["VpcId"]]}])["Subnets"]) == 1
    assert len(ec2.describe_internet_gateways()["InternetGateways"]) == 1
    make_provider(bare).terminate(again)


def test_a_half_made_vpc_is_completed_not_duplicated(bare):
    """dlrun killed after CreateVpc: the next launch finds the tagged VPC and adds what is missing."""
    ec2 = bare.client("ec2")
    made = ec2.create_vpc(CidrBlock=vpc.VPC_CIDR, TagSpecifications=[{"ResourceType": "vpc", "Tags": [
        {"Key": "dlrun-network", "Value": "dlrun"}]}])["Vpc"]["VpcId"]
    cluster = make_provider(bare).launch(make_request("finish"))
    assert [v["VpcId"] for v in dlrun_vpcs(ec2)] == [made]
    assert ec2.describe_internet_gateways(Filters=[{"Name": "attachment.vpc-id", "Values": [made]}])["InternetGateways"]
    make_provider(bare).terminate(cluster)


def test_a_stockout_in_dlruns_vpc_moves_the_launch_to_a_new_subnet_in_the_next_zone(bare):
    ec2 = bare.client("ec2")
    first = make_provider(bare).launch(make_request("first"))  # dlrun's VPC now has a subnet in us-east-1a
    assert first.zone == "us-east-1a"
    log = fail_run_instances(bare, "InsufficientInstanceCapacity", zones={"us-east-1a"})
    provider = make_provider(bare)  # its clients carry the fault
    moved = provider.launch(make_request("second", nodes=2))
    assert moved.zone == "us-east-1b" and log.injected == 1
    assert {i["SubnetId"] for i in live_instances(ec2, "second")} == {
        s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}])["Subnets"]}
    for c in (first, moved):
        provider.terminate(c)


def test_a_zone_without_a_default_subnet_is_skipped_not_fatal(unkind):
    """The default VPC is there but has no subnet in us-east-1a (a zone added after it was made): EC2 would
    answer "No default subnet for availability zone"; the launch goes to the next zone instead of failing."""
    ec2 = unkind.client("ec2")
    delete_default_subnet(ec2, "us-east-1a")
    provider = make_provider(unkind)
    cluster = provider.launch(make_request("skip", nodes=2))
    assert cluster.zone == "us-east-1b"
    default = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    assert {i["VpcId"] for i in live_instances(ec2, "skip")} == {default} and dlrun_vpcs(ec2) == []
    provider.terminate(cluster)
    assert_nothing_left(ec2, "skip")


def test_a_default_vpc_without_any_subnet_uses_dlruns_vpc(unkind):
    ec2 = unkind.client("ec2")
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"):
        delete_default_subnet(ec2, zone)
    provider = make_provider(unkind)
    cluster = provider.launch(make_request("empty-default"))
    (own,) = dlrun_vpcs(ec2)
    assert {i["VpcId"] for i in live_instances(ec2, "empty-default")} == {own["VpcId"]}
    provider.terminate(cluster)


def test_the_users_subnet_from_config_yaml_is_used_in_its_zone_only(bare, dlrun_home):
    ec2 = bare.client("ec2")
    theirs = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=theirs, CidrBlock="10.50.3.0/24", AvailabilityZone="us-east-1c")["Subnet"]["SubnetId"]
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    (dlrun_home / "config.yaml").write_text(f"aws:\n  subnets: {{{REGION}: {subnet}}}\n")
    provider = make_provider(bare)  # reads config.yaml itself, as `dlrun submit` builds it
    assert provider.subnets == {REGION: subnet}
    cluster = provider.launch(make_request("mine", nodes=2))
    assert cluster.zone == "us-east-1c"
    assert {i["SubnetId"] for i in live_instances(ec2, "mine")} == {subnet}
    (group,) = ec2.describe_security_groups(Filters=[{"Name": "tag:dlrun-cluster", "Values": ["mine"]}])["SecurityGroups"]
    assert group["VpcId"] == theirs and dlrun_vpcs(ec2) == []  # the user's network: nothing of dlrun's made
    provider.terminate(cluster)
    assert_nothing_left(ec2, "mine")
    assert ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]  # theirs, untouched


def test_a_users_subnet_that_does_not_exist_is_one_clear_line_blocking_the_region(bare):
    provider = make_provider(bare, subnets={REGION: "subnet-0123456789abcdef0"})
    with pytest.raises(ProvisionError) as err:
        provider.launch(make_request("typo"))
    assert err.value.scope == "region" and "\n" not in err.value.message
    assert "config.yaml aws.subnets.us-east-1" in err.value.message and "subnet-0123456789abcdef0" in err.value.message
    assert_nothing_left(bare.client("ec2"), "typo")


def test_a_users_subnet_in_a_zone_without_capacity_is_a_capacity_error(bare):
    ec2 = bare.client("ec2")
    theirs = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=theirs, CidrBlock="10.50.3.0/24", AvailabilityZone="us-east-1c")["Subnet"]["SubnetId"]
    fail_run_instances(bare, "InsufficientInstanceCapacity", zones={"us-east-1c"})
    with pytest.raises(CapacityError) as err:
        make_provider(bare, subnets={REGION: subnet}).launch(make_request("full"))
    assert "us-east-1c" in err.value.message
    assert_nothing_left(ec2, "full")


def test_configured_subnets_reader_takes_only_the_aws_subnets_key(dlrun_home):
    assert vpc.configured_subnets() == {}
    (dlrun_home / "config.yaml").write_text("optimize: time\naws:\n  subnets:\n    us-east-2: subnet-0abc\n")
    assert vpc.configured_subnets() == {"us-east-2": "subnet-0abc"}
    (dlrun_home / "config.yaml").write_text("aws: [not, a, mapping\n")
    assert vpc.configured_subnets() == {}  # orchestrator/config.py reports a broken file before any launch


# ------------------------------------------------------------------ the root volume
def root_volume_of(ec2, instance: dict) -> dict:
    (mapping,) = [m for m in instance["BlockDeviceMappings"] if m["DeviceName"] == instance["RootDeviceName"]]
    (volume,) = ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
    return {"size": volume["Size"], "type": volume["VolumeType"], "delete": mapping["Ebs"]["DeleteOnTermination"]}


@pytest.mark.parametrize("instance_type,planned,expected", [
    ("c7i.large", 0, 30),          # nothing planned: the CPU floor
    ("c7i.large", 12, 30),         # less than the floor: the floor
    ("c7i.large", 64, 64),         # the plan's size
    ("g4dn.xlarge", 0, 100),       # the GPU floor
    ("g4dn.xlarge", 180, 180),
])
def test_the_root_volume_is_gp3_sized_from_the_plan_with_a_floor(session, instance_type, planned, expected):
    from tests.support.aws_moto import offer
    from infra.base import ClusterRequest

    ec2, provider = session.client("ec2"), make_provider(session)
    request = ClusterRequest(cluster_id=f"root-{planned}-{instance_type[0]}", job_id="j", owner="alice",
                             offer=offer(instance_type), spot=False,
                             bootstrap=BootstrapConfig(ray_version="2.60.0", root_volume_gb=planned))
    cluster = provider.launch(request)
    (inst,) = live_instances(ec2, request.cluster_id)
    assert root_volume_of(ec2, inst) == {"size": expected, "type": "gp3", "delete": True}
    provider.terminate(cluster)
    assert ec2.describe_volumes(Filters=[{"Name": "tag:dlrun-cluster", "Values": [request.cluster_id]},
                                         {"Name": "status", "Values": ["in-use", "available"]}])["Volumes"] == []


def test_the_root_volume_is_never_smaller_than_the_images_own():
    """EC2 refuses a root volume below the image's snapshot (InvalidBlockDeviceMapping). moto's RegisterImage
    drops the mappings, so the DescribeImages answer comes from botocore's Stubber, which checks it against
    EC2's service model: a deep-learning AMI whose root snapshot is 140 GiB."""
    from botocore.stub import Stubber

    from infra.aws.images import root_volume

    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    answer = {"Images": [{"ImageId": "ami-0123456789abcdef0", "RootDeviceName": "/dev/xvda", "RootDeviceType": "ebs",
                          "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
                              "SnapshotId": "snap-0123456789abcdef0", "VolumeSize": 140, "VolumeType": "gp3",
                              "DeleteOnTermination": True, "Encrypted": False}}]}]}
    with Stubber(ec2) as stub:
        for _ in range(2):
            stub.add_response("describe_images", answer, {"ImageIds": ["ami-0123456789abcdef0"]})
        assert root_volume(ec2, "ami-0123456789abcdef0", 0, gpu=True) == {"DeviceName": "/dev/xvda", "Ebs": {
            "VolumeSize": 140, "VolumeType": "gp3", "DeleteOnTermination": True}}
        assert root_volume(ec2, "ami-0123456789abcdef0", 200, gpu=True)["Ebs"]["VolumeSize"] == 200


def test_a_new_vpc_not_yet_visible_to_the_next_call_is_waited_for(bare, monkeypatch):
    """EC2's eventual consistency: right after CreateVpc / CreateInternetGateway the next call may answer
    InvalidVpcID.NotFound ("The vpc ID 'vpc-…' does not exist"); dlrun retries it, bounded."""
    from tests.support.aws_faults import answer_error

    monkeypatch.setattr("time.sleep", lambda s: None)
    log = answer_error(bare, "AttachInternetGateway", "InvalidVpcID.NotFound", times=2,
                       message="The vpc ID 'vpc-0123456789abcdef0' does not exist")
    provider = make_provider(bare)
    cluster = provider.launch(make_request("settling"))
    assert [hit for _, hit in log.calls] == [True, True, False]
    (own,) = dlrun_vpcs(bare.client("ec2"))
    assert bare.client("ec2").describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [own["VpcId"]]}])["InternetGateways"]
    provider.terminate(cluster)


def test_a_login_that_may_not_make_a_vpc_skips_the_region_with_what_to_do(bare):
    from tests.support.aws_faults import answer_error

    answer_error(bare, "CreateVpc", "UnauthorizedOperation", status=403,
                 message="You are not authorized to perform this operation.")
    with pytest.raises(ProvisionError) as err:
        make_provider(bare).launch(make_request("no-rights"))
    e = err.value
    assert type(e) is ProvisionError and e.scope == "region" and e.region == REGION  # not a credentials error
    assert "ec2:CreateVpc" in e.message and "aws.subnets.us-east-1" in e.message and "\n" not in e.message
    assert_nothing_left(bare.client("ec2"), "no-rights")


def test_the_vpc_quota_full_is_a_quota_error_for_the_region(bare):
    from infra.base import QuotaError
    from tests.support.aws_faults import answer_error

    answer_error(bare, "CreateVpc", "VpcLimitExceeded", message="The maximum number of VPCs has been reached.")
    with pytest.raises(QuotaError) as err:
        make_provider(bare).launch(make_request("five-vpcs"))
    assert err.value.scope == "region" and "VpcLimitExceeded" in err.value.message
    assert '"VPCs per Region"' in err.value.message and "aws.subnets.us-east-1" in err.value.message
    assert_nothing_left(bare.client("ec2"), "five-vpcs")
