"""The preemption notice: the node's watcher against a fake metadata service (AWS IMDSv2, GCE), and
the job side with real torch training: stop at the next step with a checkpoint of that step, resume
there, end with exactly the uninterrupted run's metrics (CPU determinism)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from jobs import notice
from jobs.checkpoint import open_checkpoints
from tests.support.metadata_server import MetadataServer
from tests.support.training_jobs import ROOT, job_env, parse_output, run_job

EPOCHS = "8"  # ~0.45 s an epoch: after the first checkpoint the notice has ~3 s, even on a loaded machine


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    epochs, _, result = run_job("cnn", "--epochs", EPOCHS, "--checkpoint-dir", str(tmp_path_factory.mktemp("ref")))
    return {"epochs": {m["epoch"]: m for m in epochs}, "result": result}


@pytest.fixture
def metadata():
    with MetadataServer() as server:
        yield server


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_the_watcher_sees_the_notice_only_once_it_is_posted(metadata, cloud):
    assert notice.check(cloud, metadata.url) is None
    metadata.notice()
    reason = notice.check(cloud, metadata.url)
    assert reason and ("terminate" in reason if cloud == "aws" else "TRUE" in reason)
    if cloud == "aws":  # IMDSv2: a session token first, then the GET carrying it (401 without)
        assert ("PUT", "/latest/api/token") in metadata.requests


def test_no_metadata_service_is_no_notice():
    assert notice.check("aws", "http://127.0.0.1:9") is None and notice.check("gcp", "http://127.0.0.1:9") is None


def finish(ckpt, reference, stopped_at):
    """Resume from the notice's checkpoint: no step is trained twice; the metrics are the reference's."""
    epochs, events, result = run_job("cnn", "--epochs", EPOCHS, "--checkpoint-dir", str(ckpt))
    (resumed,) = [e for e in events if e["event"] == "resumed"]
    assert (resumed["epoch"], resumed["step"]) == stopped_at
    assert [m["epoch"] for m in epochs] == list(range(stopped_at[0] + 1, int(EPOCHS) + 1))
    for key in ("accuracy", "val_loss", "loss"):
        assert result[key] == reference["result"][key], key
    for m in epochs:
        assert (m["loss"], m["val_loss"], m["accuracy"]) == tuple(
            reference["epochs"][m["epoch"]][k] for k in ("loss", "val_loss", "accuracy"))


def test_a_notice_flag_stops_the_job_at_the_next_step_with_its_checkpoint(reference, tmp_path):
    ckpt, flag = tmp_path / "ckpt", tmp_path / "notice"
    flag.write_text("preempted\n")  # the node's watcher already saw the notice: stop after one step
    proc = subprocess.run([sys.executable, "-m", "jobs.cnn", "--epochs", EPOCHS, "--checkpoint-dir", str(ckpt)],
                          cwd=ROOT, env=job_env(DLRUN_NOTICE_FILE=str(flag)), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == notice.NOTICE_EXIT, proc.stderr[-2000:]
    epochs, events, result = parse_output(proc.stdout)
    assert epochs == [] and result is None
    (stopped,) = [e for e in events if e["event"] == "preempted_notice"]
    assert (stopped["epoch"], stopped["step"]) == (0, 1)
    assert open_checkpoints(str(ckpt)).points() == [(0, 1)]
    assert stopped["checkpoint"].endswith("epoch-000000-step-000001.pt")
    finish(ckpt, reference, (0, 1))


def test_the_node_watcher_signals_the_job_on_notice_and_it_resumes_where_it_stopped(reference, tmp_path, metadata):
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.notice", "--cloud", "aws", "--interval", "0.05", "--",
                             sys.executable, "-u", "-m", "jobs.cnn", "--epochs", EPOCHS, "--checkpoint-dir", str(ckpt)],
                            cwd=ROOT, env=job_env(DLRUN_METADATA_URL=metadata.url, DLRUN_NOTICE_FILE=str(tmp_path / "f")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (ckpt.is_dir() and open_checkpoints(str(ckpt)).points()):  # the first epoch is saved
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.005)
    metadata.notice()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == notice.NOTICE_EXIT, err[-2000:]
    assert (tmp_path / "f").read_text().startswith("spot instance-action terminate")
    epochs, events, result = parse_output(out)
    assert result is None and [e["event"] for e in events][-2:] == ["preemption_notice", "preempted_notice"]
    stopped = events[-1]
    point = (stopped["epoch"], stopped["step"])
    assert open_checkpoints(str(ckpt)).points()[-1] == point
    assert 1 <= point[0] < int(EPOCHS)  # after the first saved epoch, before the end
    finish(ckpt, reference, point)


def test_a_command_that_ignores_the_flag_gets_sigterm_after_the_grace(tmp_path, metadata):
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.notice", "--cloud", "gcp", "--interval", "0.05",
                             "--grace", "0.5", "--", "sleep", "60"], cwd=ROOT,
                            env=job_env(DLRUN_METADATA_URL=metadata.url, DLRUN_NOTICE_FILE=str(tmp_path / "f")),
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert proc.poll() is None
    metadata.notice()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + 15 and time.monotonic() - started < 20  # SIGTERM, long before `sleep 60`
    assert '"event": "preemption_notice"' in out and (tmp_path / "f").read_text().startswith("instance/preempted")
