"""GcpProvider against the fake Compute Engine REST server, through the real google-cloud-compute client."""
from __future__ import annotations

import pytest

from infra.vm import network as vm_network
from infra.base import BootstrapConfig, CapacityError, CredentialsError, Provider, ProvisionError, QuotaError
from infra.gcp.provider import GcpProvider
from tests.support.gcp_provider import (  # noqa: F401  (fixtures; no_address_lookup is autouse)
    CALLER, US_CENTRAL1, assert_nothing_left, boot_image, gce, metadata, no_address_lookup, offer, posts, provider,
    request)



def test_is_a_provider(provider):
    assert isinstance(provider, Provider) and provider.name == "gcp"


def test_on_demand_single_node(gce, provider):
    cluster = provider.launch(request())
    (inst,) = gce.instances.values()
    assert inst["machineType"].endswith("zones/us-central1-a/machineTypes/n1-standard-8")
    assert inst["guestAccelerators"] == [{
        "acceleratorType": "projects/dlrun-test/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
        "acceleratorCount": 1}]
    assert inst["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert inst["scheduling"]["provisioningModel"] == "STANDARD"
    assert inst["labels"] == {"dlrun-cluster": "c-1", "dlrun-job": "job-42", "dlrun-owner": "alice",
                              "dlrun-role": "head"}
    assert inst["tags"]["items"] == ["dlrun-c-1"]
    assert "deeplearning-platform-release" in boot_image(gce, inst)
    script = metadata(inst)["startup-script"]
    assert "start --head" in script and "ray[default,train]==2.60.0" in script
    assert metadata(inst)["ssh-keys"].startswith("dlrun:ssh-ed25519 ")
    assert cluster.price_per_hour == offer().price_per_hour
    assert (cluster.zone, cluster.spot, len(cluster.nodes)) == ("us-central1-a", False, 1)
    head = cluster.head
    assert head.is_head and head.private_ip.startswith("10.") and head.public_ip
    assert cluster.head_address == f"ssh://dlrun@{head.public_ip}"
    assert provider.status(cluster)[0].status == "running"


def test_spot_three_nodes(gce, provider):
    cluster = provider.launch(request(spot=True, nodes=3))
    assert cluster.price_per_hour == offer().spot_price_per_hour and cluster.spot
    assert len(gce.instances) == 3 and [n.is_head for n in cluster.nodes] == [True, False, False]
    for inst in gce.instances.values():
        assert inst["scheduling"] == {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                                      "automaticRestart": False, "onHostMaintenance": "TERMINATE"}
    workers = [i for i in gce.instances.values() if i["labels"]["dlrun-role"] == "worker"]
    assert len(workers) == 2
    for worker in workers:
        script = metadata(worker)["startup-script"]
        assert f"--address={cluster.head.private_ip}:6379" in script and "--head" not in script
    assert {s.status for s in provider.status(cluster)} == {"running"}


@pytest.mark.parametrize("instance_type,gpu", [("g2-standard-4", "L4"), ("a2-highgpu-1g", "A100")])
def test_built_in_gpu_machine_types_list_no_accelerators(gce, provider, instance_type, gpu):
    provider.launch(request(the_offer=offer(instance_type, gpu)))
    (inst,) = gce.instances.values()
    assert "guestAccelerators" not in inst or inst["guestAccelerators"] == []
    assert inst["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_image_override(gce, provider):
    provider.launch(request(image="pytorch-2-4-cu124-ubuntu-2204"))
    (inst,) = gce.instances.values()
    assert boot_image(gce, inst).endswith("/family/pytorch-2-4-cu124-ubuntu-2204")


def test_firewall_admits_ssh_only_from_caller_and_internal_only_between_members(gce, provider):
    provider.launch(request(nodes=2))
    ssh, internal = gce.firewalls["dlrun-c-1-ssh"], gce.firewalls["dlrun-c-1-internal"]
    assert ssh["sourceRanges"] == [CALLER] and ssh["targetTags"] == ["dlrun-c-1"]
    assert ssh["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert internal["sourceTags"] == internal["targetTags"] == ["dlrun-c-1"]
    assert "sourceRanges" not in internal
    for rule in gce.firewalls.values():
        assert "0.0.0.0/0" not in rule.get("sourceRanges", []) and rule["direction"] == "INGRESS"


def test_discovered_address_is_used(gce, monkeypatch):
    monkeypatch.setattr(vm_network, "discover_caller_cidr", lambda *a, **k: "198.51.100.9/32")
    GcpProvider(project=gce.project, api_endpoint=gce.endpoint).launch(request())
    assert gce.firewalls["dlrun-c-1-ssh"]["sourceRanges"] == ["198.51.100.9/32"]


@pytest.mark.parametrize("configured", [None, "0.0.0.0/0"])
def test_no_usable_caller_address_fails_before_creating_anything(gce, configured):
    provider = GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=configured)
    with pytest.raises(ProvisionError, match="DLRUN_SSH_CIDR") as err:
        provider.launch(request())
    assert "0.0.0.0/0" in err.value.message or "address" in err.value.message
    assert gce.requests == []


def test_stockout_in_first_zone_moves_to_next(gce, provider):
    gce.stockout("us-central1-a")
    cluster = provider.launch(request(nodes=3, spot=True))
    assert cluster.zone == "us-central1-b"
    assert {n.zone for n in cluster.nodes} == {"us-central1-b"}
    assert {zone for zone, _ in gce.instances} == {"us-central1-b"}
    assert len(posts(gce, "zones/us-central1-a/instances")) == 1  # the head's stockout stopped that zone


def test_stockout_after_the_head_removes_that_zones_nodes_and_moves_on(gce, provider):
    gce.stockout("us-central1-a", after=1)  # the head fits, its workers do not
    cluster = provider.launch(request(nodes=3))
    assert cluster.zone == "us-central1-b" and len(cluster.nodes) == 3
    assert len(posts(gce, "zones/us-central1-a/instances")) == 3
    assert sorted(gce.instances) == [("us-central1-b", n.node_id) for n in cluster.nodes]
    head_ip = gce.instances[("us-central1-b", cluster.head.node_id)]["networkInterfaces"][0]["networkIP"]
    for node in cluster.nodes[1:]:
        assert f"--address={head_ip}:6379" in metadata(gce.instances[("us-central1-b", node.node_id)])["startup-script"]


def test_stockout_everywhere_raises_capacity_error_and_leaves_nothing(gce, provider):
    gce.stockout(*US_CENTRAL1)
    with pytest.raises(CapacityError) as err:
        provider.launch(request(nodes=2))
    assert err.value.scope == "offer" and err.value.region == "us-central1"
    assert "us-central1-f" in err.value.message
    assert [z for z in US_CENTRAL1 if posts(gce, f"zones/{z}/instances")] == US_CENTRAL1
    assert_nothing_left(gce)


@pytest.mark.parametrize("metric,on_insert", [("GPUS_ALL_REGIONS", False), ("NVIDIA_T4_GPUS", False),
                                               ("GPUS_ALL_REGIONS", True), ("NVIDIA_T4_GPUS", True)])
def test_quota_errors_name_what_draws_on_the_quota(gce, provider, metric, on_insert):
    gce.quota(metric, on_insert=on_insert)
    with pytest.raises(QuotaError) as err:
        provider.launch(request(nodes=2))
    assert err.value.scope == "quota" and metric in err.value.message and err.value.quota.quota == metric
    assert len(posts(gce, "/instances")) == 1  # quota is not retried in the next zone
    assert_nothing_left(gce)


def test_quota_scopes_are_gces(gce, provider):
    """GCE's quota scopes (cloud.google.com/compute/resource-usage): a GPU type in a region, its
    PREEMPTIBLE_ twin for spot, GPUS_ALL_REGIONS GPU offers only, CPUS the N1/E2 series of a region."""
    t4, cpu = offer(), offer("e2-standard-4", None, 0)
    cases = {
        # metric, spot -> (blocks T4 on demand, T4 spot, e2 on demand, T4 in europe-west4)
        ("NVIDIA_T4_GPUS", False): (True, False, False, False),
        ("NVIDIA_T4_GPUS", True): (True, True, False, False),  # spot drew on the standard quota: both
        ("PREEMPTIBLE_NVIDIA_T4_GPUS", True): (False, True, False, False),
        # an on-demand GPU VM with a run-time limit may draw on preemptible quota: both, the failed one too
        ("PREEMPTIBLE_NVIDIA_T4_GPUS", False): (True, True, False, False),
        ("GPUS_ALL_REGIONS", False): (True, True, False, True),
        ("CPUS", False): (True, False, True, False),  # n1 and e2 draw on CPUS
    }
    far = offer(region="europe-west4")
    for (metric, spot), want in cases.items():
        gce.quotas.clear()
        gce.quota(metric)
        with pytest.raises(QuotaError) as err:
            provider.launch(request(f"c-{metric.lower().replace('_', '-')}-{int(spot)}", spot=spot,
                                    the_offer=cpu if metric == "CPUS" else t4,  # a deadline: maxRunDuration
                                    bootstrap=BootstrapConfig(ray_version="2.60.0", max_run_s=3600)))
        scope = err.value.quota
        got = (scope.matches(t4, False), scope.matches(t4, True), scope.matches(cpu, False), scope.matches(far, False))
        assert got == want, (metric, spot, scope)
    n2 = offer("n2-standard-4", None, 0)
    gce.quotas.clear()
    gce.quota("N2_CPUS")
    provider.launch(request("c-e2", the_offer=cpu))  # e2 does not draw on N2_CPUS
    with pytest.raises(QuotaError) as err:
        provider.launch(request("c-n2", the_offer=n2))
    assert err.value.quota.matches(n2, False) and not err.value.quota.matches(cpu, False)


@pytest.mark.parametrize("status", [403, 429])
def test_rate_limits_are_retried_and_never_read_as_credentials(gce, monkeypatch, status):
    slept = []
    provider = GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER, sleep=slept.append)
    gce.rate_limit(3, status=status)
    cluster = provider.launch(request())
    assert len(slept) == 3 and cluster.nodes
    gce.rate_limit(100, status=status)  # longer than the retries: this offer fails, the cloud does not
    with pytest.raises(ProvisionError) as err:
        provider.launch(request("c-2"))
    assert not isinstance(err.value, CredentialsError) and err.value.scope == "offer"
    assert "rate limit" in err.value.message.lower()


def test_regional_quota_elsewhere_does_not_block(gce, provider):
    gce.quota("NVIDIA_T4_GPUS", region="europe-west4")
    assert provider.launch(request()).zone == "us-central1-a"


def test_forbidden_is_credentials_error(gce, provider):
    gce.forbid()
    with pytest.raises(CredentialsError, match="gcloud auth application-default login") as err:
        provider.launch(request())
    assert err.value.scope == "cloud"
    assert_nothing_left(gce)


def test_missing_application_default_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(CredentialsError, match="GOOGLE_APPLICATION_CREDENTIALS"):
        GcpProvider(project="p", ssh_cidr=CALLER).launch(request())


def test_spot_preemption_is_reported(gce, provider):
    cluster = provider.launch(request(spot=True, nodes=3))
    head, w1, w2 = cluster.nodes
    gce.preempt(w1.node_id)  # TERMINATED, with a compute.instances.preempted operation
    gce.preempt(w2.node_id, delete=True)  # termination action DELETE: the instance is gone
    states = {s.node_id: s for s in provider.status(cluster)}
    assert states[head.node_id].status == "running"
    assert states[w1.node_id].status == "preempted" and "TERMINATED" in states[w1.node_id].reason
    assert states[w2.node_id].status == "preempted"


def test_stopped_or_deleted_on_demand_vm_is_not_preemption(gce, provider):
    cluster = provider.launch(request(nodes=2))
    head, worker = cluster.nodes
    gce.instances[(cluster.zone, head.node_id)]["status"] = "TERMINATED"
    del gce.instances[(cluster.zone, worker.node_id)]
    assert [s.status for s in provider.status(cluster)] == ["terminated", "gone"]


def test_terminate_leaves_nothing_and_is_safe_twice(gce, provider):
    cluster = provider.launch(request(spot=True, nodes=3))
    provider.terminate(cluster)
    assert_nothing_left(gce)
    provider.terminate(cluster)
    assert {s.status for s in provider.status(cluster)} == {"terminated"}


def test_relaunch_is_idempotent(gce, provider):
    first = provider.launch(request(nodes=3))
    inserts = len(posts(gce, "/instances"))
    again = GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER).launch(request(nodes=3))
    assert [n.node_id for n in again.nodes] == [n.node_id for n in first.nodes]
    assert again.head.private_ip == first.head.private_ip
    assert len(posts(gce, "/instances")) == inserts and len(gce.instances) == 3


def test_crash_mid_launch_is_found_by_list_owned(gce, monkeypatch):
    crashing = GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER)
    real_insert = crashing._insert

    def insert_then_die(req, zone, name, *args):
        if name.endswith("-w2"):
            raise SystemExit("killed")  # the process dies: no cleanup runs
        return real_insert(req, zone, name, *args)
    monkeypatch.setattr(crashing, "_insert", insert_then_die)
    with pytest.raises(SystemExit):
        crashing.launch(request("crashed", spot=True, nodes=3))
    assert len(gce.instances) == 2 and len(gce.firewalls) == 2

    fresh = GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER)
    (orphan,) = fresh.list_owned()
    assert orphan.cluster_id == "crashed" and orphan.job_id == "job-42" and orphan.spot
    assert sorted(n.node_id for n in orphan.nodes) == ["dlrun-crashed-head", "dlrun-crashed-w1"]
    assert orphan.instance_type == "n1-standard-8" and orphan.price_per_hour == offer().spot_price_per_hour
    fresh.terminate(orphan)
    assert_nothing_left(gce, "crashed")
    assert fresh.list_owned() == []


def test_list_owned_finds_firewall_only_leftovers(gce, provider):
    gce.stockout(*US_CENTRAL1[1:])
    provider.launch(request("fw-only"))
    del gce.instances[next(iter(gce.instances))]  # the VM went away, the rules stayed
    (orphan,) = provider.list_owned()
    assert orphan.cluster_id == "fw-only" and orphan.nodes == []
    provider.terminate(orphan)
    assert gce.firewalls == {}


def test_odd_cluster_ids_and_owners_become_valid_names_and_labels(gce, provider):
    req = request("Job_A.1 nightly", nodes=2)
    req.owner = "Alice@Example.com"
    cluster = provider.launch(req)
    labels = next(iter(gce.instances.values()))["labels"]
    assert labels["dlrun-owner"] == "alice-example-com"
    (owned,) = provider.list_owned()
    assert owned.cluster_id == "Job_A.1 nightly" == cluster.cluster_id
    assert provider.launch(req).nodes == cluster.nodes
    provider.terminate(cluster)
    assert_nothing_left(gce, "Job_A.1 nightly")
