"""The node role and instance profile a storage launch makes (one per cluster) go with the cluster: on
terminate, on a failed launch, and through `dlrun down --orphans` when dlrun was killed after making them
(with or without the instances, group and key); another owner's, a live job's and a role dlrun did not
name are left. Real AwsProvider and teardown.remove_orphans under moto."""
from __future__ import annotations

import boto3
import pytest

from infra.aws import storage
from infra.base import ProvisionError
from orchestrator.runs.teardown import remove_orphans
from orchestrator.state.db import Store
from tests.support.aws_faults import SimulatedCrash, crash_after, fail_run_instances
from tests.support.aws_moto import (  # noqa: F401
    REGION, assert_nothing_left, aws_env, live_instances, make_provider, make_request, moto, session)

RUN_URL = f"{storage.run_bucket_url('alice', REGION)}/digits/0123abcd"


def node_roles(iam) -> list[str]:
    return sorted(r["RoleName"] for r in iam.list_roles(PathPrefix=storage.ROLE_PATH)["Roles"])


def node_profiles(iam) -> list[str]:
    return sorted(p["InstanceProfileName"] for p in iam.list_instance_profiles(PathPrefix=storage.ROLE_PATH)["InstanceProfiles"])


def orphans(session, store, **kw):
    return remove_orphans(store, clouds=["aws"], providers={"aws": make_provider(boto3.Session(region_name=REGION))},
                          owner="alice", **kw)


def test_terminate_removes_the_clusters_role_and_profile(session):
    provider, iam = make_provider(session), session.client("iam")
    first = provider.launch(make_request("r1", storage=RUN_URL, spot=True))
    second = provider.launch(make_request("r2", storage=RUN_URL, spot=True))  # the next attempt of the run
    assert node_roles(iam) == node_profiles(iam) == sorted([storage.role_name("r1"), storage.role_name("r2")])
    tags = {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=storage.role_name("r1"))["Tags"]}
    assert tags["dlrun-cluster"] == "r1" and tags["dlrun-job"] == "job-r1" and tags["dlrun-region"] == REGION
    provider.terminate(first)
    assert node_roles(iam) == node_profiles(iam) == [storage.role_name("r2")]  # the other cluster keeps its own
    provider.terminate(second)
    assert node_roles(iam) == node_profiles(iam) == []


def test_a_failed_launch_removes_the_role_it_made(session):
    fail_run_instances(session, "InvalidParameterCombination")  # not capacity: the launch gives up
    with pytest.raises(ProvisionError):
        make_provider(session).launch(make_request("bad", storage=RUN_URL))
    assert node_roles(session.client("iam")) == node_profiles(session.client("iam")) == []
    assert_nothing_left(session.client("ec2"), "bad")


@pytest.mark.parametrize("operation", ["CreateRole", "AddRoleToInstanceProfile"])
def test_killed_after_the_role_before_the_instance_leaves_nothing_after_down_orphans(session, tmp_path, operation):
    crash_after(session, operation, service="iam")
    with pytest.raises(SimulatedCrash):
        make_provider(session).launch(make_request("killed", storage=RUN_URL, spot=True))
    iam, ec2 = session.client("iam"), session.client("ec2")
    assert node_roles(iam) == [storage.role_name("killed")] and live_instances(ec2) == []
    out = orphans(session, Store(tmp_path / "s.db"))
    assert out == ["removed orphan aws cluster killed (job job-killed)"]
    assert node_roles(iam) == node_profiles(iam) == []
    assert_nothing_left(ec2, "killed")


def test_a_role_that_outlived_its_group_and_key_is_an_orphan_of_its_own(session, tmp_path):
    crash_after(session, "AddRoleToInstanceProfile", service="iam")
    with pytest.raises(SimulatedCrash):
        make_provider(session).launch(make_request("lone", storage=RUN_URL))
    ec2 = session.client("ec2")
    for group in ec2.describe_security_groups(Filters=[{"Name": "tag:dlrun-cluster", "Values": ["lone"]}])["SecurityGroups"]:
        ec2.delete_security_group(GroupId=group["GroupId"])
    ec2.delete_key_pair(KeyName="dlrun-lone")
    (orphan,) = make_provider(boto3.Session(region_name=REGION)).list_owned()
    assert (orphan.cluster_id, orphan.job_id, orphan.region, orphan.nodes) == ("lone", "job-lone", REGION, [])
    assert orphan.extra == {"owner": "alice", "node_role": storage.role_name("lone")}
    orphans(session, Store(tmp_path / "s.db"))
    assert node_roles(session.client("iam")) == node_profiles(session.client("iam")) == []


def test_orphans_leave_other_owners_live_jobs_and_roles_dlrun_did_not_name(session, tmp_path):
    provider, iam = make_provider(session), session.client("iam")
    provider.launch(make_request("bobs", storage=RUN_URL, owner="bob@desk"))
    provider.launch(make_request("live", storage=RUN_URL))
    provider.launch(make_request("gone", storage=RUN_URL))
    # the same path and prefix, tagged with a cluster, but not the name dlrun gives it: someone else's
    iam.create_role(RoleName="dlrun-node-handmade", Path=storage.ROLE_PATH, AssumeRolePolicyDocument="{}",
                    Tags=[{"Key": "dlrun-cluster", "Value": "gone"}])
    store = Store(tmp_path / "s.db")
    store.create_job(name="t", spec_hash="h", spec_json="{}", job_id="job-live")  # PENDING: live
    out = orphans(session, store)
    assert "removed orphan aws cluster gone (job job-gone)" in out
    assert any(line.startswith("left aws cluster bobs: owned by bob@desk") for line in out)
    assert node_roles(iam) == sorted([storage.role_name("bobs"), storage.role_name("live"), "dlrun-node-handmade"])
    assert live_instances(session.client("ec2"), "live") and not live_instances(session.client("ec2"), "gone")


def test_the_role_search_is_bounded(session):
    iam = session.client("iam")
    for i in range(5):
        storage.ensure_node_profile(iam, "b", "p/", "alice", cluster_id=f"c{i}")
    assert len(storage.list_node_roles(iam)) == 5
    assert len(storage.list_node_roles(iam, limit=3)) == 3
