"""A run is its code: the workdir's content digest, the run key built on it, --fresh, and the workdir
checks at load (missing, unreadable, over Ray's upload limit: one line, exit 2, nothing recorded)."""
import os

import pytest

from jobs.checkpoint import open_checkpoints
from orchestrator.errors import SpecError
from orchestrator.planning.spec import load_job
from orchestrator.planning.workdir import RAY_GRPC_SIZE_ENV, workdir_digest
from orchestrator.runs.entrypoint import checkpoint_location, run_key
from orchestrator.runs.run_identity import start_fresh
from tests.support.job_files import make_job
from tests.support.unprivileged import shared_tmp, unprivileged


def test_digest_follows_content_and_ignores_git_and_caches(tmp_path):
    job = make_job(tmp_path)
    work = tmp_path / "work"
    first = workdir_digest(str(work))
    (work / ".git").mkdir()
    (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0" * 10)
    (work / "old.pyc").write_bytes(b"\1")
    os.utime(work / "train.py", (1, 1))  # a touch is not a change
    assert workdir_digest(str(work)) == first
    (work / "train.py").write_text("print('v2')\n")
    changed = workdir_digest(str(work))
    assert changed != first
    (work / "train.py").rename(work / "main.py")  # the same bytes under another name
    assert workdir_digest(str(work)) not in (first, changed)
    assert workdir_digest(None) is None and load_job(job)  # still a valid job


def test_run_key_changes_with_the_code_not_with_the_budget(tmp_path):
    job = make_job(tmp_path)
    spec = load_job(job)
    key = run_key(spec)
    assert run_key(load_job(job, max_cost=3.0)) == key  # planning options are not the run
    (tmp_path / "work" / "train.py").write_text("print('v2')\n")
    changed = run_key(load_job(job))
    assert changed != key
    assert checkpoint_location(spec, key) != checkpoint_location(spec, changed)


def test_fresh_removes_the_runs_checkpoints_only(tmp_path):
    spec = load_job(make_job(tmp_path, checkpoint=str(tmp_path / "ckpt")))
    mine = open_checkpoints(checkpoint_location(spec, run_key(spec)))
    other = open_checkpoints(checkpoint_location(spec, "another-run"))
    for epoch in (1, 2, 3):
        mine.save({"epoch": epoch}, epoch)
    other.save({"epoch": 1}, 1)
    assert start_fresh(spec) == [2, 3]  # the newest two are kept by the store
    assert mine.epochs() == [] and other.epochs() == [1]
    assert start_fresh(spec) == []


def test_fresh_with_an_unusable_location_is_bad_input(tmp_path):
    spec = load_job(make_job(tmp_path, checkpoint="ftp://host/ckpt"))
    with pytest.raises(SpecError, match="--fresh: unsupported checkpoint location"):
        start_fresh(spec)


def test_missing_workdir_is_one_line_at_load(tmp_path):
    job = make_job(tmp_path)
    job.write_text(job.read_text().replace("workdir: work", "workdir: nowhere"))
    with pytest.raises(SpecError, match=r"job.yaml: field 'workdir': .*nowhere does not exist"):
        load_job(job)
    (tmp_path / "nowhere").write_text("a file")
    with pytest.raises(SpecError, match="is not a directory"):
        load_job(job)


def test_unreadable_workdir_file_is_one_line_at_load():
    with shared_tmp() as tmp:  # where an unprivileged user can reach the job (pytest's tmp_path is 0700)
        job = make_job(tmp)
        secret = tmp / "work" / "secret.bin"
        secret.write_bytes(b"x")
        secret.chmod(0)
        with unprivileged() as uid:  # as root (CI), nobody: root reads every file, whatever its mode
            assert not os.access(secret, os.R_OK), uid
            with pytest.raises(SpecError, match=r"field 'workdir': cannot read .*secret.bin"):
                load_job(job)
            secret.parent.joinpath("train.py").read_text()  # the rest of the job is readable to that user


def test_dangling_link_in_workdir_is_one_line_at_load(tmp_path):
    job = make_job(tmp_path)
    (tmp_path / "work" / "data").symlink_to(tmp_path / "gone")  # Ray follows links: it could not ship it
    with pytest.raises(SpecError, match=r"field 'workdir': cannot read .*data \(No such file"):
        load_job(job)


def test_workdir_over_rays_upload_limit_is_one_line_at_load(tmp_path, monkeypatch):
    job = make_job(tmp_path)
    (tmp_path / "work" / "data.bin").write_bytes(b"\0" * 5000)
    (tmp_path / "work" / ".git").mkdir()
    (tmp_path / "work" / ".git" / "pack").write_bytes(b"\0" * 50000)  # not shipped: not counted
    monkeypatch.setenv(RAY_GRPC_SIZE_ENV, "20000")  # Ray's own setting for its package limit
    load_job(job)
    monkeypatch.setenv(RAY_GRPC_SIZE_ENV, "4000")
    with pytest.raises(SpecError, match="over Ray's upload limit"):
        load_job(job)


def test_a_link_cycle_in_the_workdir_is_walked_once(tmp_path):
    job = make_job(tmp_path)
    (tmp_path / "work" / "sub").mkdir()
    (tmp_path / "work" / "sub" / "up").symlink_to(tmp_path / "work")
    assert load_job(job).workdir and workdir_digest(str(tmp_path / "work"))


def test_fresh_removes_mid_epoch_checkpoints_too(tmp_path):
    # a preempted run leaves epoch-E-step-S checkpoints: after --fresh nothing may resume from one
    spec = load_job(make_job(tmp_path, checkpoint=str(tmp_path / "ckpt")))
    mine = open_checkpoints(checkpoint_location(spec, run_key(spec)))
    mine.save({"epoch": 1}, 1)
    mine.save({"epoch": 1, "step": 7}, 1, 7)
    assert start_fresh(spec) == [1]
    assert mine.points() == [] and mine.load_latest() is None
