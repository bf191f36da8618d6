"""A GCE node may delete itself and nothing else (infra/gcp/self_end.py), against the fake Compute Engine
and the fake IAM; the node's script run for real against them (only the metadata address is the fake's)."""
from __future__ import annotations

import re
import subprocess
import time

import pytest
import requests

from infra.base import BootstrapConfig, CredentialsError
from infra.gcp import provider as gcp_provider
from infra.gcp.provider import GcpProvider
from infra.gcp.self_end import SELF_DELETE_ROLE, self_end_script
from tests.support.gce_metadata import FakeGceMetadata
from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs
from tests.support.gcp_provider import CALLER, metadata, no_address_lookup, offer, request  # noqa: F401 (fixture)


@pytest.fixture
def clouds(monkeypatch):
    monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")  # the fakes are emulators: called without credentials
    with FakeGce() as gce, FakeGcs(project=gce.project) as iam:
        monkeypatch.setenv("DLRUN_GCP_IAM_ENDPOINT", iam.endpoint)
        monkeypatch.setenv("DLRUN_GCS_ENDPOINT", iam.endpoint)
        gce.iam = iam
        yield gce, iam


def provider_for(gce, sleep=lambda s: None) -> GcpProvider:
    return GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER, sleep=sleep)


def delete_as(gce, email: str, zone: str, name: str) -> requests.Response:
    return requests.delete(f"{gce.endpoint}/compute/v1/projects/{gce.project}/zones/{zone}/instances/{name}",
                           headers={"Authorization": f"Bearer sa:{email}"}, timeout=10)


def test_each_node_runs_as_its_clusters_account_which_may_delete_that_node_only(clouds):
    gce, iam = clouds
    a = provider_for(gce).launch(request("c-a", nodes=2))
    b = provider_for(gce).launch(request("c-b"))
    (email_a,) = {x["email"] for i in gce.instances.values() if i["labels"]["dlrun-cluster"] == "c-a"
                  for x in i["serviceAccounts"]}
    assert email_a in iam.accounts
    for inst in gce.instances.values():
        assert "https://www.googleapis.com/auth/compute" in inst["serviceAccounts"][0]["scopes"]
        assert "dlrun self-delete" in metadata(inst)["startup-script"]  # the watchdog's self-end script
        assert gce.endpoint in metadata(inst)["startup-script"]  # DLRUN_GCP_API_ENDPOINT, for the node
    head_a, worker_a = a.nodes
    for node in a.nodes:  # one binding, on the node's own instance and boot disk
        for kind in ("instances", "disks"):
            assert gce.iam_policies[(kind, a.zone, node.node_id)]["bindings"] == [
                {"role": SELF_DELETE_ROLE, "members": [f"serviceAccount:{email_a}"]}]
    other = b.nodes[0].node_id
    refused = delete_as(gce, email_a, b.zone, other)  # another cluster's node
    assert refused.status_code == 403 and "compute.instances.delete" in refused.json()["error"]["message"]
    assert delete_as(gce, email_a, a.zone, head_a.node_id).status_code == 200
    assert (a.zone, head_a.node_id) not in gce.instances and (a.zone, head_a.node_id) not in gce.disks
    assert (a.zone, worker_a.node_id) in gce.instances and (b.zone, other) in gce.instances
    provider_for(gce).terminate(a)
    provider_for(gce).terminate(b)
    assert gce.billed() == [] and iam.accounts == {}


def test_a_guest_power_off_only_stops_the_instance_and_its_disk_stays_billed(clouds):
    gce, _ = clouds
    cluster = provider_for(gce).launch(request("c-s", spot=True))  # termination action DELETE: still a stop
    name = cluster.nodes[0].node_id
    assert gce.guest_shutdown(name) == "TERMINATED"
    assert gce.instances[(cluster.zone, name)]["status"] == "TERMINATED" and (cluster.zone, name) in gce.disks
    assert gce.billed() == [f"instance {name} (TERMINATED)", f"disk {name}"]
    provider_for(gce).terminate(cluster)
    assert gce.billed() == []


def test_a_token_without_the_compute_scope_or_a_grant_cannot_delete(clouds):
    gce, _ = clouds
    cluster = provider_for(gce).launch(request("c-g"))
    name, zone = cluster.nodes[0].node_id, cluster.zone
    email = gce.instances[(zone, name)]["serviceAccounts"][0]["email"]
    gce.iam_policies.pop(("instances", zone, name))  # no grant on the instance
    assert delete_as(gce, email, zone, name).status_code == 403
    gce.instances[(zone, name)]["serviceAccounts"][0]["scopes"] = ["https://www.googleapis.com/auth/devstorage.read_write"]
    answer = delete_as(gce, email, zone, name)
    assert answer.status_code == 403 and "insufficient authentication scopes" in answer.json()["error"]["message"]
    assert (zone, name) in gce.instances


def test_the_nodes_own_script_deletes_its_instance_through_the_metadata_token(clouds, tmp_path):
    """infra/gcp/self_end.py's script, run by python3 as the watchdog runs it; the one change is the
    metadata server's address (a lab VM has the real one: tests/e2e/test_gce_self_delete_e2e.py)."""
    gce, _ = clouds
    gce.iam_lag_s = 3.0  # the node's first try comes before its new grant is enforced: it retries
    cluster = provider_for(gce).launch(request("c-run"))
    name, zone = cluster.nodes[0].node_id, cluster.zone
    with FakeGceMetadata.of_instance(gce, zone, name) as meta:
        script = self_end_script(gce.endpoint).replace("http://169.254.169.254", meta.endpoint)
        script = re.sub(r"(ENDPOINT, TRIES, GRACE_S = .*, )\d+\n", r"\g<1>0\n", script)
        (tmp_path / "self-end.sh").write_text("#!/bin/bash\n" + script)
        started = time.monotonic()
        r = subprocess.run(["bash", str(tmp_path / "self-end.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "try 1: HTTP 403 Required 'compute.instances.delete' permission" in r.stdout, r.stdout
    assert "GCE accepted the deletion of " + name in r.stdout and time.monotonic() - started < 30
    assert (zone, name) not in gce.instances and (zone, name) not in gce.disks
    assert not any("sa:" in line for line in r.stdout.splitlines())  # the token is never printed


def test_insert_waits_for_a_new_node_account_to_reach_compute_engine(clouds):
    gce, iam = clouds
    gce.account_lag = 3  # the first three inserts naming it: "... Service account ... does not exist."
    slept = []
    cluster = provider_for(gce, sleep=slept.append).launch(request("c-lag"))
    assert cluster.nodes and slept == [gcp_provider.ACCOUNT_RETRY_S] * 3
    assert len([p for m, p, _ in gce.requests if m == "POST" and p.endswith("/instances")]) == 4


def test_an_account_compute_engine_never_sees_is_a_permission_error_after_a_bounded_wait(clouds, monkeypatch):
    gce, iam = clouds
    monkeypatch.setattr(gcp_provider, "ACCOUNT_PROPAGATION_S", 0.3)
    gce.account_lag = 10 ** 6
    with pytest.raises(CredentialsError, match="iam.serviceAccountUser"):
        provider_for(gce, sleep=lambda s: time.sleep(0.05)).launch(request("c-never"))
    assert gce.billed() == [] and iam.accounts == {} and gce.firewalls == {}


def test_cpu_vms_keep_live_migration_gpu_and_spot_vms_terminate_and_disks_follow_the_plan(clouds):
    gce, _ = clouds
    p = provider_for(gce)
    cpu = offer("e2-standard-4", None, 0)
    p.launch(request("c-cpu", the_offer=cpu, bootstrap=BootstrapConfig(ray_version="2.60.0", root_volume_gb=0)))
    p.launch(request("c-cpu-big", the_offer=cpu, bootstrap=BootstrapConfig(ray_version="2.60.0", root_volume_gb=64)))
    p.launch(request("c-cpu-spot", the_offer=cpu, spot=True))
    p.launch(request("c-gpu"))
    by = {i["labels"]["dlrun-cluster"]: i for i in gce.instances.values()}
    sched = {c: (i["scheduling"]["onHostMaintenance"], i["scheduling"]["automaticRestart"]) for c, i in by.items()}
    assert sched == {"c-cpu": ("MIGRATE", True), "c-cpu-big": ("MIGRATE", True), "c-cpu-spot": ("TERMINATE", False),
                     "c-gpu": ("TERMINATE", True)}
    size = {c: int(gce.disks[(i["zone"].rsplit("/", 1)[-1], i["name"])]["sizeGb"]) for c, i in by.items()}
    assert size == {"c-cpu": 20, "c-cpu-big": 64, "c-cpu-spot": 20, "c-gpu": 100}


def test_a3_high_with_fewer_than_8_gpus_is_spot_only(clouds):
    gce, _ = clouds
    p = provider_for(gce)
    a3 = next(o for o in p.offers() if o.instance_type == "a3-highgpu-1g")
    assert a3.extra["markets"] == ("spot",)
    assert "markets" not in next(o for o in p.offers() if o.instance_type == "a3-highgpu-8g").extra
    from infra.base import ProvisionError
    with pytest.raises(ProvisionError, match="does not sell a3-highgpu-1g on-demand"):
        p.launch(request("c-a3", the_offer=a3))
    assert [(m, path) for m, path, _ in gce.requests if m != "GET"] == []  # refused before anything was made
    p.launch(request("c-a3", the_offer=a3, spot=True))  # as spot it is made: the fake records what is sent
    assert any(m == "POST" and path.endswith("/instances") for m, path, _ in gce.requests), gce.requests


def test_the_node_calls_googles_endpoint_or_the_configured_one():
    from infra.gcp.self_end import endpoint_url

    assert "ENDPOINT, TRIES, GRACE_S = 'https://compute.googleapis.com'," in self_end_script(None)
    assert endpoint_url("compute-dlrun.p.googleapis.com") == "https://compute-dlrun.p.googleapis.com"  # PSC
    assert endpoint_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    script = self_end_script("https://compute-dlrun.p.googleapis.com")
    assert "sa:" not in script and "token" not in script.split("ENDPOINT", 1)[0]


def test_a_relaunch_that_finds_a_half_made_cluster_still_grants_its_nodes(clouds):
    gce, _ = clouds
    cluster = provider_for(gce).launch(request("c-half", nodes=2))
    for node in cluster.nodes:
        gce.iam_policies.pop(("instances", cluster.zone, node.node_id))  # as if the first launch died before
    provider_for(gce).launch(request("c-half", nodes=2))
    assert len(cluster.nodes) == 2
    assert all(("instances", cluster.zone, n.node_id) in gce.iam_policies for n in cluster.nodes)
