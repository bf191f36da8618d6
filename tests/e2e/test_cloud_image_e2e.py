"""`dlrun submit` of a job with `image:` on AWS and GCP VMs in the lab, end to end: the image checked against the
lab's real registry from this machine, each VM's boot installing Debian's podman from the lab's apt mirror (the
stock image has no runtime), pulling the image with the credentials dlrun handed over SSH, installing dlrun's
Ray into a venv of the image's python3, and running the Ray node in the container; the job runs there, and
teardown leaves nothing. A GCP spot VM running the built-in cnn job in a team's training image (the image's own
Ray and torch) is reclaimed mid-run and the job resumes in the image on a new VM from its gs:// checkpoint.

That spot test is also the lab's GCP preemption: the node writes its checkpoints to dlrun's run bucket in the fake
Cloud Storage with its cluster's service account, whose token comes from the VM's own metadata server
(tests/support/gce_metadata.py); the bucket policy admits it to the run's prefix only (tests/support/gcs_server.py).
GCE reclaims the VM without notice (termination action DELETE: instance and disk gone, a
compute.instances.preempted operation says why); dlrun sees the preemption, launches a new cluster (a new account,
the same bucket prefix) and the job resumes from the last epoch it checkpointed.
(An image without python3 failing the boot: tests/integration/test_boot_container.py with stand-ins and
tests/e2e/test_vm_containers_lab.py with the real podman.)
"""
from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from tests.support.aws_moto import moto_server, user_data  # noqa: F401  (fixture)
from tests.support.vm.cloud_runs import (  # noqa: F401  (fixtures)
    REGION, assert_aws_left_nothing, dlrun, ec2, env, gcp, gcs_checkpointed_epoch, instances, job_file, lab, status,
    wait_for)
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.registry import registry_problem

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or ""),
              pytest.mark.skipif(bool(registry_problem()), reason=registry_problem() or "")]

# what the job reports: where it runs. podman puts /run/.containerenv into every container (empty unless
# privileged) and sets `container=podman` in its environment (podman-run(1), --env), which Ray's processes,
# started by `podman exec`, and so the job inherit
CHECK = """import json, os, sys
print("DLRUN_RESULT " + json.dumps({"in_container": os.path.exists("/run/.containerenv"),
                                    "runtime": os.environ.get("container", ""), "prefix": sys.prefix}), flush=True)
"""
SPOT_EPOCHS, SPOT_BATCH = 12, 8


def image_job(tmp_path, image: str, *, cloud: str, region: str, name: str):
    workdir = tmp_path / f"{name}-code"
    workdir.mkdir()
    (workdir / "check.py").write_text(CHECK)
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({
        "name": name, "run": "python3 check.py", "workdir": str(workdir), "image": image,
        "reference": {"accelerator": "cpu", "hours": 0.01},
        "resources": {"clouds": [cloud], "regions": [region], "spot": "never"}, "budget": {"max_cost": 5}}))
    return path


def test_aws_job_runs_in_its_private_image_on_a_stock_vm_and_leaves_nothing(env, tmp_path, moto_server, lab,
                                                                             dlrun_home):
    registry = lab.registry
    auth = tmp_path / "auth.json"  # where the user's `podman login` put the credentials
    auth.write_text(registry.auth_json())
    env = dict(env, REGISTRY_AUTH_FILE=str(auth), DLRUN_INSECURE_REGISTRIES=registry.private_host)
    image = registry.image("private/python:bookworm")
    r = dlrun("submit", str(image_job(tmp_path, image, cloud="aws", region=REGION, name="aws-image")), env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    job = r.stdout.split()[0]
    st = status(job, env)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "aws", st
    result = st["metrics"]
    assert result["in_container"] and result["runtime"] == "podman", result
    assert result["prefix"] == "/var/lib/dlrun/image-venv"  # dlrun's Ray in a venv of the image's python3
    [inst] = instances(moto_server, job)
    console = ec2(moto_server).get_console_output(InstanceId=inst["InstanceId"]).get("Output", "")
    assert "installing podman from" in console and "pulled " + image in console and "dlrun boot done" in console
    script = user_data(ec2(moto_server), inst["InstanceId"])
    assert registry.password not in script and "auths" not in script  # the credentials went over SSH only
    assert_aws_left_nothing(moto_server, job, lab, dlrun_home)


def test_gcp_job_runs_in_a_public_image_and_leaves_nothing(gcp, tmp_path):
    lab, gce, gcs, env = gcp
    env = dict(env, DLRUN_INSECURE_REGISTRIES=lab.registry.host)
    image = lab.registry.image("dlrun-lab/python:bookworm")
    r = dlrun("submit", str(image_job(tmp_path, image, cloud="gcp", region="us-central1", name="gcp-image")),
              "--backend", "gcp", env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    st = status(r.stdout.split()[0], env)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "gcp", st
    assert st["metrics"]["in_container"] and st["metrics"]["runtime"] == "podman", st["metrics"]
    wait_for(lambda: not lab.vms, timeout=60)
    assert gce.instances == {} and gce.disks == {} and gce.firewalls == {} and gcs.accounts == {}


def test_a_gcp_spot_vm_in_a_training_image_preempted_mid_run_resumes_in_the_image_on_a_new_vm(gcp, tmp_path):  # noqa: F811
    """The built-in cnn job (torch, numpy, scikit-learn: all from the image, `requirements:` cannot go with
    `image:`) in dlrun-lab/ray-torch, whose Ray is the client's: the boot uses the image's Ray (only the checkpoint
    client, google-cloud-storage, goes into the venv), the job runs in the container; GCE reclaims the VM
    (DELETE: instance and disk gone) and a new VM pulls the image again and resumes from the bucket."""
    lab, gce, gcs, env = gcp
    env = dict(env, DLRUN_OWNER="vm-tester", DLRUN_INSECURE_REGISTRIES=lab.registry.host)
    name = "gcp-spot-image"
    image = lab.registry.image("dlrun-lab/ray-torch:bookworm")
    spec = job_file(tmp_path, cloud="gcp", region="us-central1", spot="always", epochs=SPOT_EPOCHS,
                    batch=SPOT_BATCH, name=name, extra=f"image: {image}")
    r = dlrun("submit", str(spec), "--backend", "gcp", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_until(lambda: gcs_checkpointed_epoch(gcs, name) >= 2, 500, "no gs:// checkpoint of epoch 2", interval_s=0.1)
    (first,) = list(gce.instances)
    assert gce.instances[first]["scheduling"]["provisioningModel"] == "SPOT"
    account = gce.instances[first]["serviceAccounts"][0]["email"]
    # the job's processes are in the container (podman's own view of it, from the VM)
    processes = lab.vms[first[1]].run("podman exec dlrun-ray ps -eo args", timeout=60)
    at_preemption = gcs_checkpointed_epoch(gcs, name)
    assert at_preemption < SPOT_EPOCHS, "the job ended before its preemption"
    gce.preempt(first[1], delete=True)  # GCE reclaims it: no notice, instance and disk gone
    assert processes.returncode == 0 and "-m jobs.cnn" in processes.stdout, processes.stdout + processes.stderr

    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED", "BUDGET_EXCEEDED") and s,
                  timeout=600)
    assert st["status"] == "SUCCEEDED", st
    assert st["preemptions"] == 1 and st["attempts"] == 2 and st["metrics"]["accuracy"] >= 0.95, st
    (resumed,) = [e["detail"] for e in st["events"] if e["kind"] == "resumed"]
    assert resumed["epoch"] >= at_preemption >= 2  # the new VM went on from the bucket, not from epoch 0
    inserts = [b["name"] for m, p, b in gce.requests if m == "POST" and p.endswith("/instances") and b]
    assert len(set(inserts)) == 2, inserts  # a second cluster, on a new VM
    assert account not in gcs.accounts  # the first cluster's account went with it
    for vm in set(inserts):  # each VM pulled the image and ran Ray from it, in the container
        console = lab.console_of(vm)
        assert f"pulled {image}" in console, console[-3000:]
        # the image's Ray, as is: only the checkpoint client goes into the venv beside it
        (venv,) = [line for line in console.splitlines() if line.startswith("the image has ")]
        assert venv.startswith(f"the image has Ray {version('ray')}: installing pip google-cloud-storage==") \
            and "ray" not in venv.split(": installing ")[1].split(" into ")[0], venv
        assert "Ray runs in container dlrun-ray (podman" in console and "dlrun boot done" in console, console[-3000:]
    wait_for(lambda: not lab.vms, timeout=60)
    assert gce.billed() == [] and gce.firewalls == {} and gcs.accounts == {}
