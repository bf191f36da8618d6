"""Issue 28 end to end: a team's Ray cluster (real Ray 2.60, token auth, three nodes with different resources,
one advertising two fake A100s) reached only through its address and token file, planned beside the
catalog's clouds, chosen by cost, run, cancelled, and lost mid-run (recovery resumes on another cluster)."""
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.ray_team_cluster import start_team_cluster
from tests.support.team_cluster_jobs import ROOT, dlrun, job_file

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def team():
    """The team's cluster: a 1-CPU head, a node with 2 CPUs and 2 A100s, a node with 3 CPUs."""
    cluster = start_team_cluster(head_cpus=1)
    try:
        cluster.add_worker("gpu", num_cpus=2, num_gpus=2, resources={"accelerator_type:A100": 1})
        cluster.add_worker("cpu", num_cpus=3)
        yield cluster
    finally:
        cluster.stop()


def configure(home: Path, clusters: dict) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"clusters": clusters}))


def lab(team, shared, **over) -> dict:
    return {"address": team.address, "token_file": str(team.token_file), "price_per_gpu_hour": 0.1,
            "price_per_cpu_hour": 0.01, "max_gpus": 4, "shared_path": str(shared), **over}


def cluster_api(team, path: str, method="GET", body=None):
    req = urllib.request.Request(team.address + path, method=method, headers={
        "Authorization": f"Bearer {team.token}", "Content-Type": "application/json"},
        data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def plan_json(home, path, *args) -> dict:
    """The plan as JSON; the clouds priced though this machine has no credentials for them (--any-cloud)."""
    r = dlrun("plan", str(path), "--json", "--any-cloud", *args, home=home)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_plan_lists_the_clusters_offers_beside_the_clouds_and_picks_by_cost(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    path = job_file(tmp_path, clouds=["cluster:lab", "aws", "gcp"])
    data = plan_json(dlrun_home, path)
    cands = data["candidates"]
    mine = {c["instance_type"]: c for c in cands if c["cloud"] == "cluster:lab"}
    # what the nodes really have: 1 and 2 A100s on the GPU node, the CPU node's 3 CPUs
    assert set(mine) == {"gpus-1", "gpus-2", "cpus-3"}
    assert mine["gpus-2"]["accelerator"] == "A100" and mine["gpus-2"]["accelerator_count"] == 2
    one = mine["gpus-1"]
    assert one["feasible"] and one["estimate"]["price_per_hour"] == pytest.approx(0.1)
    assert one["estimate"]["cost"] == pytest.approx(one["estimate"]["hours"] * 0.1, rel=1e-6)
    assert any(c["cloud"] == "aws" and c["feasible"] for c in cands) and any(c["cloud"] == "gcp" for c in cands)
    cheapest = min((c for c in cands if c["feasible"]), key=lambda c: c["estimate"]["cost"])
    assert data["chosen"]["cloud"] == "cluster:lab" and data["chosen"]["key"] == cheapest["key"]
    assert mine["gpus-1"]["checkpoint"] == f"{tmp_path}/dlrun-checkpoints/team-job"

    r = dlrun("plan", str(path), "--any-cloud", home=dlrun_home)  # the cluster's rows beside the clouds'
    assert r.returncode == 0 and "cluster:lab" in r.stdout and "aws" in r.stdout, r.stdout
    assert "the team's Ray cluster at its internal rate" in r.stdout

    # at a team rate above the clouds' prices, a cloud wins
    configure(dlrun_home, {"lab": lab(team, tmp_path, price_per_gpu_hour=40.0, price_per_cpu_hour=5.0)})
    assert plan_json(dlrun_home, path)["chosen"]["cloud"] in ("aws", "gcp")

    # --backend cluster:lab narrows the plan to that cluster; a name config.yaml does not have is exit 2
    only = plan_json(dlrun_home, path, "--backend", "cluster:lab")
    assert {c["cloud"] for c in only["candidates"]} == {"cluster:lab"}
    r = dlrun("plan", str(path), "--backend", "cluster:nope", home=dlrun_home)
    assert r.returncode == 2 and "--backend: 'cluster:nope' is not one of" in r.stderr

    r = dlrun("clusters", home=dlrun_home)
    assert r.returncode == 0 and "cluster:lab" in r.stdout and "3 nodes alive" in r.stdout, r.stdout
    assert "A100: " in r.stdout and "2 GPUs on 1 node(s)" in r.stdout.replace("free of ", "")


def test_busy_gpus_make_the_plan_say_it_waits(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    sid = cluster_api(team, "/api/jobs/", "POST", {"entrypoint": "sleep 120", "entrypoint_num_gpus": 1,
                                                     "metadata": {"who": "a colleague"}})["submission_id"]
    try:
        path = job_file(tmp_path, clouds=["cluster:lab"], accelerators="A100:2")
        deadline = time.monotonic() + 60
        while True:  # the load report lags the job's start by a few seconds
            two = next(c for c in plan_json(dlrun_home, path)["candidates"] if c["instance_type"] == "gpus-2")
            if two["wait"] or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert two["wait"] == "waits: 1 A100 busy" and two["feasible"]
        r = dlrun("plan", str(path), home=dlrun_home)
        assert "waits: 1 A100 busy" in r.stdout and "the job starts when they are free" in r.stdout
    finally:
        cluster_api(team, f"/api/jobs/{sid}/stop", "POST")


def test_a_job_larger_than_the_cluster_is_excluded_with_the_reason(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    data = plan_json(dlrun_home, job_file(tmp_path, clouds=["cluster:lab", "gcp"], accelerators="A100:4"))
    four = next(c for c in data["candidates"] if c["cloud"] == "cluster:lab" and c["accelerator_count"] == 4)
    assert four["reason"] == "cluster lab can never hold 1×4×A100: its largest A100 node has 2"
    r = dlrun("plan", str(job_file(tmp_path, clouds=["cluster:lab", "gcp"], accelerators="A100:4")), "--any-cloud",
              home=dlrun_home)
    assert "gpus-4" in r.stdout and "cluster lab can" in r.stdout, r.stdout  # a row of the table, as other exclusions

    configure(dlrun_home, {"lab": lab(team, tmp_path, max_gpus=1)})
    data = plan_json(dlrun_home, job_file(tmp_path, clouds=["cluster:lab", "gcp"], accelerators="A100:4"))
    four = next(c for c in data["candidates"] if c["cloud"] == "cluster:lab" and c["accelerator_count"] == 4)
    assert four["reason"] == "cluster lab lets dlrun use at most 1 GPUs (max_gpus); the job needs 4"

    configure(dlrun_home, {"lab": lab(team, tmp_path, shared_path=None)})  # no place a recovery could resume from
    data = plan_json(dlrun_home, job_file(tmp_path, clouds=["cluster:lab", "aws"]))
    assert all("has no checkpoint location its nodes can reach" in c["reason"]
               for c in data["candidates"] if c["cloud"] == "cluster:lab")


def test_mistakes_are_one_line(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    r = dlrun("plan", str(job_file(tmp_path, clouds=["cluster:elsewhere"])), home=dlrun_home)
    assert r.returncode == 2 and "no cluster 'elsewhere' under clusters:" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "wrong-token"
    bad.write_text("not-the-token")
    configure(dlrun_home, {"lab": lab(team, tmp_path, token_file=str(bad))})
    r = dlrun("plan", str(job_file(tmp_path, clouds=["cluster:lab", "aws"])), "--any-cloud", home=dlrun_home)
    assert r.returncode == 0 and "cluster:lab left out of the plan" in r.stdout and "token was refused" in r.stdout
    (dlrun_home / "config.yaml").write_text("clusters: {lab: {address: ray-head:8265}}\n")
    r = dlrun("plan", str(job_file(tmp_path, clouds=["aws"])), home=dlrun_home)
    assert r.returncode == 2 and "clusters.lab.address: expected the dashboard URL" in r.stderr


def _dlrun_jobs(team) -> list[dict]:
    return [j for j in cluster_api(team, "/api/jobs/") if (j.get("metadata") or {}).get("dlrun_job_id")]


def test_submit_runs_there_with_dlruns_metadata_on_the_planned_gpu_and_is_charged(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    path = job_file(tmp_path, clouds=["cluster:lab", "aws", "gcp"], steps=3, pause=0.2)
    r = dlrun("submit", str(path), home=dlrun_home)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "running on cluster:lab gpus-1 A100" in r.stderr
    job_id = r.stdout.split()[0]
    ray_job = next(j for j in _dlrun_jobs(team) if j["metadata"]["dlrun_job_id"] == job_id)
    meta = ray_job["metadata"]
    assert meta["job_name"] == "team-job" and meta["backend"] == "cluster:lab" and meta["cluster"] == "lab"
    assert meta["gpu"] == "A100:1" and meta["dlrun_cluster_id"]
    assert ray_job["status"] == "SUCCEEDED"
    nodes = cluster_api(team, "/api/v0/nodes?detail=1")["data"]["result"]["result"]
    gpu_node = next(n["node_id"] for n in nodes if n["resources_total"].get("GPU"))
    assert ray_job["driver_node_id"] == gpu_node  # Ray placed it on the node with the planned A100
    st = json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "cluster:lab"
    assert st["metrics"]["cuda"] in ("0", "1")  # Ray gave the job one of the node's GPUs
    # charged GPU-seconds at the team's rate: 1 GPU × $0.1/h over the attempt's seconds
    seconds = st["actual_seconds"]
    assert 0 < st["actual_cost"] <= seconds * 0.1 / 3600 + 1e-9
    assert st["actual_cost"] >= st["actual_run_seconds"] * 0.1 / 3600


def test_cancel_stops_the_job_on_the_cluster(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    path = job_file(tmp_path, clouds=["cluster:lab"], steps=200, pause=1.0)
    r = dlrun("submit", str(path), "--detach", home=dlrun_home)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]
    deadline = time.monotonic() + 120
    while not any(j["metadata"]["dlrun_job_id"] == job_id and j["status"] == "RUNNING" for j in _dlrun_jobs(team)):
        assert time.monotonic() < deadline, "the job never ran on the cluster"
        time.sleep(1)
    r = dlrun("cancel", job_id, home=dlrun_home)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 60
    while True:
        ray_job = next(j for j in _dlrun_jobs(team) if j["metadata"]["dlrun_job_id"] == job_id)
        status = json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)["status"]
        if ray_job["status"] == "STOPPED" and status == "CANCELLED":
            break
        assert time.monotonic() < deadline, (ray_job["status"], status)
        time.sleep(1)


def test_a_cluster_that_vanishes_mid_run_is_recovered_elsewhere_from_the_checkpoint(team, tmp_path, dlrun_home):
    """The cheaper cluster (one node, one A100) dies while the job runs: dlrun re-plans, leaves it out and
    resumes on the team's other cluster from the checkpoint in the shared path both mount."""
    doomed = start_team_cluster(head_cpus=1, head_gpus=1, head_resources={"accelerator_type:A100": 1})
    try:
        configure(dlrun_home, {"cheap": lab(doomed, tmp_path, price_per_gpu_hour=0.05),
                               "lab": lab(team, tmp_path)})
        path = job_file(tmp_path, clouds=["cluster:cheap", "cluster:lab"], steps=8, pause=1.5, accelerators="A100:1")
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "submit", str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env=dict(os.environ, DLRUN_HOME=str(dlrun_home), DLRUN_LOCAL_GPUS="none",
                                         DLRUN_CATALOG_REFRESH="off", DLRUN_NODE_POLL_S="1"))
        step = next(tmp_path.glob("dlrun-checkpoints/team-job/*/"), None)
        deadline = time.monotonic() + 180
        while step is None or not (step / "step").exists() or int((step / "step").read_text() or 0) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
            step = step or next(tmp_path.glob("dlrun-checkpoints/team-job/*/"), None)
        doomed.stop()  # the whole cluster goes away mid-run
        out, err = proc.communicate(timeout=300)
    finally:
        doomed.stop()
    assert proc.returncode == 0, err[-3000:]
    assert "running on cluster:cheap" in err and "preempted (" in err
    job_id = out.split()[0]
    st = json.loads(dlrun("status", job_id, "--json", home=dlrun_home).stdout)
    assert st["status"] == "SUCCEEDED" and st["backend"] == "cluster:lab" and st["preemptions"] == 1
    resumed = (st.get("metrics") or {}).get("resumed_from")
    assert resumed is not None and resumed >= 2, st


def test_down_orphans_stops_dlruns_jobs_no_live_job_of_this_store_owns(team, tmp_path, dlrun_home):
    """A job whose store is gone (another $DLRUN_HOME: a lost laptop) still runs on the team's cluster:
    `dlrun down --orphans` finds it by its metadata and stops it; a colleague's job there is left alone."""
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    r = dlrun("submit", str(job_file(tmp_path, clouds=["cluster:lab"], steps=300, pause=1.0)), "--detach",
              home=dlrun_home)
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.split()[0]
    other = cluster_api(team, "/api/jobs/", "POST", {"entrypoint": "sleep 60", "metadata": {"who": "a colleague"}})
    deadline = time.monotonic() + 120
    while not any(j["metadata"]["dlrun_job_id"] == job_id and j["status"] == "RUNNING" for j in _dlrun_jobs(team)):
        assert time.monotonic() < deadline, "the job never ran on the cluster"
        time.sleep(1)
    fresh = tmp_path / "another-home"
    fresh.mkdir()
    configure(fresh, {"lab": lab(team, tmp_path)})
    r = dlrun("down", "--orphans", "--yes", home=fresh)
    assert r.returncode == 0 and "removed orphan cluster:lab cluster" in r.stdout and job_id in r.stdout, r.stdout
    deadline = time.monotonic() + 60
    while next(j for j in _dlrun_jobs(team) if j["metadata"]["dlrun_job_id"] == job_id)["status"] != "STOPPED":
        assert time.monotonic() < deadline, "the orphan was not stopped"
        time.sleep(1)
    assert cluster_api(team, f"/api/jobs/{other['submission_id']}")["status"] in ("PENDING", "RUNNING")
    cluster_api(team, f"/api/jobs/{other['submission_id']}/stop", "POST")


def test_check_asks_each_team_cluster_what_it_has(team, tmp_path, dlrun_home):
    configure(dlrun_home, {"lab": lab(team, tmp_path)})
    r = dlrun("check", "--cloud", "cluster", home=dlrun_home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"cluster:lab: usable — {team.address}: 3 nodes alive" in " ".join(r.stdout.split())
    bad = tmp_path / "wrong-token"
    bad.write_text("not-the-token")
    configure(dlrun_home, {"lab": lab(team, tmp_path, token_file=str(bad))})
    r = dlrun("check", "--cloud", "cluster", home=dlrun_home)
    assert r.returncode == 4 and "cluster:lab: not usable" in r.stdout and "refused" in r.stdout, r.stdout
