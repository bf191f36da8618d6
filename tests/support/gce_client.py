"""The fake Compute Engine reached through the real google-cloud-compute REST client: a client on its
endpoint, an instance body as dlrun sends one, insert and wait as a caller does; the fake with its default
network (fake_gce) and instances made by hand on it for the VM lab (gce_insert, gce_delete)."""
from __future__ import annotations

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
import pytest
from google.cloud import compute_v1

from tests.support.gce_server import FakeGce

ZONE = "us-central1-a"
GCE_IMAGE = "projects/debian-cloud/global/images/family/debian-12"


def client(gce, cls=compute_v1.InstancesClient):
    return cls(credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=gce.endpoint),
               transport="rest")


def instance(name="vm-1", machine=f"zones/{ZONE}/machineTypes/n1-standard-8", gpus=0, **kw) -> dict:
    body = {
        "name": name, "machine_type": machine,
        "disks": [{"boot": True, "auto_delete": True,
                   "initialize_params": {"source_image": "projects/debian-cloud/global/images/family/debian-12"}}],
        "network_interfaces": [{"network": "global/networks/default",
                                "access_configs": [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]}],
        "labels": {"dlrun-cluster": "c1"},
        "scheduling": {"on_host_maintenance": "TERMINATE"},
    }
    if gpus:
        body["guest_accelerators"] = [{"accelerator_type": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4",
                                       "accelerator_count": gpus}]
    body.update(kw)
    return body


def insert(gce, body, zone=ZONE):
    return client(gce).insert(project=gce.project, zone=zone, instance_resource=compute_v1.Instance(body))


def wait(gce, op, zone=ZONE):
    return client(gce, compute_v1.ZoneOperationsClient).wait(project=gce.project, zone=zone, operation=op.name)


@pytest.fixture
def fake_gce():
    with FakeGce() as fake:
        fake.add_default_network()  # these instances are made by hand, on the project's auto-mode network
        yield fake


def gce_insert(fake, name: str, public_key: str, script: str | None = None,
               scheduling: dict | None = None) -> None:
    items = [{"key": "ssh-keys", "value": f"dlrun:{public_key}"}]
    if script is not None:
        items.append({"key": "startup-script", "value": script})
    body = {"name": name, "machine_type": f"zones/{ZONE}/machineTypes/e2-standard-2",
            "disks": [{"boot": True, "auto_delete": True,
                       "initialize_params": {"source_image": GCE_IMAGE}}],
            "network_interfaces": [{"network": "global/networks/default",
                                    "access_configs": [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]}],
            "metadata": {"items": items}, **({"scheduling": scheduling} if scheduling else {})}
    wait(fake, insert(fake, body))


def gce_delete(fake, name: str) -> None:
    wait(fake, client(fake).delete(project=fake.project, zone=ZONE, instance=name))
