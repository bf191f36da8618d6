"""What a user's job takes to a cloud cluster (the real run loop, a fake backend at the boundary): its
workdir and dlrun's `jobs` package (so `from jobs.metrics import report` and jobs.checkpoint work),
the package jobs.checkpoint needs for a bucket location, and a run key that holds after a restart."""
from importlib.metadata import version

import yaml

from orchestrator.runs.entrypoint import JOBS_DIR, run_key
from orchestrator.runs.run_identity import recorded_run_key
from tests.support.fakes_runs import FakeBackend, JobsFactory
from tests.support.run_loop import SUCCESS, events, new_job, run


def job_text(tmp_path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("from jobs.metrics import report\n")
    return yaml.safe_dump({"name": "mine", "run": "python train.py", "workdir": str(work),
                           "requirements": ["einops==0.8.0"], "checkpoint": "s3://ckpt-bucket/runs",
                           "reference": {"accelerator": "T4", "hours": 1}, "resources": {"clouds": ["aws"]}})


def test_a_cloud_run_ships_the_code_jobs_and_what_its_checkpoints_need(store, clock, tmp_path):
    spec, plan, job_id = new_job(store, job_text(tmp_path))
    aws = FakeBackend("aws", clock=clock)
    jobs = JobsFactory(clock, SUCCESS)

    assert run(job_id, store, plan, [aws], jobs, clock).status == "SUCCEEDED"

    packages = aws.requests[0].bootstrap.python_packages
    assert packages == ["einops==0.8.0", f"boto3=={version('boto3')}"]  # jobs.checkpoint's S3 client
    sent = jobs.clients[0].submitted[0]
    renv = sent["runtime_env"]
    # a spot node runs the command under the preemption-notice watcher
    teed = "python3 -m jobs.tee -- sh -c 'python train.py'"  # its output read for progress (jobs/tee.py)
    command = f"python3 -m jobs.notice --cloud aws -- {teed}" if plan.chosen.spot else teed
    assert sent["entrypoint"] == command and renv["working_dir"] == spec.workdir
    assert renv["py_modules"] == [str(JOBS_DIR)] and ".git" in renv["excludes"]
    assert "pip" not in renv  # the boot installed the requirements: Ray must not clone the node's venv per job
    key = run_key(spec)
    assert renv["env_vars"]["DLRUN_CHECKPOINT_DIR"] == f"s3://ckpt-bucket/runs/{key}"
    assert events(store, job_id, "run") == [{"run_key": key, "checkpoint": f"s3://ckpt-bucket/runs/{key}"}]


def test_the_recorded_run_key_survives_a_code_change(store, tmp_path):
    """A supervisor that re-attaches later keeps the run it started with, even if train.py changed since."""
    spec, _, job_id = new_job(store, job_text(tmp_path))
    key = run_key(spec)
    (tmp_path / "work" / "train.py").write_text("print('edited')\n")
    assert run_key(spec) != key
    assert recorded_run_key(store, job_id, spec, None) == key
