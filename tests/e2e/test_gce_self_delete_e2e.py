"""An unwatched GCE cluster ends with no instance and no disk: the node deletes itself (emulated VMs).

dlrun submits to the fake Compute Engine (real google-cloud-compute client) with the fake IAM; the lab
boots a VM per RUNNING instance, with GCE's metadata server for that instance and a forwarder to the fake
Compute Engine. dlrun then dies (kill -9, tunnels too): nobody touches the heartbeat, the node's watchdog
fires, runs the self-end script dlrun wrote (infra/gcp/self_end.py: the node account's token from the
metadata server, DELETE on its own instance) and powers off.

Why the test can only pass when the node really deletes itself: the fake models a guest power-off as GCE
does, a stop (TERMINATED, boot disk kept and billed; tests/support/gce_server.py guest_shutdown), and a
service account may delete only what an IAM policy on that very instance (and its auto-delete disk)
grants it. The fake IAM is unkind too: a new node account is unknown to Compute Engine for the first
inserts that name it (launch retries them).
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.vm.cloud_runs import dlrun, gcp, job_file, status, tunnel_pids, wait_for  # noqa: F401  (fixture)
from tests.support.vm.fixtures import vm_support_problem

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


def test_an_unwatched_gce_cluster_deletes_itself_leaving_no_instance_and_no_disk(gcp, tmp_path):
    lab, gce, gcs, env = gcp
    env = dict(env, DLRUN_HEARTBEAT_TIMEOUT_S="30", DLRUN_HEARTBEAT_S="5")
    spec = job_file(tmp_path, cloud="gcp", region="us-central1", epochs=400, batch=8, name="gce-forgotten")
    r = dlrun("submit", str(spec), "--backend", "gcp", "--detach", env=env)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    wait_for(lambda: status(job, env)["status"] == "RUNNING")
    st = status(job, env)
    (name,) = [k[1] for k in gce.instances]
    assert gce.disks, "the boot disk is a resource of its own"
    os.kill(st["supervisor_pid"], signal.SIGKILL)  # dlrun dies with the laptop: nobody beats the watchdog
    for pid in tunnel_pids(st["cluster_id"]):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not gce.instances and not gce.disks, timeout=240)
    console = lab.console_of(name)
    assert "dlrun watchdog: powering off: no heartbeat from dlrun" in console, console[-3000:]
    assert "dlrun self-delete: GCE accepted the deletion" in console, console[-3000:]
    deletes = [p for m, p, _ in gce.requests if m == "DELETE" and p.endswith(f"/instances/{name}")]
    assert deletes, "the instance was deleted by its own node"
    wait_for(lambda: not lab.vms, timeout=30)
    assert gce.billed() == []
    # dlrun cancel removes what is left of the record (firewall rules, node account, local key)
    r = dlrun("cancel", job, env=env)
    assert r.returncode == 0, r.stderr
    assert gce.firewalls == {} and gcs.accounts == {}
    assert not list((Path(env["DLRUN_HOME"]) / "keys").glob("*"))
