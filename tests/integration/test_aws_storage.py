"""Checkpoints in S3 on AWS, under moto: dlrun's run bucket (made once, with its expiry rule), the
node role scoped to the run's prefix (and enforced: moto's IAM access control), attached at launch;
no access key anywhere the node, the job or the store can see."""
from __future__ import annotations

import json

import boto3
import pytest
from moto.core import set_initial_no_auth_action_count

from infra.aws import storage
from infra.base import ProvisionError
from jobs.checkpoint import CheckpointError, open_checkpoints
from tests.support.aws_faults import fail_run_instances
from tests.support.aws_moto import (  # noqa: F401
    REGION, SECRET, aws_env, live_instances, make_provider, make_request, moto, session, user_data)

OWNER = "alice"
RUN_URL = f"{storage.run_bucket_url(OWNER, REGION)}/digits/0123abcd"


def launch(session, url, **kw):
    provider = make_provider(session)
    request = make_request("cs1", storage=url, **kw)
    return provider, request, provider.launch(request)


def role_policy(iam, name):
    return iam.get_role_policy(RoleName=name, PolicyName="dlrun-run-storage")["PolicyDocument"]


def test_launch_makes_the_run_bucket_once_with_an_expiry_rule(session):
    provider, request, cluster = launch(session, RUN_URL, spot=True)
    s3 = session.client("s3")
    bucket = storage.run_bucket_name(OWNER, REGION)
    (rule,) = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert rule["Filter"]["Prefix"] == "runs/" and rule["Expiration"]["Days"] == storage.RUN_EXPIRY_DAYS
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]["BlockPublicPolicy"]
    provider.terminate(cluster)
    assert storage.ensure_run_bucket(s3, bucket, REGION, OWNER) is False  # already there: reused
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [bucket]


def test_nodes_get_a_role_for_the_runs_prefix_only_and_no_key(session):
    provider, request, cluster = launch(session, RUN_URL, spot=True, nodes=2)
    ec2, iam = session.client("ec2"), session.client("iam")
    instances = live_instances(ec2, "cs1")
    profiles = {i["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1] for i in instances}
    assert len(instances) == 2 and len(profiles) == 1
    (name,) = profiles
    (role,) = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == ["dlrun-run-storage"]
    assert iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"] == []
    doc = role_policy(iam, role["RoleName"])
    bucket = storage.run_bucket_name(OWNER, REGION)
    resources = sorted(s["Resource"] for s in doc["Statement"])
    assert resources == [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/runs/digits/0123abcd/*"]
    assert doc["Statement"][1]["Condition"] == {"StringLike": {"s3:prefix": ["runs/digits/0123abcd/*"]}}
    for inst in instances:  # the node's S3 client is installed; no key is in its user-data
        script = user_data(ec2, inst["InstanceId"])
        assert "boto3" in script
        assert SECRET not in script and "testing" not in script and "AWS_SECRET" not in script
    provider.terminate(cluster)


def test_a_users_bucket_is_used_as_is(session):
    s3 = session.client("s3")
    s3.create_bucket(Bucket="team-ckpt")
    provider, request, cluster = launch(session, "s3://team-ckpt/exp/digits/k1")
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["team-ckpt"]  # no run bucket made
    doc = role_policy(session.client("iam"), storage.role_name("cs1"))
    assert doc["Statement"][0]["Resource"] == "arn:aws:s3:::team-ckpt/exp/digits/k1/*"
    provider.terminate(cluster)


def test_a_gcs_checkpoint_cannot_be_reached_from_aws_and_nothing_is_left(session):
    provider = make_provider(session)
    with pytest.raises(ProvisionError, match="S3 only"):
        provider.launch(make_request("cs2", storage="gs://b/p"))
    assert live_instances(session.client("ec2")) == []


def test_launch_waits_for_a_new_instance_profile_to_reach_ec2(session):
    # EC2 refuses a just-made profile for a while (IAM is eventually consistent): retried, not failed
    log = fail_run_instances(session, "InvalidParameterValue", times=2, message=(
        "Value (dlrun-node-x) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"))
    provider, request, cluster = launch(session, RUN_URL)
    assert log.injected == 2 and len(live_instances(session.client("ec2"), "cs1")) == 1
    provider.terminate(cluster)


def _role_credentials(name):
    sts = boto3.Session(region_name=REGION).client("sts")
    arn = f"arn:aws:iam::123456789012:role{storage.ROLE_PATH}{name}"
    c = sts.assume_role(RoleArn=arn, RoleSessionName="node")["Credentials"]
    return dict(aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                aws_session_token=c["SessionToken"], region_name=REGION)


@set_initial_no_auth_action_count(9)  # the setup below as the account's admin; then IAM is enforced
def test_the_role_can_write_its_prefix_and_nothing_else(moto, monkeypatch):
    admin = boto3.Session(region_name=REGION)
    s3, iam = admin.client("s3"), admin.client("iam")
    bucket = storage.run_bucket_name(OWNER, REGION)
    s3.create_bucket(Bucket=bucket)                                         # 1
    s3.put_object(Bucket=bucket, Key="runs/other/0/epoch-000001.pt", Body=b"x")  # 2
    name = storage.ensure_node_profile(iam, bucket, "runs/digits/k1/", OWNER, cluster_id="c1")  # 3-8
    creds = _role_credentials(name)                                          # 9
    for k, v in creds.items():
        monkeypatch.setenv({"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
                            "aws_session_token": "AWS_SESSION_TOKEN", "region_name": "AWS_DEFAULT_REGION"}[k], v)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # the node's boto3 starts with the role's credentials
    mine = open_checkpoints(f"s3://{bucket}/runs/digits/k1")
    mine.save({"epoch": 1}, 1)
    assert mine.load_latest() == {"epoch": 1}
    with pytest.raises(CheckpointError, match="AccessDenied"):
        open_checkpoints(f"s3://{bucket}/runs/other/0").load_latest()
    with pytest.raises(CheckpointError, match="AccessDenied"):
        open_checkpoints(f"s3://{bucket}/runs/other/0").save({"epoch": 9}, 9)
