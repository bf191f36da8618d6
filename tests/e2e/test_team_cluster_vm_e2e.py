"""Issue 28 in the emulated-VM lab: a team's Ray cluster on three VMs (a token-auth head, a worker with two
fake A100s, a CPU worker), Ray installed from the lab's package index by the team's own start-up script
and started by hand as a team would, reached by dlrun only through the head's dashboard address and a
token file. Planned beside the catalog's clouds and chosen by cost, run on the planned GPU node with
dlrun's metadata, and cancelled. (The vanished-cluster recovery is tested on this machine's cluster,
tests/test_team_cluster_e2e.py: the VMs share no directory with a second cluster to resume from.)
"""
from __future__ import annotations

import json
import secrets
import shlex
import time
import urllib.request

import pytest
import yaml

from infra.base import BootstrapConfig
from infra.vm.bootstrap import install_phase, prologue
from tests.fakes.vm.fixtures import vm_lab, vm_support_problem  # noqa: F401  (fixture)
from tests.fakes.vm.machine import VmSpec
from tests.test_team_cluster_e2e import dlrun, job_file

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]

HEAD_IP = "10.228.0.2"
READY = "team ray node ready"


def team_script(mirror: str, token: str, start: str) -> str:
    """What a team's own start-up script would do: Ray into a venv from its package index, then `ray start`
    with token authentication (the token written by the script; a team would use its secret store)."""
    cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=mirror)
    return "\n".join([
        prologue("/opt/team"),
        *install_phase(cfg, ["ray[default]==2.60.0"]),
        f"printf %s {shlex.quote(token)} > /opt/team/token && chmod 600 /opt/team/token",
        "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=/opt/team/token RAY_USAGE_STATS_ENABLED=0",
        "NODE_IP=$(hostname -I | awk '{print $1}')",
        f'"$VENV/bin/python" -m ray.scripts.scripts start --node-ip-address="$NODE_IP" --disable-usage-stats {start}'
        ' || fail "ray start failed"',
        f'echo "{READY}"', ""])


def api(address: str, token: str, path: str, method="GET"):
    req = urllib.request.Request(address + path, method=method, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_a_team_cluster_on_three_vms_is_planned_run_and_cancelled(vm_lab, tmp_path, dlrun_home):
    token = secrets.token_hex(32)
    mirror = vm_lab.mirrors["pypi"]
    starts = {"team-head": (HEAD_IP, "--head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265 "
                                     "--num-cpus=1 --num-gpus=0"),
              "team-gpu": ("10.228.0.3", f"--address={HEAD_IP}:6379 --num-cpus=2 --num-gpus=2 --resources="
                                         + shlex.quote(json.dumps({"accelerator_type:A100": 1}))),
              "team-cpu": ("10.228.0.4", f"--address={HEAD_IP}:6379 --num-cpus=3 --num-gpus=0")}
    vms = {}
    for name, (ip, start) in starts.items():
        vms[name] = vm_lab.boot(VmSpec(instance_id=name, private_ip=ip, public_ip=None, user="dlrun",
                                       authorized_keys=[], boot_script=team_script(mirror, token, start).encode()))
        if name == "team-head":  # the workers join a head that is up
            vms[name].wait_for_console(READY, timeout_s=600)
    for vm in vms.values():
        vm.wait_for_console(READY, timeout_s=600)
    address = f"http://{vms['team-head'].address}:8265"  # the head's address as this machine reaches it
    deadline = time.monotonic() + 120
    while sum(n["state"] == "ALIVE" for n in api(address, token, "/api/v0/nodes?detail=1")
              ["data"]["result"]["result"]) < 3:
        assert time.monotonic() < deadline, "the workers never joined the head"
        time.sleep(1)

    token_file = tmp_path / "team.token"
    token_file.write_text(token)
    (dlrun_home / "config.yaml").write_text(yaml.safe_dump({"clusters": {"vmlab": {
        "address": address, "token_file": str(token_file), "price_per_gpu_hour": 0.1, "price_per_cpu_hour": 0.01,
        "shared_path": "/srv/team"}}}))
    path = job_file(tmp_path, clouds=["cluster:vmlab", "aws", "gcp"], steps=3, pause=0.2)
    r = dlrun("plan", str(path), "--json", home=dlrun_home)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    mine = {c["instance_type"] for c in plan["candidates"] if c["cloud"] == "cluster:vmlab"}
    assert mine == {"gpus-1", "gpus-2", "cpus-3"} and plan["chosen"]["cloud"] == "cluster:vmlab"

    r = dlrun("submit", str(path), home=dlrun_home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]
    jobs = [j for j in api(address, token, "/api/jobs/") if (j.get("metadata") or {}).get("dlrun_job_id") == job_id]
    assert len(jobs) == 1 and jobs[0]["status"] == "SUCCEEDED"
    assert jobs[0]["metadata"]["job_name"] == "team-job" and jobs[0]["metadata"]["gpu"] == "A100:1"
    nodes = api(address, token, "/api/v0/nodes?detail=1")["data"]["result"]["result"]
    gpu_node = next(n for n in nodes if n["resources_total"].get("GPU"))
    assert gpu_node["node_ip"] == "10.228.0.3" and jobs[0]["driver_node_id"] == gpu_node["node_id"]
    st = json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED" and st["actual_cost"] > 0 and st["metrics"]["cuda"] in ("0", "1")

    long_job = job_file(tmp_path, clouds=["cluster:vmlab"], steps=300, pause=1.0)
    r = dlrun("submit", str(long_job), "--detach", home=dlrun_home)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]

    def ray_status():
        return next((j["status"] for j in api(address, token, "/api/jobs/")
                     if (j.get("metadata") or {}).get("dlrun_job_id") == job_id), None)
    deadline = time.monotonic() + 180
    while ray_status() != "RUNNING":
        assert time.monotonic() < deadline, "the job never ran on the VMs"
        time.sleep(1)
    assert dlrun("cancel", job_id, home=dlrun_home).returncode == 0
    deadline = time.monotonic() + 90
    while not (ray_status() == "STOPPED"
               and json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)["status"] == "CANCELLED"):
        assert time.monotonic() < deadline, ray_status()
        time.sleep(1)
