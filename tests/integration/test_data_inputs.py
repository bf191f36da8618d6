"""`data:` in the job file: checked at load; a local directory uploaded once (content-addressed) to the
run bucket's data prefix under moto, the node role allowed to read it and nothing more; the node-side
sync (jobs/inputs.py) from moto's S3 into a cache, skipping what did not change; the plan's transfer term."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from infra.aws import storage
from jobs import inputs
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import EXIT_BAD_INPUT, SpecError
from orchestrator.planning import data_inputs, planner
from orchestrator.planning.spec import JobSpec, load_job
from orchestrator.runs.entrypoint import data_env, entrypoint
from tests.support.aws_moto import REGION, SECRET, aws_env, make_provider, make_request, moto, session  # noqa: F401
from tests.support.cli import invoke
from tests.support.planning import CATALOG, PROFILE
from tests.support.job_files import make_dir


OWNER = "alice"
RUN_URL = f"{storage.run_bucket_url(OWNER, REGION)}/digits/0123abcd"


def write_job(tmp_path, **fields) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", **fields}))
    return path


# --- the job file ----------------------------------------------------------------------------------

def test_sources_are_checked_at_load_and_local_dirs_resolved_against_the_job_file(tmp_path):
    make_dir(tmp_path / "train-set", {"a.bin": b"x"})
    spec = load_job(write_job(tmp_path, data=["train-set", "s3://bucket/imagenet/val"]))
    assert spec.data == [str((tmp_path / "train-set").resolve()), "s3://bucket/imagenet/val"]


@pytest.mark.parametrize("source, says", [
    ("missing-dir", "missing-dir does not exist; give an existing directory"),
    ("a-file", "a-file is not a directory"),
    ("ftp://host/data", "only s3://, gs:// or a local directory"),
    ("s3:///no-bucket", "names no bucket; write s3://BUCKET/PREFIX"),
])
def test_a_bad_source_is_one_line_exit_2_naming_the_field(tmp_path, source, says):
    (tmp_path / "a-file").write_text("not a directory")
    path = write_job(tmp_path, data=[source])
    with pytest.raises(SpecError) as e:
        load_job(path)
    msg = str(e.value)
    assert e.value.exit_code == EXIT_BAD_INPUT == 2 and "\n" not in msg
    assert msg.startswith(f"{path}: field 'data.0': ") and says in msg
    code, result = invoke(cli_plan.plan_command, [str(path), "--backend", "local"])
    assert code == 2 and "Traceback" not in result.output


def test_two_sources_with_one_name_are_refused(tmp_path):
    make_dir(tmp_path / "x" / "val", {"a": b"1"})
    make_dir(tmp_path / "y" / "val", {"a": b"2"})
    with pytest.raises(SpecError, match="two sources are both named 'val'"):
        load_job(write_job(tmp_path, data=["x/val", "y/val"]))


# --- what runs on the cluster ------------------------------------------------------------------------

def test_the_sync_runs_before_the_job_and_inside_the_notice_watcher(tmp_path):
    spec = JobSpec(name="t", run="python train.py --x 'a b'", data=["s3://b/p"])
    cmd = entrypoint(spec, local=False, workers=1, notice_cloud="aws")
    assert cmd == ("python3 -m jobs.notice --cloud aws -- python3 -m jobs.inputs -- python3 -m jobs.tee -- "
                   "sh -c 'python train.py --x '\"'\"'a b'\"'\"''")
    assert entrypoint(JobSpec(name="t", run="python t.py"), local=False, workers=1) == \
        "python3 -m jobs.tee -- sh -c 'python t.py'"


def test_local_runs_use_a_directory_in_place_and_cache_buckets_under_dlrun_home(tmp_path, dlrun_home):
    src = make_dir(tmp_path / "digits", {"d.npz": b"1"})
    spec = JobSpec(name="t", job="cnn", data=[str(src), "s3://b/raw"])
    env, uploads, read = data_env(spec, local=True, checkpoint=str(tmp_path / "ck"))
    assert uploads == () and read == ()
    assert env["DLRUN_DATA_CACHE"] == str(dlrun_home / "data")
    assert json.loads(env["DLRUN_DATA_SOURCES"]) == [{"name": "digits", "url": str(src), "kind": "dir"},
                                                      {"name": "raw", "url": "s3://b/raw", "kind": "prefix"}]


# --- upload once, read-only role --------------------------------------------------------------------

def count_puts(session) -> list[str]:
    puts: list[str] = []
    session.events.register("provide-client-params.s3.PutObject", lambda params, **kw: puts.append(params["Key"]))
    session.events.register("provide-client-params.s3.CreateMultipartUpload", lambda params, **kw: puts.append(params["Key"]))
    return puts


def launch_with_data(session, cluster_id, spec, while_up=lambda: None):
    env, uploads, read = data_env(spec, local=False, checkpoint=RUN_URL)
    provider = make_provider(session)
    cluster = provider.launch(make_request(cluster_id, storage=RUN_URL, data_uploads=uploads, data_read=read))
    while_up()
    provider.terminate(cluster)
    return json.loads(env["DLRUN_DATA_SOURCES"])


def test_a_local_directory_is_uploaded_once_and_only_changed_files_again(session, tmp_path):
    src = make_dir(tmp_path / "digits", {"train/a.bin": os.urandom(3000), "train/b.bin": b"same",
                                         "copy-of-b.bin": b"same", "labels.csv": b"0,1\n"})
    spec = JobSpec(name="t", job="cnn", data=[str(src)])
    puts = count_puts(session)
    (source,) = launch_with_data(session, "d1", spec)
    bucket = storage.run_bucket_name(OWNER, REGION)
    assert source["kind"] == "manifest" and source["url"].startswith(f"s3://{bucket}/data/manifests/")
    blobs = [k for k in puts if k.startswith("data/blobs/")]
    assert len(blobs) == 3 and puts[-1] == source["url"].split("/", 3)[3]  # one per content; the manifest last

    puts.clear()
    assert launch_with_data(session, "d2", spec) == [source]  # resubmitting uploads nothing
    assert puts == []

    (src / "labels.csv").write_bytes(b"0,1,2\n")
    (changed,) = launch_with_data(session, "d3", spec)
    assert changed["url"] != source["url"]
    assert len([k for k in puts if k.startswith("data/blobs/")]) == 1 and len(puts) == 2


def test_the_node_role_may_read_the_data_prefix_and_the_jobs_buckets_only(session, tmp_path):
    src = make_dir(tmp_path / "digits", {"a.bin": b"1"})
    iam, docs = session.client("iam"), []
    launch_with_data(session, "d4", JobSpec(name="t", job="cnn", data=[str(src), "s3://shared-sets/imagenet/val"]),
                     while_up=lambda: docs.append(iam.get_role_policy(
                         RoleName=storage.role_name("d4"), PolicyName="dlrun-run-storage")["PolicyDocument"]))
    (doc,) = docs
    bucket = storage.run_bucket_name(OWNER, REGION)
    by_resource = {}
    for s in doc["Statement"]:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        by_resource.setdefault(s["Resource"], set()).update(actions)
        if s["Action"] == "s3:ListBucket":
            (prefix,) = s["Condition"]["StringLike"]["s3:prefix"]
            assert prefix in ("imagenet/val/*", "data/*", "runs/digits/0123abcd/*")
    assert by_resource == {
        "arn:aws:s3:::shared-sets/imagenet/val/*": {"s3:GetObject"},
        "arn:aws:s3:::shared-sets": {"s3:ListBucket"},
        f"arn:aws:s3:::{bucket}/data/*": {"s3:GetObject"},
        f"arn:aws:s3:::{bucket}": {"s3:ListBucket"},
        f"arn:aws:s3:::{bucket}/runs/digits/0123abcd/*": {"s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                                          "s3:AbortMultipartUpload"}}
    assert SECRET not in json.dumps(doc)


# --- the node side -----------------------------------------------------------------------------------

def test_the_node_syncs_an_uploaded_directory_into_its_cache_and_skips_it_when_unchanged(session, tmp_path):
    files = {"train/a.bin": os.urandom(5000), "train/b.bin": b"bee", "labels.csv": b"0,1\n"}
    src = make_dir(tmp_path / "digits", files)
    spec = JobSpec(name="t", job="cnn", data=[str(src)])
    sources = launch_with_data(session, "n1", spec)
    cache = tmp_path / "node-cache"
    data_dir, fetched = inputs.prepare(sources, cache)
    assert fetched == 3 and Path(data_dir).is_relative_to(cache)
    assert {p.relative_to(data_dir).as_posix(): p.read_bytes() for p in Path(data_dir).rglob("*")
            if p.is_file() and p.name != inputs.SYNC_RECORD} == files
    assert inputs.prepare(sources, cache) == (data_dir, 0)  # unchanged: nothing fetched

    (src / "labels.csv").write_bytes(b"9,9\n")
    (src / "train" / "b.bin").unlink()
    sources2 = launch_with_data(session, "n2", spec)
    data_dir2, fetched = inputs.prepare(sources2, cache)
    assert data_dir2 == data_dir and fetched == 1 and (Path(data_dir2) / "labels.csv").read_bytes() == b"9,9\n"
    assert not (Path(data_dir2) / "train" / "b.bin").exists()


def test_a_bucket_prefix_is_mirrored_by_etag_and_size(moto, tmp_path):
    import boto3

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="sets")
    for key, body in {"val/x.bin": b"xx", "val/sub/y.bin": b"yyy", "other/z.bin": b"z"}.items():
        s3.put_object(Bucket="sets", Key=key, Body=body)
    src = make_dir(tmp_path / "extra", {"e.txt": b"e"})
    sources = [{"name": "val", "url": "s3://sets/val", "kind": "prefix"},
               {"name": "extra", "url": str(src), "kind": "dir"}]
    cache = tmp_path / "cache"
    data_dir, fetched = inputs.prepare(sources, cache)
    root = Path(data_dir)
    assert fetched == 2 and sorted(p.name for p in root.iterdir()) == ["extra", "val"]  # one entry per source
    assert (root / "val" / "sub" / "y.bin").read_bytes() == b"yyy" and not (root / "val" / "z.bin").exists()
    assert (root / "extra").resolve() == src.resolve()  # a directory on the machine is used in place
    assert inputs.prepare(sources, cache) == (data_dir, 0)
    s3.put_object(Bucket="sets", Key="val/x.bin", Body=b"changed")
    assert inputs.prepare(sources, cache)[1] == 1 and (root / "val" / "x.bin").read_bytes() == b"changed"


def test_the_wrapper_gives_the_job_its_data_dir(tmp_path, monkeypatch):
    import subprocess
    import sys

    src = make_dir(tmp_path / "digits", {"a": b"1"})
    env = {**os.environ, inputs.SOURCES_ENV: json.dumps([{"name": "digits", "url": str(src), "kind": "dir"}]),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-m", "jobs.inputs", "--", sys.executable, "-c",
                        "import os; print(os.environ['DLRUN_DATA_DIR'])"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(src)


# --- the plan ----------------------------------------------------------------------------------------

def test_the_plan_adds_the_transfer_time_of_local_data_to_a_clouds_start_up(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", OWNER)
    src = make_dir(tmp_path / "digits", {"a.bin": b"\0" * 9_000_000, "b.bin": b"\0" * 9_000_000})
    base = {"name": "t", "job": "cnn", "reference": {"accelerator": "T4", "hours": 1.0},
            "resources": {"clouds": ["local", "aws"]}}
    without = planner.plan(JobSpec.model_validate(base), CATALOG, profile=PROFILE)
    with_data = planner.plan(JobSpec.model_validate({**base, "data": [str(src)]}), CATALOG, profile=PROFILE)
    expected = 18_000_000 / data_inputs.TRANSFER_BYTES_PER_S["aws"]
    assert expected == pytest.approx(0.2)
    pairs = list(zip(without.candidates, with_data.candidates))
    for a, b in pairs:
        assert a.offer.key == b.offer.key
        est = b.to_json()["estimate"]
        if b.offer.cloud != "local":
            assert est["data_seconds"] == pytest.approx(expected)
            assert b.estimate.startup_seconds == pytest.approx(a.estimate.startup_seconds + expected)
            assert b.estimate.hours > a.estimate.hours
        else:
            assert est["data_seconds"] == 0 and b.estimate.hours == a.estimate.hours
    assert any(b.offer.cloud == "aws" for _, b in pairs)


def test_gs_data_and_local_data_without_a_bucket_exclude_the_candidate_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", OWNER)
    src = make_dir(tmp_path / "digits", {"a.bin": b"1"})
    base = {"name": "t", "job": "cnn", "reference": {"accelerator": "T4", "hours": 1.0},
            "resources": {"clouds": ["aws", "gcp"]}}
    without = planner.plan(JobSpec.model_validate(base), CATALOG, profile=PROFILE).candidates
    local_dir = planner.plan(JobSpec.model_validate({**base, "data": [str(src)]}), CATALOG, profile=PROFILE)
    gs = planner.plan(JobSpec.model_validate({**base, "data": ["gs://b/p"]}), CATALOG, profile=PROFILE)
    were_eligible = [i for i, c in enumerate(without) if c.reason is None]  # nothing else excludes them
    assert {without[i].offer.cloud for i in were_eligible} == {"aws", "gcp"}
    for i in were_eligible:
        c = local_dir.candidates[i]
        if c.offer.cloud == "gcp":
            assert not c.eligible and "is a local directory and dlrun uploads data only to s3:// buckets" in c.reason
        else:
            assert c.eligible and c.checkpoint.startswith("s3://")
        assert not gs.candidates[i].eligible and "gs:// inputs are not synced onto nodes yet" in gs.candidates[i].reason
    assert local_dir.chosen.offer.cloud == "aws" and gs.chosen is None
