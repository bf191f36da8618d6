"""A run that already finished, submitted again (orchestrator/runs/finished_run.py): one line that says so and
what --fresh does, exit 0, nothing profiled, planned or recorded; a run whose checkpoints are gone, or that
did not finish, is planned as before. The store is seeded as dlrun's lifecycle writes it."""
import pytest

from jobs.checkpoint import open_checkpoints
from orchestrator.cli.main import main
from orchestrator.planning.spec import load_job
from orchestrator.runs.entrypoint import checkpoint_location, run_key
from orchestrator.runs.finished_run import finished_before
from orchestrator.state.db import Store
from orchestrator.states import JobStatus
from tests.support.cli import job_file

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")


def finished(path: str, *, epochs_saved: int = 2, status: JobStatus = JobStatus.SUCCEEDED) -> str:
    """The job of this job file as a local run that trained 2 epochs leaves it: its record and checkpoints."""
    spec, store = load_job(path), Store()
    key = run_key(spec)
    location = checkpoint_location(spec, key)
    job_id = store.create_job(name=spec.name, spec_hash=spec.spec_hash(), spec_json=spec.model_dump_json())
    store.set_run_key(job_id, key)
    store.set_status(job_id, JobStatus.RUNNING)
    checkpoints = open_checkpoints(location)
    assert checkpoints is not None
    for epoch in range(1, epochs_saved + 1):
        checkpoints.save({"epoch": epoch}, epoch)
    store.finish(job_id, status, "", actual_seconds=5.0,
                 result={"job": "cnn", "epochs": 2, "epochs_run": 2, "checkpoint": location})
    return job_id


def test_a_finished_run_submitted_again_says_so_and_what_fresh_does(tmp_path, capsys):
    path = job_file(tmp_path, workload=TINY, resources={"clouds": ["local"]})
    job_id = finished(path)
    main(["submit", path])  # returns: exit 0
    out = capsys.readouterr()
    assert "profiling" not in out.err
    assert out.out.startswith(f"t: this run already finished: job {job_id} trained its 2 epochs")
    assert "`dlrun submit --fresh` removes its checkpoints and trains it again" in out.out
    assert [j.id for j in Store().list_jobs()] == [job_id]  # nothing planned, recorded or started


def test_a_run_whose_checkpoints_are_gone_or_that_failed_is_not_finished(tmp_path):
    path = job_file(tmp_path, workload=TINY, resources={"clouds": ["local"]})
    finished(path, epochs_saved=0)
    assert finished_before(load_job(path), Store()) is None
    (tmp_path / "failed").mkdir()
    other = job_file(tmp_path / "failed", workload={**TINY, "epochs": 3}, resources={"clouds": ["local"]})
    finished(other, status=JobStatus.FAILED)
    assert finished_before(load_job(other), Store()) is None
