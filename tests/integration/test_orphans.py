"""`dlrun down --orphans` removes only its owner's leftovers (real AwsProvider on moto; a teammate's
tagged cluster is listed and left alone), asks first, and --all-owners widens it."""
from __future__ import annotations

import pytest

from infra.identity import comparable, owner_identity, same_owner
from orchestrator.runs.teardown import remove_orphans
from orchestrator.state.db import Store
from tests.support.aws_moto import aws_env, live_instances, make_provider, make_request, moto, session  # noqa: F401


@pytest.fixture
def two_owners(session):
    provider = make_provider(session)
    provider.launch(make_request("mine", owner="alice@laptop"))
    provider.launch(make_request("theirs", owner="bob@desk"))
    return provider, session.client("ec2")


def test_only_this_owners_orphans_are_removed(two_owners, tmp_path):
    provider, ec2 = two_owners
    out = remove_orphans(Store(tmp_path / "s.db"), clouds=["aws"], providers={"aws": provider},
                         owner="alice@laptop")
    assert not live_instances(ec2, "mine") and live_instances(ec2, "theirs")
    assert any("removed orphan aws cluster mine" in line for line in out)
    assert any("left aws cluster theirs: owned by bob@desk" in line for line in out)


def test_nothing_is_removed_when_the_user_says_no(two_owners, tmp_path):
    provider, ec2 = two_owners
    asked = []
    out = remove_orphans(Store(tmp_path / "s.db"), clouds=["aws"], providers={"aws": provider},
                         owner="alice@laptop", confirm=lambda lines: asked.append(lines) or False)
    assert asked == [["aws cluster mine (job job-mine, us-east-1)"]] and out[-1] == "nothing removed"
    assert live_instances(ec2, "mine") and live_instances(ec2, "theirs")


def test_all_owners_removes_every_orphan(two_owners, tmp_path):
    provider, ec2 = two_owners
    remove_orphans(Store(tmp_path / "s.db"), clouds=["aws"], providers={"aws": provider}, owner="alice@laptop",
                   all_owners=True)
    assert not live_instances(ec2)


def test_the_owner_is_stable_and_compares_as_the_clouds_store_it(monkeypatch):
    monkeypatch.delenv("DLRUN_OWNER", raising=False)
    assert owner_identity() == owner_identity() and "@" in owner_identity()
    assert same_owner("Alice@Laptop.local", comparable("Alice@Laptop.local"))  # a GCE label value
    assert not same_owner("alice@laptop", "bob@desk") and not same_owner("", "")
    monkeypatch.setenv("DLRUN_OWNER", "team-ml")
    assert owner_identity() == "team-ml"


def test_dlruns_kept_vpc_is_listed_and_left(session, tmp_path):
    """An account without a default VPC: dlrun made its own VPC for the launch; `down --orphans` removes the
    cluster, names the VPC as kept, and leaves it."""
    from tests.support.aws_vpc import no_default_vpc

    with no_default_vpc(lambda region: session.client("ec2", region_name=region)):
        provider = make_provider(session)
        provider.launch(make_request("mine", owner="alice@laptop"))
        ec2 = session.client("ec2")
        (own,) = ec2.describe_vpcs(Filters=[{"Name": "tag:dlrun-network", "Values": ["dlrun"]}])["Vpcs"]
        out = remove_orphans(Store(tmp_path / "s.db"), clouds=["aws"], providers={"aws": provider},
                             owner="alice@laptop")
        assert not live_instances(ec2, "mine")
        (kept,) = [line for line in out if own["VpcId"] in line]
        assert kept.startswith("left aws network dlrun") and "kept" in kept
        assert ec2.describe_vpcs(VpcIds=[own["VpcId"]])["Vpcs"]
