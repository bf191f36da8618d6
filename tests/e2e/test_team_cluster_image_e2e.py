"""A job's `image:` on a team's Ray cluster in the emulated-VM lab: dlrun hands the image to Ray's image_uri runtime
env (orchestrator/runs/entrypoint.py), and the team's Ray starts the job in it with rootless podman.

One cluster (tests/support/vm/team_cluster.py), set up by its admins for image_uri on the head and the CPU worker
(podman from the lab's Debian mirror, Ray as a non-root user, the lab registry marked insecure) and not on the GPU
worker. A CPU job lands on the CPU worker, whose Ray pulls the lab registry's Ray image and runs the job in it: the
job sees podman's /run/.containerenv and `container=podman`, the image's Python and Ray, its own uid (keep-id). The
same job asking for the GPU worker's A100 lands where podman is missing: Ray's runtime env fails, and dlrun says so
in one line and exits 1.
"""
from __future__ import annotations

import json
from importlib.metadata import version

import pytest
import yaml

from tests.support.team_cluster_jobs import dlrun
from tests.support.vm.fixtures import vm_support_problem
from tests.support.vm.lab import VmLab
from tests.support.vm.registry import registry_problem
from tests.support.vm.team_cluster import CPU_WORKER, GPU_WORKER, HEAD, RAY_USER, TeamRayCluster

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem() or registry_problem()),
                                                  reason=vm_support_problem() or registry_problem() or "")]

IMAGE = "dlrun-lab/ray-torch:bookworm"
# what the job reports of where it runs (no workdir: image_uri ships nothing, so the code is in `run:`)
CHECK = ("import json, os, sys, ray, torch; print('DLRUN_RESULT ' + json.dumps({"
         "'containerenv': os.path.exists('/run/.containerenv'), 'container': os.environ.get('container'), "
         "'uid': os.getuid(), 'python': sys.executable, 'ray': ray.__version__, 'torch': torch.__version__, "
         "'job': os.environ.get('DLRUN_JOB_ID')}), flush=True)")


@pytest.fixture
def team(vm_lab_cache):  # (vm_lab_cache: tests/conftest.py)
    lab = VmLab().open()
    try:
        cluster = TeamRayCluster(lab, containers=(HEAD, CPU_WORKER)).start()
        yield cluster
        cluster.close()
    finally:
        lab.close()
    assert lab.leftovers() == [], f"the VM lab left {lab.leftovers()}"


def image_job(tmp_path, image: str, **resources) -> str:
    job = {"name": "team-image-job", "image": image, "run": f'python -c "{CHECK}"',
           "reference": {"accelerator": "cpu", "hours": 0.01},  # (so the CPU worker is cheapest)
           "resources": {"clouds": ["cluster:vmlab"], "spot": "never", **resources}}
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_a_job_runs_in_its_image_on_a_team_cluster_and_fails_in_one_line_where_podman_is_missing(
        team, tmp_path, dlrun_home, monkeypatch):
    (dlrun_home / "config.yaml").write_text(yaml.safe_dump({"clusters": {"vmlab": {
        "address": team.address, "token_file": str(team.token_file), "price_per_gpu_hour": 0.1,
        "price_per_cpu_hour": 0.01, "shared_path": "/srv/team"}}}))
    registry = team.lab.registry
    monkeypatch.setenv("DLRUN_INSECURE_REGISTRIES", registry.host)  # dlrun checks the image's manifest first
    image = registry.image(IMAGE)

    r = dlrun("submit", image_job(tmp_path, image), home=dlrun_home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert " SUCCEEDED on cluster:vmlab cpus-2 " in r.stdout, r.stdout
    st = json.loads(dlrun("status", r.stdout.split()[0], "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED", st
    jobs = [j for j in team.get("/api/jobs/")[1] if (j.get("metadata") or {}).get("dlrun_job_id") == st["id"]]
    assert len(jobs) == 1 and jobs[0]["runtime_env"]["image_uri"] == image
    cpu_node = next(n for n in team.alive_nodes() if n["node_ip"] == team.ip(CPU_WORKER))
    assert jobs[0]["driver_node_id"] == cpu_node["node_id"]
    result = st["metrics"]
    assert result["containerenv"] is True and result["container"] == "podman", result  # in podman's container
    # the image's `python` (Ray's image_uri runs that), Ray and torch, with dlrun's environment
    assert result["python"] == "/usr/local/bin/python" and result["job"] == st["id"], result
    assert result["ray"] == version("ray") and result["torch"].endswith("+cpu"), result
    uid = team.vms[CPU_WORKER.name].run(f"id -u {RAY_USER}", check=True).stdout.strip()
    assert str(result["uid"]) == uid, result  # --userns=keep-id: the node's Ray user inside too

    # the GPU worker's admins have not installed podman: Ray's runtime env fails there, before the job runs
    r = dlrun("submit", image_job(tmp_path, image, accelerators="A100:1"), home=dlrun_home, timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]
    job_id = r.stderr.split("dlrun: error: job ")[-1].split()[0]
    assert r.stderr.splitlines()[-1] == (
        f"dlrun: error: job {job_id} failed on cluster:vmlab gpus-1 A100: runtime_env setup failed on node "
        f"{team.ip(GPU_WORKER)}: FileNotFoundError: [Errno 2] No such file or directory: 'podman'"), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)["status"] == "FAILED"
