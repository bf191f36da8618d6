"""`dlrun submit --backend aws` in an AWS account without a default VPC, end to end on emulated VMs.

Organisation baselines often delete the default VPC. moto is made to answer as EC2 does there
(tests/support/aws_vpc.py: CreateSecurityGroup without VpcId and RunInstances without SubnetId are refused,
a new subnet is neither default nor public until dlrun says so), its default VPC in the region is deleted
through the API, and the lab (tests/support/vm) boots a VM for each instance moto reports running, as
tests/e2e/test_cloud_vm_e2e.py does. dlrun must make its own VPC (public subnet, internet gateway, route),
train the example to its accuracy there, tear the cluster down, and leave nothing but that VPC, which
`dlrun down --orphans` names and keeps.
"""
from __future__ import annotations

import json
import urllib.request

import boto3
import pytest

from tests.support.vm.cloud_runs import aws_lab_env, dlrun
from tests.support.aws_images import seed_image_parameters
from tests.support.aws_vpc import no_default_vpc
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.lab import VmLab
from tests.support.aws_moto import moto_server  # noqa: F401  (fixture: moto's server on 127.0.0.1)

REGION = "us-east-1"
LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]

JOB = """
name: no-default-vpc
job: cnn
resources: {{clouds: [aws], regions: [{region}], spot: never, num_nodes: 1}}
budget: {{max_cost: 5.0}}
workload: {{model: "jobs.cnn:SimpleCNN", input_shape: [1, 8, 8], batch_size: 64, dataset_size: 1437,
            epochs: 20, precision: fp32}}
env: {{SEED: "0"}}
"""


def ec2(moto_server):
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def lab(moto_server):
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)
    seed_image_parameters()
    try:
        with no_default_vpc(lambda region: ec2(moto_server), regions=(REGION,)):
            with VmLab(boot_timeout_s=60) as lab:
                lab.watch_ec2(moto_server, REGION)
                yield lab
                assert not lab.errors, lab.errors
            assert lab.leftovers() == [], lab.leftovers()
    finally:  # moto's backends live in this process: the next module gets a default VPC again
        urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)


@pytest.fixture
def env(lab, dlrun_home, moto_server):
    return aws_lab_env(lab, dlrun_home, moto_server)


def instances(moto_server, job, states=None) -> list[dict]:
    f = [{"Name": "tag:dlrun-job", "Values": [job]}]
    if states:
        f.append({"Name": "instance-state-name", "Values": states})
    return [i for r in ec2(moto_server).describe_instances(Filters=f)["Reservations"] for i in r["Instances"]]


def test_an_account_without_a_default_vpc_trains_the_example_and_keeps_only_dlruns_vpc(
        env, tmp_path, moto_server, lab, dlrun_home):
    client = ec2(moto_server)
    assert client.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"] == []
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB.format(region=REGION))

    r = dlrun("submit", str(spec), "--backend", "aws", env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    job = r.stdout.split()[0]
    st = json.loads(dlrun("status", job, "--json", env=env).stdout)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "aws" and st["metrics"]["accuracy"] >= 0.95, st

    # the cluster lived in dlrun's own VPC, on a public subnet it made (a terminated instance no longer
    # shows its public IP, as on EC2: the subnet's setting is what gave it one)
    (own,) = client.describe_vpcs(Filters=[{"Name": "tag:dlrun-network", "Values": ["dlrun"]}])["Vpcs"]
    (inst,) = instances(moto_server, job)
    assert inst["VpcId"] == own["VpcId"]
    (subnet,) = client.describe_subnets(SubnetIds=[inst["SubnetId"]])["Subnets"]
    assert subnet["VpcId"] == own["VpcId"] and subnet["MapPublicIpOnLaunch"]
    console = client.get_console_output(InstanceId=inst["InstanceId"]).get("Output", "")
    assert "dlrun boot done" in console

    # nothing is left but the VPC: instances, security group, key pair, local key and known_hosts are gone
    assert not instances(moto_server, job, LIVE)
    assert not client.describe_security_groups(Filters=[{"Name": "tag:dlrun-job", "Values": [job]}])["SecurityGroups"]
    assert not [k for k in client.describe_key_pairs()["KeyPairs"] if k["KeyName"].startswith("dlrun-")]
    wait_until(lambda: not lab.vms, 30, "the VM outlived its instance", interval_s=1.0)
    assert not list((dlrun_home / "keys").glob("*")) and not list((dlrun_home / "known_hosts").glob("*"))
    assert [v["VpcId"] for v in client.describe_vpcs()["Vpcs"]] == [own["VpcId"]]

    r = dlrun("down", "--orphans", "--yes", env=env)
    assert r.returncode == 0, r.stderr
    assert own["VpcId"] in r.stdout + r.stderr and "kept" in r.stdout + r.stderr
    assert client.describe_vpcs(VpcIds=[own["VpcId"]])["Vpcs"]
