"""The fake Compute Engine server, checked through the real google-cloud-compute REST client:
it must reject what GCE rejects and answer in shapes the client parses (operations, errors, lists)."""
from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tests.support.gce_server import FakeGce
from tests.support.gce_client import ZONE, client, insert, instance, wait


@pytest.fixture
def gce():
    with FakeGce() as fake:
        fake.add_default_network()
        yield fake


def test_insert_get_list_delete_roundtrip(gce):
    op = insert(gce, instance(gpus=1))
    assert op.status == compute_v1.Operation.Status.RUNNING
    done = wait(gce, op)
    assert done.status == compute_v1.Operation.Status.DONE and not done.error.errors
    vm = client(gce).get(project=gce.project, zone=ZONE, instance="vm-1")
    assert vm.status == "RUNNING" and vm.network_interfaces[0].network_i_p
    assert vm.guest_accelerators[0].accelerator_count == 1
    c = client(gce)
    listed = c.list(request=compute_v1.ListInstancesRequest(project=gce.project, zone=ZONE,
                                                            filter='labels.dlrun-cluster = "c1"'))
    assert [i.name for i in listed] == ["vm-1"]
    other = c.list(request=compute_v1.ListInstancesRequest(project=gce.project, zone=ZONE,
                                                           filter='labels.dlrun-cluster = "c2"'))
    assert list(other) == []
    wait(gce, c.delete(project=gce.project, zone=ZONE, instance="vm-1"))
    with pytest.raises(gexc.NotFound):
        c.get(project=gce.project, zone=ZONE, instance="vm-1")


@pytest.mark.parametrize("body,match", [
    (instance(machine_type=""), "machineType"),
    (instance(disks=[]), "disks"),
    (instance(network_interfaces=[]), "networkInterfaces"),
    (instance(name="Bad_Name"), "resource.name"),
    (instance(machine="zones/us-central1-b/machineTypes/n1-standard-8"), "must be in zone"),
    (instance(gpus=1, scheduling={"on_host_maintenance": "MIGRATE"}), "TERMINATE"),
    (instance(gpus=1, scheduling={}), "TERMINATE"),
    (instance(machine=f"zones/{ZONE}/machineTypes/g2-standard-4", gpus=1), "GPUs attached"),
    (instance(machine=f"zones/{ZONE}/machineTypes/e2-standard-4", gpus=1), "N1"),
    (instance(machine=f"zones/{ZONE}/machineTypes/a2-highgpu-1g", scheduling={}), "TERMINATE"),
    (instance(scheduling={"provisioning_model": "SPOT", "automatic_restart": True}), "automaticRestart"),
    (instance(labels={"Owner": "x"}), "labels"),
    (instance(labels={"owner": "Alice"}), "labels"),
])
def test_invalid_bodies_are_rejected_like_gce(gce, body, match):
    with pytest.raises(gexc.BadRequest, match=match) as err:
        insert(gce, body)
    assert err.value.code == 400 and err.value.errors[0]["reason"] == "invalid"
    assert gce.instances == {}


def test_accelerator_in_another_zone_is_rejected(gce):
    body = instance(gpus=1)
    body["guest_accelerators"][0]["accelerator_type"] = "zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4"
    with pytest.raises(gexc.BadRequest, match="must be in zone"):
        insert(gce, body)


def test_stockout_arrives_in_the_operation(gce):
    gce.stockout(ZONE)
    op = insert(gce, instance(gpus=1))  # accepted at first, as GCE does
    done = wait(gce, op)
    assert done.http_error_status_code == 503
    assert done.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert "does not have enough resources" in done.error.errors[0].message
    assert gce.instances == {}
    other = instance(machine="zones/us-central1-b/machineTypes/n1-standard-8")
    wait(gce, insert(gce, other, zone="us-central1-b"), zone="us-central1-b")
    assert list(gce.instances) == [("us-central1-b", "vm-1")]


def test_quota_in_operation_or_on_insert(gce):
    gce.quota("NVIDIA_T4_GPUS", region="us-central1")
    done = wait(gce, insert(gce, instance(gpus=1)))
    assert done.error.errors[0].code == "QUOTA_EXCEEDED" and "NVIDIA_T4_GPUS" in done.error.errors[0].message
    assert done.http_error_status_code == 403
    (detail,) = done.error.errors[0].error_details  # as GCE's: the metric and its regional limit
    assert detail.quota_info.metric_name == "compute.googleapis.com/nvidia_t4_gpus"
    assert detail.quota_info.limit_name == "NVIDIA-T4-GPUS-per-project-region"
    assert dict(detail.quota_info.dimensions) == {"region": "us-central1"}
    wait(gce, insert(gce, instance(name="cpu-only")))  # no GPU: no GPU quota
    gce.quota("GPUS_ALL_REGIONS", on_insert=True)
    with pytest.raises(gexc.Forbidden, match="GPUS_ALL_REGIONS") as err:
        insert(gce, instance(name="vm-2", gpus=1))
    assert err.value.errors[0]["reason"] == "quotaExceeded"


def test_forbidden_everywhere(gce):
    gce.forbid()
    with pytest.raises(gexc.Forbidden) as err:
        client(gce).get(project=gce.project, zone=ZONE, instance="vm-1")
    assert err.value.errors[0]["reason"] == "forbidden"
    with pytest.raises(gexc.Forbidden):
        insert(gce, instance())


def test_preemption_records_an_operation(gce):
    wait(gce, insert(gce, instance(scheduling={"provisioning_model": "SPOT", "automatic_restart": False,
                                               "on_host_maintenance": "TERMINATE"})))
    gce.preempt("vm-1")
    assert client(gce).get(project=gce.project, zone=ZONE, instance="vm-1").status == "TERMINATED"
    ops = client(gce, compute_v1.ZoneOperationsClient).list(request=compute_v1.ListZoneOperationsRequest(
        project=gce.project, zone=ZONE, filter='operationType = "compute.instances.preempted"'))
    (op,) = list(ops)
    assert op.target_link.endswith("/instances/vm-1") and op.status == compute_v1.Operation.Status.DONE


def test_firewalls_insert_get_list_delete(gce):
    fws = client(gce, compute_v1.FirewallsClient)
    gops = client(gce, compute_v1.GlobalOperationsClient)
    rule = compute_v1.Firewall(name="fw-1", network="global/networks/default", source_ranges=["198.51.100.7/32"],
                               target_tags=["t"], allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])])
    op = fws.insert(project=gce.project, firewall_resource=rule)
    assert gops.wait(project=gce.project, operation=op.name).status == compute_v1.Operation.Status.DONE
    got = fws.get(project=gce.project, firewall="fw-1")
    assert got.allowed[0].I_p_protocol == "tcp" and got.direction == "INGRESS"
    assert [f.name for f in fws.list(project=gce.project)] == ["fw-1"]
    with pytest.raises(gexc.Conflict):
        fws.insert(project=gce.project, firewall_resource=rule)
    with pytest.raises(gexc.BadRequest):
        fws.insert(project=gce.project, firewall_resource=compute_v1.Firewall(name="fw-2", network="x"))
    gops.wait(project=gce.project, operation=fws.delete(project=gce.project, firewall="fw-1").name)
    assert list(fws.list(project=gce.project)) == []
    with pytest.raises(gexc.NotFound):
        fws.delete(project=gce.project, firewall="fw-1")
