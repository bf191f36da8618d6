"""GcpProvider's network and access against the fake Compute Engine, through the real client: dlrun's own
VPC (never `default`), OS Login projects refused up front, zones that lack the GPU skipped or failed
over, and the maxRunDuration hard ceiling on every instance."""
from __future__ import annotations

import ipaddress

import pytest

from infra.base import BootstrapConfig, CapacityError, CredentialsError
from infra.gcp.provider import GcpProvider
from infra.gcp.zones import zones_for
from tests.support.gcp_provider import (  # noqa: F401
    CALLER, US_CENTRAL1, assert_nothing_left, gce, no_address_lookup, offer, posts, provider, request)


def network_posts(gce) -> list[str]:
    return [path for method, path, _ in gce.requests if method == "POST" and "networks" in path]


def test_clusters_live_on_dlruns_own_custom_network_made_once(gce, provider):
    first = provider.launch(request("c-1", nodes=2))
    (network,) = gce.networks.values()
    assert network["name"] == "dlrun" and network["autoCreateSubnetworks"] is False
    (subnet,) = gce.subnetworks.values()
    assert subnet["name"] == "dlrun-us-central1" and subnet["network"] == network["selfLink"]
    for inst in gce.instances.values():
        nic = inst["networkInterfaces"][0]
        assert nic["network"].endswith("/global/networks/dlrun")
        assert nic["subnetwork"].endswith("/regions/us-central1/subnetworks/dlrun-us-central1")
        assert ipaddress.ip_address(nic["networkIP"]) in ipaddress.ip_network(subnet["ipCidrRange"])
    for rule in gce.firewalls.values():
        assert rule["network"].endswith("/global/networks/dlrun")
    made = network_posts(gce)
    assert len(made) == 2  # the network and the region's subnet

    # another launch (even by a fresh dlrun process) reuses them
    GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER).launch(request("c-2"))
    assert network_posts(gce) == made and len(gce.networks) == 1 and len(gce.subnetworks) == 1
    assert first.head.private_ip != gce.instances[("us-central1-a", "dlrun-c-2-head")]["networkInterfaces"][0][
        "networkIP"]
    assert not any("networks/default" in str(body) or "networks/default" in path for _, path, body in gce.requests)


def test_the_default_network_is_never_used_even_where_it_exists(gce, provider):
    gce.add_default_network()
    provider.launch(request())
    (inst,) = gce.instances.values()
    assert inst["networkInterfaces"][0]["network"].endswith("/networks/dlrun")
    assert {r["network"].rsplit("/", 1)[-1] for r in gce.firewalls.values()} == {"dlrun"}


def test_each_region_gets_its_own_non_overlapping_subnet(gce, provider):
    provider.launch(request("us"))
    provider.launch(request("eu", the_offer=offer(region="europe-west4")))
    ranges = [ipaddress.ip_network(s["ipCidrRange"]) for s in gce.subnetworks.values()]
    assert sorted(r for r, _ in gce.subnetworks) == ["europe-west4", "us-central1"]
    assert not ranges[0].overlaps(ranges[1])
    assert len(gce.networks) == 1


def test_down_orphans_deletes_a_clusters_rules_but_keeps_the_shared_network(gce, provider):
    provider.launch(request("kept", nodes=2))
    provider.launch(request("gone", nodes=2))
    owned = {c.cluster_id: c for c in GcpProvider(project=gce.project, api_endpoint=gce.endpoint).list_owned()}
    provider.terminate(owned["gone"])
    assert sorted(gce.firewalls) == ["dlrun-kept-internal", "dlrun-kept-ssh"]
    provider.terminate(owned["kept"])
    assert_nothing_left(gce, "kept")
    assert list(gce.networks) == ["dlrun"] and list(gce.subnetworks) == [("us-central1", "dlrun-us-central1")]
    assert not any(method == "DELETE" and "networks" in path for method, path, _ in gce.requests)


@pytest.mark.parametrize("value", ["TRUE", "true"])
def test_a_project_with_os_login_on_gets_instances_that_turn_it_off(gce, provider, value):
    """enable-oslogin=TRUE in the project's common metadata: instance metadata overrides it
    (cloud.google.com/compute/docs/oslogin/set-up-oslogin), so each node still takes dlrun's ssh-keys."""
    gce.set_project_metadata(enable_oslogin=value)
    provider.preflight()
    cluster = provider.launch(request(nodes=2))
    for inst in gce.instances.values():
        assert {i["key"]: i["value"] for i in inst["metadata"]["items"]}["enable-oslogin"] == "FALSE"
        assert not gce.os_login_on(inst)
    provider.terminate(cluster)
    assert_nothing_left(gce)


def test_an_organisation_that_requires_os_login_ends_the_gcp_attempt_before_a_vm_exists(gce, provider):
    """constraints/compute.requireOsLogin refuses enable-oslogin=FALSE: the insert fails, nothing is billed,
    the error blocks GCP (CredentialsError: exit 4 when no other cloud is left) and says how to proceed."""
    gce.require_os_login()
    with pytest.raises(CredentialsError) as err:
        provider.launch(request(nodes=2))
    message = err.value.message
    assert err.value.scope == "cloud" and "constraints/compute.requireOsLogin" in message
    assert "exempt this project" in message and "another GCP project" in message
    assert len([b for m, p, b in gce.requests if m == "POST" and p.endswith("/instances")]) == 1  # no other zone
    assert_nothing_left(gce)


def test_os_login_off_is_fine(gce, provider):
    gce.set_project_metadata(enable_oslogin="FALSE")
    provider.preflight()
    assert provider.launch(request()).zone == "us-central1-a"


def test_zones_that_lack_the_gpu_are_never_tried():
    p100 = offer("n1-standard-8", "P100")
    assert zones_for(p100, US_CENTRAL1) == ["us-central1-c", "us-central1-f"]  # from configs/catalog
    assert zones_for(offer("n1-standard-8", "T4"), US_CENTRAL1) == US_CENTRAL1
    assert zones_for(offer("n1-standard-8", "K80"), US_CENTRAL1) == US_CENTRAL1  # not in the table: all


def test_a_launch_tries_only_the_zones_the_table_gives(gce, provider):
    cluster = provider.launch(request(the_offer=offer("n1-standard-8", "P100")))
    assert cluster.zone == "us-central1-c"
    gce.stockout("us-central1-c")
    provider.terminate(cluster)
    again = provider.launch(request("p100-2", the_offer=offer("n1-standard-8", "P100")))
    assert again.zone == "us-central1-f"
    assert [z for z in US_CENTRAL1 if posts(gce, f"zones/{z}/instances")] == ["us-central1-c", "us-central1-f"]


@pytest.mark.parametrize("instance_type,gpu", [("n1-standard-8", "T4"), ("g2-standard-4", "L4")])
def test_a_zone_that_says_the_gpu_does_not_exist_there_moves_to_the_next_zone(gce, provider, instance_type, gpu):
    gce.offer_only("us-central1-a")  # GCE answers 400 "was not found" / "does not exist in zone"
    cluster = provider.launch(request(nodes=2, the_offer=offer(instance_type, gpu)))
    assert cluster.zone == "us-central1-b" and {z for z, _ in gce.instances} == {"us-central1-b"}
    assert len(posts(gce, "zones/us-central1-a/instances")) == 1


def test_no_zone_with_the_gpu_is_a_capacity_error_for_this_offer_only(gce, provider):
    for zone in US_CENTRAL1:
        gce.offer_only(zone, "nvidia-tesla-v100")
    with pytest.raises(CapacityError) as err:
        provider.launch(request(nodes=2))
    assert err.value.scope == "offer" and "does not offer" in err.value.message
    assert [z for z in US_CENTRAL1 if posts(gce, f"zones/{z}/instances")] == US_CENTRAL1
    assert_nothing_left(gce)


@pytest.mark.parametrize("spot", [False, True])
def test_every_instance_carries_the_hard_ceiling_from_the_deadline(gce, provider, spot):
    cfg = BootstrapConfig(ray_version="2.60.0", max_run_s=7200)
    req = request(spot=spot, nodes=3)
    req.bootstrap = cfg
    provider.launch(req)
    assert len(gce.instances) == 3
    for inst in gce.instances.values():
        scheduling = inst["scheduling"]
        assert scheduling["maxRunDuration"] == {"seconds": str(7200 + 600)}
        assert scheduling["instanceTerminationAction"] == "DELETE"
        assert scheduling["provisioningModel"] == ("SPOT" if spot else "STANDARD")


def test_without_a_deadline_there_is_no_ceiling(gce, provider):
    provider.launch(request())
    (inst,) = gce.instances.values()
    assert "maxRunDuration" not in inst["scheduling"] and "instanceTerminationAction" not in inst["scheduling"]
