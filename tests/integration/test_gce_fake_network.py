"""The fake Compute Engine's project, networks, subnetworks and zonal offerings, through the real
google-cloud-compute REST client: it answers and rejects as GCE does."""
from __future__ import annotations

import ipaddress

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tests.support.gce_server import FakeGce
from tests.support.gce_client import ZONE, client, insert, instance, wait

REGION = "us-central1"
DONE = compute_v1.Operation.Status.DONE


@pytest.fixture
def gce():
    with FakeGce() as fake:
        yield fake


def make_network(gce, name="net-1", auto=False):
    nets = client(gce, compute_v1.NetworksClient)
    op = nets.insert(project=gce.project, network_resource=compute_v1.Network(name=name,
                                                                             auto_create_subnetworks=auto))
    assert client(gce, compute_v1.GlobalOperationsClient).wait(project=gce.project, operation=op.name).status == DONE
    return nets


def make_subnet(gce, name="sub-1", cidr="10.1.0.0/20", network="global/networks/net-1", region=REGION):
    subs = client(gce, compute_v1.SubnetworksClient)
    op = subs.insert(project=gce.project, region=region, subnetwork_resource=compute_v1.Subnetwork(
        name=name, network=network, ip_cidr_range=cidr))
    done = client(gce, compute_v1.RegionOperationsClient).wait(project=gce.project, region=region, operation=op.name)
    assert done.status == DONE and done.region.endswith(f"/regions/{region}")
    return subs


def on_subnet(name="vm-1", subnet=f"regions/{REGION}/subnetworks/sub-1", **kw) -> dict:
    body = instance(name, **kw)
    body["network_interfaces"][0].update(network="global/networks/net-1", subnetwork=subnet)
    return body


def test_project_metadata_is_served(gce):
    gce.set_project_metadata(enable_oslogin="TRUE")
    project = client(gce, compute_v1.ProjectsClient).get(project=gce.project)
    assert {i.key: i.value for i in project.common_instance_metadata.items} == {"enable-oslogin": "TRUE"}


def test_networks_and_subnetworks_insert_get_list_and_addresses_come_from_the_subnet(gce):
    nets = make_network(gce)
    assert nets.get(project=gce.project, network="net-1").auto_create_subnetworks is False
    subs = make_subnet(gce)
    assert subs.get(project=gce.project, region=REGION, subnetwork="sub-1").ip_cidr_range == "10.1.0.0/20"
    assert [s.name for s in subs.list(project=gce.project, region=REGION)] == ["sub-1"]
    assert [n.name for n in nets.list(project=gce.project)] == ["net-1"]
    with pytest.raises(gexc.Conflict):
        make_network(gce)
    wait(gce, insert(gce, on_subnet()))
    vm = client(gce).get(project=gce.project, zone=ZONE, instance="vm-1")
    address = ipaddress.ip_address(vm.network_interfaces[0].network_i_p)
    assert address in ipaddress.ip_network("10.1.0.0/20") and address != ipaddress.ip_address("10.1.0.1")


def test_what_gce_rejects_about_networks(gce):
    with pytest.raises(gexc.BadRequest, match="networks/default' was not found"):
        insert(gce, instance())  # a project without a default network
    make_network(gce)
    with pytest.raises(gexc.BadRequest, match="Subnetwork should be specified for custom subnetmode"):
        insert(gce, on_subnet(subnet=""))
    with pytest.raises(gexc.BadRequest, match="subnetwork resource cannot be found"):
        insert(gce, on_subnet())
    make_subnet(gce)
    with pytest.raises(gexc.BadRequest, match="conflicts with existing subnetwork 'sub-1'"):
        make_subnet(gce, "sub-2", cidr="10.1.8.0/21", region="europe-west4")
    with pytest.raises(gexc.BadRequest, match="networks/nope' was not found"):
        client(gce, compute_v1.FirewallsClient).insert(project=gce.project, firewall_resource=compute_v1.Firewall(
            name="fw", network="global/networks/nope", source_ranges=["198.51.100.7/32"],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])]))


def test_a_network_in_use_cannot_be_deleted(gce):
    nets = make_network(gce)
    subs = make_subnet(gce)
    with pytest.raises(gexc.BadRequest, match="already being used by"):
        nets.delete(project=gce.project, network="net-1")
    wait(gce, insert(gce, on_subnet()))
    with pytest.raises(gexc.BadRequest, match="already being used by"):
        subs.delete(project=gce.project, region=REGION, subnetwork="sub-1")
    wait(gce, client(gce).delete(project=gce.project, zone=ZONE, instance="vm-1"))
    subs.delete(project=gce.project, region=REGION, subnetwork="sub-1")
    nets.delete(project=gce.project, network="net-1")
    assert gce.networks == {} and gce.subnetworks == {}


def test_a_zone_without_the_gpu_or_machine_type_answers_400_at_once(gce):
    make_network(gce)
    make_subnet(gce)
    gce.offer_only(ZONE, "nvidia-tesla-v100")
    with pytest.raises(gexc.BadRequest, match=f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4' was not found"):
        insert(gce, on_subnet(gpus=1))
    with pytest.raises(gexc.BadRequest, match=f"Machine type with name 'g2-standard-4' does not exist in zone '{ZONE}'"):
        insert(gce, on_subnet(machine=f"zones/{ZONE}/machineTypes/g2-standard-4"))
    gce.offer_only(ZONE, "nvidia-tesla-t4")
    assert wait(gce, insert(gce, on_subnet(gpus=1))).status == DONE and len(gce.instances) == 1
