"""`--fresh` also starts the run over in dlrun's own buckets: every object under runs/<name>/<run key>/ of
each of the owner's run buckets (every region) goes; the run's neighbours (other keys, a key that merely
starts the same, other jobs, data/), another owner's bucket and a bucket dlrun did not make stay. Through
run_identity.start_fresh and the real providers: boto3 under moto (S3), google-cloud-storage against the
fake GCS."""
from __future__ import annotations

import pytest
from google.auth.credentials import AnonymousCredentials
from moto.core import set_initial_no_auth_action_count

from infra.aws import storage as s3_storage
from infra.gcp import storage as gcs_storage
from infra.gcp.launch_storage import storage_client
from orchestrator.errors import CloudCredentialsError
from orchestrator.planning.spec import JobSpec
from orchestrator.runs.entrypoint import run_key
from orchestrator.runs.fresh_buckets import bucket_clouds
from orchestrator.runs.run_identity import start_fresh
from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs
from tests.support.aws_moto import aws_env, moto, session  # noqa: F401

OWNER = "alice@laptop"


def spec_for(cloud: str, **kw) -> JobSpec:
    return JobSpec(name="digits", job="cnn", resources={"clouds": ["local", cloud], "spot": "always"}, **kw)


def layout(key: str) -> dict[str, bool]:
    """Object name -> whether --fresh must remove it."""
    return {f"runs/digits/{key}/epoch-000001.pt": True, f"runs/digits/{key}/epoch-000002-step-000005.pt": True,
            f"runs/digits/{key}/notes.txt": True,
            f"runs/digits/{key}x/epoch-000001.pt": False, "runs/digits/0000other/epoch-000001.pt": False,
            f"runs/digits-2/{key}/epoch-000001.pt": False, "data/blobs/abc": False}


@pytest.fixture
def owner(monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", OWNER)
    return OWNER


def test_fresh_clears_the_runs_prefix_in_each_of_the_owners_s3_buckets_only(session, owner):
    spec = spec_for("aws")
    key = run_key(spec)
    objects = layout(key)
    mine = [s3_storage.run_bucket_name(owner, r) for r in ("us-east-1", "us-west-2")]
    theirs = s3_storage.run_bucket_name("bob@desk", "us-east-1")
    for bucket, region in [(mine[0], "us-east-1"), (mine[1], "us-west-2"), (theirs, "us-east-1"),
                           ("team-bucket", "us-east-1")]:
        s3 = session.client("s3", region_name=region)
        s3_storage.ensure_run_bucket(s3, bucket, region, owner)
        for name in objects:
            s3.put_object(Bucket=bucket, Key=name, Body=b"x")

    assert start_fresh(spec) == [1, 2]
    for bucket in mine + [theirs, "team-bucket"]:
        left = {o["Key"] for o in session.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])}
        expected = {n for n, gone in objects.items() if not gone} if bucket in mine else set(objects)
        assert left == expected, bucket
    assert start_fresh(spec) == []  # nothing left of the run


def test_a_run_with_many_objects_is_cleared_in_batches(session, owner, monkeypatch):
    from infra.aws import launch_storage

    monkeypatch.setattr(launch_storage, "DELETE_BATCH", 3)  # S3 takes 1000 a call: 3 keeps the test small
    spec = spec_for("aws")
    key = run_key(spec)
    bucket = s3_storage.run_bucket_name(owner, "us-east-1")
    s3 = session.client("s3")
    s3_storage.ensure_run_bucket(s3, bucket, "us-east-1", owner)
    for i in range(7):  # three DeleteObjects calls
        s3.put_object(Bucket=bucket, Key=f"runs/digits/{key}/part-{i}", Body=b"")
    start_fresh(spec)
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_a_job_with_its_own_checkpoint_leaves_dlrun_buckets_alone(session, owner):
    spec = spec_for("aws", checkpoint="s3://team-ckpt/exp")
    key = run_key(spec)
    s3 = session.client("s3")
    s3.create_bucket(Bucket="team-ckpt")
    s3.put_object(Bucket="team-ckpt", Key=f"exp/{key}/epoch-000004.pt", Body=b"x")
    bucket = s3_storage.run_bucket_name(owner, "us-east-1")
    s3_storage.ensure_run_bucket(s3, bucket, "us-east-1", owner)
    s3.put_object(Bucket=bucket, Key=f"runs/digits/{key}/epoch-000001.pt", Body=b"x")
    assert bucket_clouds(spec) == []
    assert start_fresh(spec) == [4]  # the job's own location, as before
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1


@set_initial_no_auth_action_count(0)  # moto checks every call: these keys belong to no IAM user
def test_refused_s3_is_exit_4_before_anything_starts(moto, owner):
    with pytest.raises(CloudCredentialsError, match="--fresh: cannot clear this run's checkpoints in dlrun's aws"):
        start_fresh(spec_for("aws"))


@pytest.fixture
def gcp_env(monkeypatch):
    with FakeGce() as gce, FakeGcs(project=gce.project) as gcs:
        monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", gce.endpoint)
        monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
        monkeypatch.setenv("DLRUN_GCS_ENDPOINT", gcs.endpoint)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", gce.project)
        yield gcs


def test_fresh_clears_the_runs_prefix_in_each_of_the_owners_gcs_buckets_only(gcp_env, owner):
    gcs = gcp_env
    spec = spec_for("gcp")
    key = run_key(spec)
    objects = layout(key)
    client = storage_client(AnonymousCredentials(), gcs.project, gcs.endpoint)
    mine = [gcs_storage.run_bucket_name(owner, r) for r in ("us-central1", "europe-west4")]
    theirs = gcs_storage.run_bucket_name("bob@desk", "us-central1")
    for bucket in mine + [theirs, "team-bucket"]:
        client.create_bucket(bucket, location="US")
        for name in objects:
            client.bucket(bucket).blob(name).upload_from_string(b"x")

    assert start_fresh(spec) == [1, 2]
    for bucket in mine + [theirs, "team-bucket"]:
        left = {n for b, n in gcs.objects if b == bucket}
        expected = {n for n, gone in objects.items() if not gone} if bucket in mine else set(objects)
        assert left == expected, bucket
    listed = [p for m, p, *_ in gcs.requests if m == "GET" and p == "/storage/v1/b"]
    assert len(listed) == 1  # one bucket listing, by the owner's name prefix


def test_no_gcp_login_has_nothing_to_clear(monkeypatch, owner, tmp_path):
    for var in ("DLRUN_GCP_API_ENDPOINT", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # not on a VM either
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    assert start_fresh(spec_for("gcp")) == []


def test_the_plan_decides_whose_buckets_are_cleared(owner):
    # only clouds whose candidates would keep checkpoints in dlrun's bucket are asked (no call otherwise)
    from orchestrator.planning import planner
    from tests.support.planning import CATALOG, PROFILE, spec

    def clouds(**resources):
        s = spec(resources=resources)
        offers = [o for o in CATALOG if o.cloud in s.resources.clouds]  # what offers_for() would give
        return bucket_clouds(s, planner.plan(s, offers, profile=PROFILE))

    assert clouds(clouds=["local", "aws", "gcp"], spot="always") == ["aws", "gcp"]
    assert clouds(clouds=["gcp"], spot="never") == []  # a single on-demand GCP attempt keeps the node's disk
    assert clouds(clouds=["local", "aws"], spot="never") == ["aws"]
    assert clouds(clouds=["local"]) == []
