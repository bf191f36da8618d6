"""Checkpoints in Cloud Storage on GCP, against the fake GCE, GCS and IAM servers through the real
clients: dlrun's run bucket (made once, lifecycle, uniform access, no public access), the node service
account bound to the run's prefix only and attached to every instance, no key anywhere; and a "node"
(a fresh process whose google.auth finds the account's token in a fake metadata server) writing and
resuming through jobs.checkpoint, refused outside its prefix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from infra.base import ProvisionError
from infra.gcp import storage
from infra.gcp.launch_storage import storage_client
from infra.gcp.provider import GcpProvider
from tests.support.gce_metadata import FakeGceMetadata
from tests.support.gcs_server import FakeGcs
from tests.support.gcp_provider import CALLER, gce, metadata, no_address_lookup, request  # noqa: F401

OWNER = "alice"
REGION = "us-central1"
BUCKET = storage.run_bucket_name(OWNER, REGION)
RUN_URL = f"{storage.run_bucket_url(OWNER, REGION)}/digits/0123abcd"
REPO = Path(__file__).resolve().parents[2]
KEY_MARKERS = ("private_key", "PRIVATE KEY", "GOOGLE_APPLICATION_CREDENTIALS", "client_secret", "sa:")


@pytest.fixture
def gcs():
    with FakeGcs() as fake:
        yield fake


@pytest.fixture
def provider(gce, gcs):
    return GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER,
                       storage_endpoint=gcs.endpoint, iam_endpoint=gcs.endpoint)


def launch(provider, url, cluster_id="c-1", **kw):
    return provider.launch(request(cluster_id, storage=url, **kw))


def calls(fake, method, suffix):
    return [p for m, p, *_ in fake.requests if m == method and p.endswith(suffix)]


def test_launch_makes_the_run_bucket_once_with_its_lifecycle_and_reuses_it(gce, gcs, provider):
    launch(provider, RUN_URL, spot=True)
    (bucket,) = gcs.buckets.values()
    assert bucket["name"] == BUCKET and bucket["location"] == REGION.upper()
    assert bucket["lifecycle"]["rule"] == [{"action": {"type": "Delete"},
                                            "condition": {"age": storage.RUN_EXPIRY_DAYS, "matchesPrefix": ["runs/"]}}]
    assert bucket["iamConfiguration"] == {"uniformBucketLevelAccess": {"enabled": True},
                                          "publicAccessPrevention": "enforced"}
    assert bucket["labels"] == {"dlrun-owner": OWNER}
    launch(provider, f"{storage.run_bucket_url(OWNER, REGION)}/digits/other", cluster_id="c-2")
    assert list(gcs.buckets) == [BUCKET] and len(calls(gcs, "POST", "/storage/v1/b")) == 1
    client = storage_client(AnonymousCredentials(), gcs.project, gcs.endpoint)
    assert storage.ensure_run_bucket(client, BUCKET, REGION, OWNER) is False


def test_nodes_run_as_an_account_bound_to_the_runs_prefix_only_and_carry_no_key(gce, gcs, provider):
    launch(provider, RUN_URL, spot=True, nodes=2)
    (email,) = gcs.accounts
    assert email == storage.account_email(storage.account_id("c-1"), gce.project)  # one per cluster
    assert len(gce.instances) == 2
    for instance in gce.instances.values():
        assert instance["serviceAccounts"] == [{"email": email, "scopes": list(storage.NODE_SCOPES)}]
        meta = metadata(instance)
        assert "google-cloud-storage" in meta["startup-script"]  # the node's GCS client is installed
        text = json.dumps(instance)
        assert not any(marker in text for marker in KEY_MARKERS)
    member = f"serviceAccount:{email}"
    mine = [b for b in gcs.policies[BUCKET]["bindings"] if member in b["members"]]
    assert [(b["role"], b["members"]) for b in mine] == [("roles/storage.objectAdmin", [member]),
                                                         ("roles/storage.objectViewer", [member])]
    assert mine[0]["condition"]["expression"] == \
        f'resource.name.startsWith("projects/_/buckets/{BUCKET}/objects/runs/digits/0123abcd/")'
    assert 'resource.type == "storage.googleapis.com/Bucket"' in mine[1]["condition"]["expression"]
    assert '.startsWith("runs/digits/0123abcd/")' in mine[1]["condition"]["expression"]
    assert gcs.policies[BUCKET]["version"] == 3
    # the account is granted nothing else: no project-level call, no key ever made
    base = f"/v1/projects/{gce.project}/serviceAccounts"
    assert [(m, p) for m, p, *_ in gcs.requests if p.startswith("/v1/")] == \
        [("POST", base), ("GET", f"{base}/{email}")]  # made and read back; no keys, no project policy
    # relaunching the same cluster reuses the account and leaves the policy as it is
    puts = len(calls(gcs, "PUT", "/iam"))
    launch(provider, RUN_URL, spot=True, nodes=2)
    assert list(gcs.accounts) == [email] and len(calls(gcs, "PUT", "/iam")) == puts


def test_a_users_bucket_is_used_as_is(gce, gcs, provider):
    storage_client(AnonymousCredentials(), gcs.project, gcs.endpoint).create_bucket("team-ckpt", location="US")
    launch(provider, "gs://team-ckpt/exp/digits/k1")
    assert list(gcs.buckets) == ["team-ckpt"]  # no run bucket made
    (objects, _) = [b for b in gcs.policies["team-ckpt"]["bindings"] if "condition" in b]
    assert objects["condition"]["expression"] == \
        'resource.name.startsWith("projects/_/buckets/team-ckpt/objects/exp/digits/k1/")'
    assert gcs.policies.get(BUCKET) is None


def test_an_s3_checkpoint_cannot_be_reached_from_gcp_and_nothing_is_made(gce, gcs, provider):
    with pytest.raises(ProvisionError, match="Cloud Storage only"):
        launch(provider, "s3://b/p")
    assert gce.instances == {} and gce.firewalls == {} and gcs.buckets == {} and gcs.accounts == {}


def test_a_run_bucket_name_held_by_another_project_is_one_clear_error(gce, gcs, provider):
    gcs.foreign_buckets.add(BUCKET)
    with pytest.raises(ProvisionError, match=r"not this project's.*checkpoint: gs://YOUR-BUCKET/PREFIX"):
        launch(provider, RUN_URL, spot=True)
    assert gce.instances == {} and gcs.accounts == {}


NODE = """
import json, sys
import torch
from jobs.checkpoint import CheckpointError, open_checkpoints
out = {}
store = open_checkpoints()
if sys.argv[1] == "train":
    for epoch in (1, 2, 3):
        store.save({"epoch": epoch, "w": torch.full((4,), float(epoch))}, epoch)
    out["points"] = store.points()
else:
    state = store.load_latest()
    out["resumed"] = state["epoch"]
    out["w"] = state["w"].tolist()
    for what, call in (("list", lambda s: s.points()), ("write", lambda s: s.save({"epoch": 9}, 9))):
        try:
            call(open_checkpoints(sys.argv[2]))
            out[what] = "allowed"
        except CheckpointError as e:
            out[what] = str(e)
print(json.dumps(out))
"""


def on_node(meta: FakeGceMetadata, gcs: FakeGcs, location: str, *args: str) -> dict:
    """The job's checkpoint code in a fresh process that google.auth takes for a VM of `meta`'s account."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "STORAGE_EMULATOR"))}
    env.update(PYTHONPATH=str(REPO), DLRUN_CHECKPOINT_DIR=location, GCE_METADATA_HOST=meta.host,
               GCE_METADATA_IP=meta.host, API_ENDPOINT_OVERRIDE=gcs.endpoint, CLOUDSDK_CONFIG=os.devnull)
    proc = subprocess.run([sys.executable, "-c", NODE, *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_node_writes_and_resumes_its_gs_checkpoint_and_cannot_touch_another_run(gce, gcs, provider):
    launch(provider, RUN_URL, spot=True)
    (email,) = gcs.accounts
    location = f"{RUN_URL}/run-key-1"
    with FakeGceMetadata(email, gce.project, list(storage.NODE_SCOPES)) as meta:
        trained = on_node(meta, gcs, location, "train")
        assert trained["points"] == [[2, 0], [3, 0]]  # the newest two kept
        prefix = "runs/digits/0123abcd/run-key-1/"
        assert sorted(n for b, n in gcs.objects if b == BUCKET) == [f"{prefix}epoch-000002.pt",
                                                                    f"{prefix}epoch-000003.pt"]
        # a later checkpoint that does not read back whole is skipped; the one before resumes
        damaged = dict(gcs.objects[(BUCKET, f"{prefix}epoch-000003.pt")][1], name=f"{prefix}epoch-000004.pt")
        gcs.objects[(BUCKET, damaged["name"])] = (b"not a checkpoint", damaged)
        other = f"gs://{BUCKET}/runs/other-job/k9"
        resumed = on_node(meta, gcs, location, "resume", other)  # a new VM of the same run
    assert resumed["resumed"] == 3 and resumed["w"] == [3.0] * 4
    assert "403" in resumed["list"] and "403" in resumed["write"]
    assert not any(n.startswith("runs/other-job/") for b, n in gcs.objects)
    node_calls = [h.get("authorization") for _, p, h, _ in gcs.requests if "/o" in p]
    assert node_calls and set(node_calls) == {f"Bearer sa:{email}"}  # the metadata server's token, nothing else


def test_a_missing_gcs_bucket_stops_a_built_in_job_with_one_line(gcs, monkeypatch, capsys):
    from jobs import cnn

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
    with pytest.raises(SystemExit) as exit_info:
        cnn.main(["--epochs", "1", "--checkpoint-dir", "gs://nowhere/x"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "GCS bucket 'nowhere' does not exist" in err


def test_the_node_env_names_dlruns_gcs_endpoint_and_never_a_credential(monkeypatch):
    from orchestrator.runs.entrypoint import node_storage_env

    monkeypatch.delenv("DLRUN_GCS_ENDPOINT", raising=False)
    assert node_storage_env(f"{RUN_URL}/k", REGION) == {}  # Google's endpoint; the account's token from metadata
    monkeypatch.setenv("DLRUN_GCS_ENDPOINT", "http://10.0.0.2:4443")
    assert node_storage_env(f"{RUN_URL}/k", REGION) == {"API_ENDPOINT_OVERRIDE": "http://10.0.0.2:4443"}


def test_a_just_made_account_is_waited_for_not_failed(gce, gcs, provider, monkeypatch):
    # IAM is eventually consistent: the new account reads as 404 and setIamPolicy does not know it yet
    from infra.gcp import iam

    monkeypatch.setattr(iam, "VISIBLE_POLL_S", 0.01)
    monkeypatch.setattr(storage, "POLICY_RETRY_S", 0.01)
    gcs.account_lag = 3
    launch(provider, RUN_URL, spot=True)
    (email,) = gcs.accounts
    assert len(gce.instances) == 1
    assert any(f"serviceAccount:{email}" in b["members"] for b in gcs.policies[BUCKET]["bindings"])
    assert len([p for m, p, *_ in gcs.requests if m == "GET" and p.endswith(email)]) == 4
    assert len(calls(gcs, "PUT", "/iam")) == 4
