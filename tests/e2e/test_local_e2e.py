"""End to end on a real local Ray head: submit, status, Ray's own job list, resume, down."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infra.local import head as raycluster
from tests.support.ray_clients import unauthenticated_clients


ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


def dlrun(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture
def env(ray_head, shared_profiles):
    dlrun_home = shared_profiles
    return dict(os.environ, DLRUN_RAY_ADDRESS=ray_head.dashboard_url, DLRUN_HOME=str(dlrun_home),
                RAY_USAGE_STATS_ENABLED="0")


def _job_from(stdout: str) -> str:
    return stdout.split()[0]


def dlrun_started(*args, env, until: str, timeout=300) -> tuple[subprocess.Popen, list[str]]:
    """A dlrun command left running once a line of its stderr contains `until`; the stderr lines so far."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if until in line:
                break
    finally:
        timer.cancel()
    return proc, lines


def finished(proc: subprocess.Popen, lines: list[str], timeout=300) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines) + err)


def test_submit_digits_cnn_and_lstm(env, ray_head, tmp_path):
    # the LSTM is submitted while the CNN runs (two jobs on one head, as a user may): once the CNN's plan
    # is made, so the second plan reads this machine's measurements instead of racing to write them
    cnn = dlrun_started("submit", "configs/examples/digits_cnn.yaml", "--max-cost", "5", "--backend", "local",
                        env=env, until="running on local CPU: est. ")
    lstm = dlrun_started("submit", "configs/examples/digits_lstm.yaml", "--backend", "local", env=env,
                         until="running on local CPU: est. ")
    r, r2 = finished(*cnn), finished(*lstm)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "running on local CPU: est. " in r.stderr  # one line before it starts (--backend local: no runner-up)
    job = _job_from(r.stdout)
    acc = float(r.stdout.split("accuracy=")[1].split()[0])
    assert acc >= 0.95, r.stdout

    assert r2.returncode == 0, r2.stderr[-3000:]
    assert float(r2.stdout.split("accuracy=")[1].split()[0]) >= 0.90, r2.stdout

    st = json.loads(dlrun("status", "--json", env=env).stdout)
    mine = {j["id"]: j for j in st}
    assert mine[job]["status"] == "SUCCEEDED" and mine[job]["backend"] == "local"
    assert mine[job]["ray_submission_id"] and mine[job]["est_cost"] is not None
    assert mine[job]["actual_run_seconds"] > 0

    # Ray's own CLI lists the job, and its metadata is dlrun's
    ray_bin = str(Path(sys.executable).parent / "ray")
    out = subprocess.run([ray_bin, "job", "list", "--address", ray_head.dashboard_url],
                         capture_output=True, text=True, env=env, timeout=60).stdout
    assert mine[job]["ray_submission_id"] in out
    from ray.job_submission import JobSubmissionClient

    token = Path(ray_head.token_path).read_text().strip()  # explicit: Ray caches its auth mode per process
    info = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {token}"}) \
        .get_job_info(mine[job]["ray_submission_id"])
    assert info.metadata["dlrun_job_id"] == job
    assert info.metadata["backend"] == "local" and float(info.metadata["max_cost"]) == 5.0
    assert all(isinstance(v, str) for v in info.metadata.values())

    # the history has timestamps for every transition
    detail = json.loads(dlrun("status", job, "--json", env=env).stdout)
    statuses = [e["status"] for e in detail["events"] if e["kind"] == "status"]
    assert statuses[0] == "PENDING" and statuses[-1] == "SUCCEEDED" and "RUNNING" in statuses

    logs = dlrun("logs", job, env=env).stdout  # progress rendered; --raw: the log as written
    assert "epoch 20/20" in logs and "result: accuracy=" in logs and "DLRUN_" not in logs
    assert "DLRUN_RESULT" in dlrun("logs", job, "--raw", env=env).stdout


def test_killed_job_resumes_from_checkpoint(env, tmp_path):
    job_file = tmp_path / "digits_cnn.yaml"
    ckpt = tmp_path / "ckpt"
    # the example's 20 epochs: cancelled right after its first checkpoint, it is still far from done
    job_file.write_text((ROOT / "configs/examples/digits_cnn.yaml").read_text() + f"checkpoint: {ckpt}\n")
    r = dlrun("submit", str(job_file), "--backend", "local", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.time() + 180
    while time.time() < deadline:  # wait for the first epoch's checkpoint
        if list(ckpt.rglob("*.pt")) and "epoch" in dlrun("logs", job, env=env).stdout:
            break
        time.sleep(0.2)
    r = dlrun("cancel", job, env=env)
    assert r.returncode == 0, r.stderr
    deadline = time.time() + 60
    while time.time() < deadline:
        st = json.loads(dlrun("status", job, "--json", env=env).stdout)
        if st["status"] == "CANCELLED":
            break
        time.sleep(1)
    assert st["status"] == "CANCELLED"

    r = dlrun("submit", str(job_file), "--backend", "local", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming digits-cnn from epoch" in r.stderr and "(--fresh to start over)" in r.stderr
    new_job = _job_from(r.stdout)
    resumed = json.loads(dlrun("status", new_job, "--json", env=env).stdout)
    kinds = [e["kind"] for e in resumed["events"]]
    assert "resumed" in kinds


def test_down_stops_only_the_head_dlrun_started(ray_head, dlrun_home, tmp_path):
    env = dict(os.environ, DLRUN_HOME=str(dlrun_home), DLRUN_DASHBOARD_PORT=str(raycluster.free_port()),
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("DLRUN_RAY_ADDRESS", None)
    code = "from infra.local.head import ensure_local_head; print(ensure_local_head().pgid)"
    pgid = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=120, check=True).stdout.strip())
    r = dlrun("down", env=env)
    assert r.returncode == 0 and f"process group {pgid}" in r.stdout
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert raycluster.dashboard_alive(ray_head.dashboard_url)  # the other head is untouched
    assert "nothing to stop" in dlrun("down", env=env).stdout


def test_a_client_without_the_token_can_neither_run_tasks_nor_use_the_jobs_api(ray_head):
    lan = socket.gethostbyname(socket.gethostname())
    port = ray_head.gcs_address.rsplit(":", 1)[1]
    for out in unauthenticated_clients(f"{lan}:{port}", ray_head.gcs_address, dashboard=ray_head.dashboard_url):
        assert "JOBS_API_OPEN" not in out and "TASK_RAN" not in out, out
        assert "jobs api refused: AuthenticationError" in out and "gcs refused" in out, out
