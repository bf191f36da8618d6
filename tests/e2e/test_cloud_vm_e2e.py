"""`dlrun submit --backend aws|gcp` end to end on emulated VMs, with no bypass anywhere in dlrun.

boto3 talks to moto's server and google-cloud-compute to the fake Compute Engine; for every instance
they report running, tests/support/vm boots a VM on this machine (own network/mount/PID namespaces,
a real sshd holding the key dlrun gave the cloud, the boot script run as cloud-init runs it). dlrun
reaches it as on a real cloud: its own `ssh` (DLRUN_SSH_CONFIG maps the fake public IPs onto the VMs),
waits for the boot markers and for Ray to see every node, submits through the SSH tunnel, and tears
everything down. The supervisor test's spot preemption comes with EC2's two-minute notice (the watcher and the job's
stop at a step on this machine: tests/integration/test_notice.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest

from infra.aws.storage import run_bucket_name
from jobs.notice import NOTICE_FILE_ENV

from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_support_problem
from tests.support.aws_moto import moto_server  # noqa: F401  (fixture: moto's server on 127.0.0.1)
from tests.support.ray_clients import unauthenticated_client
from tests.support.vm.cloud_runs import (  # noqa: F401  (fixtures)
    JOB, REGION, ROOT, assert_aws_left_nothing, checkpointed_epoch, dlrun, ec2, env, instances, job_file, lab, status,
    tunnel_pids, wait_for)

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]
REATTACH_EPOCHS = 30  # the start, 2 epochs past the dropped tunnel, 1 past the re-attach: under 10 on any machine


def test_aws_two_node_cpu_cluster_boots_ray_and_trains_through_the_ssh_tunnel_one_worker_per_vm(
        env, tmp_path, moto_server, lab, dlrun_home):
    """One cluster boot for what a one-node and a two-node test proved apart: every VM's boot script runs
    to its end, dlrun reaches Ray only through its tunnel, Ray Train puts one worker on each VM, the job
    trains to the accuracy a single process reaches, it is billed, and nothing is left."""
    # two ranks × batch 64 on half the data each ≈ one process at batch 128: 0.95 from epoch 10, 0.969 at
    # 20 (jobs.cnn, SEED=0); 24 for a margin over the 0.95 bound
    r = dlrun("submit", str(job_file(tmp_path, nodes=2, epochs=24, name="two-nodes")), "--backend", "aws", env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    job = r.stdout.split()[0]
    st = status(job, env)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "aws" and st["accelerator"] == "CPU", st
    assert st["metrics"]["accuracy"] >= 0.95
    assert st["ray_address"].startswith("http://127.0.0.1:")  # the tunnel, never the VM directly
    nodes = st["metrics"]["worker_nodes"]
    launched = instances(moto_server, job)
    private = {i["PrivateIpAddress"] for i in launched}
    assert len(launched) == 2 and len(nodes) == 2 and set(nodes) == private, (nodes, private)
    for inst in launched:
        console = ec2(moto_server).get_console_output(InstanceId=inst["InstanceId"]).get("Output", "")
        assert "dlrun boot done" in console  # the boot script ran to its end (as cloud-init runs it)
    assert 0 < st["actual_cost"] < 0.05 * len(launched)  # the one-node bound, per node
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)


def test_a_failed_boot_is_reported_with_its_log_and_failed_over(env, tmp_path, moto_server, lab, dlrun_home):
    extra = "requirements: [dlrun-no-such-package==9.9.9]"
    # $0.006: the two large spot offers of us-east-1 fit (~$0.0036 each), the xlarge ones (~$0.0069) do not,
    # and the first failed boot may take minutes of a slow machine before the second no longer fits
    spec = job_file(tmp_path, name="bad-boot", spot="always", max_cost=0.006, extra=extra)
    plan = json.loads(dlrun("plan", str(spec), "--backend", "aws", "--json", env=env).stdout)
    feasible = [c for c in plan["candidates"] if c["feasible"]]
    assert 1 <= len(feasible) <= 4, [c["offer"] for c in feasible]  # keeps this test short
    r = dlrun("submit", str(spec), "--backend", "aws", env=env)
    assert r.returncode == 5, r.stderr[-4000:]
    assert "failed to boot" in r.stderr and "dlrun-no-such-package" in r.stderr
    assert "Traceback" not in r.stderr
    (job,) = [j["id"] for j in json.loads(dlrun("status", "--json", env=env).stdout)]
    failed = [e for e in status(job, env)["events"] if e["kind"] == "provision_failed"]
    assert len(failed) == len(feasible) and all("boot log" in json.dumps(e["detail"]) for e in failed)
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)


def test_a_gpu_offer_whose_image_has_no_usable_gpu_fails_its_boot_and_fails_over(env, tmp_path, moto_server, lab,
                                                                                 dlrun_home):
    """A GPU offer boots the deep-learning image (its AMI is the DLAMI), whose NVIDIA driver finds no GPU in
    the lab: each T4 node's boot stops at its GPU check, before Ray starts, and dlrun tries the next
    candidate instead of training on CPU while a GPU is billed."""
    spec = tmp_path / "no-gpu.yaml"
    spec.write_text(JOB.format(name="no-gpu", cloud="aws", region=REGION, spot="never", nodes=1, max_cost=0.09,
                               batch=64, epochs=20, extra="").replace("num_nodes: 1}", 'num_nodes: 1, accelerators: "T4:1"}'))
    plan = json.loads(dlrun("plan", str(spec), "--backend", "aws", "--json", env=env).stdout)
    feasible = [c for c in plan["candidates"] if c["feasible"]]
    assert len(feasible) == 2 and all(c["software"]["wheel_index"] == "cu130" for c in feasible), feasible
    r = dlrun("submit", str(spec), "--backend", "aws", env=env)
    assert r.returncode == 5, r.stderr[-4000:]
    assert "GPU check: nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the " \
           "NVIDIA driver" in r.stderr
    assert "Traceback" not in r.stderr
    (job,) = [j["id"] for j in json.loads(dlrun("status", "--json", env=env).stdout) if j["name"] == "no-gpu"]
    failed = [e for e in status(job, env)["events"] if e["kind"] == "provision_failed"]
    assert len(failed) == 2 and all("GPU check" in json.dumps(e["detail"]) for e in failed)
    for inst in instances(moto_server, job):
        console = ec2(moto_server).get_console_output(InstanceId=inst["InstanceId"]).get("Output", "")
        assert "dlrun boot failed: GPU check" in console and "ray.scripts.scripts start" not in console
        assert lab.dead and all(vm.image == "deep-learning" for vm in lab.dead if vm.instance_id == inst["InstanceId"])
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)


def test_gcp_vm_whose_sshd_starts_late_is_waited_for(env, tmp_path, lab, dlrun_home):
    # the fake IAM too: every GCE node runs as its cluster's own service account (infra/gcp/self_end.py)
    with FakeGce() as gce, FakeGcs(project=gce.project) as iam:
        gce.iam = iam
        watcher = lab.watch_gce(gce)
        # the guest agent makes the login user late after "RUNNING" (often half a minute): 12 s already
        # refuse dlrun's first SSH attempts, and the boot script then waits for the token they bring
        lab.sshd_delay_s = 12
        try:
            e = dict(env, DLRUN_GCP_API_ENDPOINT=gce.endpoint, DLRUN_GCP_EMULATOR="1", GOOGLE_CLOUD_PROJECT=gce.project,
                     DLRUN_GCP_IAM_ENDPOINT=iam.endpoint, DLRUN_GCS_ENDPOINT=iam.endpoint)
            r = dlrun("submit", str(job_file(tmp_path, cloud="gcp", region="us-central1", name="gcp-cnn")),
                      "--backend", "gcp", env=e)
            assert r.returncode == 0, r.stderr[-4000:]
            st = status(r.stdout.split()[0], e)
            assert st["status"] == "SUCCEEDED" and st["backend"] == "gcp" and st["metrics"]["accuracy"] >= 0.95
            wait_for(lambda: not lab.vms, timeout=30)
            assert gce.instances == {} and gce.disks == {} and gce.firewalls == {} and iam.accounts == {}
        finally:
            lab.sshd_delay_s = 0
            watcher.stop()


def test_supervisor_killed_with_9_reattaches_and_a_spot_notice_later_resumes_the_relaunch_at_the_same_step(
        env, tmp_path, moto_server, lab, dlrun_home, monkeypatch):
    """One spot cluster for what three tests proved apart (each boot costs the suite most of a minute):
    the head refuses clients without the cluster's token; a dropped tunnel is re-opened; a supervisor
    killed with -9 is picked up by `dlrun status` and re-attaches to the same Ray job; then EC2 posts the
    spot VM's two-minute notice: the job checkpoints to S3 (moto, reached from the VM with its instance role's
    credentials from the VM's own 169.254.169.254) at the step the notice stopped it, and the relaunch on a new
    VM resumes at that very step, ending with the uninterrupted run's accuracy (CPU determinism)."""
    # batch 8: 0.958 accuracy after 4 epochs, 0.975 after 10 (jobs.cnn, SEED=0). The steps below do not race the
    # training: while the test re-attaches and while the notice is posted, the VM's training is paused (SIGSTOP, as
    # a VM whose CPU is withheld), so what the job trains before its preemption is what the test waits for (two
    # epochs after the tunnel drops, one checkpoint after the re-attach) plus its start, however slow this machine's
    # steps are (the unauthenticated client alone takes ~20 s). The training is continued only once the node's
    # watcher has written the notice flag (jobs/notice.py polls every 2 s): the job stops at its next step.
    reference = ThreadPoolExecutor(1).submit(uninterrupted_accuracy, REATTACH_EPOCHS, 8)  # in its own process
    monkeypatch.setenv("DLRUN_OWNER", "vm-tester")
    env = dict(env, DLRUN_OWNER="vm-tester")
    spec = job_file(tmp_path, spot="always", epochs=REATTACH_EPOCHS, batch=8, name="spot-reattach")
    r = dlrun("submit", str(spec), "--backend", "aws", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: status(job, env)["status"] == "RUNNING")
    # the head's GCS is on the VM network; without the cluster's token nothing runs there (asked from a
    # thread: the refusal takes a client a while, and the steps below need not wait for it)
    (head,) = instances(moto_server, job, ["running"])
    vm = lab.vms[head["InstanceId"]]
    address = vm.address  # its private IP's stand-in on this machine (net.py)
    unauthenticated = ThreadPoolExecutor(1).submit(
        unauthenticated_client, f"{address}:6379", f"http://{address}:8265")
    # the connection drops (Wi-Fi, a laptop lid): the tunnel is re-opened and the job goes on
    st = status(job, env)
    for tunnel in tunnel_pids(st["cluster_id"]):
        os.kill(tunnel, signal.SIGKILL)
    epoch = (st["metrics"] or {}).get("epoch", 0)
    wait_for(lambda: (status(job, env)["metrics"] or {}).get("epoch", 0) >= epoch + 2)
    with vm.paused("jobs.cnn"):  # the supervisor killed and re-attached at a known point of the training
        assert status(job, env)["attempts"] == 1
        pid = status(job, env)["supervisor_pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/cmdline").read_bytes() == b"",
                 timeout=10)
        r = dlrun("status", job, "--json", env=env)
        assert r.returncode == 0 and "re-attached" in r.stderr, r.stderr
        def reattached():
            s = status(job, env)
            return s if any(e["kind"] == "reattach" for e in s["events"]) else None
        st = wait_for(reattached)
        assert st["attempts"] == 1, "re-attached to the running job, not relaunched"
        assert st["status"] == "RUNNING", st

        out = unauthenticated.result()
        assert "TASK_RAN" not in out and "JOBS_API_OPEN" not in out, out
        assert "jobs api refused" in out and "gcs refused" in out, out
        reattached_at = checkpointed_epoch(moto_server, "spot-reattach")

    # a checkpoint the new supervisor's attempt wrote, then EC2 posts the notice (the training paused meanwhile:
    # it cannot end first)
    wait_until(lambda: checkpointed_epoch(moto_server, "spot-reattach") > reattached_at, 120,
               "no checkpoint after the re-attach", interval_s=0.1)
    with vm.paused("jobs.cnn") as (training, *_):
        assert checkpointed_epoch(moto_server, "spot-reattach") < REATTACH_EPOCHS, "the job ended before its notice"
        assert head["IamInstanceProfile"]["Arn"].split("/")[-1].startswith("dlrun-node-")
        vm.metadata.notice()  # EC2 posts the two-minute warning
        flag = notice_flag(training)
        wait_until(flag.exists, 60, f"the node's watcher wrote no notice flag ({flag})", interval_s=0.2)

    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED", "BUDGET_EXCEEDED") and s,
                  timeout=400)
    assert st["status"] == "SUCCEEDED", st
    assert st["preemptions"] == 1 and st["attempts"] == 2 and st["metrics"]["accuracy"] >= 0.95
    events = st["events"]
    assert any(e["kind"] == "reattach" for e in events)
    (stopped,) = [e["detail"] for e in events if e["kind"] == "preempted_notice"]
    (resumed,) = [e["detail"] for e in events if e["kind"] == "resumed"]
    assert (resumed["epoch"], resumed["step"]) == (stopped["epoch"], stopped["step"])  # nothing repeated
    assert reattached_at <= stopped["epoch"] < REATTACH_EPOCHS
    recovering = [e for e in events if e["status"] == "RECOVERING"]
    assert recovering and "preempted with notice, checkpoint at epoch" in json.dumps(recovering[0])
    assert st["metrics"]["accuracy"] == reference.result()

    # the checkpoints are in dlrun's run bucket, under the run's prefix only
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=run_bucket_name("vm-tester", REGION))["Contents"]]
    assert keys and all(k.startswith("runs/spot-reattach/") for k in keys)
    assert stopped["checkpoint"].startswith(f"s3://{run_bucket_name('vm-tester', REGION)}/runs/spot-reattach/")
    assert len(instances(moto_server, job)) == 2
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)
    # each attempt's node role went with its cluster: the finished run leaves no role or instance profile
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    assert iam.list_roles(PathPrefix="/dlrun/")["Roles"] == []
    assert iam.list_instance_profiles(PathPrefix="/dlrun/")["InstanceProfiles"] == []


def uninterrupted_accuracy(epochs: int, batch: int) -> float:
    out = subprocess.run([sys.executable, "-m", "jobs.cnn", "--epochs", str(epochs), "--batch-size", str(batch)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"})
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("DLRUN_RESULT "))
    return json.loads(line.split(" ", 1)[1])["accuracy"]


def notice_flag(pid: int) -> Path:
    """The job's notice flag file (jobs/notice.py NOTICE_FILE_ENV in its environment), seen from the host."""
    variables = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                     if b"=" in item)
    return Path(f"/proc/{pid}/root") / variables[NOTICE_FILE_ENV.encode()].decode().lstrip("/")


def test_a_cluster_nobody_watches_powers_itself_off(env, tmp_path, moto_server, lab, dlrun_home):
    env = dict(env, DLRUN_HEARTBEAT_TIMEOUT_S="30", DLRUN_HEARTBEAT_S="5")
    r = dlrun("submit", str(job_file(tmp_path, epochs=200, batch=8, name="forgotten")), "--backend", "aws",
              "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: status(job, env)["status"] == "RUNNING")
    st = status(job, env)
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # dlrun dies with the laptop: nobody beats the watchdog
    for pid in tunnel_pids(st["cluster_id"]):
        os.kill(pid, signal.SIGKILL)
    (inst,) = instances(moto_server, job, ["running"])
    wait_for(lambda: not instances(moto_server, job, ["running", "pending"]), timeout=180)
    console = ec2(moto_server).get_console_output(InstanceId=inst["InstanceId"]).get("Output", "")
    assert "dlrun watchdog: powering off: no heartbeat from dlrun" in console, console[-2000:]
    # dlrun cancel removes what is left of the record (security group, key pair)
    r = dlrun("cancel", job, env=env)
    assert r.returncode == 0, r.stderr
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)
