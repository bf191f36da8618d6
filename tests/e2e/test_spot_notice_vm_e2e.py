"""A spot run on emulated EC2 VMs that is preempted *with* notice: the job checkpoints to S3 (moto,
reached from the VM with its instance role's credentials from the VM's own 169.254.169.254) at the
step the notice stopped it, and the relaunch on a new VM resumes at that very step, ending with the
uninterrupted run's accuracy (CPU determinism). Run under the VM-lab lock (one lab at a time)."""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest

from infra.aws.storage import run_bucket_name
from jobs.notice import NOTICE_FILE_ENV
from tests.support.vm.cloud_runs import (  # noqa: F401
    REGION, ROOT, assert_aws_left_nothing, checkpointed_epoch, dlrun, env, instances, job_file, lab, status,
    wait_for)
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_support_problem
from tests.support.aws_moto import moto_server  # noqa: F401

# Not a race with the machine's speed: once epoch 2's checkpoint is in S3 the training is paused (SIGSTOP, as a
# VM whose CPU is withheld), the notice posted, and the training continued only once the node's watcher has
# written the flag (jobs/notice.py polls every 2 s): the job stops at its next step, wherever the test's own steps
# took their time. What is left between the checkpoint and the pause is one 0.1 s poll of S3, against the 10
# epochs after epoch 2.
EPOCHS, BATCH = 12, 8
pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


def uninterrupted_accuracy() -> float:
    out = subprocess.run([sys.executable, "-m", "jobs.cnn", "--epochs", str(EPOCHS), "--batch-size", str(BATCH)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"})
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("DLRUN_RESULT "))
    return json.loads(line.split(" ", 1)[1])["accuracy"]


def notice_flag(pid: int) -> Path:
    """The job's notice flag file (jobs/notice.py NOTICE_FILE_ENV in its environment), seen from the host."""
    variables = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                     if b"=" in item)
    return Path(f"/proc/{pid}/root") / variables[NOTICE_FILE_ENV.encode()].decode().lstrip("/")


def test_spot_vm_preempted_with_notice_resumes_mid_epoch_from_s3(env, tmp_path, moto_server, lab, dlrun_home,  # noqa: F811
                                                                 monkeypatch):
    reference = ThreadPoolExecutor(1).submit(uninterrupted_accuracy)  # meanwhile, in its own process
    monkeypatch.setenv("DLRUN_OWNER", "vm-tester")
    env = dict(env, DLRUN_OWNER="vm-tester")
    spec = job_file(tmp_path, spot="always", epochs=EPOCHS, batch=BATCH, name="notice-cnn", max_cost=5.0)
    r = dlrun("submit", str(spec), "--backend", "aws", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_until(lambda: checkpointed_epoch(moto_server, "notice-cnn") >= 2, 400, "no checkpoint of epoch 2",
               interval_s=0.1)
    (first,) = instances(moto_server, job, ["running"])
    vm = lab.vms[first["InstanceId"]]
    with vm.paused("jobs.cnn") as (training, *_):
        assert first["IamInstanceProfile"]["Arn"].split("/")[-1].startswith("dlrun-node-")
        vm.metadata.notice()  # EC2 posts the two-minute warning
        flag = notice_flag(training)
        wait_until(flag.exists, 60, f"the node's watcher wrote no notice flag ({flag})", interval_s=0.2)

    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED", "BUDGET_EXCEEDED") and s,
                  timeout=500)
    assert st["status"] == "SUCCEEDED", st
    assert st["preemptions"] == 1 and st["attempts"] == 2
    events = st["events"]
    (stopped,) = [e["detail"] for e in events if e["kind"] == "preempted_notice"]
    (resumed,) = [e["detail"] for e in events if e["kind"] == "resumed"]
    assert (resumed["epoch"], resumed["step"]) == (stopped["epoch"], stopped["step"])  # nothing repeated
    assert 2 <= stopped["epoch"] < EPOCHS
    recovering = [e for e in events if e["status"] == "RECOVERING"]
    assert recovering and "preempted with notice, checkpoint at epoch" in json.dumps(recovering[0])
    assert st["metrics"]["accuracy"] == reference.result()

    # the checkpoints are in dlrun's run bucket, under the run's prefix only
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=run_bucket_name("vm-tester", REGION))["Contents"]]
    assert keys and all(k.startswith("runs/notice-cnn/") for k in keys)
    assert stopped["checkpoint"].startswith(f"s3://{run_bucket_name('vm-tester', REGION)}/runs/notice-cnn/")
    assert len(instances(moto_server, job)) == 2
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)
    # each attempt's node role went with its cluster: the finished run leaves no role or instance profile
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    assert iam.list_roles(PathPrefix="/dlrun/")["Roles"] == []
    assert iam.list_instance_profiles(PathPrefix="/dlrun/")["InstanceProfiles"] == []
