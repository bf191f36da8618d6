"""infra/aws/images.py under moto: the AMI per node kind comes from AWS's public SSM parameters, per
region, and only from the account that publishes it; `image:` overrides it."""
from __future__ import annotations

import boto3
import pytest

from infra.aws.images import find_image
from infra.base import ProvisionError
from infra.catalog import load_offers
from infra.software import image_for
from tests.support.aws_images import CPU_AMI, GPU_AMI, seed_image_parameters, seed_public_parameter
from tests.support.aws_moto import REGION, aws_env, make_provider, make_request, moto, session  # noqa: F401 (fixtures)

GPU_PARAM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
CPU_PARAM = "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"


def clients(region=REGION):
    return boto3.client("ec2", region_name=region), boto3.client("ssm", region_name=region)


def test_the_table_names_the_public_parameters():
    assert image_for("aws", True).name == GPU_PARAM and image_for("aws", True).owner == "amazon"
    assert image_for("aws", False).name == CPU_PARAM and image_for("aws", False).owner == "099720109477"


@pytest.mark.parametrize("gpu,ami", [(True, GPU_AMI), (False, CPU_AMI)])
def test_default_image_per_node_kind(moto, gpu, ami):
    ec2, ssm = clients()
    assert find_image(ec2, REGION, None, ssm=ssm, gpu=gpu) == (ami, "ubuntu")


def test_resolved_per_region(moto):
    ec2w, ssmw = clients("us-west-2")
    other = ec2w.describe_images(Owners=["amazon"], Filters=[
        {"Name": "name", "Values": ["Ubuntu CUDA9 DLAMI*"]}])["Images"][0]["ImageId"]
    seed_public_parameter("us-west-2", GPU_PARAM, other)  # a newer version of the parameter in one region
    assert find_image(ec2w, "us-west-2", None, ssm=ssmw, gpu=True)[0] == other
    assert find_image(*clients()[:1], REGION, None, ssm=clients()[1], gpu=True)[0] == GPU_AMI


def test_an_image_from_another_owner_is_refused(moto):
    ec2, ssm = clients()
    seed = ec2.run_instances(ImageId=GPU_AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    mine = ec2.create_image(InstanceId=seed, Name="Deep Learning Base OSS lookalike")["ImageId"]
    seed_public_parameter(REGION, GPU_PARAM, mine)
    with pytest.raises(ProvisionError, match="not an available x86_64 image owned by amazon"):
        find_image(ec2, REGION, None, ssm=ssm, gpu=True)


def test_a_region_without_the_parameter_says_what_to_do(aws_env):
    from moto import mock_aws

    with mock_aws():
        ec2, ssm = clients()
        with pytest.raises(ProvisionError, match=r"could not read the public SSM parameter .* \(ParameterNotFound\); "
                                                 "set `image:`"):
            find_image(ec2, REGION, None, ssm=ssm, gpu=True)


def test_a_name_pattern_with_an_explicit_account(moto):
    ec2, ssm = clients()
    assert find_image(ec2, REGION, "099720109477/ubuntu/images/hvm-ssd/ubuntu-xenial-*", ssm=ssm) == (CPU_AMI, "ubuntu")
    with pytest.raises(ProvisionError, match="no AMI matching"):
        find_image(ec2, REGION, "111122223333/ubuntu/images/hvm-ssd/ubuntu-xenial-*", ssm=ssm)


@pytest.mark.parametrize("instance_type,ami", [("g4dn.xlarge", GPU_AMI), ("g5.xlarge", GPU_AMI),
                                               ("g6.xlarge", GPU_AMI), ("c7i.large", CPU_AMI)])
def test_launch_boots_the_image_of_its_offer(session, instance_type, ami):
    offer = next(o for o in load_offers() if o.cloud == "aws" and o.instance_type == instance_type
                 and o.region == REGION)
    request = make_request(f"img-{instance_type.replace('.', '-')}")
    request.offer = offer
    cluster = make_provider(session).launch(request)
    (inst,) = [i for r in session.client("ec2").describe_instances(InstanceIds=[cluster.nodes[0].node_id])[
        "Reservations"] for i in r["Instances"]]
    assert inst["ImageId"] == ami and cluster.ssh_user == "ubuntu"
