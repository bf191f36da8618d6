"""Issue 28 in the emulated-VM lab: a team's Ray cluster on three VMs (tests/support/vm/team_cluster.py: a
token-auth head, a CPU worker, a worker with two fake A100s; Ray from the lab's package index, started as a
team starts it), reached by dlrun only through the head's dashboard address and a token file. Planned
beside the catalog's clouds and chosen by cost, run on the planned GPU node with dlrun's metadata,
cancelled; then the cluster vanishes mid-run and dlrun recovers as after a preemption, on this machine.
(Resuming from the checkpoint after such a loss is tested on this machine's team clusters,
tests/e2e/test_team_cluster_e2e.py, which share a directory; the VMs share none with this machine.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.lab import VmLab
from tests.support.vm.team_cluster import GPU_WORKER, TeamRayCluster
from tests.support.team_cluster_jobs import ROOT, dlrun, job_file

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


@pytest.fixture
def team(vm_lab_cache):  # (vm_lab_cache: tests/conftest.py)
    lab = VmLab().open()
    try:
        cluster = TeamRayCluster(lab).start()
        yield cluster
        cluster.close()
    finally:
        lab.close()
    assert lab.leftovers() == [], f"the VM lab left {lab.leftovers()}"


def configure(home, team, tmp_path, **over) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"clusters": {"vmlab": {
        "address": team.address, "token_file": str(team.token_file), "price_per_gpu_hour": 0.1,
        "price_per_cpu_hour": 0.01, "shared_path": "/srv/team", **over}}}))


def dlrun_jobs(team, job_id: str) -> list[dict]:
    return [j for j in team.get("/api/jobs/")[1] if (j.get("metadata") or {}).get("dlrun_job_id") == job_id]


def test_a_team_cluster_on_three_vms_is_planned_run_cancelled_and_lost(team, tmp_path, dlrun_home):
    configure(dlrun_home, team, tmp_path)
    path = job_file(tmp_path, clouds=["cluster:vmlab", "aws", "gcp"], steps=3, pause=0.2)
    r = dlrun("plan", str(path), "--json", home=dlrun_home)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    mine = {c["instance_type"] for c in plan["candidates"] if c["cloud"] == "cluster:vmlab"}
    assert mine == {"gpus-1", "gpus-2", "cpus-2"} and plan["chosen"]["cloud"] == "cluster:vmlab"

    r = dlrun("submit", str(path), home=dlrun_home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]
    jobs = dlrun_jobs(team, job_id)
    assert len(jobs) == 1 and jobs[0]["status"] == "SUCCEEDED"
    assert jobs[0]["metadata"]["job_name"] == "team-job" and jobs[0]["metadata"]["gpu"] == "A100:1"
    gpu_node = next(n for n in team.alive_nodes() if n["node_ip"] == team.ip(GPU_WORKER))
    assert jobs[0]["driver_node_id"] == gpu_node["node_id"]  # Ray placed it on the VM with the A100s
    st = json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED" and st["actual_cost"] > 0 and st["metrics"]["cuda"] in ("0", "1")

    # cancelled: `dlrun cancel` stops it on the cluster
    long_job = job_file(tmp_path, clouds=["cluster:vmlab"], steps=300, pause=1.0)
    r = dlrun("submit", str(long_job), "--detach", home=dlrun_home)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]
    wait_for(lambda: [j["status"] for j in dlrun_jobs(team, job_id)] == ["RUNNING"], 180, "the job never ran")
    assert dlrun("cancel", job_id, home=dlrun_home).returncode == 0
    wait_for(lambda: [j["status"] for j in dlrun_jobs(team, job_id)] == ["STOPPED"] and json.loads(
        dlrun("status", job_id, "--json", home=dlrun_home).stdout)["status"] == "CANCELLED", 90, "not cancelled")

    # lost: the head VM dies mid-run; dlrun re-plans without the cluster and runs the job here instead
    configure(dlrun_home, team, tmp_path, price_per_gpu_hour=0, price_per_cpu_hour=0)  # $0 as here: the faster
    lost_job = job_file(tmp_path, clouds=["cluster:vmlab", "local"], steps=40, pause=0.5, hours=0.01)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "submit", str(lost_job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, DLRUN_HOME=str(dlrun_home), DLRUN_LOCAL_GPUS="none",
                                     DLRUN_CATALOG_REFRESH="off", DLRUN_NODE_POLL_S="1"))
    try:
        wait_for(lambda: any(j["status"] == "RUNNING" for j in team.get("/api/jobs/")[1]
                             if (j.get("metadata") or {}).get("dlrun_name") == "team-job"
                             and j["submission_id"].endswith("-1") and j["metadata"].get("backend") == "cluster:vmlab"
                             and j["metadata"]["dlrun_job_id"] not in (st["id"], job_id)), 180, "never ran there")
        team.vanish()
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
        dlrun("down", home=dlrun_home)  # the local Ray head the recovery started
    assert proc.returncode == 0, err[-3000:]
    assert "running on cluster:vmlab" in err and "preempted (" in err
    st = json.loads(dlrun("status", out.split()[0], "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "local" and st["preemptions"] == 1


def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(1)
