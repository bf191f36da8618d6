"""A GCP spot VM reclaimed mid-run: the job resumes from its gs:// checkpoint on a new VM (emulated VMs).

The node writes its checkpoints to dlrun's run bucket in the fake Cloud Storage with its cluster's service
account: its token comes from the VM's own metadata server (tests/support/gce_metadata.py), the bucket
policy admits it to the run's prefix only (tests/support/gcs_server.py), and the endpoint dlrun hands the node
(DLRUN_GCS_ENDPOINT) is forwarded into the VM. GCE then reclaims the VM without notice (termination action
DELETE: the instance and its disk are gone, a compute.instances.preempted operation says why); dlrun sees the
preemption, launches a new cluster (new account, same bucket prefix) and the job resumes from the last epoch
it checkpointed, ending with the accuracy the example reaches.
"""
from __future__ import annotations

import pytest

from tests.support.vm.cloud_runs import dlrun, job_file, status, wait_for
from tests.support.vm.cloud_runs import gcp  # noqa: F401  (fixture)
from tests.support.vm.cloud_runs import gcs_checkpointed_epoch as checkpointed_epoch
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_support_problem

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]
# the preemption comes at a known point of the training: the VM's training is paused (SIGSTOP) from the first
# checkpoint seen until the VM is gone, so the job cannot end first on a fast machine; 12 epochs of batch 8 reach
# the accuracy (0.975 after 10)
EPOCHS, BATCH = 12, 8


def test_a_gcp_spot_vm_preempted_mid_run_resumes_from_its_gs_checkpoint_on_a_new_vm(gcp, tmp_path):  # noqa: F811
    lab, gce, gcs, env = gcp
    env = dict(env, DLRUN_OWNER="vm-tester")
    spec = job_file(tmp_path, cloud="gcp", region="us-central1", spot="always", epochs=EPOCHS, batch=BATCH,
                    name="gcp-spot-cnn")
    r = dlrun("submit", str(spec), "--backend", "gcp", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_until(lambda: checkpointed_epoch(gcs, "gcp-spot-cnn") >= 2, 400, "no gs:// checkpoint of epoch 2",
               interval_s=0.1)
    (first,) = [(zone, name) for zone, name in gce.instances]
    with lab.vms[first[1]].paused("jobs.cnn"):
        account = gce.instances[first]["serviceAccounts"][0]["email"]
        assert gce.instances[first]["scheduling"]["provisioningModel"] == "SPOT"
        at_preemption = checkpointed_epoch(gcs, "gcp-spot-cnn")
        assert at_preemption < EPOCHS, "the job ended before its preemption"
        gce.preempt(first[1], delete=True)  # GCE reclaims it: no notice, instance and disk gone
        lab.wait_gone(first[1], timeout_s=60)

    st = wait_for(lambda: (s := status(job, env))["status"] in ("SUCCEEDED", "FAILED", "BUDGET_EXCEEDED") and s,
                  timeout=500)
    assert st["status"] == "SUCCEEDED", st
    assert st["preemptions"] == 1 and st["attempts"] == 2 and st["metrics"]["accuracy"] >= 0.95
    (resumed,) = [e["detail"] for e in st["events"] if e["kind"] == "resumed"]
    assert resumed["epoch"] >= at_preemption >= 2  # the new VM went on from the bucket, not from epoch 0
    inserts = [b["name"] for m, p, b in gce.requests if m == "POST" and p.endswith("/instances") and b]
    assert len(set(inserts)) == 2, inserts  # a second cluster, on a new VM
    assert account not in gcs.accounts  # the first cluster's account went with it
    wait_for(lambda: not lab.vms, timeout=60)
    assert gce.billed() == [] and gce.firewalls == {} and gcs.accounts == {}
