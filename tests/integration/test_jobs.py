"""The real training jobs: accuracy on held-out digits, kill -9 + resume, S3 checkpoints under moto,
the LSTM's use of time, the reporting lines (the 2-worker Ray Train run: tests/e2e/test_ray_train_job.py)."""
from __future__ import annotations

import importlib
import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from jobs import BUILTIN_JOBS
from jobs.checkpoint import CheckpointError, open_checkpoints
from jobs.metrics import parse_line
from tests.support.training_jobs import ROOT, job_env, parse_output, run_job


@pytest.fixture(scope="module")
def cnn_reference(tmp_path_factory):
    """One uninterrupted run of the CNN job with its defaults, checkpointing to a local dir."""
    ckpt = tmp_path_factory.mktemp("cnn-reference")
    started = time.monotonic()
    epochs, events, result = run_job("cnn", "--checkpoint-dir", str(ckpt))
    return {"epochs": epochs, "events": events, "result": result, "dir": ckpt,
            "wall_s": time.monotonic() - started}


def test_cnn_reaches_target_accuracy_and_reports_every_epoch(cnn_reference):
    result, epochs = cnn_reference["result"], cnn_reference["epochs"]
    assert result["accuracy"] >= 0.95, result
    assert cnn_reference["wall_s"] < 60
    assert [m["epoch"] for m in epochs] == list(range(1, result["epochs"] + 1))
    for m in epochs:
        assert set(m) >= {"epoch", "epochs", "loss", "val_loss", "accuracy", "samples_per_s",
                          "elapsed_s"}
        assert m["samples_per_s"] > 0 and 0.0 <= m["accuracy"] <= 1.0
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    assert cnn_reference["events"] == [] and result["resumed_from"] is None
    # every epoch was checkpointed; only the newest two are kept, no temp files left behind
    last = result["epochs"]
    assert sorted(p.name for p in cnn_reference["dir"].iterdir()) == [
        f"epoch-{last - 1:06d}.pt", f"epoch-{last:06d}.pt"]


def test_lstm_reaches_target_accuracy():
    started = time.monotonic()
    epochs, _, result = run_job("lstm")
    assert result["accuracy"] >= 0.90, result
    assert time.monotonic() - started < 60
    assert len(epochs) == result["epochs"] and result["checkpoint"] is None


def test_killed_job_resumes_from_its_checkpoint_with_identical_results(cnn_reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cnn", "--checkpoint-dir", str(ckpt)],
                            cwd=ROOT, env=job_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while not (ckpt.is_dir() and any(p.suffix == ".pt" for p in ckpt.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    killed_out = proc.communicate()[0]
    assert proc.returncode == -signal.SIGKILL
    assert "DLRUN_RESULT" not in killed_out, "the job finished before it was killed"
    saved = open_checkpoints(str(ckpt)).epochs()[-1]

    epochs, events, result = run_job("cnn", "--checkpoint-dir", str(ckpt))
    assert events == [{"event": "resumed", "epoch": saved, "step": 0, "checkpoint": str(ckpt)}]
    assert 1 <= saved < result["epochs"]
    assert [m["epoch"] for m in epochs] == list(range(saved + 1, result["epochs"] + 1))
    assert result["resumed_from"] == saved and result["epochs_run"] == result["epochs"] - saved

    reference = cnn_reference["result"]
    for key in ("accuracy", "val_loss", "loss"):
        assert result[key] == reference[key], key
    by_epoch = {m["epoch"]: m for m in cnn_reference["epochs"]}
    for m in epochs:
        assert (m["loss"], m["val_loss"]) == (by_epoch[m["epoch"]]["loss"],
                                              by_epoch[m["epoch"]]["val_loss"])


@pytest.fixture
def moto_s3(monkeypatch):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    for var, value in (("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}"),
                       ("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(var, value)
    yield
    server.stop()


def test_s3_checkpoints_resume_through_the_endpoint_url(moto_s3, capsys):
    import boto3

    from jobs import lstm

    s3 = boto3.client("s3")  # picks AWS_ENDPOINT_URL up itself: the moto server
    s3.create_bucket(Bucket="ckpts")
    url = "s3://ckpts/runs/digits-lstm"

    first = lstm.main(["--epochs", "2", "--checkpoint-dir", url])
    assert first["checkpoint"] == url and first["resumed_from"] is None
    second = lstm.main(["--epochs", "3", "--checkpoint-dir", url])
    _, events, printed = parse_output(capsys.readouterr().out)
    assert events == [{"event": "resumed", "epoch": 2, "step": 0, "checkpoint": url}]
    assert second["resumed_from"] == 2 and second["epochs_run"] == 1
    assert printed == second

    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="ckpts")["Contents"])
    assert keys == ["runs/digits-lstm/epoch-000002.pt", "runs/digits-lstm/epoch-000003.pt"]
    state = open_checkpoints(url).load_latest()
    assert state["job"] == "lstm" and state["epoch"] == 3 and len(state["history"]) == 3


def test_missing_bucket_and_an_unknown_scheme_are_clear_errors(moto_s3, capsys):
    from jobs import cnn

    with pytest.raises(CheckpointError, match="bucket 'nowhere' does not exist"):
        open_checkpoints("s3://nowhere/x").save({"epoch": 1}, 1)
    for location, fix in (("ftp://host/dir", "s3://BUCKET/PREFIX"),):  # gs://: tests/integration/test_gcp_storage.py
        with pytest.raises(SystemExit) as exit_info:
            cnn.main(["--epochs", "1", "--checkpoint-dir", location])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and fix in err and "Traceback" not in err


def test_checkpoint_of_another_job_is_refused(tmp_path, capsys):
    from jobs import cnn, lstm

    lstm.main(["--epochs", "1", "--checkpoint-dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        cnn.main(["--epochs", "1", "--checkpoint-dir", str(tmp_path)])
    assert "belongs to job 'lstm'" in capsys.readouterr().err


def test_checkpoint_dir_defaults_to_the_documented_env_var(tmp_path, monkeypatch):
    from jobs import cnn

    monkeypatch.setenv("DLRUN_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    result = cnn.main(["--epochs", "1"])
    assert result["checkpoint"] == str(tmp_path / "from-env")
    assert (tmp_path / "from-env" / "epoch-000001.pt").is_file()


def test_lstm_runs_over_the_time_steps():
    from jobs.lstm import StackedLSTM

    torch.manual_seed(0)
    model = StackedLSTM().eval()
    seen = []
    model.lstm.register_forward_hook(lambda m, args, out: seen.append(out[0].shape))
    x = torch.rand(5, 8, 8)
    with torch.no_grad():
        out = model(x)
        reversed_time = model(x.flip(1))
        first_step_changed = x.clone()
        first_step_changed[:, 0] += 1.0
        changed = model(first_step_changed)
    assert out.shape == (5, 10)
    assert seen[0] == (5, 8, model.lstm.hidden_size)  # one output per time step
    assert not torch.allclose(out, reversed_time, atol=1e-4)
    # the first row reaches the classifier only through the recurrence over all later steps
    assert not torch.allclose(out, changed, atol=1e-4)


@pytest.mark.parametrize("name", sorted(BUILTIN_JOBS))
def test_workload_factories_build_with_no_arguments(name):
    module_name, factory = BUILTIN_JOBS[name]
    mod, attr = factory.split(":")
    model = getattr(importlib.import_module(mod), attr)()
    data = importlib.import_module(module_name).JOB.load_data()
    assert (len(data.train_y), len(data.test_y)) == (1437, 360)
    with torch.no_grad():
        assert model.eval()(data.test_x[:4]).shape == (4, 10)


def test_resnet_one_epoch_trains_on_32x32_images():
    from jobs import resnet

    result = resnet.main(["--epochs", "1", "--batch-size", "128"])
    assert result["job"] == "resnet" and 0.0 <= result["accuracy"] <= 1.0
    assert resnet.JOB.load_data().train_x.shape[1:] == (1, 32, 32)


def test_metric_lines_without_ray_or_torch():
    code = ("import sys; from jobs.metrics import report, report_event, report_result\n"
            "report_event('resumed', epoch=3)\n"
            "report(epoch=4, epochs=5, loss=0.5, accuracy=0.9)\n"
            "report_result(accuracy=0.9)\n"
            "print('imported', 'ray' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=job_env(),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == 'DLRUN_METRIC {"event":"resumed","epoch":3}'
    assert json.loads(lines[1].split(" ", 1)[1]) == {"epoch": 4, "epochs": 5, "loss": 0.5,
                                                     "accuracy": 0.9}
    assert lines[2] == 'DLRUN_RESULT {"accuracy":0.9}'
    assert lines[3] == "imported False False"
    # Ray prefixes worker output; the parser still finds the payload
    assert parse_line('\x1b[36m(RayTrainWorker pid=1)\x1b[0m ' + lines[1]) == (
        "metric", {"epoch": 4, "epochs": 5, "loss": 0.5, "accuracy": 0.9})
    assert parse_line("DLRUN_METRIC {broken") is None and parse_line("hello") is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_planned_gpu_is_never_replaced_by_the_cpu(tmp_path):
    """dlrun sets DLRUN_EXPECT_GPU=1 on a GPU offer: with no usable GPU (this machine) the job stops at once."""
    refused = subprocess.Popen([sys.executable, "-m", "jobs.cnn", "--epochs", "1", "--checkpoint-dir", str(tmp_path)],
                               cwd=ROOT, env=job_env(DLRUN_EXPECT_GPU="1"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # side by side with the run below
    epochs, _, result = run_job("cnn", "--epochs", "1", "--device", "cpu", "--checkpoint-dir", str(tmp_path / "cpu"),
                                DLRUN_EXPECT_GPU="1")  # asked for by name, the CPU is still allowed
    stdout, stderr = refused.communicate(timeout=120)
    assert refused.returncode == 2, stderr[-2000:]
    assert "cnn: error: dlrun planned a GPU for this job (DLRUN_EXPECT_GPU=1)" in stderr
    assert "refusing to train on CPU" in stderr and "Traceback" not in stderr
    assert "DLRUN_RESULT" not in stdout
    assert len(epochs) == 1 and result is not None
