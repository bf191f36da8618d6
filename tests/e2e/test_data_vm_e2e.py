"""`data:` on emulated EC2 VMs: a ~50 MB local directory is uploaded once to the run bucket's data
prefix (moto's server), the VM syncs it down with its instance role and the user-job example trains
from DLRUN_DATA_DIR; resubmitting uploads nothing again (that run is cancelled once its VM is asked for). Run under the VM-lab lock."""
from __future__ import annotations

import os

import boto3
import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

from infra.aws.storage import run_bucket_name
from tests.support.vm.cloud_runs import (  # noqa: F401  (fixtures)
    REGION, ROOT, assert_aws_left_nothing, dlrun, env, instances, lab, status, wait_for)
from tests.support.vm.fixtures import vm_support_problem
from tests.support.aws_moto import moto_server  # noqa: F401

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


def data_objects(moto_server, owner) -> dict[str, object]:
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_server, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=run_bucket_name(owner, REGION), Prefix="data/")
    return {o["Key"]: o["LastModified"] for p in pages for o in p.get("Contents", [])}


def test_a_local_data_dir_reaches_the_vm_once_and_the_job_trains_from_it(env, tmp_path, moto_server, lab,  # noqa: F811
                                                                        dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", "data-tester")
    env = dict(env, DLRUN_OWNER="data-tester")
    data = tmp_path / "digits-set"
    data.mkdir()
    digits = load_digits()
    np.savez(data / "digits.npz", images=digits.images[:1200], labels=digits.target[:1200])
    (data / "extra.bin").write_bytes(os.urandom(50 * 2**20))  # the issue's ~50 MB
    job = yaml.safe_load((ROOT / "configs/examples/user_job/user_job.yaml").read_text())
    job.update(name="vm-data", workdir=str(ROOT / "configs/examples/user_job"), data=[str(data)],
               run="python train.py --epochs 10 --batch-size 32",
               resources={"clouds": ["aws"], "regions": [REGION], "spot": "never"})
    job["workload"].update(epochs=10, dataset_size=960)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))

    r = dlrun("submit", str(path), "--backend", "aws", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    first = data_objects(moto_server, "data-tester")
    assert len([k for k in first if k.startswith("data/blobs/")]) == 2 and len(first) == 3
    job_id = r.stdout.split()[0]
    logs = dlrun("logs", job_id, env=env).stdout
    assert "(2 file(s) fetched)" in logs and "data: 1200 images from /" in logs, logs[-3000:]
    assert float(r.stdout.split("accuracy=")[1].split()[0]) >= 0.85, r.stdout

    # the same directory again: nothing is uploaded before the instance is asked for (the upload comes first); the
    # run is cancelled once its VM is (a second training on a second VM would prove nothing more)
    r = dlrun("submit", str(path), "--backend", "aws", "--detach", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    again = r.stdout.strip()
    wait_for(lambda: instances(moto_server, again), timeout=120)
    assert data_objects(moto_server, "data-tester") == first
    r = dlrun("cancel", again, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "cancel requested" in r.stdout, r.stdout  # its supervisor, still launching, cancels as on Ctrl-C
    st = wait_for(lambda: (s := status(again, env))["status"] not in ("PENDING", "PROVISIONING", "BOOTSTRAPPING") and s,
                  timeout=120)
    assert st["status"] == "CANCELLED", st
    assert_aws_left_nothing(moto_server, again, lab, dlrun_home)
