"""The lab's team Ray cluster (tests/support/vm/team_cluster.py) is what dlrun's cluster backend meets: a
real three-node Ray cluster behind token authentication, reached only through its address and token,
whose GPU worker takes the jobs that ask for a GPU, and which can vanish mid-run.

One cluster serves the module (its three installs are the cost); the tests run in file order and the
last one makes it vanish."""
from __future__ import annotations

import errno
import time
import urllib.error
import urllib.request

import pytest

from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.lab import VmLab
from tests.support.vm.team_cluster import CPU_WORKER, GPU_WORKER, HEAD, TeamRayCluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1200),
              pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


@pytest.fixture(scope="module")
def cluster(vm_lab_cache):
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


def test_a_vanished_cluster_no_longer_answers(cluster):
    assert cluster.get("/api/version")[0] == 200  # (a route Ray leaves open)
    cluster.vanish()
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(cluster.address + "/api/version", timeout=15)
    assert not isinstance(e.value, urllib.error.HTTPError), e.value  # nothing answers at all (no gateway's 403)
    # the neighbour lookup gives up after ~3 s (EHOSTUNREACH); on a loaded machine the client's timeout may come first
    reason = e.value.reason
    assert isinstance(reason, TimeoutError) or getattr(reason, "errno", None) == errno.EHOSTUNREACH, e.value
