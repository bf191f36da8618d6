"""`dlrun` run against the clouds' stand-ins while the emulated-VM lab boots a VM for each instance they report
running (moto's server as EC2/S3, tests/support/vm/lab.py): the lab itself (module-scoped, watching moto's EC2),
dlrun's environment for it, a job file, the CLI, and what EC2 and S3 then hold; for GCP the lab watching the fake
Compute Engine with its IAM/GCS (gcp)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.support.aws_images import seed_image_parameters
from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import write_mirrors
from tests.support.vm.lab import VmLab

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
CHECKPOINT_NAME = re.compile(r"/epoch-(\d+)(?:-step-\d+)?\.pt$")  # jobs/checkpoint.py's names
LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]


JOB = """
name: {name}
job: cnn
resources: {{clouds: [{cloud}], regions: [{region}], spot: {spot}, num_nodes: {nodes}}}
budget: {{max_cost: {max_cost}}}
workload: {{model: "jobs.cnn:SimpleCNN", input_shape: [1, 8, 8], batch_size: {batch}, dataset_size: 1437,
            epochs: {epochs}, precision: fp32}}
env: {{SEED: "0"}}
{extra}
"""


@pytest.fixture(scope="module")
def lab(moto_server, vm_lab_cache):
    seed_image_parameters()  # the public SSM parameters naming the AMIs (moto serves them in this process)
    with VmLab(boot_timeout_s=60) as lab:
        lab.watch_ec2(moto_server, REGION)
        yield lab
        assert not lab.errors, lab.errors
    assert lab.leftovers() == [], lab.leftovers()


@pytest.fixture
def env(lab, dlrun_home, moto_server):
    return aws_lab_env(lab, dlrun_home, moto_server)


def aws_lab_env(lab, dlrun_home, moto_server) -> dict:
    """dlrun's environment for AWS runs on the lab's VMs (moto's server as EC2)."""
    # the VMs have no route off this machine: packages come from the lab's index, which dlrun's nodes
    # use through the user setting for corporate / air-gapped networks ($DLRUN_HOME/config.yaml mirrors)
    write_mirrors(dlrun_home, lab)
    e = dict(os.environ, DLRUN_HOME=str(dlrun_home), RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none",
             DLRUN_SSH_CONFIG=str(lab.ssh_config), DLRUN_SSH_CIDR="203.0.113.7/32", DLRUN_NODE_POLL_S="1",
             DLRUN_BOOT_TIMEOUT="240", DLRUN_SSH_WAIT_S="120",
             AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION,
             AWS_ENDPOINT_URL=moto_server, AWS_EC2_METADATA_DISABLED="true")
    e.pop("DLRUN_RAY_ADDRESS", None)
    return e


def job_file(tmp_path, *, cloud="aws", region=REGION, spot="never", nodes=1, epochs=20, batch=64,
             max_cost=5.0, name="vm-cnn", extra="") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(JOB.format(name=name, cloud=cloud, region=region, spot=spot, nodes=nodes, epochs=epochs,
                            batch=batch, max_cost=max_cost, extra=extra))
    return p


def dlrun(*args, env, timeout=600, stdin=None):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout, input=stdin)


def status(job, env) -> dict:
    r = dlrun("status", job, "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_for(predicate, timeout=300):
    return wait_until(predicate, timeout, "the condition did not hold", interval_s=1.0)


def ec2(moto_server):
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def instances(moto_server, job, states=None) -> list[dict]:
    f = [{"Name": "tag:dlrun-job", "Values": [job]}]
    if states:
        f.append({"Name": "instance-state-name", "Values": states})
    return [i for r in ec2(moto_server).describe_instances(Filters=f)["Reservations"] for i in r["Instances"]]


def checkpointed_epoch(moto_server, name: str) -> int:
    """The newest epoch a run of job `name` checkpointed to dlrun's run buckets (0: none yet): observed
    progress, read straight from S3 (moto) without the latency of `dlrun status`."""
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    epochs = [0]
    for bucket in s3.list_buckets()["Buckets"]:
        if bucket["Name"].startswith("dlrun-"):
            for o in s3.list_objects_v2(Bucket=bucket["Name"], Prefix=f"runs/{name}/").get("Contents", []):
                m = CHECKPOINT_NAME.search(o["Key"])
                epochs += [int(m.group(1))] if m else []
    return max(epochs)


def gcs_checkpointed_epoch(gcs, name: str) -> int:
    """The newest epoch a run of job `name` checkpointed to dlrun's run buckets in the fake GCS (0: none)."""
    epochs = [0]
    for bucket, key in list(gcs.objects):
        if bucket.startswith("dlrun-") and key.startswith(f"runs/{name}/"):
            m = CHECKPOINT_NAME.search("/" + key)
            epochs += [int(m.group(1))] if m else []
    return max(epochs)


def tunnel_pids(job_cluster_id: str) -> list[int]:
    """dlrun's ssh processes for one cluster (their known_hosts file is named after it)."""
    out = subprocess.run(["pgrep", "-f", f"known_hosts/{job_cluster_id}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def assert_aws_left_nothing(moto_server, job, lab, dlrun_home):
    client = ec2(moto_server)
    assert instances(moto_server, job), "the job's instances were never launched"
    assert not instances(moto_server, job, LIVE)
    assert not client.describe_security_groups(Filters=[{"Name": "tag:dlrun-job", "Values": [job]}])["SecurityGroups"]
    assert not [k for k in client.describe_key_pairs()["KeyPairs"] if k["KeyName"].startswith("dlrun-")]
    wait_for(lambda: not lab.vms, timeout=30)
    assert not list((dlrun_home / "keys").glob("*")) and not list((dlrun_home / "known_hosts").glob("*"))


@pytest.fixture
def gcp(dlrun_home):
    """(lab, fake GCE, fake IAM/GCS, env) for one test."""
    with FakeGce() as gce, FakeGcs(project=gce.project) as gcs, VmLab(boot_timeout_s=60) as lab:
        gce.iam, gce.account_lag = gcs, 2
        watcher = lab.watch_gce(gce, gcs_port=gcs.port)
        write_mirrors(dlrun_home, lab)  # the nodes' packages come from the lab's index (config.yaml mirrors)
        env = dict(os.environ, DLRUN_HOME=str(dlrun_home), RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none",
                   DLRUN_SSH_CONFIG=str(lab.ssh_config), DLRUN_SSH_CIDR="203.0.113.7/32", DLRUN_NODE_POLL_S="1",
                   DLRUN_BOOT_TIMEOUT="240", DLRUN_SSH_WAIT_S="120", DLRUN_GCP_API_ENDPOINT=gce.endpoint, DLRUN_GCP_EMULATOR="1",
                   DLRUN_GCP_IAM_ENDPOINT=gcs.endpoint, DLRUN_GCS_ENDPOINT=gcs.endpoint,
                   GOOGLE_CLOUD_PROJECT=gce.project)
        env.pop("DLRUN_RAY_ADDRESS", None)
        try:
            yield lab, gce, gcs, env
        finally:
            watcher.stop()
            assert not lab.errors, lab.errors
    assert lab.leftovers() == [], lab.leftovers()
