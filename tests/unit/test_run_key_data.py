"""A run is also its data: the run key follows `data:` (a bucket source's prefix, a local directory's
content digest), so a job resubmitted with other data starts a new run instead of resuming the old
run's checkpoint; the same data (moved, touched, a trailing slash) is the same run."""
import os
import shutil
from pathlib import Path

import yaml

from jobs.checkpoint import open_checkpoints
from orchestrator.planning.spec import load_job
from orchestrator.runs.entrypoint import checkpoint_location, run_key
from orchestrator.runs.run_identity import record_run, recorded_run_key
from orchestrator.state.db import Store
from tests.support.job_files import make_dir


def job_file(tmp_path: Path, data: list[str], name: str = "job.yaml") -> Path:
    job = tmp_path / name
    job.write_text(yaml.safe_dump({"name": "digits", "job": "cnn", "data": data,
                                   "checkpoint": str(tmp_path / "ckpt")}))
    return job


def test_other_local_data_is_another_run_and_does_not_resume_the_old_checkpoint(tmp_path):
    make_dir(tmp_path / "digits", {"train/a.csv": b"1,2\n", "labels.csv": b"0\n"})
    spec = load_job(job_file(tmp_path, ["digits"]))
    key = run_key(spec)
    open_checkpoints(checkpoint_location(spec, key)).save({"epoch": 3}, 3)

    os.utime(tmp_path / "digits" / "labels.csv", (1, 1))  # touched, not changed: the same run
    assert run_key(load_job(job_file(tmp_path, ["digits"]))) == key
    (tmp_path / "digits" / "labels.csv").write_bytes(b"1\n")  # other data: a new run, nothing to resume
    changed = load_job(job_file(tmp_path, ["digits"]))
    assert run_key(changed) != key
    assert open_checkpoints(checkpoint_location(changed, run_key(changed))).load_latest() is None
    assert open_checkpoints(checkpoint_location(spec, key)).load_latest() == {"epoch": 3}


def test_the_same_content_elsewhere_is_the_same_run(tmp_path):
    make_dir(tmp_path / "a" / "digits", {"x.bin": b"\0" * 100})
    shutil.copytree(tmp_path / "a" / "digits", tmp_path / "b" / "digits")
    here = load_job(job_file(tmp_path / "a", ["digits"]))
    there = load_job(job_file(tmp_path / "b", ["digits"]))
    assert here.data != there.data and run_key(here) == run_key(there)
    (tmp_path / "b" / "digits" / "x.bin").rename(tmp_path / "b" / "digits" / "y.bin")  # same bytes, other name
    assert run_key(load_job(job_file(tmp_path / "b", ["digits"]))) != run_key(here)


def test_a_bucket_prefix_is_its_identity(tmp_path):
    key = run_key(load_job(job_file(tmp_path, ["s3://sets/imagenet/train"])))
    assert run_key(load_job(job_file(tmp_path, ["s3://sets/imagenet/train/"]))) == key
    assert run_key(load_job(job_file(tmp_path, ["s3://sets/imagenet/val"]))) != key
    assert run_key(load_job(job_file(tmp_path, ["s3://sets/imagenet/train", "s3://sets/labels"]))) != key
    assert run_key(load_job(job_file(tmp_path, []))) != key


def test_the_recorded_key_keeps_the_data_it_started_with(tmp_path):
    # a re-attached supervisor resumes the run it recorded, even if the data changed since
    make_dir(tmp_path / "digits", {"a.csv": b"1\n"})
    store = Store(tmp_path / "s.db")
    spec = load_job(job_file(tmp_path, ["digits"]))
    job_id = store.create_job(name="digits", spec_hash="h", spec_json="{}")
    key = record_run(store, job_id, spec, schedule_id=None)
    (tmp_path / "digits" / "a.csv").write_bytes(b"2\n")
    assert recorded_run_key(store, job_id, load_job(job_file(tmp_path, ["digits"])), None) == key != \
        run_key(load_job(job_file(tmp_path, ["digits"])))
