"""A team's Ray cluster on three VMs in the emulated-VM lab (tests/support/vm/team_cluster.py: a token-auth head, a
CPU worker, a worker with two fake A100s; Ray from the lab's package index, started as a team starts it): first
what dlrun's cluster backend meets (three nodes, the token, a GPU job on the GPU worker), then issue 28's run:
reached by dlrun only through the head's dashboard address and a token file, planned beside the catalog's clouds
and chosen by cost, run on the planned GPU node with dlrun's metadata, cancelled; then the cluster vanishes
mid-run and dlrun recovers as after a preemption, on this machine; a vanished cluster answers nothing at all.
(Resuming from the checkpoint after such a loss is tested on this machine's team clusters,
tests/e2e/test_team_cluster_e2e.py, which share a directory; the VMs share none with this machine.)

One cluster serves the module (its three installs are the cost: the lab checks and the dlrun run had one each);
the tests run in file order and the dlrun run makes it vanish."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.lab import VmLab
from tests.support.vm.team_cluster import CPU_WORKER, GPU_WORKER, HEAD, TeamRayCluster
from tests.support.team_cluster_jobs import ROOT, dlrun, job_file

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1200),
              pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


@pytest.fixture(scope="module")
def cluster(vm_lab_cache):  # (vm_lab_cache: tests/e2e/conftest.py)
    lab = VmLab().open()
    try:
        team = TeamRayCluster(lab).start()
        print(f"team cluster: VMs booted in {team.timings['boot']:.1f} s, installs done "
              f"{team.timings['install']:.0f} s after boot, 3 nodes alive after {team.timings['cluster']:.1f} s")
        yield team
        team.close()
    finally:
        lab.close()
    assert lab.leftovers() == [], f"the VM lab left {lab.leftovers()}"


def test_three_nodes_with_distinct_resources(cluster):
    by_ip = {n["node_ip"]: n for n in cluster.alive_nodes()}
    assert set(by_ip) == {cluster.ip(r) for r in (HEAD, CPU_WORKER, GPU_WORKER)}
    head, cpu, gpu = (by_ip[cluster.ip(r)]["resources_total"] for r in (HEAD, CPU_WORKER, GPU_WORKER))
    assert head["CPU"] == 1 and "GPU" not in head and by_ip[cluster.ip(HEAD)]["is_head_node"]
    assert cpu["CPU"] == 2 and "GPU" not in cpu and not any(k.startswith("accelerator_type:") for k in cpu)
    assert gpu["GPU"] == 2 and gpu["accelerator_type:A100"] == 1


def test_the_jobs_api_wants_the_token(cluster):
    assert cluster.get("/api/version")[0] == 200  # (a route Ray leaves open: it answers until it vanishes)
    assert cluster.get("/api/jobs/", headers={})[0] == 401
    assert cluster.get("/api/jobs/", headers={"Authorization": "Bearer " + "0" * 64})[0] == 403
    status, jobs = cluster.get("/api/jobs/")
    assert status == 200 and isinstance(jobs, list)
    assert cluster.token_file.read_text().strip() == cluster.token  # what a user hands dlrun


def test_a_job_asking_for_a_gpu_lands_on_the_gpu_worker(cluster):
    from ray.job_submission import JobStatus, JobSubmissionClient

    token = cluster.token_file.read_text().strip()
    client = JobSubmissionClient(cluster.address, headers={"Authorization": f"Bearer {token}"})
    job = client.submit_job(
        entrypoint="python -c 'import os, socket, ray, torch; ray.init(); "
                   "print(\"node\", ray.get_runtime_context().get_node_id(), socket.gethostname(), "
                   "os.environ.get(\"CUDA_VISIBLE_DEVICES\"), torch.__version__)'",
        # a GPU and a share of the A100 marker, as Ray's accelerator_type= option asks (0.001)
        entrypoint_num_gpus=1, entrypoint_resources={"accelerator_type:A100": 0.001},
        metadata={"owner": "team-cluster-lab-test"})
    deadline = time.monotonic() + 300
    while (status := client.get_job_status(job)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, f"job still {status}"
        time.sleep(1)
    logs = client.get_job_logs(job)
    assert status == JobStatus.SUCCEEDED, logs
    line = next(x for x in logs.splitlines() if x.startswith("node "))
    _, node_id, hostname, visible, torch_version = line.split()
    gpu_node = next(n for n in cluster.alive_nodes() if n["node_ip"] == cluster.ip(GPU_WORKER))
    assert (node_id, hostname) == (gpu_node["node_id"], cluster.instance_id(GPU_WORKER))
    assert visible in ("0", "1") and torch_version.endswith("+cpu")
    assert client.get_job_info(job).metadata["owner"] == "team-cluster-lab-test"


def configure(home, team, tmp_path, **over) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"clusters": {"vmlab": {
        "address": team.address, "token_file": str(team.token_file), "price_per_gpu_hour": 0.1,
        "price_per_cpu_hour": 0.01, "shared_path": "/srv/team", **over}}}))


def dlrun_jobs(team, job_id: str) -> list[dict]:
    return [j for j in team.get("/api/jobs/")[1] if (j.get("metadata") or {}).get("dlrun_job_id") == job_id]


def test_a_team_cluster_on_three_vms_is_planned_run_cancelled_and_lost(cluster, tmp_path, dlrun_home):
    team = cluster
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


def test_a_vanished_cluster_no_longer_answers(cluster):
    cluster.vanish()  # (done already when the test above ran: the head stays gone)
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(cluster.address + "/api/version", timeout=15)
    assert not isinstance(e.value, urllib.error.HTTPError), e.value  # nothing answers at all (no gateway's 403)
    # the neighbour lookup gives up after ~3 s (EHOSTUNREACH); on a loaded machine the client's timeout may come first
    reason = e.value.reason
    assert isinstance(reason, TimeoutError) or getattr(reason, "errno", None) == errno.EHOSTUNREACH, e.value


def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(1)
