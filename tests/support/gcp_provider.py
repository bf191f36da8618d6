"""GcpProvider against the fake Compute Engine (tests/support/gce_server.py) and the fake IAM/GCS, through the real
google clients: the fakes (gce), no internet lookup of the caller's address (no_address_lookup, autouse where
imported), a provider and a cluster request as the executor builds them, and what the fake then holds."""
from __future__ import annotations

import pytest

from infra.base import BootstrapConfig, ClusterRequest
from infra.catalog import load_offers
from infra.gcp.provider import GcpProvider
from infra.vm import network as vm_network
from infra.vm.keys import key_path
from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs

CALLER = "198.51.100.7/32"
US_CENTRAL1 = ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"]


@pytest.fixture
def gce(monkeypatch):
    """The fake Compute Engine, and the fake IAM (tests/support/gcs_server.py) that list_owned() asks for
    dlrun's node service accounts: never Google's. They are emulators, as a user says of theirs
    (DLRUN_GCP_EMULATOR=1: called without credentials)."""
    monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
    with FakeGce() as fake, FakeGcs(project=fake.project) as iam:
        monkeypatch.setenv("DLRUN_GCP_IAM_ENDPOINT", iam.endpoint)
        monkeypatch.setenv("DLRUN_GCS_ENDPOINT", iam.endpoint)
        yield fake


@pytest.fixture(autouse=True)
def no_address_lookup(monkeypatch):
    """Tests never ask the internet for the caller's address: the lookup finds nothing unless a test says."""
    monkeypatch.setattr(vm_network, "CHECKIP_URLS", ("http://127.0.0.1:9/",))
    monkeypatch.delenv("DLRUN_SSH_CIDR", raising=False)


@pytest.fixture
def provider(gce):
    return GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER)


def offer(instance_type="n1-standard-8", accelerator="T4", count=1, region="us-central1"):
    return next(o for o in load_offers() if o.cloud == "gcp" and o.region == region
                and o.instance_type == instance_type and o.accelerator == accelerator
                and o.accelerator_count == count)


def request(cluster_id="c-1", *, spot=False, nodes=1, the_offer=None, **kw):
    kw.setdefault("bootstrap", BootstrapConfig(ray_version="2.60.0"))
    return ClusterRequest(cluster_id=cluster_id, job_id="job-42", offer=the_offer or offer(), spot=spot,
                          num_nodes=nodes, owner="alice", **kw)


def metadata(instance: dict) -> dict:
    return {i["key"]: i["value"] for i in instance["metadata"]["items"]}


def boot_image(gce: FakeGce, inst: dict) -> str:
    """The image the instance's boot disk was made from (GCE shows it on the disk, not the instance)."""
    zone = inst["zone"].rsplit("/", 1)[-1]
    return gce.disks[(zone, inst["disks"][0]["source"].rsplit("/", 1)[-1])]["sourceImage"]


def assert_nothing_left(gce: FakeGce, cluster_id="c-1"):
    assert gce.instances == {}
    assert gce.disks == {}
    assert gce.firewalls == {}
    assert not key_path(cluster_id).exists()


def posts(gce: FakeGce, suffix: str) -> list[dict]:
    return [body for method, path, body in gce.requests if method == "POST" and path.endswith(suffix)]
