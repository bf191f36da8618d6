"""`dlrun submit --backend aws|gcp` end to end, and managed runs: spot preemption recovery, the budget
guard, a supervisor killed with -9.

The clouds are simulated, the code paths are real: boto3 against moto's server on 127.0.0.1
(AWS_ENDPOINT_URL), google-cloud-compute against tests/fakes' Compute Engine server
(DLRUN_GCP_API_ENDPOINT), and the provisioned head is mapped to a real local Ray head by the
documented test hook DLRUN_TEST_HEAD_ADDRESS (infra/ssh.py), so the job really trains.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from tests.fakes.gce_server import FakeGce
from tests.test_aws_server import moto_server  # noqa: F401  (fixture: moto's server on 127.0.0.1)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.ray
REGION = "us-east-1"
LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]

# slow enough (small batches, ~0.5 s an epoch) that a preemption lands mid-training
SLOW_JOB = """
name: {name}
job: cnn
resources: {{spot: always, clouds: [{cloud}]}}
budget: {{max_cost: 5.0}}
workload: {{model: "jobs.cnn:SimpleCNN", input_shape: [1, 8, 8], batch_size: 8, dataset_size: 1437,
            epochs: {epochs}, precision: fp32}}
checkpoint: {ckpt}
env: {{SEED: "0"}}
"""


@pytest.fixture(scope="module")
def moto_url(moto_server):
    return moto_server


@pytest.fixture
def gce():
    with FakeGce() as fake:
        yield fake


@pytest.fixture
def env(ray_head, dlrun_home, moto_url):
    e = dict(os.environ, DLRUN_HOME=str(dlrun_home), RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none",
             DLRUN_TEST_HEAD_ADDRESS=ray_head.dashboard_url, DLRUN_SSH_CIDR="203.0.113.7/32",
             DLRUN_NODE_POLL_S="1", DLRUN_BOOT_TIMEOUT="60",
             AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION,
             AWS_ENDPOINT_URL=moto_url, AWS_EC2_METADATA_DISABLED="true")
    e.pop("DLRUN_RAY_ADDRESS", None)
    return e


def dlrun(*args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def job_file(tmp_path, *, cloud="aws", epochs=30, name="spot-cnn") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SLOW_JOB.format(name=name, cloud=cloud, epochs=epochs, ckpt=tmp_path / "ckpt"))
    return p


def status(job, env) -> dict:
    r = dlrun("status", job, "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_for(predicate, timeout=240, every=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s")


def ec2_instances(moto_url, **filters) -> list[dict]:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    f = [{"Name": k, "Values": v} for k, v in filters.items()]
    found = []
    for region in [r["RegionName"] for r in ec2.describe_regions()["Regions"]]:
        c = boto3.client("ec2", region_name=region, endpoint_url=moto_url, aws_access_key_id="testing",
                         aws_secret_access_key="testing")
        found += [(region, i) for r in c.describe_instances(Filters=f)["Reservations"] for i in r["Instances"]]
    return found


def terminate(moto_url, region, instance_id):
    boto3.client("ec2", region_name=region, endpoint_url=moto_url, aws_access_key_id="testing",
                 aws_secret_access_key="testing").terminate_instances(InstanceIds=[instance_id])


def epochs_logged(job, env) -> list[int]:
    out = dlrun("logs", job, env=env).stdout
    return [json.loads(line.split("DLRUN_METRIC ", 1)[1]).get("epoch", -1)
            for line in out.splitlines() if "DLRUN_METRIC " in line and '"event"' not in line]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, ray_head, moto_url):
    """An uninterrupted spot run on (simulated) AWS: the baseline the preempted run must match."""
    tmp = tmp_path_factory.mktemp("reference")
    home = tmp / "home"
    home.mkdir()
    e = dict(os.environ, DLRUN_HOME=str(home), RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none",
             DLRUN_TEST_HEAD_ADDRESS=ray_head.dashboard_url, DLRUN_SSH_CIDR="203.0.113.7/32",
             DLRUN_NODE_POLL_S="1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
             AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=moto_url, AWS_EC2_METADATA_DISABLED="true")
    r = dlrun("submit", str(job_file(tmp)), "--backend", "aws", env=e)
    return r, e


def test_submit_on_aws_runs_the_job_and_leaves_nothing(reference, moto_url):
    r, env = reference
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.split()[0]
    st = status(job, env)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "aws" and st["spot"] == 1
    assert st["metrics"]["accuracy"] >= 0.95
    assert st["actual_cost"] > 0 and st["price_per_hour"] > 0
    assert not ec2_instances(moto_url, **{"tag:dlrun-job": [job], "instance-state-name": LIVE})
    assert ec2_instances(moto_url, **{"tag:dlrun-job": [job]}), "the job's instance was never launched"


def test_submit_on_gcp_runs_the_job_and_leaves_nothing(env, gce, tmp_path):
    env = dict(env, DLRUN_GCP_API_ENDPOINT=gce.endpoint, GOOGLE_CLOUD_PROJECT=gce.project)
    p = tmp_path / "gcp.yaml"
    p.write_text((ROOT / "configs/examples/digits_cnn.yaml").read_text() + f"checkpoint: {tmp_path / 'ck'}\n")
    r = dlrun("submit", str(p), "--backend", "gcp", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.split()[0]
    st = status(job, env)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "gcp" and st["metrics"]["accuracy"] >= 0.95
    inserted = [b for m, path, b in gce.requests if m == "POST" and path.endswith("/instances")]
    assert inserted and inserted[0]["labels"]["dlrun-job"] == job
    assert gce.instances == {} and gce.firewalls == {}


def test_spot_preemption_relaunches_and_resumes_from_the_last_checkpoint(reference, env, tmp_path, moto_url):
    ref, _ = reference
    assert ref.returncode == 0, ref.stderr[-2000:]
    ref_acc = status(ref.stdout.split()[0], reference[1])["metrics"]["accuracy"]

    r = dlrun("submit", str(job_file(tmp_path)), "--backend", "aws", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: len(epochs_logged(job, env)) >= 3)
    [(region, first)] = ec2_instances(moto_url, **{"tag:dlrun-job": [job], "instance-state-name": ["running"]})
    terminate(moto_url, region, first["InstanceId"])  # AWS reclaims the spot instance

    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED") and s)
    assert st["status"] == "SUCCEEDED", st
    assert st["preemptions"] == 1 and st["attempts"] == 2
    assert st["metrics"]["accuracy"] == pytest.approx(ref_acc, abs=1e-9)  # same as uninterrupted
    kinds = [(e["kind"], e["status"]) for e in st["events"]]
    assert ("status", "RECOVERING") in kinds
    resumed = [json.loads(e["detail"]) for e in st["events"] if e["kind"] == "resumed"]
    assert len(resumed) == 1
    # only the epochs after the last checkpoint are trained twice
    epochs = epochs_logged(job, env)  # both attempts' logs, one after the other
    ckpt_epoch = resumed[0]["epoch"]
    start = len(epochs) - 1 - epochs[::-1].index(ckpt_epoch + 1)
    first_run, second = epochs[:start], epochs[start:]
    assert first_run == list(range(1, len(first_run) + 1)) and len(first_run) >= 3, epochs
    assert second == list(range(ckpt_epoch + 1, 31)), epochs
    # the resume point is the last epoch the first attempt finished (at most the epoch in flight is lost)
    assert 0 <= max(first_run) - ckpt_epoch <= 1, (ckpt_epoch, epochs)
    # both attempts' instances are terminated
    assert len(ec2_instances(moto_url, **{"tag:dlrun-job": [job]})) == 2
    assert not ec2_instances(moto_url, **{"tag:dlrun-job": [job], "instance-state-name": LIVE})


def test_supervisor_killed_with_9_is_picked_up_by_status(env, tmp_path, moto_url):
    r = dlrun("submit", str(job_file(tmp_path, epochs=20)), "--backend", "aws", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: status(job, env)["status"] == "RUNNING")
    pid = status(job, env)["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or b"" == Path(f"/proc/{pid}/cmdline").read_bytes(),
             timeout=10)

    r = dlrun("status", job, "--json", env=env)
    assert r.returncode == 0 and "re-attached" in r.stderr, r.stderr
    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED") and s)
    assert st["status"] == "SUCCEEDED", st
    assert st["attempts"] == 1, "re-attached to the running job, not relaunched"
    assert any(e["kind"] == "reattach" for e in st["events"])
    assert not ec2_instances(moto_url, **{"tag:dlrun-job": [job], "instance-state-name": LIVE})


def test_budget_guard_stops_the_job_at_max_cost(env, tmp_path, moto_url, monkeypatch):
    """In-process with an injectable clock running SPEED× real time, so dollars accrue in seconds."""
    from orchestrator.runs import executor as runner
    from orchestrator.planning.spec import load_job

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    spec = load_job(job_file(tmp_path, epochs=60))
    plan = runner.make_plan(spec)
    est = plan.chosen.estimate
    rate = est.price_per_hour  # one node
    speed, poll_s = 60.0, 0.5
    max_cost = est.cost * 1.2  # fits the plan; the real run (x speed) costs far more
    spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"max_cost": max_cost})})
    t0 = time.time()
    clock = lambda: t0 + (time.time() - t0) * speed  # noqa: E731
    job = runner.record_job(spec, runner.make_plan(spec))
    res = runner.execute(job, poll_s=poll_s, node_poll_s=5.0, clock=clock)

    from orchestrator.state.db import default_store

    row = default_store().get_job(job)
    assert res.status == "BUDGET_EXCEEDED" and row["status"] == "BUDGET_EXCEEDED"
    one_interval = rate * poll_s * speed / 3600
    assert max_cost <= row["actual_cost"] <= max_cost + one_interval, (row["actual_cost"], max_cost, one_interval)
    events = [e["kind"] for e in default_store().events(job)]
    assert "budget_warning" in events
    assert not ec2_instances(moto_url, **{"tag:dlrun-job": [job], "instance-state-name": LIVE})
